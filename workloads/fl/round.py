"""One federated round t: the clients it trains (``schedule.sample_clients``, or a participation
plan's arrivals), what the method sends them, their local training in the run's way
(``workloads.fl.ways``), the aggregate (with ``Execution.server_average``, from round 2 on, the
moving average of the aggregates: ``aggregate.moving_average``), and the evaluation every
``eval_every`` rounds and after the last one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import torch

from workloads.fl.aggregate import moving_average
from workloads.fl.clients import ClientResult, RoundWork, checked_groups, client_start, described
from workloads.fl.comm import Transfer
from workloads.fl.evaluation import scores
from workloads.fl.guard import UserCodeError, check_finite
from workloads.fl.local import NonFiniteLossError
from workloads.fl.methods.base import ServerState
from workloads.fl.schedule import cosine_lr, epoch_samples, sample_clients
from workloads.fl.setup import Setup
from workloads.fl.streams import SEND_EXTRAS_STREAM, sent
from workloads.fl.ways import WAYS


@dataclass(frozen=True)
class LoopState:
    """What round t leaves for round t + 1 (and what a checkpoint holds)."""

    round: int  # the last completed round, 0 before the first
    server: ServerState
    memory: dict[int, dict[str, torch.Tensor]]  # client-side state never sent (double head)
    transfers: tuple[Transfer, ...]
    history: tuple[dict, ...]
    samples: int
    clients: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # the method's client state (SCAFFOLD's c_i)


def initial_state(setup: Setup) -> LoopState:
    weights = {k: v.detach().clone() for k, v in setup.global_model.state_dict().items()}
    return LoopState(0, ServerState(weights=weights, num_clients=len(setup.client_idx)), {}, (), (), 0)


def round_work(setup: Setup, state: LoopState, t: int) -> RoundWork:
    """What round t gives its clients: the sampled clients (or the plan's), the learning rate, the
    keys shared this round and the method's extras, as sent."""
    method, cfg, hp = setup.method, setup.cfg, setup.hp
    algo, server = method.algo, state.server
    lr = cosine_lr(hp.lr, hp.lr_min, t, cfg.rounds)
    clients = (sample_clients(len(setup.client_idx), cfg.participation, seed=cfg.seed, round=t)
               if setup.arrivals is None else list(setup.arrivals[t - 1]))
    shared = algo.shared_keys(setup.client_model, t, hp)
    unknown = sorted(set(shared) - set(server.weights))
    if unknown:
        raise UserCodeError(f"{method.name}.shared_keys in round {t} named {unknown[:3]}, which the model's state does "
                            f"not hold: name state_dict keys (docs/methods.md)")
    keys = [k for k in shared if k in setup.params]
    extras = checked_groups(algo.server_extras(server, keys, t, hp), algo.extra_downloads(t), "server_extras", method, t)
    extras = {group: sent(setup.execution, tensors, cfg.seed, t, SEND_EXTRAS_STREAM, *([i] if i else []))
              for i, (group, tensors) in enumerate(sorted(extras.items()))}
    return RoundWork(setup, server, state.memory, state.clients, tuple(clients), tuple(shared), extras, t, lr)


def federated_round(setup: Setup, state: LoopState, t: int) -> LoopState:
    """Round t: sample, train every sampled client from the global state, aggregate, evaluate."""
    work = round_work(setup, state, t)
    hp = setup.hp
    try:
        trained = WAYS[setup.way].train(work)
    except NonFiniteLossError as error:  # name what made it non-finite, where a hook did
        raise blamed(error, work) from None
    server = _aggregated(setup, state, work, trained)
    acc = val_acc = None
    if t == setup.cfg.rounds or (setup.cfg.eval_every and t % setup.cfg.eval_every == 0):
        setup.global_model.load_state_dict(server.weights)
        acc, val_acc = scores(setup)
    losses = [r.mean_loss for r in trained]
    entry = {"round": t, "lr": work.lr, "clients": list(work.clients),
             "mean_loss": float(np.mean(losses)) if losses else None, "accuracy": acc, "val_accuracy": val_acc,
             **({"number_format": setup.execution.format_of_round(t)} if setup.execution.precision_schedule else {})}
    memory = {**state.memory, **{k: r.local for k, r in zip(work.clients, trained) if r.local}}
    kept = {**state.clients, **{k: r.kept for k, r in zip(work.clients, trained) if r.kept}}
    transfers = state.transfers + tuple(entry for r in trained for entry in r.transfers)
    samples = state.samples + sum(hp.local_epochs * epoch_samples(len(setup.client_idx[k]), hp.batch_size)
                                  for k in work.clients)
    return LoopState(t, server, memory, transfers, state.history + (entry,), samples, kept)


def _aggregated(setup: Setup, state: LoopState, work: RoundWork, trained: Sequence[ClientResult]) -> ServerState:
    """The server after the round's aggregate (a round nobody arrived in leaves it as it was)."""
    method, t, server = setup.method, work.round, state.server
    if not trained:
        return server
    keys = [k for k in work.shared if k in setup.params]
    server = method.algo.aggregate(server, [r.update for r in trained], setup.hp, keys)
    check_aggregate(server, state.server, method.name)
    check_finite(server.weights, f"round {t}: {method.name}'s aggregate",
                 "check what your aggregate returns" if users_hook(method.algo, "aggregate") else "a diverged run")
    if setup.execution.server_average and t > 1:  # round 1's average is its aggregate
        server = replace(server, weights=moving_average(state.server.weights, server.weights, keys,
                                                        decay=setup.execution.server_average))
    return server


def check_aggregate(server, before: ServerState, name: str) -> None:
    """One ``UserCodeError`` line where an ``aggregate`` returned something other than a
    ``ServerState`` whose weights have the keys, shapes and dtypes of the state it was given (a
    dropped or reshaped entry failed later, in ``load_state_dict``, with a traceback)."""
    if not isinstance(server, ServerState):
        raise UserCodeError(f"{name}.aggregate returned {described(server)}, not a ServerState: return the server's "
                            "new state (self._advance(server, weights) builds one; docs/methods.md)")
    missing = sorted(set(before.weights) - set(server.weights))
    extra = sorted(set(server.weights) - set(before.weights))
    if missing or extra:
        raise UserCodeError(f"{name}.aggregate returned weights without {missing[:3]} and with {extra[:3]}: the global "
                            "model keeps every key of the state it was given (docs/methods.md)")
    for key, old in before.weights.items():
        new = server.weights[key]
        if not torch.is_tensor(new) or new.shape != old.shape or new.dtype != old.dtype:
            got = f"{tuple(new.shape)} {new.dtype}" if torch.is_tensor(new) else f"a {type(new).__name__}"
            raise UserCodeError(f"{name}.aggregate returned {key!r} as {got}, where the global model holds "
                                f"{tuple(old.shape)} {old.dtype} (docs/methods.md)")


def blamed(error: NonFiniteLossError, work: RoundWork) -> NonFiniteLossError:
    """``error`` naming the hook that made round t's loss non-finite (``ClientTrainer.non_finite_cause``
    at each client's starting point, ``clients.client_start``, on its first batch), with the fix; as it is
    (lower the learning rate) where every hook's result is finite there: the run diverged while
    training. Runs only once a run has failed."""
    setup, t, lr = work.setup, work.round, work.lr
    name, algo = setup.method.name, setup.method.algo
    for k in work.clients:
        idx = setup.client_idx[k][: setup.hp.batch_size]
        cause = client_start(work, k, setup.client_model).trainer.non_finite_cause(setup.train.take(idx), setup.train.y[idx])
        if cause is None:
            continue
        hook, what = cause
        users = users_hook(algo, hook)
        diverged = f"the run diverged: lower the learning rate (lr={lr:g})"
        if hook == "server_extras":
            fix = f"it comes from {name}.server_extras (the ServerState.extras {name}.aggregate keeps): keep them finite"
        elif hook == "after_training":
            fix = f"it comes from {name}.after_training (initial_client_state before a client's first round): keep it finite"
        elif hook == "aggregate" and t == 1:
            fix = "it is the initial model: check the model and its initialization"
        elif hook == "aggregate":
            fix = (f"it is what {name}.aggregate returned in round {t - 1}: check what it returns" if users
                   else f"the global model of round {t - 1}; {diverged}")
        else:
            fix = "make it return a finite value" if users else diverged
        return error.blaming(f"{name}.{hook} {what}; {fix}" if hook in ("batch_loss", "penalty") else f"{what}; {fix}")
    return error


def users_hook(algo, hook: str) -> bool:
    """Whether ``algo``'s ``hook`` is a user's code (defined outside this package)."""
    return not getattr(type(algo), hook).__module__.startswith("workloads.")

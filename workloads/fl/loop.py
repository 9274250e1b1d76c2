"""The federated loop: rounds, client sampling, local training, aggregation, evaluation,
calibration and the communication ledger.

Per round t = 1..R (SphereFed Sec. 5.1): the learning rate follows cosine annealing per round,
lr_t = lr_min + (lr - lr_min) (1 + cos(pi (t - 1) / R)) / 2 (torch's CosineAnnealingLR stepped
once per round); round(participation x K) clients (at least one) are sampled without replacement;
each downloads the shared state, trains ``local_epochs`` epochs of mini-batches of ``batch_size``
from a fresh SGD optimizer, with what its method sends beside the model (``server_extras``: FedCos's
d_t, SCAFFOLD's c) and what the client kept from its last round (a double-head client's local
parts; its method's state, ``initial_client_state`` / ``after_training``: SCAFFOLD's c_i, FedDyn's
gradient term, MOON's previous model), and sends the shared state back with its sample count and
its method's ``extra_uploads``; the algorithm aggregates (with ``Execution.server_average``, from
round 2 on, the global model is the moving average of the aggregates: ``aggregate.moving_average``).
After round R an
optional calibration runs over all K clients (or a participation plan's arrivals of round R + 1;
none: the model stays uncalibrated). The global model is evaluated on the global test
set every ``eval_every`` rounds and after the last round (and after the calibration).

Same seed, same results: the model is built and prepared on the CPU under
``torch.manual_seed(seed)`` (the same initial weights whatever the run's device) and then moved to
the run's device; client sampling uses ``numpy.random.default_rng([seed, t])``; each client's
shuffling a CPU torch generator seeded from ``(seed, t, k)`` (so the sample order is the same on
every device), its augmentation (when on) a generator on the run's device seeded from
``(seed, t, k, 1)``; the calibration one on the run's device seeded from ``(seed, R + 1)``.

Device: everything of a round (models, batches, client updates, aggregation, calibration
statistics, evaluation) lives on ``execution.device``; the data are held there once
(``execution.DeviceData``) and batches are gathered by index there. Only the shuffling order is
drawn on the CPU and copied over once per local epoch.

Resume: with ``checkpoint=PATH`` the loop's state after every round (``LoopState``: server state,
clients' local parts, ledger, history, samples, torch's RNG states) is written atomically to PATH;
with ``resume=True`` a run starts from the last completed round found there and gives results
identical to an uninterrupted run (nothing of a round depends on anything else).

A trailing mini-batch of a single sample is skipped (BatchNorm cannot train on one sample);
every other partial batch is used.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from workloads.fl.aggregate import moving_average
from workloads.fl.comm import Transfer, grouped_bytes, metadata_bytes, tensor_bytes
from workloads.fl.execution import DeviceData, Execution, synchronize
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import (ClientTrainer, NonFiniteLossError, client_trainer, epoch_order, example_received,
                                per_sample_loss, prepare_model, shuffling_generator)
from workloads.fl.methods import MethodConfig
from workloads.fl.methods.base import ClientUpdate, ServerState, frozen_keys, trainable_keys
from workloads.fl.guard import UserCodeError, check_divergence, check_finite
from workloads.fl import capture, threads
from workloads.fl.capture import StepRecorder
from workloads.fl.threads import Slot, draws_global_generator, run_on_slots
from workloads.fl.together import ClientRun, fallback_line, fallback_reason, train_together
from workloads.numerics.emulate import Arithmetic
from workloads.numerics.quantize import round_tensors

CHECKPOINT_FORMAT = 1
AUGMENT_STREAM = 1  # last part of the augmentation generator's seed (seed, t, k, 1)
ROUNDING_STREAM = 2  # last part of the stochastic-rounding generator's seed (seed, t, k, 2)
SEND_DOWN_STREAM = 3  # the server's download in a communication format (seed, t, 3): every client gets the same
SEND_UP_STREAM = 4  # a client's upload in a communication format (seed, t, k, 4)
SEND_EXTRAS_STREAM = 5  # a method's extra downloads (FedCos's d_t) in a communication format (seed, t, 5[, i])
SEND_EXTRAS_UP_STREAM = 6  # a client's extra uploads (SCAFFOLD's Delta c_i) in a communication format (seed, t, k, 6[, i])
DRAWS_STREAM = 7  # a client's own generator of the round, RoundContext.draws (FjORD's widths): (seed, t, k, 7)
FORECAST_STEPS = 3  # timed local steps behind the projected wall time (after one warm-up step)


@dataclass(frozen=True)
class RunResult:
    method: str
    accuracy: float  # global model on the global test set, after calibration if any
    accuracy_before_calibration: float | None
    history: tuple[dict, ...]  # per round: round, lr, clients, mean_loss, accuracy and val_accuracy (or None)
    transfers: tuple[Transfer, ...]
    samples_trained: int  # local training samples processed over the run
    weights: dict = field(repr=False, compare=False, default_factory=dict)  # final global state
    resumed_after_round: int = field(compare=False, default=0)  # 0: started from round 1
    val_accuracy: float | None = None  # the final global model on the validation hold-out (None: no hold-out)
    val_accuracy_before_calibration: float | None = None
    local_accuracy: float | None = None  # the local test mode (``local_test_accuracy``), after calibration if any
    local_accuracy_before_calibration: float | None = None


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


@dataclass(frozen=True)
class _Setup:
    """What stays fixed for a whole run of one method."""

    method: MethodConfig
    cfg: FLConfig
    hp: Hparams
    execution: Execution
    global_model: nn.Module
    client_model: nn.Module
    frozen: set
    params: set
    train: DeviceData
    test: DeviceData
    client_idx: tuple[torch.Tensor, ...]  # per client: indices into train, on the device
    val: DeviceData | None = None  # the validation hold-out (scored whenever the test set is)
    arrivals: tuple[tuple[int, ...], ...] | None = None  # per round (and calibration), the clients (None: sampled, all)
    together: bool = False  # a round's clients trained as one batched computation (``workloads.fl.together``)
    slots: tuple[Slot, ...] = ()  # a round's clients trained on threads, one per slot (``workloads.fl.threads``; (): one after another)
    recorder: StepRecorder | None = None  # the local step recorded once a round and replayed (``workloads.fl.capture``)
    staleness: tuple[dict[int, int], ...] = ()  # per round, client -> server steps since it started (FedBuff's clock)


def cosine_lr(lr: float, lr_min: float, round: int, rounds: int) -> float:
    """Cosine annealing per round (SGDR / torch CosineAnnealingLR with T_max = R), round 1-based."""
    return lr_min + (lr - lr_min) * (1.0 + math.cos(math.pi * (round - 1) / rounds)) / 2.0


def sample_clients(num_clients: int, participation: float, *, seed: int, round: int) -> list[int]:
    """The clients of round ``round``: ``clients_per_round`` of them (``draw_clients``)."""
    return draw_clients(num_clients, clients_per_round(num_clients, participation), seed=seed, round=round)


def clients_per_round(num_clients: int, participation: float) -> int:
    """``round(participation x K)`` clients (half up), at least one."""
    return max(1, round_half_up(participation * num_clients))


def draw_clients(num_clients: int, count: int, *, seed: int, round: int) -> list[int]:
    """``count`` of the clients, drawn without replacement from ``default_rng([seed, round])``
    (all of them, in order, when ``count`` >= K), sorted."""
    if count >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng([seed, round])
    return sorted(int(k) for k in rng.choice(num_clients, size=count, replace=False))


def check_arrivals(arrivals: Sequence[Sequence[int]], num_clients: int, rounds: int,
                   calibrates: bool = False) -> tuple[tuple[int, ...], ...]:
    """A participation plan's arrivals as the loop takes them: one sorted list of distinct clients
    per round, and where the method ``calibrates`` one more for the calibration round R + 1 (the
    clients whose statistics arrive); an empty one: nobody arrived, the global model stays as it
    was (uncalibrated, for the calibration round)."""
    if len(arrivals) != rounds + calibrates:
        raise ValueError(f"the participation plan covers {len(arrivals)} round(s); the run has {rounds}"
                         + (" and a calibration round" if calibrates else ""))
    out = []
    for t, clients in enumerate(arrivals, start=1):
        clients = tuple(int(k) for k in clients)
        if list(clients) != sorted(set(clients)) or any(not 0 <= k < num_clients for k in clients):
            raise ValueError(f"round {t} of the participation plan: {list(clients)} is not a sorted list of "
                             f"distinct clients in 0..{num_clients - 1}")
        out.append(clients)
    return tuple(out)


def check_staleness(arrivals: Sequence[Sequence[int]] | None, staleness: Sequence[Sequence[int]]
                    ) -> tuple[dict[int, int], ...]:
    """Per round, client -> its staleness: one non-negative count per arrival of that round."""
    if arrivals is None or len(staleness) != len(arrivals) or any(
            len(ages) != len(clients) or min(ages, default=0) < 0 for clients, ages in zip(arrivals, staleness)):
        raise ValueError("staleness: one non-negative count per arriving client of every round of the plan")
    return tuple(dict(zip(clients, (int(a) for a in ages))) for clients, ages in zip(arrivals, staleness))


def round_half_up(value: float) -> int:
    return int(math.floor(value + 0.5))


def derived_seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def batch_starts(n: int, batch_size: int) -> list[int]:
    """Start indices of the mini-batches of one epoch (a trailing batch of 1 is skipped)."""
    starts = list(range(0, n, batch_size))
    if n > 1 and n - starts[-1] == 1:
        starts.pop()
    return starts


def epoch_samples(n: int, batch_size: int) -> int:
    """Samples one local epoch over ``n`` samples trains on (all but a skipped trailing single)."""
    return sum(min(batch_size, n - s) for s in batch_starts(n, batch_size))


def planned_samples(parts: Sequence[np.ndarray], cfg: FLConfig, hp: Hparams,
                    arrivals: Sequence[Sequence[int]] | None = None) -> int:
    """Local training samples of a whole run (what ``RunResult.samples_trained`` will be);
    ``arrivals``: the clients each round trains where a participation plan gives them."""
    return sum(hp.local_epochs * epoch_samples(len(parts[k]), hp.batch_size)
               for t in range(1, cfg.rounds + 1)
               for k in (sample_clients(len(parts), cfg.participation, seed=cfg.seed, round=t) if arrivals is None
                         else arrivals[t - 1]))


@torch.no_grad()
def top1(model: nn.Module, batches) -> float:
    """Top-1 accuracy of ``model`` (eval mode) over ``batches`` of (x, y)."""
    was_training = model.training
    model.eval()
    correct = total = 0
    for x, y in batches:
        correct += int((model(x).argmax(1) == y).sum())
        total += len(y)
    model.train(was_training)
    return correct / total


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> float:
    """Top-1 accuracy of ``model`` (eval mode) on (x, y)."""
    return top1(model, ((x[s:s + batch_size], y[s:s + batch_size]) for s in range(0, len(y), batch_size)))


def evaluate_on(model: nn.Module, data: DeviceData, *, channels_last: bool = False, batch_size: int = 1024) -> float:
    """``evaluate`` over a split held on the device (decoded batch by batch)."""
    order = torch.arange(len(data), device=data.y.device)
    return top1(model, ((_memory_format(data.take(order[s:s + batch_size]), channels_last), data.y[s:s + batch_size])
                        for s in range(0, len(data), batch_size)))


def _memory_format(x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if channels_last and x.dim() == 4 else x


def train_client(trainer, data: DeviceData, idx: torch.Tensor, hp: Hparams, *, seed: int, where: str,
                 augment: torch.Generator | None = None, channels_last: bool = False) -> tuple[int, float]:
    """Local epochs of SGD steps over samples ``idx`` of ``data``; returns (steps, mean loss).
    NaN/inf -> NonFiniteLossError. The shuffling order is drawn on the CPU from ``seed``."""
    gen = shuffling_generator(seed)
    n, steps = len(idx), 0
    loss_sum = torch.zeros((), device=idx.device)
    starts = batch_starts(n, hp.batch_size)
    for epoch in range(hp.local_epochs):
        order = epoch_order(idx, gen)
        for s in starts:
            batch = order[s:s + hp.batch_size]
            x = _memory_format(data.take(batch, generator=augment), channels_last)
            loss_sum = loss_sum + trainer.step(x, data.y[batch])
        steps += len(starts)
        if not torch.isfinite(loss_sum):
            raise NonFiniteLossError.in_epoch(where, epoch + 1, trainer.ctx.lr)
    return steps, float(loss_sum) / max(steps, 1)


def arithmetic_of(execution: Execution, seed: int, round: int, client: int) -> Arithmetic | None:
    """Client ``client``'s arithmetic in round ``round`` (``Execution.arithmetic_of_client``: the
    run's number format, its precision schedule's for the round, or its device class's in a fleet
    that declares one; None for FP32, which rounds nothing), its
    stochastic rounding drawn from a generator seeded by ``derived_seed(seed, round, client,
    ROUNDING_STREAM)``: the same run rounds the same way every time."""
    fmt = execution.arithmetic_of_client(client, round)
    if fmt.is_identity:
        return None
    generator = None
    if fmt.rounding == "stochastic":
        generator = torch.Generator(device=execution.torch_device).manual_seed(derived_seed(seed, round, client, ROUNDING_STREAM))
    return Arithmetic(fmt, generator=generator)


def sent(execution: Execution, tensors, *parts: int) -> dict:
    """``tensors`` as sent in the run's communication format (``Execution.comm_format``; FP32: as
    they are), stochastic rounding drawn from ``derived_seed(*parts)``."""
    fmt = execution.communication
    generator = None
    if fmt.rounding == "stochastic":
        generator = torch.Generator(device=execution.torch_device).manual_seed(derived_seed(*parts))
    return round_tensors(tensors, fmt, generator=generator)


def _record(transfers: list, round: int, client: int, direction: str, sizes: dict[str, int]) -> None:
    transfers.extend(Transfer(round, client, direction, g, b) for g, b in sorted(sizes.items()))


# --------------------------------------------------------------------------- the run, step by step


def run_method(method: MethodConfig, *, model_fn: Callable[[], nn.Module], train, test,
               parts: Sequence[np.ndarray], cfg: FLConfig, hp: Hparams,
               execution: Execution = Execution(), progress: bool = False,
               checkpoint: str | Path | None = None, resume: bool = False,
               after_round: Callable[[int], None] | None = None, val=None,
               arrivals: Sequence[Sequence[int]] | None = None,
               staleness: Sequence[Sequence[int]] = ()) -> RunResult:
    """Run ``method`` on ``train`` split by ``parts`` (one index array per client).

    ``staleness`` (FedBuff's clock, ``workloads.cost.buffered``: per round, beside ``arrivals``, how
    many server steps ago each arriving client started) makes each client start from the server as
    it was then (the method's ``server_view``) and tells the aggregation (``ClientUpdate.staleness``).

    ``arrivals`` (a participation plan, ``workloads.cost.fleet``: per round, the sampled clients
    whose updates arrive in time; None: every sampled client) are the clients each round trains
    and aggregates, instead of ``sample_clients``; the loop never learns why the others were left out.
    A calibrated method's plan has one more entry, round R + 1: the clients whose statistics the
    calibration uses (instead of all K; none: the model is left uncalibrated).

    ``val`` (a ``Dataset`` held out of ``train`` before partitioning, or None) is scored wherever
    the test set is: every evaluated round's ``val_accuracy`` and the final model's, so that
    hyper-parameters can be chosen on validation and never on test.

    With ``execution.clients_together`` each round's clients train as one batched computation
    (``workloads.fl.together``); where the method or the options cannot, one line on stderr says
    so and they train one after another.

    ``model_fn()`` builds the (unprepared) model; it is called on the CPU under
    ``torch.manual_seed(seed)`` so every method starts from the same initial weights on any device.
    ``after_round(t)`` is called after round t's checkpoint is written (a test interrupts a run there).
    """
    setup = _set_up(method, model_fn, train, test, parts, cfg, hp.with_knobs(method.knobs), execution, val)
    if arrivals is not None:
        setup = replace(setup, arrivals=check_arrivals(arrivals, len(parts), cfg.rounds, method.calib is not None))
    if staleness:
        setup = replace(setup, staleness=check_staleness(setup.arrivals, staleness))
    if execution.clients_together:
        reason = fallback_reason(method, execution)
        if reason is not None:
            print(fallback_line(method, reason), file=sys.stderr)
        setup = replace(setup, together=reason is None)
    if execution.client_threads > 1:
        setup = _with_threads(setup)
    if execution.capture_step:
        setup = _with_recorder(setup)
    fingerprint = _fingerprint(setup, parts) if checkpoint is not None else ""
    state = _initial_state(setup)
    if resume and checkpoint is not None and Path(checkpoint).is_file():
        state = load_checkpoint(checkpoint, fingerprint, setup.execution.torch_device)
    resumed_after = state.round
    bar = tqdm(total=cfg.rounds, initial=state.round, desc=method.name, unit="round", file=sys.stderr,
               disable=not progress)
    for t in range(state.round + 1, cfg.rounds + 1):
        state = _federated_round(setup, state, t)
        check_divergence(state.history, method.name)
        if state.history[-1]["accuracy"] is not None and state.history[-1]["mean_loss"] is not None:
            bar.set_postfix(acc=f"{state.history[-1]['accuracy']:.3f}", loss=f"{state.history[-1]['mean_loss']:.3f}")
        bar.update(1)
        if checkpoint is not None:
            save_checkpoint(checkpoint, state, fingerprint)
        if after_round is not None:
            after_round(t)
    bar.close()
    return _finish(setup, state, resumed_after)


def _set_up(method, model_fn, train, test, parts, cfg, hp, execution: Execution, val=None) -> _Setup:
    """Models built on the CPU from the seed, then moved; data held on the device once."""
    device = execution.torch_device
    global_model = build_on_device(method, model_fn, cfg.seed, execution)
    client_model = copy.deepcopy(global_model)  # clients rebuild the same model from the seed
    client_model.train()
    if execution.compile:
        client_model.compile()
    if any(len(p) == 0 for p in parts):
        raise ValueError("every client needs at least one training sample; check the partition")
    client_idx = tuple(torch.as_tensor(np.asarray(p), dtype=torch.long, device=device) for p in parts)
    return _Setup(method, cfg, hp, execution, global_model, client_model, frozen_keys(client_model),
                  set(trainable_keys(client_model)), DeviceData.from_dataset(train, device),
                  DeviceData.from_dataset(test, device), client_idx,
                  None if val is None else DeviceData.from_dataset(val, device))


def build_on_device(method: MethodConfig, model_fn: Callable[[], nn.Module], seed: int,
                    execution: Execution) -> nn.Module:
    """The prepared model, built on the CPU under ``torch.manual_seed(seed)`` (the same weights
    whatever the device), then moved to the run's device (NHWC with ``channels_last``)."""
    with torch.device("cpu"):
        torch.manual_seed(seed)
        model = prepare_model(model_fn(), method, seed=seed)
    model = model.to(execution.torch_device)
    return model.to(memory_format=torch.channels_last) if execution.channels_last else model


def _initial_state(setup: _Setup) -> LoopState:
    weights = {k: v.detach().clone() for k, v in setup.global_model.state_dict().items()}
    return LoopState(0, ServerState(weights=weights, num_clients=len(setup.client_idx)), {}, (), (), 0)


def _federated_round(setup: _Setup, state: LoopState, t: int) -> LoopState:
    """Round t: sample, train every sampled client from the global state, aggregate, evaluate."""
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
    extras = _checked_groups(algo.server_extras(server, keys, t, hp), algo.extra_downloads(t), "server_extras", method, t)
    extras = {group: sent(setup.execution, tensors, cfg.seed, t, SEND_EXTRAS_STREAM, *([i] if i else []))
              for i, (group, tensors) in enumerate(sorted(extras.items()))}
    transfers, memory, updates, losses, samples = list(state.transfers), dict(state.memory), [], [], state.samples
    kept = dict(state.clients)
    try:
        if setup.together and clients:
            trained = _clients_together(setup, server, memory, kept, clients, shared, extras, t, lr, transfers)
        elif setup.slots:
            trained = _clients_in_threads(setup, server, memory, kept, clients, shared, extras, t, lr, transfers)
        else:
            trained = [_client_update(setup, server, memory.get(k, {}), kept.get(k), shared, extras, t, k, lr, transfers)
                       for k in clients]
    except NonFiniteLossError as error:  # name what made it non-finite, where a hook did
        raise _blamed(error, setup, clients, t, lr, lambda k: _client_start(
            setup, server, memory.get(k, {}), kept.get(k), shared, t, k, extras, lr, setup.client_model)[0]) from None
    for k, (update, loss, local, own) in zip(clients, trained):
        if local:
            memory[k] = local
        if own:
            kept[k] = own
        updates.append(update)
        losses.append(loss)
        samples += hp.local_epochs * epoch_samples(len(setup.client_idx[k]), hp.batch_size)
    if updates:  # a round nobody arrived in leaves the global model as it was
        server = algo.aggregate(server, updates, hp, keys)
        _check_aggregate(server, state.server, method.name)
        check_finite(server.weights, f"round {t}: {method.name}'s aggregate",
                     "check what your aggregate returns" if _users_hook(algo, "aggregate") else "a diverged run")
        if setup.execution.server_average and t > 1:  # round 1's average is its aggregate
            server = replace(server, weights=moving_average(state.server.weights, server.weights, keys,
                                                            decay=setup.execution.server_average))
    acc = val_acc = None
    if t == cfg.rounds or (cfg.eval_every and t % cfg.eval_every == 0):
        setup.global_model.load_state_dict(server.weights)
        acc, val_acc = _scores(setup)
    entry = {"round": t, "lr": lr, "clients": clients, "mean_loss": float(np.mean(losses)) if losses else None,
             "accuracy": acc,
             "val_accuracy": val_acc,
             **({"number_format": setup.execution.format_of_round(t)} if setup.execution.precision_schedule else {})}
    return LoopState(t, server, memory, tuple(transfers), state.history + (entry,), samples, kept)


def _checked_groups(tensors: dict, declared: tuple[str, ...], hook: str, method: MethodConfig, t: int) -> dict:
    """``tensors`` by ledger group, if they are the groups the method declares for round ``t``
    (what the closed form charges); a one-line ValueError otherwise."""
    if not isinstance(tensors, Mapping):
        raise UserCodeError(f"{method.name}.{hook} returned {_described(tensors)} in round {t}; it must return a "
                            f"dict of tensor dicts by ledger group ({{}} for none; docs/methods.md)")
    if sorted(tensors) != sorted(declared):
        raise ValueError(f"method {method.name!r}: {hook} in round {t} gave groups {sorted(tensors)}, but it declares "
                         f"{sorted(declared)} (extra_downloads / extra_uploads); make the two agree")
    return tensors


def _client_update(setup: _Setup, server: ServerState, own_state: dict, kept: dict | None, shared: list[str],
                   extras: dict, t: int, k: int, lr: float, transfers: list,
                   model: nn.Module | None = None) -> tuple[ClientUpdate, float, dict, dict]:
    """Client k in round t: download (the shared state and the method's ``extras``), train
    locally, upload. ``kept``: the method's state client k kept from its last round (None: its
    first). Returns (update, mean loss, the client's local parts to keep, its new method state)
    and appends its transfers to the ledger. ``model``: the client model it trains (None: the run's)."""
    model = setup.client_model if model is None else model
    server = setup.method.algo.server_view(server, t, _staleness(setup, t, k))
    trainer, down = _client_start(setup, server, own_state, kept, shared, t, k, extras, lr, model)
    if setup.recorder is not None:
        trainer = setup.recorder.trainer(trainer)
    steps, loss = train_client(trainer, setup.train, setup.client_idx[k], setup.hp, seed=derived_seed(setup.cfg.seed, t, k),
                               where=_where(setup, t, k), augment=_augment(setup, t, k),
                               channels_last=setup.execution.channels_last)
    return _client_finish(setup, trainer, down, shared, extras, t, k, steps, loss, transfers)


def _client_start(setup: _Setup, server: ServerState, own_state: dict, kept: dict | None, shared: list[str],
                  t: int, k: int, extras: dict, lr: float, model: nn.Module) -> tuple[ClientTrainer, dict]:
    """Client k's download: ``model`` (a client model) loaded with its starting weights, its
    trainer (the method's ``RoundContext``), and the download as sent."""
    method, hp, ex = setup.method, setup.hp, setup.execution
    shared_set = set(shared)
    down = sent(ex, {key: server.weights[key] for key in shared}, setup.cfg.seed, t, SEND_DOWN_STREAM)
    own = {key: v for key, v in own_state.items() if key not in shared_set}
    model.load_state_dict({**server.weights, **own, **down})
    trainer = client_trainer(model, down, hp, method, round=t, lr=lr, received=extras, state=kept,
                             autocast_dtype=ex.autocast_dtype, arithmetic=arithmetic_of(ex, setup.cfg.seed, t, k),
                             low_precision_weights=ex.low_precision_weights, width=ex.width_of_client(k),
                             draws=torch.Generator().manual_seed(derived_seed(setup.cfg.seed, t, k, DRAWS_STREAM)))
    return trainer, down


def _described(value) -> str:
    return "None" if value is None else f"a {type(value).__name__}" + (f" of {len(value)}" if isinstance(value, tuple) else "")


def _check_aggregate(server, before: ServerState, name: str) -> None:
    """One ``UserCodeError`` line where an ``aggregate`` returned something other than a
    ``ServerState`` whose weights have the keys, shapes and dtypes of the state it was given (a
    dropped or reshaped entry failed later, in ``load_state_dict``, with a traceback)."""
    if not isinstance(server, ServerState):
        raise UserCodeError(f"{name}.aggregate returned {_described(server)}, not a ServerState: return the server's "
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


def _blamed(error: NonFiniteLossError, setup: _Setup, clients: Sequence[int], t: int, lr: float,
            start: Callable[[int], ClientTrainer]) -> NonFiniteLossError:
    """``error`` naming the hook that made round t's loss non-finite (``ClientTrainer.non_finite_cause``
    at each client's starting point, ``start(k)``, on its first batch), with the fix; as it is
    (lower the learning rate) where every hook's result is finite there: the run diverged while
    training. Runs only once a run has failed."""
    name, algo = setup.method.name, setup.method.algo
    for k in clients:
        idx = setup.client_idx[k][: setup.hp.batch_size]
        cause = start(k).non_finite_cause(setup.train.take(idx), setup.train.y[idx])
        if cause is None:
            continue
        hook, what = cause
        users = _users_hook(algo, hook)
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


def _users_hook(algo, hook: str) -> bool:
    """Whether ``algo``'s ``hook`` is a user's code (defined outside this package)."""
    return not getattr(type(algo), hook).__module__.startswith("workloads.")


def _augment(setup: _Setup, t: int, k: int) -> torch.Generator | None:
    """Client k's augmentation generator of round t (None: no augmentation)."""
    if not setup.execution.augment:
        return None
    return torch.Generator(device=setup.execution.torch_device).manual_seed(
        derived_seed(setup.cfg.seed, t, k, AUGMENT_STREAM))


def _where(setup: _Setup, t: int, k: int) -> str:
    return f"round {t}, client {k} ({setup.method.name})"


def _client_finish(setup: _Setup, trainer: ClientTrainer, down: dict, shared: list[str], extras: dict, t: int, k: int,
                   steps: int, loss: float, transfers: list) -> tuple[ClientUpdate, float, dict, dict]:
    """Client k after local training (its trainer's model holds its trained weights): the method's
    ``after_training``, the upload, and its transfers (download, then upload) in the ledger."""
    method, hp, ex, model = setup.method, setup.hp, setup.execution, trainer.model
    shared_set = set(shared)
    _record(transfers, t, k, "down", grouped_bytes(method.algo.payload(model, down, trainer.ctx), fmt=ex.communication))
    for group, tensors in extras.items():
        _record(transfers, t, k, "down", grouped_bytes(tensors, group, fmt=ex.communication))
    returned = method.algo.after_training(model, trainer.ctx, steps, hp)
    if not (isinstance(returned, tuple) and len(returned) == 2 and isinstance(returned[0], Mapping)):
        raise UserCodeError(f"{method.name}.after_training returned {_described(returned)}; it must return a pair "
                            "(the state the client keeps, its extra uploads by group): ({}, {}) for none (docs/methods.md)")
    kept, uploads = returned
    uploads = _checked_groups(uploads, method.algo.extra_uploads(t), "after_training", method, t)
    state = model.state_dict()
    up = sent(ex, method.algo.payload(model, {key: state[key].detach().clone() for key in shared}, trainer.ctx),
              setup.cfg.seed, t, k, SEND_UP_STREAM)
    uploads = {group: sent(ex, tensors, setup.cfg.seed, t, k, SEND_EXTRAS_UP_STREAM, *([i] if i else []))
               for i, (group, tensors) in enumerate(sorted(uploads.items()))}
    local = {key: v.detach().clone() for key, v in state.items() if key not in shared_set and key not in setup.frozen}
    _record(transfers, t, k, "up", {**grouped_bytes(up, fmt=ex.communication), "metadata": metadata_bytes(method.algo),
                                    **{group: sum(grouped_bytes(tensors, group, fmt=ex.communication).values())
                                       for group, tensors in uploads.items()}})
    return ClientUpdate(k, up, len(setup.client_idx[k]), steps, uploads, _staleness(setup, t, k)), loss, local, kept


def _staleness(setup: _Setup, t: int, k: int) -> int:
    """Client k's staleness in round t (0 in synchronous rounds)."""
    return setup.staleness[t - 1][k] if setup.staleness else 0


def _clients_together(setup: _Setup, server: ServerState, memory: dict, kept: dict, clients: Sequence[int],
                      shared: list[str], extras: dict, t: int, lr: float,
                      transfers: list) -> list[tuple[ClientUpdate, float, dict, dict]]:
    """``_client_update`` of every client of round t, their local training as one batched
    computation (``workloads.fl.together``); the same downloads, generators, hooks and ledger."""
    starts, runs = [], []
    for k in clients:
        trainer, down = _client_start(setup, server, memory.get(k, {}), kept.get(k), shared, t, k, extras, lr,
                                      setup.client_model)
        state = {key: v.detach().clone() for key, v in setup.client_model.state_dict().items()}
        starts.append((trainer, down))
        runs.append(ClientRun(state, trainer.ctx, setup.client_idx[k], tuple(batch_starts(len(setup.client_idx[k]),
                                                                                         setup.hp.batch_size)),
                              shuffling_generator(derived_seed(setup.cfg.seed, t, k)),
                              _augment(setup, t, k), _where(setup, t, k)))
    results = train_together(setup.client_model, setup.method, starts[0][0].hp, runs, setup.train)
    out = []
    for k, (trainer, down), result in zip(clients, starts, results):
        setup.client_model.load_state_dict(result.state)
        out.append(_client_finish(setup, trainer, down, shared, extras, t, k, result.steps, result.mean_loss, transfers))
    return out


def _clients_in_threads(setup: _Setup, server: ServerState, memory: dict, kept: dict, clients: Sequence[int],
                        shared: list[str], extras: dict, t: int, lr: float,
                        transfers: list) -> list[tuple[ClientUpdate, float, dict, dict]]:
    """``_client_update`` of every client of round t, as many at once as the run has slots
    (``workloads.fl.threads``); each client's transfers enter the ledger in the round's client order."""
    def update(model: nn.Module, k: int) -> tuple[tuple[ClientUpdate, float, dict, dict], list]:
        own: list = []
        return _client_update(setup, server, memory.get(k, {}), kept.get(k), shared, extras, t, k, lr, own, model), own

    out = []
    for result, own in run_on_slots(update, clients, setup.slots):
        transfers.extend(own)
        out.append(result)
    return out


def _with_threads(setup: _Setup) -> _Setup:
    """``setup`` with ``client_threads`` slots, unless its model draws from torch's global
    generator in a local step (``threads.draws_global_generator``, on a copy): then as it is, and one line says so."""
    ex, method = setup.execution, setup.method
    if _draws_global(setup):
        print(threads.fallback_line(method.name, "its model draws from torch's global generator in a local step "
                                                  "(dropout?), which threads would interleave"), file=sys.stderr)
        return setup
    return replace(setup, slots=threads.slots(setup.client_model, ex.client_threads, ex.torch_device))


def _with_recorder(setup: _Setup) -> _Setup:
    """``setup`` with a step recorder (``workloads.fl.capture``), unless the run cannot record its
    step (``capture.fallback_reason``): then as it is, and one line says so."""
    reason = capture.fallback_reason(setup.execution, lambda: _draws_global(setup))
    if reason is not None:
        print(capture.fallback_line(setup.method.name, reason), file=sys.stderr)
        return setup
    return replace(setup, recorder=StepRecorder(setup.method.name, setup.hp.batch_size, setup.execution.torch_device))


def _draws_global(setup: _Setup) -> bool:
    """Whether a local step of the run's model draws from torch's global generator (``_step_draws_global``)."""
    return _step_draws_global(setup.client_model, setup.method, setup.hp, setup.train, setup.client_idx[0],
                              setup.execution)


def _step_draws_global(model: nn.Module, method: MethodConfig, hp: Hparams, data: DeviceData, idx: torch.Tensor,
                       execution: Execution) -> bool:
    """Whether a local step of ``model`` draws from torch's global generator: one step of a copy
    on the first batch of ``idx`` (``threads.draws_global_generator``; ``model`` is not changed)."""
    probe = copy.deepcopy(model)
    return draws_global_generator(lambda: _timed_trainer(probe, method, hp, data, idx, execution),
                                  execution.torch_device)


def _finish(setup: _Setup, state: LoopState, resumed_after: int) -> RunResult:
    """The optional calibration, then the result."""
    setup.global_model.load_state_dict(state.server.weights)
    last = state.history[-1]
    accuracy, val, before, val_before = last["accuracy"], last.get("val_accuracy"), None, None
    transfers = list(state.transfers)
    local_before = None
    if setup.method.calib is not None:
        before, val_before, local_before = accuracy, val, _local_accuracy(setup, state)
        t = setup.cfg.rounds + 1
        clients = range(len(setup.client_idx)) if setup.arrivals is None else setup.arrivals[t - 1]
        if clients:  # no statistics arrived: the model stays as trained, uncalibrated
            _calibrate(setup, clients, round=t, transfers=transfers)
            check_finite(setup.global_model.state_dict(), f"{setup.method.name}'s calibration")
            accuracy, val = _scores(setup)
    final = _global_state(setup)
    return RunResult(setup.method.name, accuracy, before, state.history, tuple(transfers), state.samples, final,
                     resumed_after, val, val_before, _local_accuracy(setup, state), local_before)


def _global_state(setup: _Setup) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in setup.global_model.state_dict().items()}


def _local_accuracy(setup: _Setup, state: LoopState) -> float | None:
    """The local test mode of the global model as it is now (``local_test_accuracy``): each
    client's model, with its never-sent parts, on the test samples of its own classes."""
    ex = setup.execution
    return setup.method.algo.local_test_accuracy(
        setup.client_model, _global_state(setup), state.memory, [setup.train.y[idx].tolist() for idx in setup.client_idx],
        lambda idx: _memory_format(setup.test.take(idx), ex.channels_last), setup.test.y)


def _scores(setup: _Setup) -> tuple[float, float | None]:
    """(test accuracy, validation accuracy or None) of the global model as it is now."""
    ex = setup.execution
    test = evaluate_on(setup.global_model, setup.test, channels_last=ex.channels_last)
    val = None if setup.val is None else evaluate_on(setup.global_model, setup.val, channels_last=ex.channels_last)
    return test, val


def _calibrate(setup: _Setup, clients: Sequence[int], *, round: int, transfers: list) -> None:
    """Each of ``clients`` (every client, or the calibration round's arrivals) downloads the final
    feature extractor and sends its statistics; the server replaces the classifier of the global
    model by the one calibrated on those statistics alone."""
    calib, model, hp = setup.method.calib, setup.global_model, setup.hp
    model.eval()
    heads = ("classifier", *setup.method.algo.local_modules)
    extractor = sent(setup.execution, {k: v for k, v in model.state_dict().items() if k.split(".")[0] not in heads},
                     setup.cfg.seed, round, SEND_DOWN_STREAM)
    clients_model = model  # the clients compute their statistics with the extractor as they received it
    if not setup.execution.communication.is_identity:
        clients_model = setup.client_model
        clients_model.load_state_dict({**model.state_dict(), **extractor})
        clients_model.eval()
    num_classes = model.classifier.out_features
    stats = []
    for k in clients:
        idx = setup.client_idx[k]
        _record(transfers, round, k, "down", grouped_bytes(extractor, fmt=setup.execution.communication))
        x = _memory_format(setup.train.take(idx), setup.execution.channels_last)
        with arithmetic_of(setup.execution, setup.cfg.seed, round, k) or contextlib.nullcontext():
            s = calib.client_statistics(clients_model, calib.client_batches(x, setup.train.y[idx], hp.batch_size),
                                        num_classes=num_classes, hp=hp)
        _record(transfers, round, k, "up", {"calibration_statistics": sum(tensor_bytes(v) for v in s.values())})
        stats.append(s)
    gen = torch.Generator(device=setup.execution.torch_device).manual_seed(derived_seed(setup.cfg.seed, round))
    weight = calib.server_calibrate(stats, classifier_weight=model.classifier.weight.detach(),
                                    loss_fn=per_sample_loss(setup.method), hp=hp, generator=gen)
    with torch.no_grad():
        model.classifier.weight.copy_(weight)


# --------------------------------------------------------------------------- know before you wait


@dataclass(frozen=True)
class Forecast:
    """The projected wall time of a run's local training, from a few timed steps."""

    method: str
    samples: int  # local training samples of the whole run (``planned_samples``)
    samples_per_s: float  # measured on FORECAST_STEPS steps of a fresh model, in the mode the run trains in
    device: str
    mode: str = ""  # how the timed steps ran where not one client after another ("2 clients at once on threads")

    @property
    def wall_s(self) -> float:
        return self.samples / self.samples_per_s

    def line(self) -> str:
        return (f"{self.method}: projected local training {duration_text(self.wall_s)} ({self.samples:,} samples "
                f"at {self.samples_per_s:,.0f} samples/s on {self.device}{', ' + self.mode if self.mode else ''}; "
                "evaluation not included)")


def forecast(method: MethodConfig, *, model_fn: Callable[[], nn.Module], train, parts: Sequence[np.ndarray],
             cfg: FLConfig, hp: Hparams, execution: Execution = Execution(),
             arrivals: Sequence[Sequence[int]] | None = None) -> Forecast:
    """Time ``FORECAST_STEPS`` local steps (after one warm-up step, where ``compile`` compiles) of
    the model ``run_method`` would build, on the first client's first batch, and project the local
    training of the whole run (``arrivals``: the clients each round trains where a participation
    plan gives them, as ``run_method`` takes them). Touches no state of a later ``run_method`` (it re-seeds).

    The steps run in the mode the run will train in: with ``clients_together``, G copies of that
    batch as one batched step (``together_rate``), with ``client_threads``, that many clients'
    steps at once on threads (``step_rate``), G and the thread count at most a round's clients,
    and with ``capture_step``, the replayed step after its recording; a run that would fall back
    is timed as it will train."""
    device = execution.torch_device
    model = build_on_device(method, model_fn, cfg.seed, execution)
    if execution.compile:
        model.compile()
    model.train()
    idx = torch.as_tensor(np.asarray(parts[0]), dtype=torch.long, device=device)
    data, hp = DeviceData.from_dataset(train, device), hp.with_knobs(method.knobs)
    per_round = clients_per_round(len(parts), cfg.participation)
    if execution.clients_together and fallback_reason(method, execution) is None and per_round > 1:
        rate, mode = together_rate(model, method, hp, data, idx, execution, per_round), f"{per_round} clients together"
    else:
        def draws() -> bool:
            return _step_draws_global(model, method, hp, data, idx, execution)

        threads_used = min(execution.client_threads, per_round)
        if threads_used > 1 and draws():
            threads_used = 1
        recorded = execution.capture_step and capture.fallback_reason(execution, draws) is None
        rate = step_rate(model, method, hp, data, idx, execution, clients=threads_used, recorded=recorded)
        mode = ", ".join([*([f"{threads_used} clients at once on threads"] if threads_used > 1 else []),
                          *(["the step replayed as a CUDA graph"] if recorded and device.type == "cuda" else [])])
    return Forecast(method.name, planned_samples(parts, cfg, hp, arrivals), rate, execution.device, mode)


def step_rate(model: nn.Module, method: MethodConfig, hp: Hparams, data: DeviceData, idx: torch.Tensor,
              execution: Execution, steps: int = FORECAST_STEPS, clients: int = 1, recorded: bool = False) -> float:
    """Training samples/s of ``steps`` local steps of each of ``clients`` clients after one warm-up
    step each, ``model`` (changed by them) and ``clients - 1`` copies of it trained at once on as
    many threads (``workloads.fl.threads``; 1: this thread); ``recorded``: through the round's
    static step (``workloads.fl.capture``), after its eager first step and, on a GPU, its recording."""
    pool = threads.slots(model, clients, execution.torch_device)

    def timed(model: nn.Module):
        trainer, x, y = _timed_trainer(model, method, hp, data, idx, execution)
        if recorded:
            trainer = StepRecorder(method.name, hp.batch_size, execution.torch_device).trainer(trainer)
            trainer.step(x, y)  # the client's first step: eager
            trainer.step(x, y)  # recorded, on a GPU
        return trainer, x, y

    trainers = {id(slot.model): timed(slot.model) for slot in pool}

    def train(model: nn.Module, _: int) -> None:
        trainer, x, y = trainers[id(model)]
        for _ in range(steps):
            trainer.step(x, y)

    synchronize(execution.torch_device)
    start = time.perf_counter()
    if clients == 1:
        train(model, 0)
    else:
        run_on_slots(train, range(clients), pool)
    synchronize(execution.torch_device)
    return clients * steps * len(idx[:hp.batch_size]) / (time.perf_counter() - start)


def together_rate(model: nn.Module, method: MethodConfig, hp: Hparams, data: DeviceData, idx: torch.Tensor,
                  execution: Execution, clients: int, steps: int = FORECAST_STEPS) -> float:
    """Training samples/s of ``clients`` clients trained together (``workloads.fl.together``),
    each ``steps`` steps on the first batch of ``idx``, after one warm-up step; ``model`` is not changed."""
    trainer, _, _ = _timed_trainer(copy.deepcopy(model), method, hp, data, idx, execution)
    batch = idx[:hp.batch_size]
    start_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def train(epochs: int) -> None:
        runs = [ClientRun(start_state, trainer.ctx, batch, (0,), shuffling_generator(k), None, f"timed client {k}")
                for k in range(clients)]
        train_together(model, method, trainer.hp.replace(local_epochs=epochs), runs, data)

    train(1)
    synchronize(execution.torch_device)
    begin = time.perf_counter()
    train(steps)
    synchronize(execution.torch_device)
    return clients * steps * len(batch) / (time.perf_counter() - begin)


def _timed_trainer(model: nn.Module, method: MethodConfig, hp: Hparams, data: DeviceData, idx: torch.Tensor,
                   execution: Execution) -> tuple[ClientTrainer, torch.Tensor, torch.Tensor]:
    """A round-2 trainer of ``model`` on the first batch of ``idx`` (its ``x``, ``y``), after one
    step (a warm-up, where ``compile`` compiles)."""
    batch = idx[:hp.batch_size]
    x = _memory_format(data.take(batch), execution.channels_last)
    y = data.y[batch]
    anchor = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trainer = client_trainer(model, anchor, hp, method, round=2, lr=hp.lr, received=example_received(model, method, hp, 2),
                             autocast_dtype=execution.autocast_dtype,
                             arithmetic=arithmetic_of(execution, 0, 1, 0),  # the forecast times round 1's emulation too
                             low_precision_weights=execution.low_precision_weights)
    trainer.step(x, y)
    return trainer, x, y


def duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# --------------------------------------------------------------------------- checkpoints


def _fingerprint(setup: _Setup, parts) -> str:
    """What a checkpoint must agree with: method, config, hyper-parameters, execution options
    (device type, not index), the partition and the initial weights."""
    h = hashlib.sha256()
    ex = setup.execution.settings()
    ex["device"] = setup.execution.torch_device.type
    doc = {"method": setup.method.name, "cfg": asdict(setup.cfg), "hp": setup.hp.as_dict(), "execution": ex}
    if setup.arrivals is not None:
        doc["arrivals"] = setup.arrivals
    if setup.staleness:
        doc["staleness"] = [sorted(ages.items()) for ages in setup.staleness]
    h.update(json.dumps(doc, sort_keys=True, default=str).encode())
    for p in parts:
        h.update(np.asarray(p, dtype=np.int64).tobytes() + b"|")
    for key, v in setup.global_model.state_dict().items():
        h.update(key.encode() + v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def save_checkpoint(path: str | Path, state: LoopState, fingerprint: str) -> None:
    """``state`` and torch's RNG states to ``path`` (written to a temporary name, then renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint, "round": state.round,
           "server": {"weights": state.server.weights, "prev_weights": state.server.prev_weights,
                      "momentum": state.server.momentum, "extras": state.server.extras,
                      "num_clients": state.server.num_clients},
           "memory": state.memory, "clients": state.clients, "transfers": [tuple(asdict(t).values()) for t in state.transfers],
           "history": list(state.history), "samples": state.samples, "torch_rng": torch.get_rng_state(),
           "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(doc, tmp)
    os.replace(tmp, path)


def load_checkpoint_document(path: str | Path, device: torch.device | str = "cpu") -> dict:
    """The checkpoint file's contents; a damaged file is one-line ValueError."""
    try:
        doc = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch reports damage through many exception types
        first = (str(err).strip().splitlines() or [""])[0]  # torch's own advice (weights_only=False) is not ours
        raise ValueError(f"checkpoint {path} is unreadable ({type(err).__name__}: {first}); delete it to start "
                         "that method over") from None
    return doc if isinstance(doc, dict) else {}


def load_checkpoint(path: str | Path, fingerprint: str, device: torch.device) -> LoopState:
    """The ``LoopState`` saved at ``path``; restores torch's RNG states. A checkpoint of another
    run (method, config, partition, model, options) is a one-line ValueError."""
    doc = load_checkpoint_document(path, device)
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"checkpoint {path} is not a format-{CHECKPOINT_FORMAT} loop checkpoint; delete it to start over")
    if doc["fingerprint"] != fingerprint:
        raise ValueError(f"checkpoint {path} belongs to another run (method, config, partition, model or "
                         "options differ); resume with the same settings or delete it")
    torch.set_rng_state(doc["torch_rng"].cpu())
    if doc["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in doc["cuda_rng"]])
    server = ServerState(**doc["server"])
    transfers = tuple(Transfer(*row) for row in doc["transfers"])
    return LoopState(doc["round"], server, doc["memory"], transfers, tuple(doc["history"]), doc["samples"],
                     doc.get("clients", {}))

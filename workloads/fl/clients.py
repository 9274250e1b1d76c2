"""A round's clients: each downloads the shared state and what its method sends beside it,
trains its local epochs, runs its method's ``after_training`` and uploads (``client_update``), and
the ways a round's clients can be scheduled (``one_after_another``, ``on_threads``, ``together``:
``workloads.fl.ways`` registers and chooses them).

Each client downloads the shared state, trains ``local_epochs`` epochs of mini-batches of
``batch_size`` from a fresh optimizer, with what its method sends beside the model
(``server_extras``: FedCos's d_t, SCAFFOLD's c) and what the client kept from its last round (a
double-head client's local parts; its method's state, ``initial_client_state`` /
``after_training``: SCAFFOLD's c_i, FedDyn's gradient term, MOON's previous model), and sends the
shared state back with its sample count and its method's ``extra_uploads``. Its shuffling order is
drawn on the CPU and copied to the device once per local epoch; every generator is seeded as
``workloads.fl.streams`` says, so every way of training draws the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch import nn

from workloads.fl.comm import Transfer, grouped_bytes, metadata_bytes
from workloads.fl.evaluation import memory_format
from workloads.fl.execution import DeviceData
from workloads.fl.guard import UserCodeError
from workloads.fl.hparams import Hparams
from workloads.fl.local import (ClientContext, ClientTrainer, NonFiniteLossError, client_trainer, local_batches,
                                shuffling_generator)
from workloads.fl.methods import MethodConfig
from workloads.fl.methods.base import ClientUpdate, ServerState
from workloads.fl.schedule import batch_starts
from workloads.fl.setup import Setup
from workloads.fl.streams import (SEND_DOWN_STREAM, SEND_EXTRAS_UP_STREAM, SEND_UP_STREAM, arithmetic_of,
                                  augment_generator, derived_seed, draws_generator, sent)
from workloads.fl.threads import run_on_slots
from workloads.fl.together import ClientRun, train_together

TensorDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class RoundWork:
    """What round ``round`` gives its clients: the server's state, what each client kept from its
    last round (``memory``: its never-sent local parts; ``kept``: its method's state), the keys the
    method shares this round and what it sends beside them (``extras``, as sent)."""

    setup: Setup
    server: ServerState
    memory: Mapping[int, TensorDict]
    kept: Mapping[int, TensorDict]
    clients: tuple[int, ...]
    shared: tuple[str, ...]
    extras: Mapping[str, TensorDict]
    round: int
    lr: float


@dataclass(frozen=True)
class ClientStart:
    """A client after its download: its trainer (its model loaded, its ``RoundContext``) and the download as sent."""

    trainer: ClientTrainer
    down: TensorDict


@dataclass(frozen=True)
class ClientResult:
    """A client after its round: its update for the aggregate, its mean local loss, what it keeps
    (``local``: its never-sent parts; ``kept``: its method's new state) and its ledger entries."""

    update: ClientUpdate
    mean_loss: float
    local: TensorDict
    kept: TensorDict
    transfers: tuple[Transfer, ...]


def train_client(trainer, data: DeviceData, idx: torch.Tensor, hp: Hparams, *, seed: int, where: str,
                 augment: torch.Generator | None = None, channels_last: bool = False) -> tuple[int, float]:
    """Local epochs of SGD steps over samples ``idx`` of ``data``; returns (steps, mean loss).
    NaN/inf -> NonFiniteLossError. The shuffling order is drawn on the CPU from ``seed``."""
    starts = batch_starts(len(idx), hp.batch_size)
    loss_sum, steps = torch.zeros((), device=idx.device), 0
    batches = local_batches(idx, shuffling_generator(seed), starts, hp.batch_size, hp.local_epochs)
    for steps, batch in enumerate(batches, start=1):
        x = memory_format(data.take(batch, generator=augment), channels_last)
        loss_sum = loss_sum + trainer.step(x, data.y[batch])
        if steps % len(starts) == 0 and not torch.isfinite(loss_sum):  # at the end of each epoch
            raise NonFiniteLossError.in_epoch(where, steps // len(starts), trainer.ctx.lr)
    return steps, float(loss_sum) / max(steps, 1)


def client_start(work: RoundWork, k: int, model: nn.Module) -> ClientStart:
    """Client k's download: ``model`` (a client model) loaded with its starting weights (the
    server as the method lets the client see it: ``server_view``), its trainer, and the download as sent."""
    setup, t = work.setup, work.round
    method, hp, ex, seed = setup.method, setup.hp, setup.execution, setup.cfg.seed
    server = method.algo.server_view(work.server, t, staleness(setup, t, k))
    down = sent(ex, {key: server.weights[key] for key in work.shared}, seed, t, SEND_DOWN_STREAM)
    own = {key: v for key, v in work.memory.get(k, {}).items() if key not in set(work.shared)}
    model.load_state_dict({**server.weights, **own, **down})
    client = ClientContext(round=t, lr=work.lr, received=work.extras, state=work.kept.get(k),
                           width=ex.width_of_client(k), draws=draws_generator(seed, t, k))
    trainer = client_trainer(model, down, hp, method, client, autocast_dtype=ex.autocast_dtype,
                             arithmetic=arithmetic_of(ex, seed, t, k), low_precision_weights=ex.low_precision_weights)
    return ClientStart(trainer, down)


def client_update(work: RoundWork, k: int, model: nn.Module | None = None) -> ClientResult:
    """Client k in the round: download, train locally, upload. ``model``: the client model it
    trains (None: the run's)."""
    setup, t = work.setup, work.round
    start = client_start(work, k, setup.client_model if model is None else model)
    trainer = start.trainer if setup.recorder is None else setup.recorder.trainer(start.trainer)
    steps, loss = train_client(trainer, setup.train, setup.client_idx[k], setup.hp, seed=derived_seed(setup.cfg.seed, t, k),
                               where=where(setup, t, k), augment=augment_generator(setup.execution, setup.cfg.seed, t, k),
                               channels_last=setup.execution.channels_last)
    return client_finish(work, k, start, steps, loss)


def client_finish(work: RoundWork, k: int, start: ClientStart, steps: int, loss: float) -> ClientResult:
    """Client k after local training (its trainer's model holds its trained weights): the method's
    ``after_training``, the upload, and its ledger entries (download, then upload)."""
    setup, t, trainer = work.setup, work.round, start.trainer
    method, ex, model, seed = setup.method, setup.execution, trainer.model, setup.cfg.seed
    transfers: list[Transfer] = []
    record(transfers, t, k, "down", grouped_bytes(method.algo.payload(model, start.down, trainer.ctx), fmt=ex.communication))
    for group, tensors in work.extras.items():
        record(transfers, t, k, "down", grouped_bytes(tensors, group, fmt=ex.communication))
    returned = method.algo.after_training(model, trainer.ctx, steps, setup.hp)
    if not (isinstance(returned, tuple) and len(returned) == 2 and isinstance(returned[0], Mapping)):
        raise UserCodeError(f"{method.name}.after_training returned {described(returned)}; it must return a pair "
                            "(the state the client keeps, its extra uploads by group): ({}, {}) for none (docs/methods.md)")
    kept, uploads = returned
    uploads = checked_groups(uploads, method.algo.extra_uploads(t), "after_training", method, t)
    state = model.state_dict()
    up = sent(ex, method.algo.payload(model, {key: state[key].detach().clone() for key in work.shared}, trainer.ctx),
              seed, t, k, SEND_UP_STREAM)
    uploads = {group: sent(ex, tensors, seed, t, k, SEND_EXTRAS_UP_STREAM, *([i] if i else []))
               for i, (group, tensors) in enumerate(sorted(uploads.items()))}
    local = {key: v.detach().clone() for key, v in state.items() if key not in set(work.shared) and key not in setup.frozen}
    record(transfers, t, k, "up", {**grouped_bytes(up, fmt=ex.communication), "metadata": metadata_bytes(method.algo),
                                   **{group: sum(grouped_bytes(tensors, group, fmt=ex.communication).values())
                                      for group, tensors in uploads.items()}})
    update = ClientUpdate(k, up, len(setup.client_idx[k]), steps, uploads, staleness(setup, t, k))
    return ClientResult(update, loss, local, kept, tuple(transfers))


def one_after_another(work: RoundWork) -> list[ClientResult]:
    """``client_update`` of every client of the round, in the round's order, on the run's client
    model (through the round's recorded step where the run records it)."""
    return [client_update(work, k) for k in work.clients]


def on_threads(work: RoundWork) -> list[ClientResult]:
    """``client_update`` of every client of the round, as many at once as the run has slots
    (``workloads.fl.threads``); the results, and so the ledger, in the round's client order."""
    return run_on_slots(lambda model, k: client_update(work, k, model), work.clients, work.setup.slots)


def together(work: RoundWork) -> list[ClientResult]:
    """``client_update`` of every client of the round, their local training as one batched
    computation (``workloads.fl.together``); the same downloads, generators, hooks and ledger."""
    setup, t, seed = work.setup, work.round, work.setup.cfg.seed
    if not work.clients:
        return []
    starts, runs = [], []
    for k in work.clients:
        start = client_start(work, k, setup.client_model)
        state = {key: v.detach().clone() for key, v in setup.client_model.state_dict().items()}
        starts.append(start)
        runs.append(ClientRun(state, start.trainer.ctx, setup.client_idx[k],
                              tuple(batch_starts(len(setup.client_idx[k]), setup.hp.batch_size)),
                              shuffling_generator(derived_seed(seed, t, k)),
                              augment_generator(setup.execution, seed, t, k), where(setup, t, k)))
    results = train_together(setup.client_model, setup.method, starts[0].trainer.hp, runs, setup.train)
    out = []
    for k, start, result in zip(work.clients, starts, results):
        setup.client_model.load_state_dict(result.state)
        out.append(client_finish(work, k, start, result.steps, result.mean_loss))
    return out


def record(transfers: list, round: int, client: int, direction: str, sizes: dict[str, int]) -> None:
    """Ledger entries of ``sizes`` (bytes by group) sent in ``direction`` by ``client`` in ``round``."""
    transfers.extend(Transfer(round, client, direction, g, b) for g, b in sorted(sizes.items()))


def checked_groups(tensors: dict, declared: tuple[str, ...], hook: str, method: MethodConfig, t: int) -> dict:
    """``tensors`` by ledger group, if they are the groups the method declares for round ``t``
    (what the closed form charges); a one-line ValueError otherwise."""
    if not isinstance(tensors, Mapping):
        raise UserCodeError(f"{method.name}.{hook} returned {described(tensors)} in round {t}; it must return a "
                            f"dict of tensor dicts by ledger group ({{}} for none; docs/methods.md)")
    if sorted(tensors) != sorted(declared):
        raise ValueError(f"method {method.name!r}: {hook} in round {t} gave groups {sorted(tensors)}, but it declares "
                         f"{sorted(declared)} (extra_downloads / extra_uploads); make the two agree")
    return tensors


def described(value) -> str:
    """What a hook returned, in a message: its type (and a tuple's length)."""
    return "None" if value is None else f"a {type(value).__name__}" + (f" of {len(value)}" if isinstance(value, tuple) else "")


def staleness(setup: Setup, t: int, k: int) -> int:
    """Client k's staleness in round t (0 in synchronous rounds)."""
    return setup.staleness[t - 1][k] if setup.staleness else 0


def where(setup: Setup, t: int, k: int) -> str:
    return f"round {t}, client {k} ({setup.method.name})"

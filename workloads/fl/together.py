"""A round's clients trained together: one batched computation per local step instead of one
per client (issue 44, ``Execution.clients_together``, ``--clients-together``).

The round's clients' models are stacked (every parameter and buffer gets a leading client
dimension), and each local step runs the method's own step hooks (``head_outputs``,
``batch_loss``, ``penalty``: ``workloads.fl.local.ClientTrainer.step``) once for all of them, under
``torch.func.vmap`` over the clients of ``torch.func.functional_call`` of the client model with
each client's weights, and ``torch.func.grad`` of each client's loss with respect to its trainable
weights (PyTorch's ``torch.func``, "Model ensembling" in its documentation; inside, a trainable
weight reads ``requires_grad`` True and a frozen one False, as the hooks expect). SGD with momentum and weight decay is then applied to the stacked tensors with
the one SGD update (``local.sgd_update``, ``torch.optim.SGD``'s single-tensor arithmetic), element
for element what each client's own optimizer (``local.LocalSGD``) does.

What keeps its meaning, client by client:

* its data: its own shuffling generator and augmentation generator, drawn in the order the
  sequential loop draws them, its mini-batches of ``batch_size`` and its partial last batch;
* its step count: at local step s, the clients that still have a step s train; they are grouped
  by batch size (a partial last batch, a client with less data), each group one batched step,
  so that no client trains on more or fewer samples than sequentially;
* its BatchNorm running statistics (stacked buffers, updated in place per client by vmap's
  batch-norm rule), its momentum buffers, its method state (``RoundContext.state``: SCAFFOLD's c_i,
  FedDyn's gradient term, MOON's previous model) and its local parts (double head);
* what it downloaded (the anchors, ``received``) is the same for every client and enters unbatched.

Not bitwise: a stacked convolution is one grouped convolution over the clients' channels and a
stacked linear layer one batched matrix product, whose reductions run in another order than the
per-client kernels' (and BatchNorm's statistics are reduced by another kernel), so results agree
with the sequential loop to float rounding (``tests/test_clients_together.py`` states the
tolerance), as two CPUs' kernels do (docs/results.md).

``fallback_reason`` names why a run cannot train its clients together (a number format, whose
stochastic rounding draws per client; autocast; ``torch.compile``; a method whose step hooks are
not declared batchable, ``FedAvg.clients_together``); the loop then trains them one after another
and says so once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from workloads.fl.execution import DeviceData, Execution
from workloads.fl.hparams import Hparams
from workloads.fl.local import NonFiniteLossError, Objective, local_batches, loss_function, sgd_update
from workloads.fl.methods import MethodConfig
from workloads.fl.methods.base import RoundContext, trains_together

TensorDict = dict[str, torch.Tensor]


def fallback_reason(method: MethodConfig, execution: Execution) -> str | None:
    """Why ``method`` under ``execution`` cannot train a round's clients together (None: it can)."""
    if execution.rounds_arithmetic:
        return "a number format rounds each client's GEMMs with its own generator"
    if execution.bf16:
        return "--bf16 autocast is not batched"
    if execution.compile:
        return "--compile compiles one client's forward"
    if not trains_together(method.algo):
        return (f"{method.algorithm}'s step hooks (head_outputs, batch_loss, penalty) are not declared batchable "
                "(clients_together)")
    return None


def fallback_line(method_name: str, reason: str) -> str:
    """The one line a run that cannot train its clients together prints."""
    return f"--clients-together: {method_name} trains its clients one after another ({reason})"


@dataclass(frozen=True)
class ClientRun:
    """One client of the round, as the batched training takes it."""

    start: TensorDict  # the client model's state_dict at the start of local training
    ctx: RoundContext  # what it knows (anchors, received, its own state, lr)
    idx: torch.Tensor  # its samples: indices into the training split, on the device
    batches: tuple[int, ...]  # start of each mini-batch of an epoch (``schedule.batch_starts``)
    shuffle: torch.Generator  # its CPU shuffling generator, seeded as the sequential loop seeds it
    augment: torch.Generator | None  # its augmentation generator (None: no augmentation)
    where: str  # "round t, client k (method)" for errors


@dataclass(frozen=True)
class ClientResult:
    steps: int
    mean_loss: float
    state: TensorDict  # the client model's state_dict after local training


class _LocalLoss(nn.Module):
    """One client's loss of one mini-batch, as ``ClientTrainer.step`` computes it, as a module's
    forward so that ``functional_call`` can run it with the client's weights."""

    def __init__(self, model: nn.Module, method: MethodConfig, hp: Hparams, ctx: RoundContext) -> None:
        super().__init__()
        self.model = model
        self.objective, self.ctx = Objective(method.algo, loss_function(method), hp), ctx

    def forward(self, x: torch.Tensor, y: torch.Tensor, state: TensorDict) -> torch.Tensor:
        ctx = RoundContext(self.ctx.round, self.ctx.global_params, self.ctx.received, state, self.ctx.lr)
        return self.objective.batch_loss(self.model, x, y, ctx).loss


class _Stacked:
    """The clients' weights, momentum buffers and method states, each with a leading client dimension."""

    def __init__(self, model: nn.Module, clients: Sequence[ClientRun]) -> None:
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        keys = list(clients[0].start)
        self.trainable = [k for k in keys if k in trainable]
        self.weights = {k: torch.stack([c.start[k] for c in clients]).detach().clone() for k in keys}
        self.momentum: dict[str, torch.Tensor] = {}
        self.state = {k: torch.stack([c.ctx.state[k] for c in clients]) for k in clients[0].ctx.state}

    def rows(self, tensors: TensorDict, rows: torch.Tensor | None) -> TensorDict:
        """``tensors`` of the clients ``rows`` (None: all, the tensors themselves)."""
        return dict(tensors) if rows is None else {k: v.index_select(0, rows) for k, v in tensors.items()}

    def put(self, tensors: TensorDict, into: TensorDict, rows: torch.Tensor | None) -> None:
        if rows is not None:
            for k, v in tensors.items():
                into[k].index_copy_(0, rows, v.detach())


def train_together(model: nn.Module, method: MethodConfig, hp: Hparams, clients: Sequence[ClientRun],
                   data: DeviceData) -> list[ClientResult]:
    """Local training of ``clients`` (``hp.local_epochs`` epochs each, learning rate their
    ``ctx.lr``) as one batched computation per step and batch size (module doc); ``model`` is the
    client model (its structure; its weights are not read or changed). ``hp``: with the method's
    knobs (``ClientTrainer.hp``). NaN/inf -> ``NonFiniteLossError`` at the end of the epoch it
    happened in, as ``clients.train_client``."""
    stacked = _Stacked(model, clients)
    lr = clients[0].ctx.lr
    loss_fn = _LocalLoss(model, method, hp, clients[0].ctx)

    def client_loss(trained: TensorDict, others: TensorDict, x, y, state: TensorDict) -> torch.Tensor:
        weights = {f"model.{k}": v for k, v in {**trained, **others}.items()}
        return torch.func.functional_call(loss_fn, weights, (x, y, state))

    per_client = torch.func.vmap(torch.func.grad_and_value(client_loss))
    steps = [hp.local_epochs * len(c.batches) for c in clients]
    loss_sums = [torch.zeros((), device=c.idx.device) for c in clients]
    batches = [local_batches(c.idx, c.shuffle, c.batches, hp.batch_size, hp.local_epochs) for c in clients]
    for s in range(max(steps)):
        groups: dict[int, list[tuple[int, torch.Tensor]]] = {}
        for k in range(len(clients)):
            if s < steps[k]:
                batch = next(batches[k])
                groups.setdefault(len(batch), []).append((k, batch))
        for members in groups.values():
            ks = [k for k, _ in members]
            rows = None if ks == list(range(len(clients))) else torch.tensor(ks, device=clients[0].idx.device)
            x = torch.stack([data.take(batch, generator=clients[k].augment) for k, batch in members])
            y = torch.stack([data.y[batch] for _, batch in members])
            losses = _step(stacked, per_client, rows, x, y, lr=lr, hp=hp, first=s == 0)
            for i, k in enumerate(ks):
                loss_sums[k] = loss_sums[k] + losses[i]
        for k, c in enumerate(clients):
            if s < steps[k] and (s + 1) % len(c.batches) == 0 and not torch.isfinite(loss_sums[k]):
                raise NonFiniteLossError.in_epoch(c.where, (s + 1) // len(c.batches), lr)
    return [ClientResult(steps[k], float(loss_sums[k]) / max(steps[k], 1),
                         {key: v[k].detach().clone() for key, v in stacked.weights.items()})
            for k in range(len(clients))]


def _step(stacked: _Stacked, per_client, rows: torch.Tensor | None, x: torch.Tensor, y: torch.Tensor, *,
          lr: float, hp: Hparams, first: bool) -> torch.Tensor:
    """One local step of the clients ``rows`` (None: all) on their batches ``x`` [G, B, ...], ``y``
    [G, B]: each client's loss and its gradient (``per_client``: vmap of grad), SGD on each
    trainable tensor; returns the G losses."""
    weights = stacked.rows(stacked.weights, rows)
    trained = {k: weights[k] for k in stacked.trainable}
    grads, losses = per_client(trained, {k: v for k, v in weights.items() if k not in trained}, x, y,
                               stacked.rows(stacked.state, rows))
    momentum = {} if first else stacked.rows(stacked.momentum, rows)
    with torch.no_grad():
        for k in stacked.trainable:
            momentum[k] = sgd_update(weights[k], grads[k], momentum.get(k), lr=lr, momentum=hp.momentum,
                                     weight_decay=hp.weight_decay)
        stacked.put(weights, stacked.weights, rows)
        if hp.momentum != 0:
            if first and rows is not None and not stacked.momentum:  # the first step's group of a partial batch
                stacked.momentum = {k: torch.zeros_like(stacked.weights[k]) for k in stacked.trainable}
            if rows is None:
                stacked.momentum.update(momentum)
            stacked.put(momentum, stacked.momentum, rows)
    return losses.detach()

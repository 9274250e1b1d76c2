"""The local training step and calibration as objects the trace capture can call.

The local step is defined once: the mini-batch loss (``Objective.batch_loss``: the method's
``head_outputs``, ``batch_loss`` and ``penalty``) and the SGD update (``sgd_update``,
``torch.optim.SGD``'s arithmetic). Every way of training calls both: one client after another and
on threads through ``ClientTrainer.step`` (its optimizer ``LocalSGD`` applies ``sgd_update``), the
batched clients (``workloads.fl.together``) and the recorded step (``workloads.fl.capture``)
directly. bench captures ``ClientTrainer.step`` on ``meta``-device copies of the model and a batch::

    model = prepare_model(build_model(...), method, seed=0)        # SphereFed / FedBABU / double head
    trainer = client_trainer(model, global_state, hp, method, ClientContext(round=2, received={"fedcos_direction": d}))
    loss = trainer.step(x, y)      # zero_grad, forward, loss (+ the method's terms), backward, SGD step

``step`` uses tensor ops only (no ``.item()``, no branching on data), so it runs on ``meta``; the
loop checks the returned loss for NaN outside the step. Calibration hooks are
``method.calib.client_statistics(model, batches, num_classes=C, hp=hp)`` and
``method.calib.server_calibrate(stats, classifier_weight=W, loss_fn=per_sample_loss(method),
hp=hp)``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from workloads.allocator import keep_freed_memory
from workloads.fl.guard import UserCodeError
from workloads.fl.hparams import Hparams
from workloads.fl.methods import MethodConfig
from workloads.fl.methods.base import FedAvg, RoundContext
from workloads.numerics.emulate import Arithmetic
from workloads.numerics.quantize import round_to_format


class NonFiniteLossError(FloatingPointError):
    """Local training produced a NaN or infinite loss. ``place``: where (``"round t, client k
    (method), local epoch e"``); the message adds what made it non-finite, where the loop found it
    (``blaming``), else the hint for a divergence."""

    def __init__(self, message: str, place: str = "") -> None:
        super().__init__(message)
        self.place = place

    @classmethod
    def in_epoch(cls, where: str, epoch: int, lr: float) -> "NonFiniteLossError":
        """The error of ``where``'s (``"round t, client k (method)"``) local ``epoch`` (from 1) at rate ``lr``."""
        place = f"{where}, local epoch {epoch}"
        return cls(f"non-finite loss in {place}: lower the learning rate (lr={lr:g})", place)

    def blaming(self, cause: str) -> "NonFiniteLossError":
        """The same error with ``cause`` (what made the loss non-finite, and its fix) in place of
        the learning-rate hint."""
        return NonFiniteLossError(f"non-finite loss in {self.place}: {cause}", self.place)


def _finite(value) -> bool:
    return not torch.is_tensor(value) or not value.is_floating_point() or bool(torch.isfinite(value).all())


def first_non_finite(tensors: Mapping[str, torch.Tensor]) -> str | None:
    """The first key of ``tensors`` whose value holds NaN or inf (None: all finite)."""
    return next((key for key, value in tensors.items() if not _finite(value)), None)


def _shown(value: torch.Tensor) -> str:
    """A non-finite hook result as a user reads it: the value, or the first non-finite one of a tensor."""
    flat = value.detach().reshape(-1)
    bad = flat[~torch.isfinite(flat)]
    return f"{float(bad[0]):g}" + ("" if flat.numel() == 1 else f" (in a tensor of shape {tuple(value.shape)})")


def shuffling_generator(seed: int) -> torch.Generator:
    """A client's shuffling generator for one round: on the CPU, seeded by ``seed``, whatever the
    device (the same order on every device)."""
    return torch.Generator(device="cpu").manual_seed(seed)


def epoch_order(idx: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One local epoch's order of a client's samples ``idx``: a permutation drawn from its shuffling
    ``generator``, on ``idx``'s device."""
    return idx[torch.randperm(len(idx), generator=generator, device="cpu").to(idx.device)]


def local_batches(idx: torch.Tensor, generator: torch.Generator, starts: Sequence[int], batch_size: int,
                  epochs: int) -> Iterator[torch.Tensor]:
    """A client's mini-batches of one round, in training order: ``epochs`` local epochs, each a
    fresh ``epoch_order`` of its samples ``idx`` drawn from its shuffling ``generator`` when the
    epoch begins, cut at ``starts`` (``schedule.batch_starts``) into batches of ``batch_size``.
    Every way of training takes its batches from here, and its loop differs from the others only as
    the way does: ``clients.train_client`` steps one client (its trainer eager or recorded,
    ``workloads.fl.capture``), ``together.train_together`` the round's clients in lockstep, and
    Flower's client (``workloads.flower.app``) one client through its meter."""
    for _ in range(epochs):
        order = epoch_order(idx, generator)
        for start in starts:
            yield order[start:start + batch_size]


def loss_function(method: MethodConfig) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Batch-mean loss: the method's modifier's (SphereFed: MSE against one-hot, Eq. 5), cross entropy
    without one (``workloads.fl.methods.modifier``)."""
    return method.mod.loss


def per_sample_loss(method: MethodConfig) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The same loss without the batch mean (CCVR weights virtual samples)."""
    return method.mod.per_sample_loss


def prepare_model(model: nn.Module, method: MethodConfig, *, seed: int) -> nn.Module:
    """Apply the method's changes to a freshly built model: its modifier's (a fixed head's
    weights), then its algorithm's (frozen heads, local head)."""
    return method.algo.prepare_model(method.mod.prepare_model(model, seed=seed), seed=seed)


@dataclass(frozen=True)
class BatchLoss:
    """One mini-batch's loss as local training minimizes it (``batch_loss`` + ``penalty``), the
    forward's outputs it came from (``head_outputs``) and the penalty term. A step holds it until
    its SGD update is done, as a training loop holds its outputs and terms through the step: the
    captured step's peak memory (``workloads.cost.step``) counts them as alive to that point, by
    this reference, not by how long some local variable happens to live."""

    loss: torch.Tensor  # 0-dim, with a gradient
    outputs: Sequence[torch.Tensor]  # the forward's outputs, the logits first (empty: the method's own forward)
    penalty: torch.Tensor | float | None = None  # the method's penalty term (None: none)


@dataclass(frozen=True)
class Objective:
    """What a client's local step minimizes: its method's step hooks (``head_outputs``,
    ``batch_loss``, ``penalty``), the loss (``loss_function``), the hyper-parameters with the
    method's knobs; ``autocast_dtype``: the forward and ``batch_loss`` under ``torch.autocast``
    (bfloat16; None: none), the penalty outside it."""

    algorithm: FedAvg
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    hp: Hparams
    autocast_dtype: torch.dtype | None = None

    def batch_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: RoundContext) -> BatchLoss:
        """The mini-batch loss of ``model`` on ``(x, y)`` with what the client knows (``ctx``): the
        one definition every way of training computes (``ClientTrainer.step``, the batched clients
        of ``workloads.fl.together``, the recorded step of ``workloads.fl.capture``)."""
        algorithm = self.algorithm
        with autocast(x, self.autocast_dtype):
            outputs = outputs_from(algorithm, algorithm.head_outputs(model, x))
            loss = scalar_from(algorithm, "batch_loss", algorithm.batch_loss(model, x, y, outputs, self.loss_fn, ctx, self.hp))
            if not loss.requires_grad:  # detached (.item(), .detach(), torch.tensor(...)): nothing would train
                cls = type(algorithm)
                raise UserCodeError(f"{cls.__module__}:{cls.__qualname__}.batch_loss returned a loss without a "
                                    "gradient (detached?): compute it from the outputs it is given (docs/methods.md)")
        penalty = scalar_from(algorithm, "penalty", algorithm.penalty(model, ctx, self.hp))
        return BatchLoss(loss if penalty is None else loss + penalty, outputs, penalty)


def autocast(x: torch.Tensor, dtype: torch.dtype | None):
    """``torch.autocast`` to ``dtype`` on ``x``'s device (None: no autocast)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=x.device.type, dtype=dtype)


def sgd_update(param: torch.Tensor, grad: torch.Tensor, buf: torch.Tensor | None, *, lr: float, momentum: float,
               weight_decay: float) -> torch.Tensor | None:
    """One step of SGD with momentum and weight decay on ``param`` in place, ``torch.optim.SGD``'s
    arithmetic (dampening 0, no Nesterov; its ``_single_tensor_sgd``); returns the momentum buffer
    (``buf`` None: the first step, where torch clones the gradient). The one SGD update every way of
    training applies (``LocalSGD``, the batched and the recorded steps)."""
    if weight_decay != 0:
        grad = grad.add(param, alpha=weight_decay)
    if momentum != 0:
        if buf is None:
            buf = grad.detach().clone()
        else:
            buf.mul_(momentum).add_(grad, alpha=1)
        grad = buf
    param.add_(grad, alpha=-lr)
    return buf


class LocalSGD(torch.optim.Optimizer):
    """A client's optimizer: ``sgd_update`` on every parameter with a gradient, its momentum buffer
    in ``state[p]["momentum_buffer"]`` (where ``torch.optim.SGD`` keeps it, and where the trace
    capture finds the optimizer's state; its global step hooks run around ``step`` as around any
    ``torch.optim.Optimizer``'s)."""

    def __init__(self, params, *, lr: float, momentum: float, weight_decay: float) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None) -> None:  # noqa: ARG002 - torch's signature; no closure is used
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                buf = sgd_update(p, p.grad, state.get("momentum_buffer"), lr=group["lr"], momentum=group["momentum"],
                                 weight_decay=group["weight_decay"])
                if group["momentum"] != 0:
                    state["momentum_buffer"] = buf


def _described(value) -> str:
    """What a hook returned, in a message: its type and (shortened) value."""
    if torch.is_tensor(value):
        return f"a tensor of shape {tuple(value.shape)}"
    return "None" if value is None else f"{type(value).__name__} {repr(value)[:40]}"


def outputs_from(algorithm, outputs):
    """``outputs``, what ``algorithm``'s ``head_outputs`` returned, if a list or tuple of tensors
    (the logits first; empty for a method whose ``batch_loss`` runs its own forward, as HeteroFL's
    at the client's width); else one ``UserCodeError`` line naming the hook."""
    own_forward = type(algorithm).batch_loss is not FedAvg.batch_loss
    if isinstance(outputs, (list, tuple)) and (outputs or own_forward) and all(torch.is_tensor(o) for o in outputs):
        return outputs
    cls = type(algorithm)
    raise UserCodeError(f"{cls.__module__}:{cls.__qualname__}.head_outputs returned {_described(outputs)}; it must "
                        "return a list of tensors, the logits first ([model(x)] for none; docs/methods.md)")


def scalar_from(algorithm, hook: str, value):
    """``value``, what ``algorithm``'s ``hook`` (``batch_loss``, ``penalty``) returned for the loss,
    if it is one number: a 0-dim tensor (``penalty``: also None or a Python number); else one
    ``UserCodeError`` line naming the hook (a per-sample loss or a vector cannot be minimized as
    one; a step that got one failed in backward with a traceback). Reads no value: no sync."""
    if (torch.is_tensor(value) and value.dim() == 0) or (
            hook == "penalty" and (value is None or isinstance(value, (int, float)) and not isinstance(value, bool))):
        return value
    cls = type(algorithm)
    wanted = "a 0-dim tensor, a number or None" if hook == "penalty" else "the loss as a 0-dim tensor"
    fix = ": reduce it (.mean() or .sum())" if torch.is_tensor(value) else ""
    raise UserCodeError(f"{cls.__module__}:{cls.__qualname__}.{hook} returned {_described(value)}; it must return "
                        f"{wanted}{fix} (your code, docs/methods.md)")


class ClientTrainer:
    """One client's local optimizer and loss; ``step(x, y)`` is one SGD step."""

    def __init__(self, model: nn.Module, method: MethodConfig, hp: Hparams, ctx: RoundContext,
                 lr: float, autocast_dtype: torch.dtype | None = None, arithmetic: Arithmetic | None = None,
                 low_precision_weights: bool = False) -> None:
        self.model = model
        self.objective = Objective(method.algo, loss_function(method), hp, autocast_dtype)
        self.arithmetic = arithmetic  # a number format: forward and backward GEMMs rounded to it
        self.low_precision_weights = low_precision_weights and arithmetic is not None
        self.ctx = ctx
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = LocalSGD(params, lr=lr, momentum=hp.momentum, weight_decay=hp.weight_decay)

    @property
    def algorithm(self):
        return self.objective.algorithm

    @property
    def hp(self) -> Hparams:
        return self.objective.hp

    @property
    def loss_fn(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return self.objective.loss_fn

    @loss_fn.setter
    def loss_fn(self, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        self.objective = replace(self.objective, loss_fn=fn)

    @torch.no_grad()
    def non_finite_cause(self, x: torch.Tensor, y: torch.Tensor) -> tuple[str, str] | None:
        """Why a step from this trainer's starting point (before any local step) on the batch
        ``(x, y)`` is not finite, as ``(hook, what)``: what the client received (``server_extras``)
        or kept (``after_training``) holds NaN or inf, or the starting model's outputs are not
        finite (``aggregate``, the round's global model), or ``batch_loss`` or ``penalty`` returned
        a non-finite value; None where all of those are finite (the loss became non-finite while
        training: a divergence). For a failed run's message only: it runs the step's hooks once more."""
        ctx = self.ctx
        for group, tensors in ctx.received.items():
            key = first_non_finite(tensors)
            if key is not None:
                return "server_extras", f"what the client received in group {group!r} holds NaN or inf ({key!r})"
        key = first_non_finite(ctx.state)
        if key is not None:
            return "after_training", f"the state the client kept from its last round holds NaN or inf ({key!r})"
        with self.arithmetic or contextlib.nullcontext():
            with autocast(x, self.objective.autocast_dtype):
                outputs = outputs_from(self.algorithm, self.algorithm.head_outputs(self.model, x))
                if not all(_finite(o) for o in outputs):
                    largest = max(float(p.detach().abs().max()) for p in self.model.parameters() if p.numel())
                    return "aggregate", f"the round's starting model gives non-finite outputs before any local step " \
                                        f"(its largest weight magnitude {largest:.3g})"
                loss = self.algorithm.batch_loss(self.model, x, y, outputs, self.loss_fn, ctx, self.hp)
                if not _finite(loss):
                    return "batch_loss", f"returned {_shown(loss)} at the round's starting weights (before any local step)"
            penalty = self.algorithm.penalty(self.model, ctx, self.hp)
            if penalty is not None and not _finite(penalty):
                return "penalty", f"returned {_shown(penalty)} at the round's starting weights (before any local step)"
        return None

    def held(self) -> tuple[torch.Tensor, ...]:
        """What the client holds through every step besides its model and optimizer: its round
        context's tensors (an anchored method's copy of the downloaded w_t, what it received, its
        own state), whether or not the step reads them (SCAFFOLD keeps w_t for its control-variate
        update after training): the priced step holds them from its start (``workloads.cost.step``)."""
        ctx = self.ctx
        groups = (ctx.global_params, *ctx.received.values(), ctx.state)
        return tuple(t for group in groups for t in group.values() if isinstance(t, torch.Tensor))

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """zero_grad, forward, loss (+ penalty: ``Objective.batch_loss``), backward, SGD update
        (``LocalSGD``); returns the loss. The batch's loss and outputs (``BatchLoss``) are held
        until the update is done, then dropped."""
        self.optimizer.zero_grad(set_to_none=True)
        with self.arithmetic or contextlib.nullcontext():
            held = self.objective.batch_loss(self.model, x, y, self.ctx)
            held.loss.backward()
        self.optimizer.step()  # FP32: master weights and momentum are the optimizer's, not the array's
        if self.low_precision_weights:
            self._store_weights_in_format()
        return held.loss.detach()

    @torch.no_grad()
    def _store_weights_in_format(self) -> None:
        """No FP32 master copy (Li et al., "Low Precision Local Training is Enough for Federated
        Learning", NeurIPS 2024): every trainable GEMM weight (a parameter of two or more dimensions:
        convolution and linear weights) is stored back rounded to the arithmetic's format, grouped
        along dim 1 (the input channels / features the forward GEMM reduces over, as the emulation
        groups them); biases and normalization parameters, which the special unit uses in FP32,
        and the momentum stay FP32."""
        fmt, generator = self.arithmetic.fmt, self.arithmetic.generator
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if p.dim() >= 2 and p.dtype == torch.float32:
                    p.copy_(round_to_format(p, fmt, dim=1, generator=generator))


def example_received(model: nn.Module, method: MethodConfig, hp: Hparams, round: int) -> dict[str, dict[str, torch.Tensor]]:
    """Zeros shaped as ``method``'s ``extra_downloads`` of round ``round`` (the trainable shared
    parameters, once per group): what a priced or timed step receives in their place."""
    keys = set(method.algo.shared_keys(model, round, hp.with_knobs(method.knobs)))
    like = {n: p for n, p in model.named_parameters() if p.requires_grad and n in keys}
    return {group: {n: torch.zeros_like(p).detach() for n, p in like.items()} for group in method.algo.extra_downloads(round)}


@dataclass(frozen=True)
class ClientContext:
    """What a client brings to its trainer of its round besides its model and download: its
    ``RoundContext`` but the anchors (``client_trainer`` makes them from the download), in its
    order, with the defaults of a lone step (round 1, the method's first state, the
    hyper-parameters' rate)."""

    round: int = 1  # 1-based
    received: Mapping[str, Mapping[str, torch.Tensor]] = field(default_factory=dict)  # extra_downloads, by group
    state: Mapping[str, torch.Tensor] | None = None  # kept from its last round (None: ``initial_client_state``)
    lr: float | None = None  # this round's local learning rate (None: ``hp.lr``)
    width: float = 1.0  # its largest submodel width (a fleet class's; ``workloads.fl.width``)
    draws: torch.Generator | None = None  # its own generator of the round (FjORD's per-step widths)


def client_trainer(model: nn.Module, global_state: Mapping[str, torch.Tensor], hp: Hparams, method: MethodConfig,
                   client: ClientContext = ClientContext(), *, arithmetic: Arithmetic | None = None,
                   autocast_dtype: torch.dtype | None = None, low_precision_weights: bool = False) -> ClientTrainer:
    """A trainer for ``model``, which must already hold the client's starting weights.

    ``global_state`` is what the client downloaded (w_t): an ``anchored`` method (FedProx, FedCos,
    SCAFFOLD, FedDyn, MOON) reads it during or after training, so for it the download is cloned
    (the optimizer updates ``model`` in place). ``client``: the rest of its ``RoundContext``
    (``ClientContext``): ``received``, the method's ``extra_downloads`` of this round by group
    (FedCos's d_t from round 2, SCAFFOLD's c); ``state``, what the client kept from its last round;
    ``width``, its largest submodel width (a width-scaled method's); ``draws``, its own generator
    of the round (FjORD's per-step widths). ``arithmetic`` (``workloads.numerics.emulate.Arithmetic``,
    None for FP32) rounds the step's GEMM operands; ``low_precision_weights``: the weights are
    stored in its format after every step, with no FP32 master copy
    (``ClientTrainer._store_weights_in_format``).
    """
    keep_freed_memory()  # the next step's tensors reuse this one's memory (workloads.allocator)
    anchors = {}
    if method.algo.anchored:
        anchors = {name: t.detach().clone() for name, t in global_state.items()}
    hp = hp.with_knobs(method.knobs)  # the method's knobs: their defaults where ``hp`` lacks them
    lr = hp.lr if client.lr is None else client.lr
    state = client.state
    if state is None:
        state = method.algo.initial_client_state(model, hp)
        if not isinstance(state, Mapping):
            cls = type(method.algo)
            raise UserCodeError(f"{cls.__module__}:{cls.__qualname__}.initial_client_state returned a "
                                f"{type(state).__name__}; it must return a dict of tensors ({{}} for none; docs/methods.md)")
    ctx = RoundContext(round=client.round, global_params=anchors, received=dict(client.received), state=dict(state),
                       lr=lr, width=client.width, draws=client.draws)
    return ClientTrainer(model, method, hp, ctx, lr, autocast_dtype, arithmetic, low_precision_weights)

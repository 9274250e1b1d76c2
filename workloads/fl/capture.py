"""The local step recorded once a round and replayed (issue 44, ``Execution.capture_step``,
``--capture-step``): on a GPU as a CUDA graph, so that a step of every full batch costs one launch
instead of one per operator (NVIDIA, "CUDA C++ Programming Guide", Sec. "CUDA Graphs"; PyTorch's
``torch.cuda.graph`` and its "whole-network capture" recipe, "CUDA semantics", Sec. "CUDA Graphs").

A graph replays the kernels it recorded on the tensors it recorded them on, so the step is
written over tensors that stay where they are for the whole round (``StaticStep``):

* the client model's parameters and buffers (each client's weights are copied into them by
  ``load_state_dict``, which copies in place), and one momentum buffer per trainable parameter;
* the round's context (``RoundContext``): the anchors, what was received and the client's own
  state, each copied into the round's tensors before the client trains (``load``); its round
  number and learning rate are the round's, which is why the graph is recorded again each round;
* the batch: the full batches are copied into one input and one label tensor before each replay.

The step itself is ``ClientTrainer.step``'s without an optimizer object: the one mini-batch loss
(``local.Objective.batch_loss``: the method's hooks ``head_outputs``, ``batch_loss``, ``penalty``,
tensor ops only, as their contract already requires), ``torch.autograd.grad`` of it with respect to
the trainable parameters, and the one SGD update (``local.sgd_update``: momentum, weight decay) in place. A client's
first step runs eagerly with the optimizer's first-step rule (the momentum buffer is the gradient
itself), and so does a partial last batch (another shape): every client trains on the samples and
steps it trains on one after another, so the sample counts that price the run do not change.

On the CPU there is no graph: the same static step runs eagerly, which is what the tests check
against the sequential loop, bit for bit (``tests/test_capture_step.py``): it proves that the step
reads each client's data only through the round's static tensors, the property a replayed graph
needs. Where the recording fails on a GPU (an operator that cannot be captured), the run says so
in one line and trains eagerly from then on; the results are the same.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import nn

from workloads.fl.hparams import Hparams
from workloads.fl.local import ClientTrainer, sgd_update
from workloads.fl.methods.base import RoundContext

WARMUP_STEPS = 3  # eager steps on a side stream before recording (PyTorch's recipe: "a few")


def fallback_line(method_name: str, reason: str) -> str:
    """The one line a run that cannot record its step prints."""
    return f"--capture-step: {method_name} trains eagerly ({reason})"


def _copy_tree(into, source) -> None:
    """Copy ``source``'s tensors (nested mappings of tensors) into ``into``'s, in place."""
    for key, value in source.items():
        if isinstance(value, torch.Tensor):
            into[key].copy_(value)
        else:
            _copy_tree(into[key], value)


def _clone_tree(source):
    return {k: v.detach().clone() if isinstance(v, torch.Tensor) else _clone_tree(v) for k, v in source.items()}


def _layout(ctx: RoundContext):
    """What a static context must share with a client's to take it: its round, learning rate, and
    every tensor's place, shape and dtype."""
    def tree(source):
        return tuple((k, (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else tree(v))
                     for k, v in sorted(source.items()))
    return ctx.round, ctx.lr, ctx.width, tree(ctx.global_params), tree(ctx.received), tree(ctx.state)


class StaticStep:
    """One client model's local step for one round, over tensors that stay put (module doc)."""

    def __init__(self, trainer: ClientTrainer) -> None:
        self.model, self.objective = trainer.model, trainer.objective
        self.hp: Hparams = trainer.hp
        ctx = trainer.ctx
        self.lr = ctx.lr
        self.ctx = replace(ctx, global_params=_clone_tree(ctx.global_params), received=_clone_tree(ctx.received),
                           state=_clone_tree(ctx.state))
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.momentum = [torch.zeros_like(p) for p in self.params]
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: tuple[torch.Tensor, torch.Tensor] | None = None  # the recorded batch (x, y)
        self.loss: torch.Tensor | None = None  # the recorded step's loss

    def matches(self, trainer: ClientTrainer) -> bool:
        """Whether ``trainer`` trains this step's model in this step's round, with a context laid
        out as this step's (a client's first state may differ from a returning one's)."""
        return trainer.model is self.model and _layout(trainer.ctx) == _layout(self.ctx)

    def load(self, trainer: ClientTrainer) -> None:
        """Take a client's context (its weights are already in the model)."""
        _copy_tree(self.ctx.global_params, trainer.ctx.global_params)
        _copy_tree(self.ctx.received, trainer.ctx.received)
        _copy_tree(self.ctx.state, trainer.ctx.state)
        self.ctx = replace(self.ctx, draws=trainer.ctx.draws)  # the client's own generator (FjORD's eager steps)

    def __call__(self, x: torch.Tensor, y: torch.Tensor, first: bool = False) -> torch.Tensor:
        """One SGD step on (x, y); ``first``: the client's first, whose momentum is the gradient."""
        held = self.objective.batch_loss(self.model, x, y, self.ctx)  # held to the update's end, as ClientTrainer.step
        grads = torch.autograd.grad(held.loss, self.params)
        with torch.no_grad():
            for p, g, buf in zip(self.params, grads, self.momentum):
                new = sgd_update(p, g, None if first else buf, lr=self.lr, momentum=self.hp.momentum,
                                 weight_decay=self.hp.weight_decay)
                if first and new is not None:
                    buf.copy_(new)
        return held.loss.detach()

    def record(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Record the step on a batch shaped as (x, y) as a CUDA graph (PyTorch's recipe: warm-up
        steps on a side stream, then the capture); the model and momentum are left as they were."""
        saved = ({k: v.clone() for k, v in self.model.state_dict().items()}, [b.clone() for b in self.momentum])
        self.inputs = (x.clone(), y.clone())
        side = torch.cuda.Stream(x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        try:
            with torch.cuda.stream(side):
                for _ in range(WARMUP_STEPS):
                    self(*self.inputs)
            torch.cuda.current_stream(x.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.loss = self(*self.inputs)
            self.graph = graph
        finally:
            self.model.load_state_dict(saved[0])
            for buf, value in zip(self.momentum, saved[1]):
                buf.copy_(value)

    def replay(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.inputs[0].copy_(x)
        self.inputs[1].copy_(y)
        self.graph.replay()
        return self.loss


class StepRecorder:
    """A run's recorded steps: one ``StaticStep`` for the round being trained, made at its first
    client and recorded (on a GPU) at that client's first full batch after its first step; a
    recording that fails is said once and the run trains eagerly from then on."""

    def __init__(self, method_name: str, batch_size: int, device: torch.device) -> None:
        self.method_name, self.batch_size, self.device = method_name, batch_size, device
        self.step: StaticStep | None = None
        self.failed = False

    def trainer(self, trainer: ClientTrainer) -> "RecordedTrainer":
        """``trainer``'s client, trained by the round's static step."""
        if self.step is None or not self.step.matches(trainer):
            self.step = StaticStep(trainer)
        self.step.load(trainer)
        return RecordedTrainer(self, trainer)

    def run(self, x: torch.Tensor, y: torch.Tensor, first: bool) -> torch.Tensor:
        step = self.step
        if first or len(y) != self.batch_size or self.device.type != "cuda" or self.failed:
            return step(x, y, first=first)
        if not step.objective.algorithm.recordable:  # FjORD: a width drawn per step, which a recorded graph would fix
            self.failed = True
            print(fallback_line(self.method_name, "its step draws a width per step"), file=sys.stderr)
            return step(x, y)
        if step.graph is None:
            try:
                step.record(x, y)
            except Exception as err:  # noqa: BLE001 - an operator CUDA graphs cannot record: train eagerly
                self.failed = True
                print(fallback_line(self.method_name, f"recording failed: {type(err).__name__}: "
                                                      f"{str(err).splitlines()[0][:120]}"), file=sys.stderr)
                return step(x, y)
        return step.replay(x, y)


@dataclass
class RecordedTrainer:
    """A client's trainer whose steps are the round's static step (``ClientTrainer``'s interface:
    ``step``, ``model``, ``ctx``, ``hp``)."""

    recorder: StepRecorder
    client: ClientTrainer
    steps: int = 0

    @property
    def model(self) -> nn.Module:
        return self.client.model

    @property
    def ctx(self) -> RoundContext:
        return self.client.ctx

    @property
    def hp(self) -> Hparams:
        return self.client.hp

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = self.recorder.run(x, y, first=self.steps == 0)
        self.steps += 1
        return loss


def fallback_reason(execution, draws_global: Callable[[], bool]) -> str | None:
    """Why a run cannot record its step (None: it can): a number format (its rounding runs as a
    Python dispatch mode around every operator), ``bf16`` autocast, or a model that draws from
    torch's global generator in a step (``draws_global()``)."""
    if execution.rounds_arithmetic:
        return "a number format rounds every operator from Python"
    if execution.bf16:
        return "--bf16 autocast is not recorded"
    if draws_global():
        return "its model draws from torch's global generator in a local step (dropout?)"
    return None

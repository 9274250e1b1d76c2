"""Client side, without Flower: count a train call's steps and price each new step shape once.

A Flower ``ClientApp``'s train function builds its step through ``metered_step``::

    step = metered_step(lambda m: make_optimizer_and_loss_step(m), model)   # instead of make_...(model)
    for x, y in batches:
        step(x, y)

While a ``StepMeter`` is active (the accelerator mod, ``workloads.flower.mod``, activates one
around each train message), every call is counted under its *step shape*: the step's code, the
model's structure (parameter and buffer names, shapes, dtypes, which ones train) and the shapes and
dtypes of the call's tensors (and the caller's ``key``, if one factory builds several
programs). The first time a process sees a shape on a hardware config, it prices
it the way ``bench`` prices a step (``workloads.cost.step``): the step factory is applied to a
``meta``-device copy of the model, one warm-up step creates the optimizer state, one step is
captured (``workloads.capture.capture``) and priced (``simulate_complete`` -> ``StepPrice``). The
price is kept for the life of the process (in Flower's simulation engine: the Ray actor), so later
rounds reuse it. With no meter active, ``metered_step`` returns ``make_step(model)`` itself.

The copy, warm-up and capture run on ``meta`` under ``torch.random.fork_rng``: the real model, its
optimizer and the CPU random stream are untouched, so the trained weights are those of the
unwrapped app (tested bit for bit).

Work that is no training step (a method's ``after_training`` hook, a calibration's client
statistics) is charged whole with ``metered_work(price, key=...)``: ``price(hw)`` is asked once per
process, key and hardware config, and added to the call's cost.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from accel_sim.hardware import HardwareConfig
from workloads.capture import capture_step
from workloads.cost.step import StepPrice, simulate_complete

StepFactory = Callable[[nn.Module], Callable[..., Any]]

_PRICES: dict[Hashable, StepPrice] = {}  # process-wide: a step shape is captured once per process
_ACTIVE: ContextVar[StepMeter | None] = ContextVar("workloads_fl_flower_meter", default=None)


def model_signature(model: nn.Module) -> tuple:
    """What a step's ops depend on in the model: its class and, per parameter and buffer, name,
    shape, dtype and whether it trains (SphereFed's frozen classifier has no weight gradient)."""
    params = tuple((n, tuple(p.shape), str(p.dtype), p.requires_grad) for n, p in model.named_parameters())
    buffers = tuple((n, tuple(b.shape), str(b.dtype)) for n, b in model.named_buffers())
    return type(model).__module__, type(model).__qualname__, params, buffers


def step_identity(make_step: StepFactory) -> Hashable:
    """The step factory by its code (a lambda rebuilt every round is the same step)."""
    code = getattr(make_step, "__code__", None)
    return (code.co_filename, code.co_firstlineno, code.co_name) if code is not None else make_step


def args_signature(args: tuple) -> tuple:
    if not all(isinstance(a, torch.Tensor) for a in args):
        raise TypeError("a metered step takes tensors only (e.g. step(x, y))")
    return tuple((tuple(a.shape), str(a.dtype)) for a in args)


def price_step(make_step: StepFactory, model: nn.Module, args_sig: tuple, hw: HardwareConfig) -> StepPrice:
    """Capture one steady-state step of ``make_step`` on a ``meta`` copy of ``model`` with zero
    tensors of ``args_sig`` (shape, dtype) (``workloads.capture.capture_step``, the one path every
    priced step takes) and price it on ``hw``."""
    meta_args = [torch.zeros(shape, dtype=getattr(torch, dtype.removeprefix("torch.")), device="meta")
                 for shape, dtype in args_sig]
    trace = capture_step(make_step, model, *meta_args, meta={"source": "flower"})
    what = f"metered step of {type(model).__name__} on {[list(s) for s, _ in args_sig]}"
    return StepPrice.of(simulate_complete(trace, hw, what))


class StepMeter:
    """One train call's steps, counted per step shape, on one hardware config, and the work it
    charges whole (``metered_work``).

    ``counts[key]`` steps ran with step shape ``key``; ``prices[key]`` is its ``StepPrice`` and
    ``batches[key]`` its batch size (first dimension of the first argument); ``work`` lists each
    piece of charged work as (its ``StepPrice``, the steps it counts as).
    """

    def __init__(self, hw: HardwareConfig) -> None:
        self.hw = hw
        self.counts: Counter = Counter()
        self.prices: dict[Hashable, StepPrice] = {}
        self.batches: dict[Hashable, int] = {}
        self.work: list[tuple[StepPrice, int]] = []

    def record(self, make_step: StepFactory, model: nn.Module, model_key: Hashable, args: tuple) -> None:
        sig = args_signature(args)
        key = (step_identity(make_step), model_key, sig, self.hw)
        if key not in _PRICES:
            _PRICES[key] = price_step(make_step, model, sig, self.hw)
        self.counts[key] += 1
        self.prices[key] = _PRICES[key]
        self.batches[key] = sig[0][0][0] if sig and sig[0][0] else 0

    def charge(self, price: Callable[[HardwareConfig], StepPrice], key: Hashable, steps: int) -> None:
        full = ("work", key, self.hw)
        if full not in _PRICES:
            with torch.random.fork_rng(devices=[]):  # the client's random stream stays untouched
                _PRICES[full] = price(self.hw)
        self.work.append((_PRICES[full], steps))

    def cost(self) -> TrainCost:
        """What the counted steps and the charged work cost on ``hw`` (at the modeled accelerator's own speed)."""
        steps = [(n, self.prices[k]) for k, n in self.counts.items()] + [(1, p) for p, _ in self.work]
        if not steps:
            return TrainCost(0, 0.0, 0.0, 0.0, self.hw.energy.static_w, 0)
        count = sum(self.counts.values()) + sum(n for _, n in self.work)
        train_s = math.fsum(n * p.latency_s for n, p in steps)
        if self.counts:
            step_s = self.prices[max(self.counts, key=lambda k: (self.batches[k], self.counts[k]))].latency_s
        else:
            step_s = train_s / count if count else 0.0  # a calibration's batches; an after-training hook alone: none
        return TrainCost(steps=count, train_s=train_s, step_s=step_s,
                         energy_j=math.fsum(n * p.energy_j for n, p in steps), static_w=self.hw.energy.static_w,
                         peak_memory_bytes=max(p.peak_memory_bytes for _, p in steps))


@dataclass(frozen=True)
class TrainCost:
    """One client's local training (or calibration) in one round, modeled on its accelerator.

    ``train_s``: the sum over steps of each step's modeled latency, plus the work charged whole
    (``metered_work``); ``step_s``: one step at the largest batch the client ran (its configured
    batch size; a trailing partial batch is smaller), or without a training step (a calibration)
    ``train_s`` over the steps its work counts as (0 where it counts none); ``energy_j``: dynamic energy plus ``static_w`` x
    ``train_s``; ``peak_memory_bytes``: the largest peak memory bytes of a step or a charged work.
    """

    steps: int
    train_s: float
    step_s: float
    energy_j: float
    static_w: float
    peak_memory_bytes: int


@contextmanager
def metering(meter: StepMeter) -> Iterator[StepMeter]:
    """``meter`` counts the ``metered_step`` calls made inside this block."""
    token = _ACTIVE.set(meter)
    try:
        yield meter
    finally:
        _ACTIVE.reset(token)


def metered_step(make_step: StepFactory, model: nn.Module, *, key: Hashable = None) -> Callable[..., Any]:
    """``make_step(model)``, counted by the active ``StepMeter`` (if any) on every call.

    ``make_step(model)`` must return the training step: a callable on tensors (``step(x, y)``)
    that runs zero_grad, forward, loss, backward and the optimizer step on ``model``; it is also
    applied to a ``meta`` copy of ``model`` to capture the step's price, so it must build its
    optimizer from the model it is given. ``key``: what else decides the step's ops when one
    factory builds different steps for the same model (e.g. the method's name: FedProx adds a
    proximal term to FedAvg's step); values that change no op (the learning rate) stay out of it.
    """
    step = make_step(model)
    meter = _ACTIVE.get()
    if meter is None:
        return step
    model_key = (model_signature(model), key)

    def counted(*args):
        meter.record(make_step, model, model_key, args)
        return step(*args)

    return counted


def metered_work(price: Callable[[HardwareConfig], StepPrice], *, key: Hashable, steps: int = 0) -> None:
    """Charge the active ``StepMeter`` (if any) work that is no training step, priced whole by
    ``price(hw)``: a method's ``after_training`` hook (``workloads.cost.step.after_training_price``),
    a calibration's client statistics (``workloads.cost.calibration.client_price``). ``key``: what
    decides the price besides the hardware (priced once per process and key, as a step shape);
    ``steps``: how many steps it counts as in ``TrainCost.steps`` (0: none, an after-training hook;
    a calibration's batches)."""
    meter = _ACTIVE.get()
    if meter is not None:
        meter.charge(price, key, steps)

"""One hyper-parameter as its method declares it: name, default, bounds and where the default comes from.

Every method (``workloads/fl/methods``) lists its own knobs (``knobs = (Knob(...), ...)``) and the
local training's are ``LOCAL_TRAINING``; ``workloads.fl.hparams.Hparams`` holds values of declared
knobs only (a run's: the local training's and its own method's), each checked by its ``Knob`` when
it is set. A knob's type is its default's: an ``int`` knob takes integers, a ``float`` knob any
finite number, a ``str`` knob one of its ``choices``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Knob:
    name: str
    default: float | int | str
    source: str  # where the default comes from (a paper's table, or "our choice" and why)
    low: float | None = None  # None: no lower bound
    low_open: bool = False  # True: value > low, else value >= low
    high: float | None = None  # None: no upper bound (an upper bound is always open: value < high)
    choices: tuple[str, ...] = ()  # a str knob's allowed values

    @property
    def kind(self) -> type:
        return type(self.default)

    def type_problem(self, value: Any) -> str | None:
        """Why ``value`` is not of this knob's type (None: it is)."""
        if self.kind is str:
            if isinstance(value, str) and (not self.choices or value in self.choices):
                return None
            return f"{self.name} must be {' or '.join(repr(c) for c in self.choices)}, got {value!r}"
        if isinstance(value, bool) or not isinstance(value, int if self.kind is int else (int, float)):
            return f"{self.name} = {value!r} must be {'an integer' if self.kind is int else 'a number'}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{self.name} = {value!r} must be a finite number"
        return None

    def check(self, value: Any) -> Any:
        """``value`` if it is of this knob's type and within its bounds; ValueError (one line) otherwise."""
        problem = self.type_problem(value)
        if problem is None and not self._within(value):
            problem = f"hyper-parameter {self.name} must be {self.bounds_text()}, got {value!r}"
        if problem:
            raise ValueError(problem)
        return value

    def _within(self, value: Any) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value < self.high

    def bounds_text(self) -> str:
        """``> 0``, ``>= 0`` or ``in [0, 1)``."""
        if self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g})"
        return f"{'>' if self.low_open else '>='} {self.low:g}"


def positive(name: str, default: float | int, source: str) -> Knob:
    return Knob(name, default, source, low=0, low_open=True)


def non_negative(name: str, default: float | int, source: str) -> Knob:
    return Knob(name, default, source, low=0)


def fraction(name: str, default: float, source: str) -> Knob:
    """A value in [0, 1): a momentum."""
    return Knob(name, default, source, low=0, high=1)


LOCAL_TRAINING = (
    positive("lr", 0.1, "Tab. 16, FedAvg (MobileNetV2)"),
    fraction("momentum", 0.9, "Tab. 16 / Sec. 5.1: SGD momentum 0.9 for all approaches"),
    non_negative("weight_decay", 1e-5, "Tab. 16"),
    positive("local_epochs", 10, "E, Tab. 16"),
    positive("batch_size", 64, "B, Tab. 16"),
    non_negative("lr_min", 0.0, "cosine annealing floor (torch CosineAnnealingLR default eta_min = 0)"),
)
"""The knobs of every method's local training (SphereFed appendix 0.F.2, Tab. 16)."""

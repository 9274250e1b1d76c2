"""FL methods by CLI name, and how names compose.

A method name is a base algorithm, optionally followed by a modifier (``MODIFIERS``: how the
model's head and the loss change, ``workloads.fl.methods.modifier``) and a calibration, joined with
``+``: ``fedavg``, ``fedprox+spherefed``, ``fedopt+spherefed+ffc``, ``fedavg+ccvr``. A modifier
alone means FedAvg with it; a calibration alone means it after the training method it is priced on
(its ``trained_with``, Fig. 5 (d) of SphereFed, Dong et al., ECCV 2022): ``ccvr`` is ``fedavg+ccvr``,
``ffc`` is ``spherefed+ffc`` (the paper's "Ours" on FedAvg), in every command and file. ``NAME_PARTS`` maps every built-in name that may appear in such a string to what it is
(``algorithm``, ``modifier`` or ``calibration``).

Bring your own method: a part written ``package.module:Class`` names a class of yours, a subclass
of ``FedAvg`` (an algorithm) or of ``Calibration`` (a calibration), imported from the current
directory or ``PYTHONPATH`` (docs/methods.md). It composes like a built-in
(``mymethods:FedAvgPlus+spherefed+ffc``) and is spelt as given (case and all) in results.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

from iokit.dotted import import_attribute, is_dotted
from workloads.fl.guard import guard
from workloads.fl.knob import Knob
from workloads.fl.methods.base import FedAvg
from workloads.fl.methods.calibration import Calibration
from workloads.fl.methods.ccvr import CCVR
from workloads.fl.methods.doublehead import DoubleHead
from workloads.fl.methods.etf import SimplexETF
from workloads.fl.methods.fedbabu import FedBABU
from workloads.fl.methods.fedbuff import FedBuff
from workloads.fl.methods.fedcos import FedCos
from workloads.fl.methods.fednova import FedNova
from workloads.fl.methods.fedopt import FedAvgM, FedOpt
from workloads.fl.methods.fedprox import FedProx
from workloads.fl.methods.feddyn import FedDyn
from workloads.fl.methods.ffc import FFC
from workloads.fl.methods.fjord import FjORD
from workloads.fl.methods.heterofl import HeteroFL
from workloads.fl.methods.modifier import Modifier
from workloads.fl.methods.moon import MOON
from workloads.fl.methods.scaffold import Scaffold
from workloads.fl.methods.spherefed import SphereFed
from workloads.models import Head

ALGORITHMS = {
    "fedavg": FedAvg(),
    "fedprox": FedProx(),
    "fedcos": FedCos(),
    "fednova": FedNova(),
    "fedopt": FedOpt(),
    "fedavgm": FedAvgM(),
    "fedbabu": FedBABU(),
    "doublehead": DoubleHead(),
    "scaffold": Scaffold(),
    "moon": MOON(),
    "feddyn": FedDyn(),
    "heterofl": HeteroFL(),
    "fjord": FjORD(),
    "fedbuff": FedBuff(),
}
CALIBRATIONS = {"ffc": FFC(), "ccvr": CCVR()}
MODIFIERS = {"spherefed": SphereFed(), "etf": SimplexETF()}
NO_MODIFIER = Modifier()
NAME_PARTS = {**{name: "algorithm" for name in ALGORITHMS}, **{name: "modifier" for name in MODIFIERS},
              **{name: "calibration" for name in CALIBRATIONS}}
COMPOSE = f"compose as base+{'|'.join(MODIFIERS)}+ffc|ccvr; a method of yours is package.module:Class"


class MethodError(ValueError):
    """A method named so that it cannot be run; the message is one line with the fix."""


@functools.cache
def _own(path: str) -> FedAvg | Calibration:
    """The method a ``package.module:Class`` path names, made once per process."""
    found = import_attribute(path, role="method", kind="method class", form="package.module:Class (e.g. mymethods:FedAvgPlus)",
                             wanted="a subclass of FedAvg or Calibration of yours (docs/methods.md)", error=MethodError)
    if isinstance(found, type) and issubclass(found, (FedAvg, Calibration)):
        try:
            return guard(found(), path)  # its hooks' errors name it (workloads.fl.guard)
        except Exception as exc:  # noqa: BLE001 - the user's constructor: its own error, on one line
            raise MethodError(f"method {path!r}: {found.__name__}() failed: {type(exc).__name__}: {exc}") from None
    what = f"class {found.__name__}, which is not" if isinstance(found, type) else f"a {type(found).__name__}, not"
    raise MethodError(f"method {path!r} names {what} an FL method class; name a subclass of "
                      "workloads.fl.methods.base.FedAvg (an algorithm) or of "
                      "workloads.fl.methods.calibration.Calibration (a calibration), docs/methods.md")


def role_of(part: str) -> str:
    """``algorithm``, ``modifier`` or ``calibration`` of one part of a method name (MethodError otherwise)."""
    if is_dotted(part):
        return "calibration" if isinstance(_own(part), Calibration) else "algorithm"
    if part.lower() in NAME_PARTS:
        return NAME_PARTS[part.lower()]
    raise MethodError(f"unknown method name {part!r}; known: {sorted(NAME_PARTS)} ({COMPOSE})")


def algorithm_named(name: str) -> FedAvg:
    return _named(name, ALGORITHMS, FedAvg, "algorithm")


def calibration_named(name: str) -> Calibration:
    return _named(name, CALIBRATIONS, Calibration, "calibration")


def _named(name: str, registry: dict, kind: type, role: str):
    found = _own(name) if is_dotted(name) else registry.get(name)
    if not isinstance(found, kind):
        raise MethodError(f"unknown {role} {name!r}; choose one of {', '.join(sorted(registry))} "
                          "(or a class of yours, package.module:Class)")
    return found


def is_calibration(name: str) -> bool:
    """Whether ``name`` is a calibration on its own (``ccvr``, or a ``Calibration`` class of yours),
    as ``bench.run``'s ``--methods`` names one."""
    return name in CALIBRATIONS or ("+" not in name and is_dotted(name) and isinstance(_own(name), Calibration))


@dataclass(frozen=True)
class MethodConfig:
    algorithm: str = "fedavg"  # a key of ALGORITHMS or package.module:Class
    modifier: str | None = None  # a key of MODIFIERS
    calibration: str | None = None  # a key of CALIBRATIONS or package.module:Class

    @property
    def name(self) -> str:
        parts = [self.algorithm] + ([self.modifier] if self.modifier else [])
        return "+".join(parts + ([self.calibration] if self.calibration else []))

    @property
    def mod(self) -> Modifier:
        """Its modifier (``NO_MODIFIER`` for none)."""
        return MODIFIERS[self.modifier] if self.modifier else NO_MODIFIER

    @property
    def head(self) -> Head:
        """What its model's head is built with (``workloads.models.Head``): its modifier's."""
        return self.mod.head

    @property
    def algo(self) -> FedAvg:
        return algorithm_named(self.algorithm)

    @property
    def calib(self) -> Calibration | None:
        return calibration_named(self.calibration) if self.calibration else None

    @property
    def training(self) -> "MethodConfig":
        """The method without its calibration: what its clients run in rounds 1..R."""
        return MethodConfig(self.algorithm, self.modifier)

    @property
    def knobs(self) -> tuple[Knob, ...]:
        """The method's own hyper-parameters: its algorithm's, its modifier's and its calibration's."""
        return (*self.algo.knobs, *self.mod.knobs, *(self.calib.knobs if self.calib else ()))


def built_in_name(part: str) -> str:
    """The built-in name of one part of a method name: ``part`` itself, or for a ``package.module:Class``
    path naming a built-in method's own class (``workloads.fl.methods.scaffold:Scaffold``) that
    method's name (``scaffold``): one method under two spellings."""
    if is_dotted(part):
        own = type(_own(part))
        for name, found in {**ALGORITHMS, **CALIBRATIONS}.items():
            if type(found) is own:
                return name
    return part


def method_identity(text: str) -> str:
    """What a method name trains, whatever its spelling: its canonical name (``parse_method``) with
    every part that is a built-in method's class by its path written as the built-in (``built_in_name``)."""
    m = parse_method(text)
    return MethodConfig(built_in_name(m.algorithm), m.modifier,
                        built_in_name(m.calibration) if m.calibration else None).name


def distinct_methods(names: Sequence[str], *, name: str, error: type[Exception] = MethodError) -> list[str]:
    """``names`` unchanged when no two train the same method (``method_identity``: ``ccvr`` and
    ``fedavg+ccvr``, ``scaffold`` and ``workloads.fl.methods.scaffold:Scaffold``); else ``error``
    naming both spellings (``iokit.identity.distinct_resolved``)."""
    from iokit.identity import distinct_resolved

    return distinct_resolved(list(names), method_identity, name=name, error=error)


def check_file_spelling(name: str, *, where: str) -> None:
    """A method name in a file (a preset's ``[run]`` methods, a study's methods): files written
    before a calibration alone meant it after its ``trained_with`` read ``ffc`` as ``fedavg+ffc``;
    a calibration alone whose meaning that changed is refused there with both spellings (MethodError),
    so an old file never silently trains another method."""
    method = parse_method(name)
    if method.calibration and "+" not in name and method != MethodConfig("fedavg", None, method.calibration):
        raise MethodError(f"{where}: {name!r} alone means {method.name} in every command (files before issue 45 "
                          f"read it as fedavg+{name}): write \"{method.name}\" or \"fedavg+{name}\"")


def parse_method(text: str) -> MethodConfig:
    """``"fedprox+spherefed+ffc"`` -> MethodConfig("fedprox", "spherefed", "ffc"); ``"ffc"`` ->
    MethodConfig("fedavg", "spherefed", "ffc") (module doc); one-line MethodError otherwise."""
    parts = [p.strip() if is_dotted(p) else p.strip().lower() for p in text.split("+") if p.strip()]
    if not parts:
        raise MethodError(f"unknown method name(s) {[text]} in {text!r}; known: {sorted(NAME_PARTS)} ({COMPOSE})")
    unknown = [p for p in parts if not is_dotted(p) and p not in NAME_PARTS]
    if unknown:
        raise MethodError(f"unknown method name(s) {unknown} in {text!r}; known: {sorted(NAME_PARTS)} ({COMPOSE})")
    roles = [role_of(p) for p in parts]
    algos = [p for p, r in zip(parts, roles) if r == "algorithm"]
    calibs = [p for p, r in zip(parts, roles) if r == "calibration"]
    mods = [p for p, r in zip(parts, roles) if r == "modifier"]
    if len(algos) > 1 or len(calibs) > 1 or len(mods) > 1:
        raise MethodError(f"{text!r}: at most one base algorithm, one calibration and one modifier "
                          f"({', '.join(MODIFIERS)})")
    if calibs and not algos and not mods:  # a calibration alone: after its trained_with
        base = parse_method(calibration_named(calibs[0]).trained_with)
        algos, mods = [base.algorithm], [base.modifier] if base.modifier else []
    cfg = MethodConfig(algos[0] if algos else "fedavg", mods[0] if mods else None, calibs[0] if calibs else None)
    if cfg.algo.own_head and cfg.modifier:
        raise MethodError(f"{text!r}: {cfg.algorithm} defines its own head; it does not compose with {cfg.modifier}")
    if cfg.calibration and not cfg.algo.calibratable:
        raise MethodError(f"{text!r}: calibrating the global head of {cfg.algorithm} is not supported")
    return cfg

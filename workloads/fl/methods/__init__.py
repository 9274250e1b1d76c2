"""FL methods by CLI name, and how names compose.

A method name is a base algorithm, optionally followed by modifiers joined with ``+``:
``fedavg``, ``fedprox+spherefed``, ``fedopt+spherefed+ffc``, ``fedavg+ccvr``. ``spherefed``,
``ffc`` and ``ccvr`` alone mean FedAvg with them (``spherefed+ffc`` is the paper's "Ours" on
FedAvg). ``NAME_PARTS`` maps every name that may appear in such a string to what it is
(``algorithm``, ``modifier`` or ``calibration``).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.fl.methods.base import FedAvg
from workloads.fl.methods.ccvr import CCVR
from workloads.fl.methods.doublehead import DoubleHead
from workloads.fl.methods.fedbabu import FedBABU
from workloads.fl.methods.fedcos import FedCos
from workloads.fl.methods.fednova import FedNova
from workloads.fl.methods.fedopt import FedAvgM, FedOpt
from workloads.fl.methods.fedprox import FedProx
from workloads.fl.methods.ffc import FFC

ALGORITHMS = {
    "fedavg": FedAvg(),
    "fedprox": FedProx(),
    "fednova": FedNova(),
    "fedopt": FedOpt(),
    "fedavgm": FedAvgM(),
    "fedcos": FedCos(),
    "fedbabu": FedBABU(),
    "doublehead": DoubleHead(),
}
CALIBRATIONS = {"ffc": FFC(), "ccvr": CCVR()}
NAME_PARTS = {**{name: "algorithm" for name in ALGORITHMS}, "spherefed": "modifier",
              **{name: "calibration" for name in CALIBRATIONS}}


@dataclass(frozen=True)
class MethodConfig:
    algorithm: str = "fedavg"
    spherefed: bool = False
    calibration: str | None = None

    @property
    def name(self) -> str:
        parts = [self.algorithm] + (["spherefed"] if self.spherefed else [])
        return "+".join(parts + ([self.calibration] if self.calibration else []))

    @property
    def algo(self):
        return ALGORITHMS[self.algorithm]

    @property
    def calib(self):
        return CALIBRATIONS[self.calibration] if self.calibration else None


def parse_method(text: str) -> MethodConfig:
    """``"fedprox+spherefed+ffc"`` -> MethodConfig("fedprox", True, "ffc"); clear errors otherwise."""
    parts = [p.strip().lower() for p in text.split("+") if p.strip()]
    unknown = [p for p in parts if p not in NAME_PARTS]
    if not parts or unknown:
        raise ValueError(f"unknown method name(s) {unknown or [text]} in {text!r}; known: "
                         f"{sorted(NAME_PARTS)} (compose as base+spherefed+ffc|ccvr)")
    algos = [p for p in parts if NAME_PARTS[p] == "algorithm"]
    calibs = [p for p in parts if NAME_PARTS[p] == "calibration"]
    if len(algos) > 1 or len(calibs) > 1 or parts.count("spherefed") > 1:
        raise ValueError(f"{text!r}: at most one base algorithm, one calibration and one spherefed")
    cfg = MethodConfig(algos[0] if algos else "fedavg", "spherefed" in parts,
                       calibs[0] if calibs else None)
    if cfg.algorithm in ("fedbabu", "doublehead") and cfg.spherefed:
        raise ValueError(f"{text!r}: {cfg.algorithm} defines its own head; it does not compose "
                         "with spherefed")
    if cfg.algorithm == "doublehead" and cfg.calibration:
        raise ValueError(f"{text!r}: calibrating the global head of double head is not supported")
    return cfg

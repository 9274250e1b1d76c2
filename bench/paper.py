"""SphereFed's efficiency claims and the saving they are stated as: one definition for bench.run's
paper-vs-model table and bench.sweep's reference lines.

Source: Dong, Zhang, Li, Kung, "SphereFed: Hyperspherical Federated Learning", ECCV 2022,
Sec. 5.4 and Fig. 5 (b)-(d): savings "up to" these figures over ConvNet, ResNet and MobileNetV2
on CIFAR-100.
"""

from __future__ import annotations

from typing import NamedTuple


class PaperClaim(NamedTuple):
    """A saving the paper claims: ``other`` against ``baseline`` on ``metric`` of a summary section."""

    claim: str
    section: str  # "training" or "calibration" (bench.run summary sections)
    metric: str
    baseline: str
    other: str
    up_to_pct: float


MEMORY_SAVING = PaperClaim("peak memory saved by SphereFed vs FedAvg (Fig. 5 b)", "training", "peak_memory_bytes",
                           "fedavg", "spherefed", 10.5)
LATENCY_SAVING = PaperClaim("one-round latency saved by SphereFed vs FedAvg (Fig. 5 c)", "training",
                            "round_latency_s", "fedavg", "spherefed", 13.6)
CALIBRATION_SAVING = PaperClaim("calibration latency saved by FFC vs CCVR (Fig. 5 d)", "calibration", "latency_s",
                                "ccvr", "ffc", 9.1)
PAPER_CLAIMS = (MEMORY_SAVING, LATENCY_SAVING, CALIBRATION_SAVING)


def saving_pct(baseline: float, other: float) -> float:
    """Percent saved by ``other`` against ``baseline``: 100 x (1 - other / baseline)."""
    return 100.0 * (1.0 - other / baseline)

"""What a study reads off one accuracy curve: whether it converged (the plateau rule), when it
first reached a target, and the target derived from the base method's validation curves.

The plateau rule. With ``w`` = ``last_rounds`` and δ = ``tolerance_pct`` (points of accuracy), on
the last 2w evaluated rounds of a curve a_1..a_R (in percent):

    gain   = mean(a_{R-w+1..R}) - mean(a_{R-2w+1..R-w})     (the last window against the one before)
    spread = max(a_{R-w+1..R}) - min(a_{R-w+1..R})          (within the last window)

    "rising"     if gain >= δ        (still improving: more rounds would change the answer)
    "falling"    if gain <= -δ
    "noisy"      if |gain| < δ and spread > 2δ   (no trend, but the last rounds disagree)
    "converged"  otherwise           (flat and steady)
    "too short"  with fewer than 2w evaluated rounds

Only "converged" counts as converged. The paper trains with cosine annealing (SphereFed Sec. 5.1),
so the learning rate itself goes to zero over the last rounds; a curve that is still "rising" under
that schedule was cut short by it, and more rounds (a longer schedule), not a longer tail, decide.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

VERDICTS = ("converged", "rising", "falling", "noisy", "too short")


@dataclass(frozen=True)
class PlateauVerdict:
    verdict: str  # one of VERDICTS
    gain_pct: float | None  # last window's mean minus the previous window's, in points
    spread_pct: float | None  # max - min within the last window, in points

    @property
    def converged(self) -> bool:
        return self.verdict == "converged"


def plateau(accuracy_pct: Sequence[float], last_rounds: int = 3, tolerance_pct: float = 1.0) -> PlateauVerdict:
    """The plateau rule (module doc) on a curve's evaluated accuracies in percent, in round order."""
    w = last_rounds
    if w < 1 or tolerance_pct <= 0:
        raise ValueError(f"the plateau rule needs last_rounds >= 1 and tolerance_pct > 0, got {w}, {tolerance_pct}")
    a = [float(v) for v in accuracy_pct]
    if len(a) < 2 * w:
        return PlateauVerdict("too short", None, None)
    last, before = a[-w:], a[-2 * w:-w]
    gain = statistics.fmean(last) - statistics.fmean(before)
    spread = max(last) - min(last)
    if gain >= tolerance_pct:
        verdict = "rising"
    elif gain <= -tolerance_pct:
        verdict = "falling"
    elif spread > 2 * tolerance_pct:
        verdict = "noisy"
    else:
        verdict = "converged"
    return PlateauVerdict(verdict, gain, spread)


@dataclass(frozen=True)
class Reach:
    """What one run needed to first reach a target: the round and the modeled cost up to it."""

    round: int
    wall_s: float
    device_s: float
    energy_j: float
    bytes: float


def first_reaching(curve: Sequence[Mapping], target_pct: float) -> Reach | None:
    """The first row of ``curve`` (``curve.csv`` rows of one run and method, in round order,
    ``accuracy`` in [0, 1] or None) whose test accuracy is at or above ``target_pct``; None if none."""
    for row in curve:
        if row["accuracy"] is not None and 100 * row["accuracy"] >= target_pct:
            return Reach(int(row["round"]), float(row["cum_wall_s"]), float(row["cum_device_s"]),
                         float(row["cum_energy_j"]), float(row["cum_bytes"]))
    return None


def base_validation_target(val_curves: Sequence[Sequence[float]], fraction: float) -> float:
    """``fraction`` of the best round of the base method's mean validation curve (percent): the
    mean over seeds of the validation accuracy per round, its maximum, times ``fraction``. Only the
    base method's validation accuracy enters, so no compared method's result (and no test
    accuracy) moves the target."""
    if not val_curves or not all(val_curves):
        raise ValueError("a validation target needs the base method's validation accuracy on every seed")
    rounds = min(len(c) for c in val_curves)
    mean_curve = [statistics.fmean(c[r] for c in val_curves) for r in range(rounds)]
    return fraction * max(mean_curve)

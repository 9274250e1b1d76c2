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

Only "converged" counts as converged.

Convergence is judged on the curve's end: the plateau rule on its last 2w rounds. Under a
decaying schedule (SphereFed Sec. 5.1 trains with cosine annealing to zero) the last rounds run at
small rates, so a flat end can mean small steps rather than a finished model. That is reported
apart, not folded into the verdict (``judge``): the plateau rule on the *high-rate part*, the
rounds up to the last one whose learning rate is at least ``rate_fraction`` (default 0.5) of the
run's peak (with cosine annealing over R rounds, round t runs at (1 + cos(π (t - 1) / R)) / 2 of
the peak: rounds 1-11 of 20); "rising" there means "still learning while the rate was high". A
curve can be both: rising at the high rate and converged at its end.
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


def high_rate_rounds(lr: Sequence[float], rate_fraction: float) -> int:
    """How many leading rounds form the high-rate part (module doc): up to the last round whose
    learning rate is at least ``rate_fraction`` of the peak (a relative 1e-9 of slack for rounding)."""
    peak = max(lr)
    return max(i for i, v in enumerate(lr) if v >= rate_fraction * peak * (1 - 1e-9)) + 1


@dataclass(frozen=True)
class Convergence:
    """A curve's convergence verdict (its end) and, apart, its high-rate part's (module doc)."""

    end: PlateauVerdict
    high_rate: PlateauVerdict | None  # None: no learning rate recorded, or never below rate_fraction of its peak
    high_rate_rounds: int | None = None

    @property
    def converged(self) -> bool:
        return self.end.converged


def judge(accuracy_pct: Sequence[float], lr: Sequence[float | None] | None = None, last_rounds: int = 3,
          tolerance_pct: float = 1.0, rate_fraction: float = 0.5) -> Convergence:
    """The plateau rule on the curve's end, and on its high-rate part (module doc). ``lr``: the
    learning rate of each round of ``accuracy_pct`` (None: unknown)."""
    if not 0 < rate_fraction <= 1:
        raise ValueError(f"rate_fraction must be in (0, 1], got {rate_fraction}")
    if lr is not None and len(lr) != len(accuracy_pct):
        raise ValueError(f"{len(accuracy_pct)} rounds of accuracy but {len(lr)} learning rates")
    end = plateau(accuracy_pct, last_rounds, tolerance_pct)
    if lr and all(v is not None and v > 0 for v in lr):
        k = high_rate_rounds([float(v) for v in lr], rate_fraction)
        if k < len(accuracy_pct):
            return Convergence(end, plateau(accuracy_pct[:k], last_rounds, tolerance_pct), k)
    return Convergence(end, None)


@dataclass(frozen=True)
class Reach:
    """What one run needed to first reach a target: the round and the modeled cost up to it."""

    round: int
    wall_s: float
    device_s: float
    energy_j: float
    bytes: float


def end_slope_pts(accuracy_pct: Sequence[float], rounds: int) -> float | None:
    """The least-squares slope of the curve's last ``rounds`` evaluated rounds, in points per round
    (the ordinary least-squares line through (t, a_t), t = 1..k: Σ (t - t̄)(a_t - ā) / Σ (t - t̄)²);
    None with fewer than 2 rounds. A study reports its mean over the seeds with a t interval beside
    the plateau verdict: a curve still gaining 0.1 point per round at its end is not finished, even
    where the plateau rule calls it flat."""
    a = [float(v) for v in accuracy_pct][-rounds:]
    if rounds < 2 or len(a) < 2:
        return None
    tbar, abar = (len(a) + 1) / 2, statistics.fmean(a)
    return (sum((t - tbar) * (v - abar) for t, v in enumerate(a, start=1))
            / sum((t - tbar) ** 2 for t in range(1, len(a) + 1)))


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

"""Statistics of a study's runs across seeds: mean, sample standard deviation, Student-t
confidence intervals, paired differences, median and range.

A handful of seeds is a small sample from an unknown distribution, so the interval of a mean is
Student's t (Student, "The probable error of a mean", Biometrika 6(1), 1908):

    mean ± t_{(1 + c) / 2, n - 1} · s / √n,   s the sample standard deviation (n - 1 in the denominator),

and two methods run on the same seeds (same partition, same initial weights) are compared through
the per-seed differences d_s = a_s - b_s, whose mean and interval are those of the d_s (the paired
t interval): the seed-to-seed variation both methods share cancels.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """A sample's mean, sample standard deviation and the Student-t interval of its mean."""

    n: int
    mean: float
    std: float  # sample standard deviation (n - 1); nan for n = 1
    low: float  # the interval's ends; nan for n = 1
    high: float
    confidence: float = CONFIDENCE

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def record(self) -> dict:
        """As results files record it (JSON: an undefined std or interval, n = 1, as null)."""
        clean = lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else v  # noqa: E731
        return {"n": self.n, "mean": self.mean, "std": clean(self.std), "ci_low": clean(self.low),
                "ci_high": clean(self.high), "confidence": self.confidence}


def t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
    """t_{(1 + confidence) / 2, n - 1}: the two-sided Student-t quantile of ``n`` values."""
    from scipy import stats

    if n < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {n}")
    return float(stats.t.ppf((1 + confidence) / 2, n - 1))


def estimate(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """Mean, sample std and Student-t interval of ``values`` (module doc); one value: std and
    interval nan."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values to estimate from")
    mean = statistics.fmean(values)
    if len(values) == 1:
        return Estimate(1, mean, math.nan, math.nan, math.nan, confidence)
    std = statistics.stdev(values)
    half = t_quantile(len(values), confidence) * std / math.sqrt(len(values))
    return Estimate(len(values), mean, std, mean - half, mean + half, confidence)


def paired_difference(a: Mapping[int, float], b: Mapping[int, float], confidence: float = CONFIDENCE) -> Estimate:
    """The paired difference a - b over the seeds both have (module doc)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("no seed in common: a paired difference needs runs on the same seeds")
    return estimate([a[s] - b[s] for s in seeds], confidence)


@dataclass(frozen=True)
class Spread:
    """Median and range of the values of the seeds that have one, and how many of all have one."""

    reached: int
    of: int
    median: float | None
    low: float | None
    high: float | None


def spread(values: Sequence[float | None]) -> Spread:
    """Median and range of ``values``, None entries (a target not reached) counted but left out."""
    have = [float(v) for v in values if v is not None]
    if not have:
        return Spread(0, len(values), None, None, None)
    return Spread(len(have), len(values), statistics.median(have), min(have), max(have))


# ----------------------------------------------------------------------------- one new seed, equivalence


def prediction_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """Where one *new* seed's value is expected, from ``values`` (n seeds of the same setting): the
    Student-t prediction interval

        mean ± t_{(1 + c) / 2, n - 1} · s · √(1 + 1/n)

    (the new value's own spread s plus the uncertainty s / √n of the mean; e.g. Hahn & Meeker,
    "Statistical Intervals", Wiley 1991, Sec. 4.7). It is √(n + 1) times wider than the interval of
    the mean: a run outside it is unlikely to be another seed of the same setting. n = 1: nan."""
    e = estimate(values, confidence)
    if e.n < 2:
        return e
    half = t_quantile(e.n, confidence) * e.std * math.sqrt(1 + 1 / e.n)
    return Estimate(e.n, e.mean, e.std, e.mean - half, e.mean + half, confidence)


DEFAULT_EQUIVALENCE_MARGIN_PTS = 1.0
"""The equivalence margin m of a study file that declares none (``equivalence_margin_pts``), in
points of accuracy: our choice (on the offline digits' 360 test images, 1 point is 3.6 images)."""


@dataclass(frozen=True)
class Equivalence:
    """Schuirmann's two one-sided tests (TOST) on paired differences d_s against the margin ± m
    (Schuirmann, "A comparison of the two one-sided tests procedure and the power approach for
    assessing the equivalence of average bioavailability", J. Pharmacokinet. Biopharm. 15(6), 1987):

        t_low  = (mean + m) / (s / √n),  p_low  = P(T_{n-1} >= t_low)    H0: mean difference <= -m
        t_high = (mean - m) / (s / √n),  p_high = P(T_{n-1} <= t_high)   H0: mean difference >= +m

    p = max(p_low, p_high); equivalent at level α when p < α (α = 0.05: the same as the 90 % t
    interval of the mean lying inside (-m, +m)). With s = 0 the mean decides (p = 0 inside the
    margin, 1 outside)."""

    n: int
    mean: float
    margin: float
    p_low: float
    p_high: float
    alpha: float = 1 - CONFIDENCE

    @property
    def p(self) -> float:
        return max(self.p_low, self.p_high)

    @property
    def equivalent(self) -> bool:
        return self.p < self.alpha


def tost(differences: Sequence[float], margin: float, alpha: float = 1 - CONFIDENCE) -> Equivalence:
    """TOST of paired differences (``Equivalence``); needs n >= 2 and margin > 0."""
    from scipy import stats

    d = [float(v) for v in differences]
    if len(d) < 2 or not margin > 0:
        raise ValueError(f"an equivalence test needs >= 2 differences and a margin > 0, got {len(d)} and {margin}")
    mean, s = statistics.fmean(d), statistics.stdev(d)
    if s == 0:
        inside = -margin < mean < margin
        return Equivalence(len(d), mean, margin, 0.0 if inside else 1.0, 0.0 if inside else 1.0, alpha)
    se = s / math.sqrt(len(d))
    t = stats.t(len(d) - 1)
    return Equivalence(len(d), mean, margin, float(t.sf((mean + margin) / se)), float(t.cdf((mean - margin) / se)),
                       alpha)

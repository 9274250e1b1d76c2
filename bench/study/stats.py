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

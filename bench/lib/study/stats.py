"""Statistics of a study's runs across seeds: mean, sample standard deviation, Student-t
confidence intervals, paired differences, median and range.

A handful of seeds is a small sample from an unknown distribution, so the interval of a mean is
Student's t (Student, "The probable error of a mean", Biometrika 6(1), 1908):

    mean ± t_{(1 + c) / 2, n - 1} · s / √n,   s the sample standard deviation (n - 1 in the denominator),

and two methods run on the same seeds (same partition, same initial weights) are compared through
the per-seed differences d_s = a_s - b_s, whose mean and interval are those of the d_s (the paired
t interval): the seed-to-seed variation both methods share cancels.

A zero spread is not certainty. Accuracy on N evaluation samples moves in steps of one sample,
100 / N points (``resolution_pts``): three seeds that agree to the image say nothing about the
fourth, which may flip one. So every interval and test of accuracies takes the sample standard
deviation floored at that step, s' = max(s, 100 / N) (``floor_pts``; our rule, docs/study.md
"Verdicts"): "+0.28 on every seed" on 360 images is then +0.28 [-0.41, +0.97] with 3 seeds, not
a certain difference, and no p-value is set by fiat.
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
    floor: float = 0.0  # the spread's floor (``resolution_pts``) the interval was computed with; 0: none

    @property
    def spread(self) -> float:
        """The standard deviation the interval and tests use: the sample's, floored (module doc)."""
        return max(self.std, self.floor)

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def record(self) -> dict:
        """As results files record it (JSON: an undefined std or interval, n = 1, as null)."""
        clean = lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else v  # noqa: E731
        return {"n": self.n, "mean": self.mean, "std": clean(self.std), "ci_low": clean(self.low),
                "ci_high": clean(self.high), "confidence": self.confidence,
                **({"std_floor": self.floor} if self.floor > 0 else {})}


def t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
    """t_{(1 + confidence) / 2, n - 1}: the two-sided Student-t quantile of ``n`` values."""
    from scipy import stats

    if n < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {n}")
    return float(stats.t.ppf((1 + confidence) / 2, n - 1))


def resolution_pts(samples: int) -> float:
    """One evaluation sample's worth of accuracy, in points: 100 / ``samples`` (module doc)."""
    if not isinstance(samples, int) or samples < 1:
        raise ValueError(f"the evaluation set's size must be a positive whole number, got {samples!r}")
    return 100 / samples


def estimate(values: Sequence[float], confidence: float = CONFIDENCE, floor: float = 0.0) -> Estimate:
    """Mean, sample std and Student-t interval of ``values`` (module doc), the spread floored at
    ``floor``; one value: std and interval nan."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values to estimate from")
    mean = statistics.fmean(values)
    if len(values) == 1:
        return Estimate(1, mean, math.nan, math.nan, math.nan, confidence, floor)
    std = statistics.stdev(values)
    half = t_quantile(len(values), confidence) * max(std, floor) / math.sqrt(len(values))
    return Estimate(len(values), mean, std, mean - half, mean + half, confidence, floor)


def paired_difference(a: Mapping[int, float], b: Mapping[int, float], confidence: float = CONFIDENCE,
                      floor: float = 0.0) -> Estimate:
    """The paired difference a - b over the seeds both have (module doc), its spread floored at ``floor``."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("no seed in common: a paired difference needs runs on the same seeds")
    return estimate([a[s] - b[s] for s in seeds], confidence, floor)


def difference_p(d: Estimate) -> float:
    """The two-sided p-value of the paired t-test of "no difference" on ``d`` (its floored spread):
    t = mean / (s' / √n), p = 2 P(T_{n-1} >= |t|); nan for n < 2 or a spread of 0 with no floor."""
    from scipy import stats

    if d.n < 2 or not d.spread > 0:
        return math.nan
    return float(2 * stats.t(d.n - 1).sf(abs(d.mean) / (d.spread / math.sqrt(d.n))))


def one_sided_p(d: Estimate, null: float, alternative: str) -> float:
    """The one-sided paired t-test on ``d`` (its floored spread) against a mean difference of ``null``:
    ``greater`` (H0: mean <= null; a non-inferiority test at null = -m, superiority at 0),
    p = P(T_{n-1} >= (mean - null) / (s' / √n)); ``less`` (H0: mean >= null) the other tail
    (e.g. Chow, Shao and Wang 2008, Sec. 3.1); nan for n < 2 or no spread."""
    from scipy import stats

    if alternative not in ("greater", "less"):
        raise ValueError(f"alternative {alternative!r}: give greater or less")
    if d.n < 2 or not d.spread > 0:
        return math.nan
    t = (d.mean - null) / (d.spread / math.sqrt(d.n))
    return float(stats.t(d.n - 1).sf(t) if alternative == "greater" else stats.t(d.n - 1).cdf(t))


def normality_p(values: Sequence[float]) -> float | None:
    """The Shapiro-Wilk test's p-value of ``values`` (Shapiro & Wilk, "An analysis of variance test
    for normality (complete samples)", Biometrika 52(3/4), 1965; scipy's implementation of Royston's
    algorithm AS R94, 1995): small p, the values are unlikely to be normal (the t-test's assumption);
    None for fewer than 3 values or no spread (the test is undefined)."""
    from scipy import stats

    v = [float(x) for x in values]
    if len(v) < 3 or max(v) - min(v) <= 1e-12 * max(1.0, max(abs(x) for x in v)):
        return None
    return float(stats.shapiro(v).pvalue)


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


def prediction_interval(values: Sequence[float], confidence: float = CONFIDENCE, floor: float = 0.0) -> Estimate:
    """Where one *new* seed's value is expected, from ``values`` (n seeds of the same setting): the
    Student-t prediction interval

        mean ± t_{(1 + c) / 2, n - 1} · s · √(1 + 1/n)

    (the new value's own spread s plus the uncertainty s / √n of the mean; e.g. Hahn & Meeker,
    "Statistical Intervals", Wiley 1991, Sec. 4.7). It is √(n + 1) times wider than the interval of
    the mean: a run outside it is unlikely to be another seed of the same setting. n = 1: nan.
    ``floor``: s floored (module doc), so that seeds that agree to the sample do not give [x, x]."""
    e = estimate(values, confidence, floor)
    if e.n < 2:
        return e
    half = t_quantile(e.n, confidence) * e.spread * math.sqrt(1 + 1 / e.n)
    return Estimate(e.n, e.mean, e.std, e.mean - half, e.mean + half, confidence, floor)


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
    interval of the mean lying inside (-m, +m)). s is floored (``floor``, module doc): a zero spread
    gets no p-value by fiat."""

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


def tost(differences: Sequence[float], margin: float, alpha: float = 1 - CONFIDENCE,
         floor: float = 0.0) -> Equivalence:
    """TOST of paired differences (``Equivalence``), the spread floored at ``floor``; needs n >= 2,
    margin > 0 and a spread (or floor) > 0."""
    from scipy import stats

    d = [float(v) for v in differences]
    if len(d) < 2 or not margin > 0:
        raise ValueError(f"an equivalence test needs >= 2 differences and a margin > 0, got {len(d)} and {margin}")
    mean, s = statistics.fmean(d), max(statistics.stdev(d), floor)
    if not s > 0:
        raise ValueError("the differences have no spread and no floor was given: give the evaluation set's "
                         "resolution (floor = resolution_pts(samples))")
    se = s / math.sqrt(len(d))
    t = stats.t(len(d) - 1)
    return Equivalence(len(d), mean, margin, float(t.sf((mean + margin) / se)), float(t.cdf((mean - margin) / se)),
                       alpha)


# ----------------------------------------------------------------------------- many comparisons

CORRECTIONS = ("holm", "bh", "none")


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm, "A simple sequentially rejective multiple test
    procedure", Scand. J. Statist. 6(2), 1979): with p_(1) <= ... <= p_(m),

        q_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)),

    returned in the input's order; rejecting where q < α keeps the family-wise error rate at α.
    nan entries (no test) are left out of the family and stay nan."""
    return _adjust(p, lambda ordered, m: _running(
        [min(1.0, (m - j) * v) for j, v in enumerate(ordered)], max))


def benjamini_hochberg(p: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (Benjamini & Hochberg, "Controlling the false
    discovery rate", J. R. Statist. Soc. B 57(1), 1995): q_(i) = min_{j >= i} min(1, m p_(j) / j),
    in the input's order; rejecting where q < α keeps the false discovery rate at α. nan: as ``holm``."""
    return _adjust(p, lambda ordered, m: _running(
        [min(1.0, m * v / (j + 1)) for j, v in enumerate(ordered)][::-1], min)[::-1])


def adjusted(p: Sequence[float], correction: str) -> list[float]:
    """``p`` adjusted for the family it forms by ``correction`` (one of ``CORRECTIONS``)."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction {correction!r}: give one of {', '.join(CORRECTIONS)}")
    return {"holm": holm, "bh": benjamini_hochberg, "none": lambda v: [float(x) for x in v]}[correction](p)


def _running(values: list[float], pick) -> list[float]:
    out, acc = [], None
    for v in values:
        acc = v if acc is None else pick(acc, v)
        out.append(acc)
    return out


def _adjust(p: Sequence[float], rule) -> list[float]:
    values = [float(v) for v in p]
    order = sorted((i for i, v in enumerate(values) if not math.isnan(v)), key=lambda i: values[i])
    out = [math.nan] * len(values)
    for i, q in zip(order, rule([values[i] for i in order], len(order))):
        out[i] = q
    return out


# ----------------------------------------------------------------------------- power: seeds and detectable differences

DEFAULT_POWER = 0.8


def seeds_for_equivalence(sd: float, margin: float, alpha: float = 1 - CONFIDENCE, power: float = DEFAULT_POWER,
                          n_max: int = 10_000, true_difference: float = 0.0) -> int:
    """The fewest paired seeds whose TOST shows equivalence within ± ``margin`` with probability
    ``power`` when the true difference is ``true_difference`` and the paired spread is ``sd``: the
    smallest n >= 2 with

        (t_{1-α, n-1} + t_{1-β', n-1}) · sd / √n <= margin - |δ|,   β' = β / 2 at δ = 0, else β

    (Chow, Shao and Wang, "Sample Size Calculations in Clinical Research", 2nd ed., Chapman & Hall
    2008, Sec. 3.1.3, the one-sample test for equivalence, with t quantiles for the normal ones).
    ``n_max`` + 1 when even ``n_max`` seeds do not suffice (always, when |δ| >= margin)."""
    from scipy import stats

    if not sd > 0 or not margin > 0 or not 0 < power < 1:
        raise ValueError(f"a seed plan needs sd > 0, margin > 0 and 0 < power < 1, got {sd}, {margin}, {power}")
    room = margin - abs(true_difference)
    if room <= 0:
        return n_max + 1
    beta = (1 - power) / 2 if true_difference == 0 else 1 - power
    return _first_n(lambda df: stats.t.ppf(1 - alpha, df) + stats.t.ppf(1 - beta, df), sd, room, n_max)


def _first_n(quantiles, sd: float, room: float, n_max: int) -> int:
    """The smallest n in 2..``n_max`` with quantiles(n - 1) · sd / √n <= ``room`` (every n at once:
    one vectorised quantile call), ``n_max`` + 1 for none."""
    import numpy as np

    n = np.arange(2, n_max + 1)
    ok = np.nonzero(quantiles(n - 1) * sd / np.sqrt(n) <= room)[0]
    return int(n[ok[0]]) if len(ok) else n_max + 1


def seeds_for_difference(sd: float, difference: float, alpha: float = 1 - CONFIDENCE, power: float = DEFAULT_POWER,
                         n_max: int = 10_000) -> int:
    """The fewest paired seeds whose two-sided t-test at ``alpha`` detects a true difference
    ``difference`` at spread ``sd`` with probability ``power``: the smallest n >= 2 with
    (t_{1-α/2, n-1} + t_{power, n-1}) · sd / √n <= |difference| (Chow, Shao and Wang 2008, Sec. 3.1.2);
    ``n_max`` + 1 for a difference of 0 or one that ``n_max`` seeds do not detect."""
    from scipy import stats

    if not sd > 0 or not 0 < power < 1:
        raise ValueError(f"a seed plan needs sd > 0 and 0 < power < 1, got {sd}, {power}")
    if difference == 0:
        return n_max + 1
    return _first_n(lambda df: stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df), sd, abs(difference), n_max)


def sd_upper_bound(sd: float, n: int, confidence: float) -> float:
    """The one-sided upper ``confidence`` bound of a standard deviation estimated as ``sd`` from
    ``n`` values (n - 1 degrees of freedom), for normal values:

        σ_U = sd · √((n - 1) / χ²_{1-confidence, n-1})

    (χ² the lower quantile; Browne, "On the use of a pilot sample for sample size determination",
    Statistics in Medicine 14(17), 1995: planning on σ_U instead of sd keeps the planned power with
    probability ``confidence`` over the pilot's own error). From 3 pilot values (2 degrees of
    freedom) at 80 %: sd × 2.11."""
    from scipy import stats

    if n < 2:
        raise ValueError(f"an upper bound of a spread needs at least 2 values, got {n}")
    return sd * math.sqrt((n - 1) / stats.chi2(n - 1).ppf(1 - confidence))


def equivalence_power(sd: float, n: int, margin: float, alpha: float = 1 - CONFIDENCE,
                      true_difference: float = 0.0) -> float:
    """The probability that the TOST of ``n`` paired seeds at spread ``sd`` shows equivalence within
    ± ``margin`` when the true difference is ``true_difference``:

        power ≈ F_{n-1}((m - δ) √n / sd - t_{1-α, n-1}) + F_{n-1}((m + δ) √n / sd - t_{1-α, n-1}) - 1

    (F the Student-t distribution function; Chow, Shao and Wang 2008, Sec. 3.1.3, the approximation
    their sample size inverts), floored at 0; nan for n < 2."""
    from scipy import stats

    if n < 2 or not sd > 0:
        return math.nan
    t = stats.t(n - 1)
    q = t.ppf(1 - alpha)
    se = sd / math.sqrt(n)
    return max(0.0, float(t.cdf((margin - true_difference) / se - q) + t.cdf((margin + true_difference) / se - q) - 1))


def permutation_min_seeds(alpha: float) -> int:
    """The fewest seeds whose exact two-sided sign-flip test can reach p < ``alpha`` at all: its
    smallest p is 2 / 2ⁿ (``bench.lib.study.exact``), so n > log2(2 / α)."""
    return max(2, math.floor(math.log2(2 / alpha)) + 1)


def minimum_detectable_difference(sd: float, n: int, alpha: float = 1 - CONFIDENCE,
                                  power: float = DEFAULT_POWER) -> float:
    """The smallest true paired difference that ``n`` seeds at spread ``sd`` detect (the two-sided
    paired t-test at ``alpha`` rejects "no difference") with probability ``power``:

        MDD = (t_{1-α/2, n-1} + t_{power, n-1}) · sd / √n

    (Chow, Shao and Wang 2008, Sec. 3.1, the one-sample test for equality, solved for the difference);
    nan for n < 2."""
    from scipy import stats

    if n < 2:
        return math.nan
    t = stats.t(n - 1)
    return float((t.ppf(1 - alpha / 2) + t.ppf(power)) * sd / math.sqrt(n))

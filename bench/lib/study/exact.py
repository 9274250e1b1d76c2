"""The paired sign-flip permutation test: a p-value of paired differences that assumes no normal
distribution (docs/study.md, "Verdicts").

Two methods run on the same seeds give paired differences d_1 … d_n. If the two methods are
exchangeable at every seed (the null hypothesis of no difference), each d_s is as likely to have
come out as −d_s: every one of the 2ⁿ sign patterns ε ∈ {−1, +1}ⁿ gives a sum Σ ε_s d_s as likely
as the observed one, and the p-value is the share of them at least as extreme as the observed sum
(Fisher, "The Design of Experiments", 1935, Sec. 21; Good, "Permutation, Parametric and Bootstrap
Tests of Hypotheses", 3rd ed., Springer 2005, Sec. 3.7.2 "Matched pairs"):

    two-sided: p = #{ε : |Σ ε_s d_s| ≥ |Σ d_s|} / 2ⁿ
    greater:   p = #{ε :  Σ ε_s d_s  ≥  Σ d_s } / 2ⁿ     (H0: the mean difference ≤ 0)
    less:      p = #{ε :  Σ ε_s d_s  ≤  Σ d_s } / 2ⁿ     (H0: the mean difference ≥ 0)

A null of a mean difference δ other than 0 (a margin: non-inferiority, equivalence) is tested on
d_s − δ, assuming the differences are symmetric about their mean; the test of no difference needs
only the exchangeability the paired design gives. Every sign pattern counts, the observed one
among them, so the smallest p is 1 / 2ⁿ one-sided and 2 / 2ⁿ two-sided: with 3 seeds 0.25, with 6
seeds 0.031 — a study of few seeds cannot resolve anything without assuming normality, and this
test says so.

Up to ``EXACT_MAX_SEEDS`` differences every pattern is enumerated (2²⁰ ≈ 10⁶ sums, 8 MB); above,
``MONTE_CARLO_DRAWS`` patterns are drawn with a generator seeded ``MONTE_CARLO_SEED`` (the same
p-value every time) and p = (1 + hits) / (1 + draws) (Phipson & Smyth, "Permutation p-values should
never be zero", Stat. Appl. Genet. Mol. Biol. 9(1), 2010).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

EXACT_MAX_SEEDS = 20
MONTE_CARLO_DRAWS = 100_000
MONTE_CARLO_SEED = 0
ALTERNATIVES = ("two-sided", "greater", "less")
_CHUNK = 10_000


def method_text(n: int) -> str:
    """How the p-value of ``n`` differences is computed, as results files record it."""
    if n <= EXACT_MAX_SEEDS:
        return f"exact: all 2^{n} = {2 ** n} sign patterns"
    return f"Monte Carlo: {MONTE_CARLO_DRAWS} sign patterns drawn, generator seed {MONTE_CARLO_SEED}"


def sign_flip_sums(values: Sequence[float]) -> np.ndarray:
    """Σ ε_s v_s for every sign pattern ε (2ⁿ sums, the all-plus pattern among them), built by
    doubling: after k values, the 2ᵏ sums of the first k."""
    sums = np.zeros(1)
    for v in values:
        sums = np.concatenate([sums + v, sums - v])
    return sums


def _tolerance(values: np.ndarray) -> float:
    """Sums equal up to rounding count as ties (an extreme pattern always counts itself)."""
    return 1e-9 * max(1.0, float(np.abs(values).sum()))


def _extreme(sums: np.ndarray, observed: float, alternative: str, tol: float) -> int:
    if alternative == "greater":
        return int(np.count_nonzero(sums >= observed - tol))
    if alternative == "less":
        return int(np.count_nonzero(sums <= observed + tol))
    return int(np.count_nonzero(np.abs(sums) >= abs(observed) - tol))


def sign_flip_p(differences: Sequence[float], alternative: str = "two-sided", null: float = 0.0) -> float:
    """The sign-flip permutation p-value of paired ``differences`` against a mean difference of
    ``null`` (module doc); ``alternative``: two-sided, greater (H0: mean ≤ null) or less (H0: mean ≥
    null). nan for no difference at all."""
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative {alternative!r}: give one of {', '.join(ALTERNATIVES)}")
    d = np.asarray([float(v) for v in differences]) - float(null)
    if not len(d) or not np.all(np.isfinite(d)):
        return math.nan
    observed, tol = float(d.sum()), _tolerance(d)
    if len(d) <= EXACT_MAX_SEEDS:
        return _extreme(sign_flip_sums(d), observed, alternative, tol) / 2 ** len(d)
    rng = np.random.default_rng(MONTE_CARLO_SEED)
    hits = 0
    for start in range(0, MONTE_CARLO_DRAWS, _CHUNK):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(min(_CHUNK, MONTE_CARLO_DRAWS - start), len(d)))
        hits += _extreme(signs @ d, observed, alternative, tol)
    return (1 + hits) / (1 + MONTE_CARLO_DRAWS)

"""What a comparison shows, in one wording used by every report and by ``bench.run``
(docs/study.md, "Verdicts").

Two methods on the same seeds (a study's paired differences d_s = a_s - b_s, ``bench.lib.study.stats``,
their spread floored at one evaluation sample's worth of accuracy). Each table of a report is one
family of comparisons; each comparison's p-values are adjusted for its family (the study's
``[verdicts] correction``: Holm, Benjamini-Hochberg or none) and the words follow the adjusted ones:

* ``different``: the paired t-test rejects "no difference" (adjusted p < α = 0.05);
* ``equivalent within ± m``: the TOST rejects a difference of m or more either way (adjusted p < α),
  m the study's declared margin;
* ``different, but within ± m``: both (a resolved difference smaller than the margin);
* ``not resolved with n seeds``: neither: these n seeds resolve it neither way.

No word is stronger than its test: ``check`` refuses a stated verdict that the numbers beside it
do not give (``bench.findings`` renders every stated result through it).

One new run against a reference's seeds (``bench.run``'s run beside a reference study):

* ``the reference's own seed-s run: not new evidence``: the run has a reference seed's seed and
  settings (same learning rate, same configuration, same device and execution options) and its
  result, to the digit: it repeats that run and proves nothing new;
* ``the reference's seed-s settings on other CPU kernels: not new evidence``: the same seed and
  settings, another result: the machine's kernels differ from the reference's (instruction set,
  threads; docs/results.md, "Reproducibility across machines"). Not an independent seed either;
* ``inside the reference's 95 % prediction interval for a new seed [lo, hi]``;
* ``outside the reference's 95 % prediction interval for a new seed [lo, hi]``: unlikely to be
  another seed of the same setting (another machine's kernels, or a change in the code).
"""

from __future__ import annotations

import math

from bench.lib.study.stats import CONFIDENCE, Estimate

ALPHA = 1 - CONFIDENCE
ONE_SEED = "one seed: no verdict"


def comparison(n: int, p_difference: float, p_equivalence: float, margin: float, alpha: float = ALPHA) -> str:
    """The verdict on a paired difference of ``n`` seeds from its (adjusted) p-values (module doc);
    a nan p-value: that test could not be made."""
    if n < 2:
        return ONE_SEED
    different = not math.isnan(p_difference) and p_difference < alpha
    equivalent = not math.isnan(p_equivalence) and p_equivalence < alpha
    if different and equivalent:
        return f"different, but within ± {margin:g}"
    if different:
        return "different"
    return f"equivalent within ± {margin:g}" if equivalent else f"not resolved with {n} seeds"


def p_text(p: float | None) -> str:
    """A p-value as every report and page prints it: two significant digits, ``<0.001`` below that,
    ``—`` for no test."""
    return "—" if p is None else "<0.001" if p < 0.001 else f"{p:.2g}"


class OverstatedVerdict(ValueError):
    """A stated verdict that its numbers do not give."""


def check(stated: str, n: int, p_difference: float | None, p_equivalence: float | None, margin: float,
          alpha: float = ALPHA) -> str:
    """``stated`` if it is the verdict the adjusted p-values give (``comparison``), else
    OverstatedVerdict naming both: a claim of "different" or "equivalent" that its test does not
    carry is refused, and so is a weaker word where the test resolved it."""
    nan = lambda v: math.nan if v is None else float(v)  # noqa: E731
    given = comparison(n, nan(p_difference), nan(p_equivalence), margin, alpha)
    if stated != given:
        raise OverstatedVerdict(f"stated {stated!r}, but n = {n}, adjusted p {p_difference} (difference) and "
                                f"{p_equivalence} (equivalence within ± {margin:g}) give {given!r}")
    return stated


def same_run(seed: int) -> str:
    return f"the reference's own seed-{seed} run: not new evidence"


def same_settings(seed: int) -> str:
    return f"the reference's seed-{seed} settings on other CPU kernels: not new evidence"


def inside(value: float, interval: Estimate) -> bool:
    return bool(interval.low <= value <= interval.high)


def new_seed(value: float, interval: Estimate, signed: bool = True) -> str:
    """Whether ``value`` lies in the prediction interval for one new seed (module doc); ``signed``:
    a difference (+/- shown), else an accuracy."""
    fmt = "{:+.1f}" if signed else "{:.1f}"
    return (f"{'inside' if inside(value, interval) else 'outside'} the reference's 95 % prediction interval for a "
            f"new seed [{fmt.format(interval.low)}, {fmt.format(interval.high)}]")

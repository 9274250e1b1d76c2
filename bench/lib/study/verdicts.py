"""What a comparison shows, in one wording used by every report and by ``bench.run``
(docs/study.md, "Verdicts").

Two methods on the same seeds (a study's paired differences d_s = a_s - b_s, ``bench.lib.study.stats``):

* ``different``: the 95 % t interval of the mean difference excludes 0;
* ``equivalent within ± m``: the TOST at α = 0.05 shows the mean difference inside (-m, +m), m the
  study's declared margin, and the interval includes 0;
* ``different, but within ± m``: both (a resolved difference smaller than the margin);
* ``not shown equivalent``: neither: three seeds did not resolve it either way.

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

from bench.lib.study.stats import Equivalence, Estimate


def comparison(difference: Estimate, equivalence: Equivalence | None) -> str:
    """The verdict on a paired difference (module doc); ``equivalence`` None: not testable (n < 2)."""
    if difference.n < 2:
        return "one seed: no verdict"
    excludes_zero = difference.low > 0 or difference.high < 0
    equivalent = equivalence is not None and equivalence.equivalent
    margin = "" if equivalence is None else f"{equivalence.margin:g}"
    if excludes_zero and equivalent:
        return f"different, but within ± {margin}"
    if excludes_zero:
        return "different"
    return f"equivalent within ± {margin}" if equivalent else "not shown equivalent"


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

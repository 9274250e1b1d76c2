"""One paired comparison as every report records it, and a family of them corrected together
(docs/study.md, "Verdicts"); ``bench.study``'s report writes these records into ``summary.json``
and ``bench.findings --check`` recomputes them from the runs.

Each comparison a − b (paired over the seeds both have) is tested four ways, by two tests:

* the hypotheses (``HYPOTHESES``): *difference* (two-sided, H0: mean = 0), *equivalence* (TOST,
  H0: |mean| ≥ m), *non-inferiority* (one-sided, H0: mean ≤ −m: the claim a ≥ b within the margin)
  and *superiority* (one-sided, H0: mean ≤ 0: the claim a > b);
* the tests (``TESTS``): the paired Student-t tests on the spread floored at one evaluation sample
  (``bench.lib.study.stats``) and the exact sign-flip permutation test (``bench.lib.study.exact``),
  and beside them the Shapiro-Wilk p of the differences (``stats.normality_p``), the t-test's
  assumption;
* where every paired run recorded its right-or-wrong per test image, a bootstrap over test images
  and seeds (``bench.lib.study.image_bootstrap``): whether the verdict survives another draw of the
  test set (``image_bootstrap.verdict_holds``), a sensitivity column, not a test.

Every p-value is adjusted within its family by the study's correction, each test's apart; the
verdict word follows the study's *primary* test (``[verdicts] primary_test``, default
``DEFAULT_PRIMARY_TEST``), whose p-values are also recorded at the top of the record
(``p_difference``, ``p_difference_adjusted``, ...: what ``verdicts.check`` and the claims read).
Where the two tests' verdicts differ, ``tests_agree`` is false and every table says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from bench.lib.study import verdicts
from bench.lib.study.exact import method_text, sign_flip_p
from bench.lib.study.image_bootstrap import holds, image_bootstrap
from bench.lib.study.stats import (adjusted, difference_p, minimum_detectable_difference, normality_p, one_sided_p,
                                   paired_difference, seeds_for_equivalence, tost)

TESTS = ("permutation", "t")
TEST_NAMES = {"permutation": "exact sign-flip", "t": "t-test"}
DEFAULT_PRIMARY_TEST = "permutation"
"""The test whose p-values carry the words when a study file declares none (docs/study.md,
"Which test carries the word"): its error rate holds without the normality the t-test assumes."""
HYPOTHESES = ("difference", "equivalence", "noninferiority", "superiority")
CELL_FAMILIES = {"base": "paired_difference_vs_base_pct", "fp32": "paired_difference_vs_fp32_pct",
                 "local": "local_difference_vs_base_pct"}
"""The families a study's cells hold, each under its key: against the base method, against FP32, the
local test mode against the base method (the ``compare`` family is ``pairs[*].difference_pct``)."""
Images = tuple[Mapping[int, np.ndarray], Mapping[int, np.ndarray]]
"""a's and b's right-or-wrong per test image (bool arrays), by seed."""


@dataclass(frozen=True)
class Rules:
    """What a study declares about its comparisons: the equivalence margin (points), the family
    correction, the power of its plans and which test carries the words."""

    margin_pts: float
    correction: str
    power: float
    primary_test: str = DEFAULT_PRIMARY_TEST


def _clean(p: float) -> float | None:
    return None if p is None or math.isnan(p) else float(p)


def t_test_ps(differences: Sequence[float], margin: float, floor: float) -> dict[str, float | None]:
    """The four hypotheses' raw p-values by the paired t-tests (spread floored at ``floor``)."""
    d = paired_difference(dict(enumerate(differences)), {i: 0.0 for i in range(len(differences))}, floor=floor)
    return {"difference": _clean(difference_p(d)), "equivalence": _clean(tost(differences, margin, floor=floor).p),
            "noninferiority": _clean(one_sided_p(d, -margin, "greater")),
            "superiority": _clean(one_sided_p(d, 0.0, "greater"))}


def permutation_ps(differences: Sequence[float], margin: float) -> dict[str, Any]:
    """The four hypotheses' raw p-values by the sign-flip permutation test (``bench.lib.study.exact``):
    equivalence as the larger of the two one-sided tests at −m and +m (TOST by permutation)."""
    low = sign_flip_p(differences, "greater", -margin)
    return {"difference": _clean(sign_flip_p(differences)),
            "equivalence": _clean(max(low, sign_flip_p(differences, "less", margin))),
            "noninferiority": _clean(low), "superiority": _clean(sign_flip_p(differences, "greater", 0.0)),
            "method": method_text(len(differences))}


def comparison(a: Mapping[int, float], b: Mapping[int, float], floor: float, rules: Rules, family: str,
               operands: Mapping[str, Any] | None = None, images: Images | None = None) -> dict[str, Any]:
    """The paired difference a − b (its spread floored at ``floor``) with every test's raw p-values
    (module doc), the Shapiro-Wilk p of the differences, the minimum detectable difference at the
    study's power and the seeds a ± margin equivalence would need at this spread; ``operands``: what
    a and b are (so a check can find their runs); ``images``: a's and b's right-or-wrong per test
    image by seed, where the runs recorded them (the image bootstrap is made when every paired
    seed has both). The adjusted p-values and the verdict come with the family (``adjust_family``)."""
    d = paired_difference(a, b, floor=floor)
    seeds = sorted(set(a) & set(b))
    margin = rules.margin_pts
    out: dict[str, Any] = {**d.record(), "family": family, "margin_pts": margin, "seeds": [int(s) for s in seeds],
                           **({"operands": dict(operands)} if operands else {}), "primary_test": rules.primary_test,
                           **{f"p_{h}": None for h in HYPOTHESES}}
    if d.n >= 2:
        diffs = [a[s] - b[s] for s in seeds]
        out.update({"tests": {"t": t_test_ps(diffs, margin, floor), "permutation": permutation_ps(diffs, margin)},
                    "shapiro_wilk_p": normality_p(diffs), "power": rules.power,
                    "minimum_detectable_pts": minimum_detectable_difference(d.spread, d.n, power=rules.power),
                    "seeds_for_margin": seeds_for_equivalence(d.spread, margin, power=rules.power)})
        if images is not None and all(s in images[0] and s in images[1] for s in seeds):
            out["image_bootstrap"] = image_bootstrap(
                np.stack([images[0][s].astype(np.int8) - images[1][s].astype(np.int8) for s in seeds]))
    return out


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def adjust_family(members: Sequence[dict[str, Any]], rules: Rules) -> None:
    """One family's comparisons (module doc), in place: each test's p-values of each hypothesis
    adjusted together by ``rules.correction``, each test's verdict from its adjusted p-values, and
    the primary test's p-values and verdict at the top of each record."""
    for test in TESTS:
        for h in HYPOTHESES:
            raw = [_nan(m["tests"][test][h]) if "tests" in m else math.nan for m in members]
            for m, q in zip(members, adjusted(raw, rules.correction)):
                if "tests" in m:
                    m["tests"][test][f"{h}_adjusted"] = _clean(q)
        for m in members:
            if "tests" in m:
                t = m["tests"][test]
                t["verdict"] = verdicts.comparison(m["n"], _nan(t["difference_adjusted"]),
                                                   _nan(t["equivalence_adjusted"]), rules.margin_pts)
    for m in members:
        m["correction"], m["family_size"] = rules.correction, len(members)
        primary = m.get("tests", {}).get(rules.primary_test)
        for h in HYPOTHESES:
            m[f"p_{h}"] = None if primary is None else primary[h]
            m[f"p_{h}_adjusted"] = None if primary is None else primary[f"{h}_adjusted"]
        m["verdict"] = verdicts.comparison(m["n"], _nan(m["p_difference_adjusted"]), _nan(m["p_equivalence_adjusted"]),
                                           rules.margin_pts)
        if "tests" in m:
            m["tests_agree"] = len({m["tests"][t]["verdict"] for t in TESTS}) == 1
        if "image_bootstrap" in m:
            m["image_bootstrap"]["verdict_holds"] = holds(m["image_bootstrap"], m["verdict"], m["mean"], rules.margin_pts)


def carrying_text(e: Mapping[str, Any]) -> str:
    """The adjusted p-value(s) that carry ``e``'s verdict, named: ``different (sign-flip adj. p 0.003)``;
    ``equivalent within ± 1 (TOST, sign-flip adj. p 0.002)``; not resolved: both; and where the
    other test's verdict differs, what it says (``; the t-test: not resolved (adj. p 0.16)``)."""
    v = e["verdict"]
    if e.get("p_difference_adjusted") is None and e.get("p_equivalence_adjusted") is None:
        return v
    primary = e.get("primary_test", "t")
    return f"{v} ({_ps_text(e, primary, v)})" + _other_text(e, primary) + _images_text(e)


def scope_text(cells: Sequence[Mapping[str, Any]], pairs: Sequence[Mapping[str, Any]] = ()) -> str:
    """What a study's intervals cover, as its table and docs/findings.md say it: seeds on one fixed
    test set, and where its runs recorded per-image correctness, a bootstrap over test images too."""
    comparisons = [c[k] for c in cells for k in CELL_FAMILIES.values() if k in c]
    comparisons += [p["difference_pct"] for p in pairs if "difference_pct" in p]
    made = sum("image_bootstrap" in c for c in comparisons)
    local = sum(CELL_FAMILIES["local"] in c for c in cells)  # each client's own test samples: no per-image record
    seeds = "Scope: every interval and test is over seeds on one fixed test set"
    if not made:
        return (f"{seeds}; the sampling of the test images is not in them (the runs record no per-image "
                "correctness, so no images × seeds bootstrap can be made).")
    return (f"{seeds}; the sampling of the test images enters through a bootstrap over images × seeds, made for "
            f"{made} of {len(comparisons)} comparisons (those on the global test set whose runs all recorded per-image "
            f"correctness{f'; the {local} in the local test mode have no per-image record' if local else ''}): "
            "\"over test images too\" or \"not over test images\" beside a verdict says whether it survives, with the "
            "bootstrap's 95 % interval (90 % for an equivalence), unadjusted for the family (docs/study.md, \"Scope\").")


def _images_text(e: Mapping[str, Any]) -> str:
    """Whether the verdict survives the bootstrap over test images and seeds, where it was made
    (``bench.lib.study.image_bootstrap``): ``; over test images too (95 % [+0.4, +3.1])``."""
    boot = e.get("image_bootstrap")
    if boot is None or boot.get("verdict_holds") is None:
        return ""
    level = "90" if e["verdict"].startswith("equivalent") else "95"
    lo, hi = boot[f"interval_{level}_pts"]
    return f"; {'over test images too' if boot['verdict_holds'] else 'not over test images'} ({level} % [{lo:+.2f}, {hi:+.2f}])"


def _ps_text(e: Mapping[str, Any], test: str, verdict: str) -> str:
    t = e.get("tests", {}).get(test)
    p = (lambda h: t[f"{h}_adjusted"]) if t else (lambda h: e[f"p_{h}_adjusted"])  # noqa: E731
    name = TEST_NAMES.get(test, test)
    diff, tost_ = f"difference {verdicts.p_text(p('difference'))}", f"TOST {verdicts.p_text(p('equivalence'))}"
    if verdict == "different":
        return f"{name} adj. p: {diff}"
    if verdict.startswith("equivalent"):
        return f"{name} adj. p: {tost_}"
    return f"{name} adj. p: {diff}, {tost_}"


def _other_text(e: Mapping[str, Any], primary: str) -> str:
    if e.get("tests_agree", True):
        return ""
    other = next(t for t in TESTS if t != primary)
    v = e["tests"][other]["verdict"]
    return f"; the {TEST_NAMES[other]} says {v} ({_ps_text(e, other, v)})"

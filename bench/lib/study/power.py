"""How many evaluation seeds a study needs, planned before the evaluation runs (docs/study.md,
"Seeds from a power plan").

A study with ``[seed_plan]`` plans, per model and data setting, from its tuning runs (the pilot):
for every method compared with the base, the paired differences of the final *validation* accuracy
of the two chosen trials on each tuning seed (same seed: same partition and initial weights), and
from them, for the real case rather than the best one:

* the pilot's **mean difference** δ̂, taken as the truth: the plan asks for the seeds that resolve
  the comparison either way with the study's power, the fewer of a TOST within ± m at δ̂
  (``stats.seeds_for_equivalence``; none when |δ̂| >= m) and a difference test detecting δ̂
  (``stats.seeds_for_difference``);
* the **family's correction**: each test at α / k, k the comparisons against the base (models ×
  settings × compared methods): Holm's bar for the smallest p of the family, the worst case (and
  Bonferroni's for every p);
* the **spread's uncertainty**: the pilot's sample standard deviation, floored at one validation
  sample, replaced by its upper ``SD_CONFIDENCE`` confidence bound on the pilot's degrees of freedom
  (``stats.sd_upper_bound``: × 2.11 from 3 tuning seeds at 80 %), so that a pilot that happened to
  agree does not under-plan;
* with the exact sign-flip test as the primary test, at least the seeds that test needs to reach
  α / k at all (``stats.permutation_min_seeds``: 2 / 2ⁿ < α / k).

The setting runs the most any comparison needs, within ``[min_seeds, max_seeds]``: the first n of
the study's ``seeds``. The plan reads no test accuracy. It is recorded in the folder's registration
when the first evaluation run starts (``bench.lib.study.registration``) and binds from then on. After
the study, the report gives each comparison's delivered power (``delivered_power``) beside the
planned. Settings in another number format, or on a fleet, run as many seeds as the setting they
were tuned on.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from typing import Mapping, Sequence

from bench.lib.study.spec import Setting, Study
from bench.lib.study.stats import (CONFIDENCE, equivalence_power, permutation_min_seeds, resolution_pts,
                                   sd_upper_bound, seeds_for_difference, seeds_for_equivalence)

SD_CONFIDENCE = 0.8
"""The confidence of the upper bound the plan takes for the pilot's spread (Browne 1995's 80 %: the
plan's power is kept with probability 0.8 over the pilot's own sampling error)."""
ALPHA = 1 - CONFIDENCE


@dataclass(frozen=True)
class Comparison:
    """One comparison's plan: the pilot's paired differences and the seeds they ask for."""

    method: str
    tuning_seeds: int
    sd_pts: float  # the pilot's spread, floored
    seeds_needed: int
    mean_pts: float = 0.0  # the pilot's mean difference, taken as the truth
    sd_upper_pts: float = 0.0  # its upper SD_CONFIDENCE bound: what the plan uses
    alpha: float = ALPHA  # each test's level: α / family size
    planned_power: float = 0.0  # the TOST's power at the seeds the setting runs, the plan's spread and mean


@dataclass(frozen=True)
class SettingPlan:
    model: str
    setting: str  # the tuned-on setting's label
    comparisons: tuple[Comparison, ...]
    seeds: int  # what the setting runs: the largest need, within the study's bounds

    def record(self) -> dict:
        return {"model": self.model, "setting": self.setting, "seeds": self.seeds,
                "comparisons": [asdict(c) for c in self.comparisons]}


def final_val_pct(curve: Sequence[Mapping]) -> float | None:
    """The last validation accuracy (percent) of one label's curve; None without one."""
    val = [r["val_accuracy"] for r in curve if r.get("val_accuracy") is not None]
    return None if not val else 100 * float(val[-1])


def family_size(study: Study) -> int:
    """The comparisons against the base the plan corrects for: models × settings × compared methods."""
    return len(study.models) * len(study.settings) * max(1, len(study.methods) - 1)


def seeds_needed(sd_upper: float, mean: float, margin: float, alpha: float, power: float, primary_test: str) -> int:
    """The seeds one comparison asks for (module doc): the fewer of the TOST's and the difference
    test's at the pilot's mean, at least what the exact test needs to reach ``alpha``."""
    need = min(seeds_for_equivalence(sd_upper, margin, alpha, power, true_difference=mean),
               seeds_for_difference(sd_upper, mean, alpha, power))
    return max(need, permutation_min_seeds(alpha)) if primary_test == "permutation" else need


def plan_setting(study: Study, model: str, setting: Setting, finals: Mapping[str, Mapping[int, float]],
                 val_samples: int) -> SettingPlan:
    """The plan of one model and tuned-on setting (module doc) from ``finals``: method -> tuning seed ->
    final validation accuracy of its chosen trial."""
    if study.seed_plan is None:
        raise ValueError(f"study {study.name!r} has no [seed_plan]")
    floor = resolution_pts(val_samples)
    alpha = ALPHA / family_size(study)
    margin = study.equivalence_margin_pts
    out = []
    base = finals.get(study.base, {})
    for method in study.methods:
        if method == study.base:
            continue
        seeds = sorted(set(finals.get(method, {})) & set(base))
        if len(seeds) < 2:
            raise ValueError(f"{model} {setting.label}: {method} and {study.base} share {len(seeds)} finished tuning "
                             "seed(s); a seed plan needs 2 or more (add tuning_seeds, or drop [seed_plan])")
        d = [finals[method][s] - base[s] for s in seeds]
        sd, mean = max(statistics.stdev(d), floor), statistics.fmean(d)
        upper = sd_upper_bound(sd, len(d), SD_CONFIDENCE)
        need = seeds_needed(upper, mean, margin, alpha, study.power, study.primary_test)
        out.append(Comparison(method, len(seeds), sd, need, mean, upper, alpha))
    need = max((c.seeds_needed for c in out), default=study.seed_plan.min_seeds)
    n = min(max(need, study.seed_plan.min_seeds), study.seed_plan.max_seeds)
    return SettingPlan(model, setting.label, tuple(with_power(c, n, margin) for c in out), n)


def with_power(c: Comparison, n: int, margin: float) -> Comparison:
    """``c`` with its planned TOST power at ``n`` seeds (the plan's spread bound, level and mean)."""
    return replace(c, planned_power=equivalence_power(c.sd_upper_pts, n, margin, c.alpha, c.mean_pts))


def delivered_power(comparison: Mapping, spread_pts: float, n: int, margin: float) -> float:
    """The TOST power the study delivered for a planned comparison (a ``Comparison`` record): at the
    seeds it ran and the spread its test data showed, the plan's level and assumed difference."""
    return equivalence_power(spread_pts, n, margin, comparison.get("alpha", ALPHA), comparison.get("mean_pts", 0.0))

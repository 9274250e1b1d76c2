"""How many evaluation seeds a study needs, planned before the evaluation runs (docs/study.md,
"Seeds from a power plan").

A study with ``[seed_plan]`` plans, per model and data setting, from its tuning runs: for every
method compared with the base, the paired differences of the final *validation* accuracy of the
two chosen trials on each tuning seed (same seed: same partition and initial weights), their
sample standard deviation floored at one validation sample (``stats.resolution_pts``: the seeds'
agreement to the image is no evidence of a smaller spread), and the seeds a TOST at the study's
margin needs for the study's power when the true difference is 0
(``stats.seeds_for_equivalence``). The setting runs the most any comparison needs, within
``[min_seeds, max_seeds]``: the first n of the study's ``seeds``. The plan is fixed before any
evaluation run and reads no test accuracy, so the evaluation's error rates are those of a
fixed-n design. Validation sets are smaller than test sets here, so the plan errs on the side of
more seeds. Settings in another number format, or on a fleet, run as many seeds as the setting
they were tuned on.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from bench.lib.study.spec import Setting, Study
from bench.lib.study.stats import resolution_pts, seeds_for_equivalence


@dataclass(frozen=True)
class Comparison:
    """One comparison's plan: the tuning seeds' paired spread and the seeds it needs."""

    method: str
    tuning_seeds: int
    sd_pts: float  # floored
    seeds_needed: int


@dataclass(frozen=True)
class SettingPlan:
    model: str
    setting: str  # the tuned-on setting's label
    comparisons: tuple[Comparison, ...]
    seeds: int  # what the setting runs: the largest need, within the study's bounds

    def record(self) -> dict:
        return {"model": self.model, "setting": self.setting, "seeds": self.seeds,
                "comparisons": [c.__dict__ for c in self.comparisons]}


def final_val_pct(curve: Sequence[Mapping]) -> float | None:
    """The last validation accuracy (percent) of one label's curve; None without one."""
    val = [r["val_accuracy"] for r in curve if r.get("val_accuracy") is not None]
    return None if not val else 100 * float(val[-1])


def plan_setting(study: Study, model: str, setting: Setting, finals: Mapping[str, Mapping[int, float]],
                 val_samples: int) -> SettingPlan:
    """The plan of one model and tuned-on setting (module doc) from ``finals``: method -> tuning seed ->
    final validation accuracy of its chosen trial."""
    if study.seed_plan is None:
        raise ValueError(f"study {study.name!r} has no [seed_plan]")
    floor = resolution_pts(val_samples)
    out = []
    base = finals.get(study.base, {})
    for method in study.methods:
        if method == study.base:
            continue
        seeds = sorted(set(finals.get(method, {})) & set(base))
        if len(seeds) < 2:
            raise ValueError(f"{model} {setting.label}: {method} and {study.base} share {len(seeds)} finished tuning "
                             "seed(s); a seed plan needs 2 or more (add tuning_seeds, or drop [seed_plan])")
        sd = max(statistics.stdev(finals[method][s] - base[s] for s in seeds), floor)
        out.append(Comparison(method, len(seeds), sd, seeds_for_equivalence(sd, study.equivalence_margin_pts,
                                                                            power=study.power)))
    need = max((c.seeds_needed for c in out), default=study.seed_plan.min_seeds)
    n = min(max(need, study.seed_plan.min_seeds), study.seed_plan.max_seeds)
    return SettingPlan(model, setting.label, tuple(out), n)

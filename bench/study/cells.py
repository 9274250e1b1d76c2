"""An accuracy study's cells: every (model, setting, method)'s statistics over its evaluation seeds, the
paired comparisons (against the base method, against FP32, the study's ``compare`` pairs), each family's
p-values adjusted together and the verdicts (docs/study.md, "Verdicts").
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

import pandas as pd

from bench.study.fleets import by_seed
from bench.lib.study.spec import Setting, Study
from bench.lib.study import compare
from bench.lib.study.stats import Estimate, estimate, resolution_pts, spread


ImagesByCell = Mapping[tuple[str, str, str], Mapping[int, np.ndarray]]
"""(model, setting, method) -> seed -> right-or-wrong per test image (the runs' ``test_correct``)."""

COST_KEYS = (("wall_s", "cum_wall_s"), ("device_s", "cum_device_s"), ("energy_j", "cum_energy_j"),
             ("bytes", "cum_bytes"))


def _finals(runs_df: pd.DataFrame, model: str, setting: Setting, method: str) -> dict[int, float]:
    """seed -> final test accuracy (%) of one cell's evaluation runs."""
    if not len(runs_df):
        return {}
    mine = runs_df[(runs_df["model"] == model) & (runs_df["setting"] == setting.label) & (runs_df["method"] == method)]
    return dict(zip(mine["seed"], mine["final_accuracy_pct"]))


def cells(study: Study, runs_df: pd.DataFrame, tta_df: pd.DataFrame, images: ImagesByCell | None = None) -> list[dict[str, Any]]:
    """Every (model, setting, method)'s statistics over its evaluation seeds, each spread floored at
    one test sample (``stats.resolution_pts``); the paired difference against the base method and, in
    a number format other than FP32, against the same method and seeds in FP32, each with its raw
    p-values (and the image bootstrap where ``images`` has both sides' runs); then each family's
    p-values adjusted and the verdicts (``decide``)."""
    images = images or {}
    out = []
    for model in study.models:
        for setting in study.settings:
            here = runs_df[(runs_df["model"] == model) & (runs_df["setting"] == setting.label)] if len(runs_df) else runs_df
            base = here[here["method"] == study.base] if len(here) else here
            base_final = _finals(runs_df, model, setting, study.base)
            base_bytes = float(base["bytes"].mean()) if len(base) else None
            for method in study.methods:
                mine = here[here["method"] == method] if len(here) else here
                if not len(mine):
                    out.append({"model": model, "setting": setting.label, "method": method, "n": 0})
                    continue
                samples = int(mine["test_samples"].max())
                floor = resolution_pts(samples)
                final = dict(zip(mine["seed"], mine["final_accuracy_pct"]))
                cell = {"model": model, "setting": setting.label, "method": method, "n": len(mine),
                        **_statistics(mine, final, floor, samples, base_bytes)}
                local = by_seed(mine, "final_local_accuracy_pct")
                base_local = by_seed(base, "final_local_accuracy_pct") if len(base) else {}
                mine_key, base_key = (setting.label, method), (setting.label, study.base)
                if method != study.base and len(set(local) & set(base_local)) >= 2:  # paired as the global one
                    cell["local_difference_vs_base_pct"] = compare.comparison(
                        local, base_local, floor, rules(study), "local", _operands(model, mine_key, base_key, "local"))
                if method != study.base and base_final and set(final) & set(base_final):
                    cell["paired_difference_vs_base_pct"] = compare.comparison(
                        final, base_final, floor, rules(study), "base", _operands(model, mine_key, base_key),
                        _pair_images(images, model, mine_key, base_key))
                cell["number_format"] = setting.number_format
                fp32 = _finals(runs_df, model, setting.in_fp32, method) if setting.number_format != "fp32" else {}
                if set(final) & set(fp32):
                    fp32_key = (setting.in_fp32.label, method)
                    cell["paired_difference_vs_fp32_pct"] = compare.comparison(
                        final, fp32, floor, rules(study), "fp32", _operands(model, mine_key, fp32_key),
                        _pair_images(images, model, mine_key, fp32_key))
                cell["time_to_accuracy"] = _tta_cell(tta_df, model, setting.label, method)
                out.append(cell)
    return decide(study, out)


def _statistics(mine: pd.DataFrame, final: dict, floor: float, samples: int, base_bytes: float | None) -> dict[str, Any]:
    """One cell's statistics over its evaluation runs ``mine`` (``runs.csv`` rows), each spread floored
    at ``floor`` (one test sample of ``samples``); ``base_bytes``: the base method's mean bytes."""
    return {"seeds": sorted(int(s) for s in mine["seed"]), "test_samples": samples,
            "final_accuracy_pct": _estimate(estimate(list(final.values()), floor=floor)),
            "best_accuracy_pct": _estimate(estimate(list(mine["best_accuracy_pct"]), floor=floor)),
            **({"local_accuracy_pct": _estimate(estimate(list(mine["final_local_accuracy_pct"]),
                                                         floor=floor))}
               if mine["final_local_accuracy_pct"].notna().all() else {}),
            **({"participation": {c: float(mine[c].mean()) for c in mine.columns
                                  if c in ("clients_per_round", "sampled_per_round") or c.startswith("dropped_")}}
               if "clients_per_round" in mine and mine["clients_per_round"].notna().all() else {}),
            "converged": int(mine["converged"].sum()),
            "end_slope_pts_per_round": _estimate(estimate(list(mine["end_slope_pts_per_round"])))
            if "end_slope_pts_per_round" in mine and mine["end_slope_pts_per_round"].notna().all() else None,
            "rising_at_high_rate": int((mine["high_rate_verdict"] == "rising").sum()),
            "bytes": float(mine["bytes"].mean()),
            "bytes_vs_base": float(mine["bytes"].mean()) / base_bytes if base_bytes else None,
            "verdicts": {str(k): int(v) for k, v in mine["verdict"].value_counts().items()}}


FAMILIES = {**compare.CELL_FAMILIES, "compare": "difference_pct"}
"""The families of comparisons a report corrects together, one per table of paired differences
(against the base method; against FP32; the local test mode against the base method; the study's
``compare`` pairs), and the key each is recorded under."""


def pairs(study: Study, runs_df: pd.DataFrame, images: ImagesByCell | None = None) -> list[dict[str, Any]]:
    """The study's ``compare`` pairs (a - b, paired over their common seeds) per model and setting,
    their spread floored at one test sample; verdicts follow ``decide`` (one family)."""
    out = []
    for model in study.models:
        for setting in study.settings:
            for a, b in study.compare:
                fa, fb = _finals(runs_df, model, setting, a), _finals(runs_df, model, setting, b)
                if not set(fa) & set(fb):
                    continue
                here = runs_df[(runs_df["model"] == model) & (runs_df["setting"] == setting.label)]
                floor = resolution_pts(int(here["test_samples"].max()))
                ka, kb = (setting.label, a), (setting.label, b)
                out.append({"model": model, "setting": setting.label, "a": a, "b": b,
                            "difference_pct": compare.comparison(fa, fb, floor, rules(study), "compare",
                                                                 _operands(model, ka, kb),
                                                                 _pair_images(images or {}, model, ka, kb))})
    return decide(study, out)


def _pair_images(images: ImagesByCell, model: str, a: tuple[str, str], b: tuple[str, str]) -> compare.Images | None:
    """a's and b's right-or-wrong per test image by seed, or None when either side recorded none."""
    ia, ib = images.get((model, *a)), images.get((model, *b))
    return (ia, ib) if ia and ib else None


def rules(study: Study) -> compare.Rules:
    """What the study declares about its comparisons (``bench.lib.study.compare.Rules``)."""
    return compare.Rules(study.equivalence_margin_pts, study.correction, study.power, study.primary_test)


def _operands(model: str, a: tuple[str, str], b: tuple[str, str], accuracy: str = "final") -> dict[str, Any]:
    """What a comparison compares: (setting, method) of a and b, the accuracy (final test, or the local test mode's)."""
    return {"model": model, "a": {"setting": a[0], "method": a[1]}, "b": {"setting": b[0], "method": b[1]},
            "accuracy": accuracy}


def decide(study: Study, cells_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each family's p-values adjusted together (the study's ``[verdicts] correction``, ``FAMILIES``)
    and each comparison's verdict from its primary test's adjusted ones (``bench.lib.study.compare``)."""
    for key in FAMILIES.values():
        compare.adjust_family([c[key] for c in cells_ if key in c], rules(study))
    return cells_


def _tta_cell(tta_df: pd.DataFrame, model: str, setting: str, method: str) -> list[dict[str, Any]]:
    if not len(tta_df):
        return []
    mine = tta_df[(tta_df["model"] == model) & (tta_df["setting"] == setting) & (tta_df["method"] == method)]
    out = []
    for (pct, source), group in mine.groupby(["target_pct", "target_source"], sort=False):
        entry = {"target_pct": float(pct), "source": source}
        for key in ("round", *(name for name, _ in COST_KEYS)):
            s = spread([None if pd.isna(v) else float(v) for v in group[key]])
            entry[key] = {"median": s.median, "min": s.low, "max": s.high}
            entry["reached"], entry["of"] = s.reached, s.of
        out.append(entry)
    return out


def _estimate(e: Estimate) -> dict[str, Any]:
    return e.record()

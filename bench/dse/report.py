"""What ``python -m bench.dse`` prints and writes beside points.csv: pareto.csv, the best point per
method and objective, whether the best design changes with the FL method, and summary.json."""

from __future__ import annotations

import functools

import pandas as pd

from accel_sim.space import NUMBER_FORMAT
from bench.dse.explore import OBJECTIVE_PAIRS, OBJECTIVES, Exploration
from bench.dse.spec import Dse

COMPARED = (("fedavg", "spherefed"), ("ccvr", "ffc"))
"""The paper's two comparisons: the frozen classifier's training step, and the two calibrations."""
UNITS = {"step_latency_s": ("ms", 1e3), "step_energy_j": ("mJ", 1e3), "asic_area_mm2": ("mm²", 1.0)}


def pareto_table(dse: Dse, found: Exploration) -> pd.DataFrame:
    """Every front point, labelled with its objective pair."""
    frames = [found.front(model, method, pair).assign(objectives=f"{pair[0]} vs {pair[1]}")
              for model in dse.models for method in dse.methods for pair in OBJECTIVE_PAIRS]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def design(dse: Dse, row: pd.Series) -> str:
    """A point as its axes' values, e.g. ``rows=32 cols=64 number_format=bfp_m4_g16``."""
    paths = [a.path for a in dse.space.axes if a.path != NUMBER_FORMAT] + [NUMBER_FORMAT]
    return " ".join(f"{p}={_shown(row[p])}" for p in paths)


def design_of_point(dse: Dse, index: int) -> str:
    """Grid point ``index`` as ``design`` shows a row."""
    hw, fmt = dse.space.point(index)
    values = {a.path: functools.reduce(getattr, a.path.split("."), hw) for a in dse.space.axes if a.path != NUMBER_FORMAT}
    return design(dse, pd.Series({**values, NUMBER_FORMAT: fmt.name}))


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def best_points(dse: Dse, found: Exploration) -> list[dict]:
    """The fitting point with the least of each objective, per model and method."""
    out = []
    for model in dse.models:
        for method in dse.methods:
            for objective in OBJECTIVES:
                row = found.best(model, method, objective)
                if row is not None:
                    out.append({"model": model, "method": method, "objective": objective, "point": int(row["point"]),
                                "design": design(dse, row), "value": float(row[objective]),
                                "step_latency_s": float(row["step_latency_s"]),
                                "step_energy_j": float(row["step_energy_j"]),
                                "asic_area_mm2": float(row["asic_area_mm2"]),
                                "limiting_resource": str(row["limiting_resource"])})
    return out


def same_best(best: list[dict]) -> list[dict]:
    """For FedAvg vs SphereFed and CCVR vs FFC: is the best point the same, per model and objective?"""
    at = {(b["model"], b["method"], b["objective"]): b for b in best}
    out = []
    for model in sorted({b["model"] for b in best}):
        for a, b in COMPARED:
            for objective in OBJECTIVES:
                x, y = at.get((model, a, objective)), at.get((model, b, objective))
                if x and y:
                    out.append({"model": model, "methods": [a, b], "objective": objective,
                                "same_point": x["point"] == y["point"], "points": [x["point"], y["point"]]})
    return out


def printout(dse: Dse, found: Exploration, best: list[dict], compared: list[dict]) -> list[str]:
    lines = [f"{dse.name}: {found.points:,} points x {len(dse.models) * len(dse.methods)} model-method pair(s) priced "
             f"in {found.pricing_s:.2f} s; {found.fitting:,} fit {dse.device.name} ({dse.device.board})"
             + (f"; {found.beyond_fold_model:,} beyond the fold model, skipped" if found.beyond_fold_model else "")]
    if not found.fitting:
        lines.append("no point fits the device: no Pareto front (try number_format = [\"bfp_m4_g16\"] or smaller "
                     "arrays and buffers; docs/dse.md)")
        return lines
    lines.append(f"{'model':<12} {'method':<10} {'best for':<15} {'point':>8}  {'latency':>10} {'energy':>10} "
                 f"{'area':>9}  design")
    for b in best:
        lines.append(f"{b['model']:<12} {b['method']:<10} {b['objective']:<15} {b['point']:>8}  "
                     f"{b['step_latency_s'] * 1e3:>7.2f} ms {b['step_energy_j'] * 1e3:>7.1f} mJ "
                     f"{b['asic_area_mm2']:>6.2f} mm²  {b['design']}")
    for c in compared:
        verdict = "the same point" if c["same_point"] else f"different points ({c['points'][0]} vs {c['points'][1]})"
        lines.append(f"{c['model']}: best {c['objective']} for {c['methods'][0]} and {c['methods'][1]}: {verdict}")
    return lines

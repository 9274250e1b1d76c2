"""The fleet answer of a study with ``fleets`` (and ``deadlines_s``): per model, fleet and method,
each deadline's participation, final accuracy against the every-client run, and time, energy and
bytes to each declared target over the seeds; and the deadline that minimizes time-to-accuracy
(docs/fleets.md, "Which deadline minimizes time-to-accuracy").

The rule, fixed before any run:

* A deadline is a *candidate* for a target when every seed reached the target at it (a mean over
  the seeds that happened to reach it would favour a deadline that often fails).
* The *choice* is the candidate with the smallest mean modeled wall time to the target.
* Against each other deadline, the paired difference of the wall time (that deadline's minus the
  choice's, over the seeds both reached the target in; the same seeds give the same clients,
  classes and availability at every deadline) with its 95 % Student-t interval
  (``bench.lib.study.stats.paired_difference``) and the paired t-test's p-value, adjusted over the
  table's comparisons by the study's ``[verdicts] correction``: the choice is *resolved* against a
  deadline when the difference is above 0 and the adjusted p is below 0.05. Three seeds resolve
  large gaps only.
* Accuracy against every client: the paired difference of the final test accuracy, the fleet's
  run minus the same method and seed with every sampled client taking part (``Setting.tuned_on``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from bench.lib.study.spec import Setting, Study
from bench.lib.study.stats import adjusted, difference_p, estimate, paired_difference, resolution_pts
from bench.lib.study.verdicts import ALPHA

DECLARED = "declared in the study file"


def fleet_groups(study: Study) -> dict[Setting, list[Setting]]:
    """Each fleet setting at its file's deadline -> the study's settings on it (one per deadline)."""
    groups: dict[Setting, list[Setting]] = {}
    for s in study.settings:
        if s.fleet is not None:
            groups.setdefault(s.without_deadline_axis, []).append(s)
    return groups


def deadline_s(setting: Setting) -> float:
    """The deadline a fleet setting's rounds ran with: the study's ``deadlines_s`` value, else its file's."""
    if setting.deadline_s is not None:
        return setting.deadline_s
    from workloads.cost.fleet import load_fleet

    return load_fleet(setting.fleet).deadline_s


def by_seed(df: pd.DataFrame, column: str) -> dict[int, float]:
    """seed -> ``column`` of a table of runs, the seeds without a value left out."""
    return {int(s): float(v) for s, v in zip(df["seed"], df[column]) if not pd.isna(v)}


def _estimate(values: Sequence[float], floor: float = 0.0) -> dict[str, Any] | None:
    return estimate(values, floor=floor).record() if values else None


def _difference(a: Mapping[int, float], b: Mapping[int, float], floor: float) -> dict[str, Any] | None:
    """An accuracy difference, its spread floored at one test sample (``stats.resolution_pts``), with
    the paired t-test's p-value (adjusted with its table by ``_correct``)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    d = estimate([a[s] - b[s] for s in seeds], floor=floor)
    return {**d.record(), "p": difference_p(d)}


def fleet_answers(study: Study, runs_df: pd.DataFrame, tta_df: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per (model, fleet, method, declared target): its deadlines' rows, the choice and
    the verdicts (module doc); [] for a study without fleets."""
    if not len(runs_df):
        return []
    out = []
    for model in study.models:
        for group, settings in fleet_groups(study).items():
            for method in study.methods:
                def rows(setting: Setting, frame: pd.DataFrame) -> pd.DataFrame:
                    return frame[(frame["model"] == model) & (frame["setting"] == setting.label)
                                 & (frame["method"] == method)]

                every = by_seed(rows(group.tuned_on, runs_df), "final_accuracy_pct")
                for target in study.targets.accuracy_pct:
                    entry = {"model": model, "fleet": group.label, "method": method, "target_pct": float(target),
                             "deadlines": []}
                    walls: dict[float | str, dict[int, float]] = {}  # deadline (as recorded) -> seed -> s
                    for setting in settings:
                        mine = rows(setting, runs_df)
                        if not len(mine):
                            continue
                        reach = rows(setting, tta_df)
                        reach = reach[(reach["target_pct"] == target) & (reach["target_source"] == DECLARED)]
                        hit = reach[reach["reached"].astype(bool)]
                        d = deadline_s(setting)
                        d = "inf" if math.isinf(d) else d  # JSON has no infinity
                        walls[d] = by_seed(hit, "wall_s")
                        final = by_seed(mine, "final_accuracy_pct")
                        floor = resolution_pts(int(mine["test_samples"].max()))
                        entry["deadlines"].append({
                            "deadline_s": d, "setting": setting.label,
                            "seeds": len(mine), "reached": len(hit),
                            "clients_per_round": float(mine["clients_per_round"].mean())
                            if "clients_per_round" in mine else None,
                            "sampled_per_round": float(mine["sampled_per_round"].mean())
                            if "sampled_per_round" in mine else None,
                            "final_accuracy_pct": _estimate(list(final.values()), floor),
                            "final_vs_every_client_pct": _difference(final, every, floor),
                            **{key: _estimate([float(v) for v in hit[key]]) for key in ("wall_s", "energy_j", "bytes")}})
                    if entry["deadlines"]:
                        entry.update(_choice(entry["deadlines"], walls))
                        out.append(entry)
    _correct(study, out)
    return out


def _correct(study: Study, answers: list[dict[str, Any]]) -> None:
    """The table's "resolved" claims as one family (module doc): each p adjusted by the study's correction."""
    rows = [r for a in answers for r in a["deadlines"] if "wall_s_vs_choice" in r]
    for r, q in zip(rows, adjusted([r["wall_s_vs_choice"]["p"] for r in rows], study.correction)):
        r["wall_s_vs_choice"]["p_adjusted"] = q
        r["choice_resolved"] = r["wall_s_vs_choice"]["mean"] > 0 and q < ALPHA
    # an accuracy difference is one comparison however many targets repeat its row
    accuracy = {(a["model"], a["fleet"], a["method"], r["deadline_s"]): r["final_vs_every_client_pct"]
                for a in answers for r in a["deadlines"] if r["final_vs_every_client_pct"] is not None}
    keys = list(accuracy)
    for key, q in zip(keys, adjusted([accuracy[k]["p"] for k in keys], study.correction)):
        q = None if math.isnan(q) else q
        for a in answers:
            for r in a["deadlines"]:
                if (a["model"], a["fleet"], a["method"], r["deadline_s"]) == key:
                    r["final_vs_every_client_pct"] = {**accuracy[key], "p_adjusted": q,
                                                      "resolved": q is not None and q < ALPHA}


def _choice(rows: list[dict[str, Any]], walls: Mapping[float | str, Mapping[int, float]]) -> dict[str, Any]:
    """The chosen deadline among the candidates and its paired verdict against each other deadline."""
    candidates = [r for r in rows if r["seeds"] and r["reached"] == r["seeds"]]
    if not candidates:
        return {"choice_deadline_s": None}
    best = min(candidates, key=lambda r: r["wall_s"]["mean"])
    mine = walls[best["deadline_s"]]
    for r in rows:
        if r is best:
            continue
        d = walls[r["deadline_s"]]
        if len(set(d) & set(mine)) >= 2:
            diff = paired_difference(d, mine)
            r["wall_s_vs_choice"] = {"n": diff.n, "mean": diff.mean, "ci_low": diff.low, "ci_high": diff.high,
                                     "p": difference_p(diff)}
    return {"choice_deadline_s": best["deadline_s"]}


def _fmt(e: Mapping[str, Any] | None, spec: str = ".3g", scale: float = 1.0, signed: bool = False) -> str:
    """``mean ± std`` (``signed``: ``mean [low, high]``, bold where the interval excludes 0), ``—`` for none."""
    if not e:
        return "—"
    f = lambda v: format(v * scale, ("+" if signed else "") + spec)  # noqa: E731
    if e.get("ci_low") is None:
        return f(e["mean"]) + (" (n=1)" if e["n"] == 1 else "")
    if signed:
        text = f"{f(e['mean'])} [{f(e['ci_low'])}, {f(e['ci_high'])}]"
        return f"**{text}**" if e.get("resolved", e["ci_low"] > 0 or e["ci_high"] < 0) else text
    return f"{f(e['mean'])} ± {f(e['std'])}"


def fleet_markdown(answers: Sequence[Mapping[str, Any]]) -> list[str]:
    """``table.md``'s section of the fleet answers (module doc); [] without fleets."""
    if not answers:
        return []
    lines = ["", "## Fleets: which deadline reaches each target first, and accuracy against every client", "",
             "Per deadline (the study's `deadlines_s`, or the fleet file's): clients aggregated / sampled per round; "
             "final test accuracy (%, mean ± std) and its paired difference against the same method and seeds with "
             "every sampled client [95 % t interval, spread floored at one test sample; bold: resolved, adjusted p < "
             "0.05 with this table's accuracy differences as one family]; modeled wall time, energy and MB to the "
             "target (mean ± std over the seeds that reached it; reached k/n). **Choice**: the smallest mean time "
             "among the deadlines every seed reached the target at; Δ time: that deadline's minus the choice's, "
             "paired [95 % t interval], *resolved* where it is above 0 and its p-value, adjusted with this table's "
             "time differences as one family (the study's `[verdicts] correction`), is below 0.05 "
             "(bench/study/fleets.py).", "",
             "| model | fleet | method | target (%) | deadline (s) | clients / sampled | final acc. | Δ acc. vs every "
             "client | reached | time (s) | Δ time vs choice (s) | energy (J) | MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for a in answers:
        for r in a["deadlines"]:
            chosen = len(a["deadlines"]) > 1 and r["deadline_s"] == a["choice_deadline_s"]
            deadline = f"{r['deadline_s']:g}" if r["deadline_s"] != "inf" else "inf"
            clients = ("—" if r["clients_per_round"] is None or pd.isna(r["clients_per_round"])
                       else f"{r['clients_per_round']:.1f} / {r['sampled_per_round']:.1f}")
            against = r.get("wall_s_vs_choice")
            vs = ("**choice**" if chosen else _fmt(None if against is None else {**against,
                                                                                 "resolved": r["choice_resolved"]},
                                                     signed=True)
                  + ("" if "choice_resolved" not in r else f", adj. p {against['p_adjusted']:.2g}"
                     + (": resolved" if r["choice_resolved"] else ": not resolved")))
            lines.append(f"| {a['model']} | {a['fleet']} | {a['method']} | {a['target_pct']:g} | {deadline} | {clients} | "
                         f"{_fmt(r['final_accuracy_pct'], '.2f')} | "
                         f"{_fmt(r['final_vs_every_client_pct'], '.2f', signed=True)} | {r['reached']}/{r['seeds']} | "
                         f"{_fmt(r['wall_s'])} | {vs} | {_fmt(r['energy_j'])} | {_fmt(r['bytes'], '.4g', 1e-6)} |")
    return lines

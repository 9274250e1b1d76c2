"""An accuracy study's report: its tables, figures and summary, from what its runs left
(``bench.study.phases.StudyRun``); nothing is recomputed but the statistics (docs/study.md).

* ``runs.csv``: one row per evaluation run and method: the chosen hyper-parameters, final and best
  test and validation accuracy, the plateau verdict, the modeled cost totals, the machine;
* ``curves.csv``: one row per evaluation run, method and round;
* ``tuning.csv``: every tried setting on every tuning seed, its validation score, the choice;
* ``tta.csv``: per run, method and target: whether and when it was first reached, at what cost;
* ``table.md``: SphereFed Tab. 2's layout (rows model / method, columns data settings, final test
  accuracy mean ± std, the paired change against the base method in parentheses), then the
  intervals, best accuracy, convergence, time-to-accuracy and the tuning choices;
* ``summary.json``: the resolved study, every cell's statistics, the targets, the git commit of the
  report and of each run, the machines and the wall time;
* ``curves_<model>.png`` (``bench.lib.plots.study``).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from bench.lib.results import FORMAT_NAME, FORMAT_VERSION, write_json
from bench.lib.study.curves import Convergence, base_validation_target, end_slope_pts, first_reaching, judge
from bench.study.fleets import by_seed, fleet_answers, fleet_markdown
from bench.study.phases import Outcome, StudyRun, edge_text
from bench.lib.study.runner import PRICED_KEY, machine_info
from bench.lib.study.spec import Setting, Study
from bench.lib.study import compare, registration, verdicts
from bench.lib.study.stats import Estimate, estimate, resolution_pts, spread
from bench.lib.study.tuning import score
from iokit.files import atomic_write, atomic_write_text

FILES = ("runs.csv", "curves.csv", "tuning.csv", "tta.csv", "table.md", "summary.json")
COST_KEYS = (("wall_s", "cum_wall_s"), ("device_s", "cum_device_s"), ("energy_j", "cum_energy_j"),
             ("bytes", "cum_bytes"))


@dataclass(frozen=True)
class MethodRun:
    """One evaluation run of one method (a calibrated method's run is its training method's, calibrated)."""

    model: str
    setting: Setting
    method: str
    seed: int
    trial: Mapping[str, Any]
    curve: tuple[dict, ...]  # curve.csv rows of this method, round order
    outcome: Outcome

    @property
    def final_pct(self) -> float:
        return 100 * [r["accuracy"] for r in self.curve if r["accuracy"] is not None][-1]

    def _train(self) -> list[dict]:
        return [r for r in self.curve if r["stage"] == "train" and r["accuracy"] is not None]

    @property
    def train_curve_pct(self) -> list[float]:
        return [100 * r["accuracy"] for r in self._train()]

    def convergence(self, study: Study) -> Convergence:
        """Judged on the curve's end; the high-rate part apart (``bench.lib.study.curves.judge``)."""
        p = study.plateau
        return judge(self.train_curve_pct, [r.get("lr") for r in self._train()], p.last_rounds, p.tolerance_pct,
                     p.rate_fraction)

    @property
    def test_samples(self) -> int:
        """The evaluation (test) set's size, from the run's record (one sample: ``resolution_pts``)."""
        n = self.outcome.info.get("test_samples")
        if not n:
            raise ValueError(f"run {self.outcome.run_id}: its run.json records no test_samples; a report needs the "
                             "test set's size for the resolution of its accuracies (rerun the run)")
        return int(n)


@dataclass(frozen=True)
class Target:
    pct: float
    source: str


def method_runs(study: Study, run: StudyRun) -> list[MethodRun]:
    """Every finished evaluation run, once per method it gives."""
    out = []
    for o in run.evaluation:
        if o.status != "done":
            continue
        p = o.planned
        for method in study.labels(p.training):
            out.append(MethodRun(p.model, p.setting, method, p.seed, p.trial, tuple(o.label_curve(method)), o))
    return out


def targets(study: Study, runs: Sequence[MethodRun], model: str, setting: Setting) -> list[Target]:
    """The study's declared targets, and the one derived from the base method's validation curves."""
    out = [Target(p, "declared in the study file") for p in study.targets.accuracy_pct]
    fraction = study.targets.base_validation_fraction
    if fraction is not None:
        base = [r for r in runs if (r.model, r.setting, r.method) == (model, setting, study.base)]
        curves = [[100 * row["val_accuracy"] for row in r.curve if row["val_accuracy"] is not None] for r in base]
        if base and all(curves):
            pct = base_validation_target(curves, fraction)
            out.append(Target(pct, f"{100 * fraction:g} % of {study.base}'s best mean validation accuracy"))
    return out


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value


def runs_table(study: Study, runs: Sequence[MethodRun]) -> pd.DataFrame:
    keys = _search_keys(study)
    rows = []
    for r in runs:
        acc = [row["accuracy"] for row in r.curve if row["accuracy"] is not None]
        val = [row["val_accuracy"] for row in r.curve if row["val_accuracy"] is not None]
        best_round = max((row for row in r.curve if row["accuracy"] is not None), key=lambda x: x["accuracy"])["round"]
        c = r.convergence(study)
        v, early = c.end, c.high_rate
        last = r.curve[-1]
        machine = r.outcome.info.get("machine", {})
        rows.append({"model": r.model, "setting": r.setting.label, "number_format": r.setting.number_format,
                     "method": r.method, "seed": r.seed, **{k: r.trial.get(k) for k in keys},
                     "final_accuracy_pct": 100 * acc[-1], "best_accuracy_pct": 100 * max(acc), "best_round": best_round,
                     "final_local_accuracy_pct": _pct(r.outcome.info.get(
                         "local_accuracy" if r.method == r.outcome.planned.config["method"]
                         else "local_accuracy_before_calibration")),
                     "final_val_accuracy_pct": _pct(val[-1] if val else None),
                     "best_val_accuracy_pct": _pct(max(val) if val else None),
                     "verdict": v.verdict, "converged": v.converged, "gain_pct": v.gain_pct, "spread_pct": v.spread_pct,
                     "high_rate_verdict": None if early is None else early.verdict,
                     "end_slope_pts_per_round": end_slope_pts(r.train_curve_pct, 2 * study.plateau.last_rounds),
                     "test_samples": r.test_samples,
                     "rounds": study.rounds, **{name: last[col] for name, col in COST_KEYS},
                     "run_wall_s": r.outcome.elapsed_s, "cpu": machine.get("cpu"), "host": machine.get("host"),
                     "torch_threads": machine.get("torch_threads"), **provenance(r.outcome),
                     "run_id": r.outcome.run_id, **participation_columns(r.outcome.info.get("participation"))})
    return pd.DataFrame(rows)


def participation_columns(plan: Mapping[str, Sequence] | None) -> dict[str, float]:
    """A fleet run's participation (``run.json``, docs/fleets.md) as ``runs.csv`` columns: clients
    aggregated and sampled per training round (mean over the rounds), the sampled clients dropped
    over the run by reason; none for a run without a fleet (so a study without fleets keeps its columns)."""
    if not plan:
        return {}
    rounds = len(plan["clients"])
    return {"clients_per_round": sum(plan["clients"]) / rounds, "sampled_per_round": sum(plan["sampled"]) / rounds,
            **{key: sum(values) for key, values in plan.items() if key.startswith("dropped_")}}


def _participation(p: Mapping[str, float]) -> str:
    drops = ", ".join(f"{k.removeprefix('dropped_')} {v:.1f}" for k, v in p.items() if k.startswith("dropped_") and v)
    return f"{p['clients_per_round']:.1f} / {p['sampled_per_round']:.1f}" + (f"; {drops}" if drops else "")


def provenance(o: Outcome) -> dict[str, Any]:
    """Where one run came from: the commit of the code that ran it as recorded (``iokit.provenance``:
    with "-dirty" when its tree had changes) and that flag on its own (empty: recorded before runs
    recorded it), the CPU kernels it computed with (instruction set,
    threads, the variables that choose them; empty: not recorded) and the machine."""
    commit = o.git_commit or ""
    kernels = o.info.get("machine", {}).get("kernels")
    return {"git_commit": commit, "git_dirty": commit.endswith("-dirty") if commit else None,
            "kernels": json.dumps(kernels, sort_keys=True) if kernels else ""}


def missing_provenance(run: StudyRun) -> dict[str, list[str]]:
    """The finished runs whose record lacks the commit, or the kernels (run ids, sorted)."""
    done = finished(run)
    return {"git_commit": sorted(o.run_id for o in done if not o.git_commit),
            "kernels": sorted(o.run_id for o in done if not o.info.get("machine", {}).get("kernels"))}


def curves_table(runs: Sequence[MethodRun]) -> pd.DataFrame:
    rows = [{"model": r.model, "setting": r.setting.label, "number_format": r.setting.number_format,
             "method": r.method, "seed": r.seed, "round": row["round"],
             "stage": row["stage"], "lr": row["lr"], "mean_loss": row["mean_loss"],
             "accuracy_pct": _pct(row["accuracy"]), "val_accuracy_pct": _pct(row["val_accuracy"]),
             **{col: row[col] for _, col in COST_KEYS}}
            for r in runs for row in r.curve]
    return pd.DataFrame(rows)


def tuning_table(study: Study, run: StudyRun) -> pd.DataFrame:
    keys = _search_keys(study)
    rows = []
    for o in run.tuning:
        p = o.planned
        choice = run.choices[(p.model, p.setting.label, p.training)]
        curve = o.label_curve(p.training) if o.status == "done" else []
        train = [row for row in curve if row["stage"] == "train"]
        trial_score = next((s.score_pct for s in choice.scores if dict(s.trial) == dict(p.trial)), None)
        rows.append({"model": p.model, "setting": p.setting.label, "method": p.training,
                     **{k: p.trial.get(k) for k in keys}, "seed": p.seed, "status": o.status,
                     "val_score_pct": score(curve, study.tuning_last_rounds) if curve else None,
                     "final_val_accuracy_pct": _pct(train[-1]["val_accuracy"]) if train else None,
                     "final_test_accuracy_pct_not_used": _pct(train[-1]["accuracy"]) if train else None,
                     "trial_score_pct": trial_score, "chosen": choice.trial is not None and dict(choice.trial) == dict(p.trial),
                     "at_grid_edge": ",".join(choice.at_edge) if choice.trial is not None
                     and dict(choice.trial) == dict(p.trial) else "", "error": o.error})
    return pd.DataFrame(rows)


def tta_table(study: Study, runs: Sequence[MethodRun]) -> pd.DataFrame:
    rows = []
    for model in study.models:
        for setting in study.settings:
            for target in targets(study, runs, model, setting):
                for r in runs:
                    if (r.model, r.setting) != (model, setting):
                        continue
                    reach = first_reaching(r.curve, target.pct)
                    rows.append({"model": model, "setting": setting.label, "number_format": setting.number_format,
                                 "method": r.method, "seed": r.seed,
                                 "target_pct": target.pct, "target_source": target.source, "reached": reach is not None,
                                 "round": None if reach is None else reach.round,
                                 **{name: None if reach is None else getattr(reach, name) for name, _ in COST_KEYS}})
    return pd.DataFrame(rows, columns=["model", "setting", "number_format", "method", "seed", "target_pct", "target_source", "reached",
                                       "round", *(name for name, _ in COST_KEYS)])


def _finals(runs_df: pd.DataFrame, model: str, setting: Setting, method: str) -> dict[int, float]:
    """seed -> final test accuracy (%) of one cell's evaluation runs."""
    if not len(runs_df):
        return {}
    mine = runs_df[(runs_df["model"] == model) & (runs_df["setting"] == setting.label) & (runs_df["method"] == method)]
    return dict(zip(mine["seed"], mine["final_accuracy_pct"]))


def cells(study: Study, runs_df: pd.DataFrame, tta_df: pd.DataFrame) -> list[dict[str, Any]]:
    """Every (model, setting, method)'s statistics over its evaluation seeds, each spread floored at
    one test sample (``stats.resolution_pts``); the paired difference against the base method and, in
    a number format other than FP32, against the same method and seeds in FP32, each with its raw
    p-values; then each family's p-values adjusted and the verdicts (``decide``)."""
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
                        "seeds": sorted(int(s) for s in mine["seed"]), "test_samples": samples,
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
                local = by_seed(mine, "final_local_accuracy_pct")
                base_local = by_seed(base, "final_local_accuracy_pct") if len(base) else {}
                mine_key, base_key = (setting.label, method), (setting.label, study.base)
                if method != study.base and len(set(local) & set(base_local)) >= 2:  # paired as the global one
                    cell["local_difference_vs_base_pct"] = compare.comparison(
                        local, base_local, floor, rules(study), "local", _operands(model, mine_key, base_key, "local"))
                if method != study.base and base_final and set(final) & set(base_final):
                    cell["paired_difference_vs_base_pct"] = compare.comparison(
                        final, base_final, floor, rules(study), "base", _operands(model, mine_key, base_key))
                cell["number_format"] = setting.number_format
                fp32 = _finals(runs_df, model, setting.in_fp32, method) if setting.number_format != "fp32" else {}
                if set(final) & set(fp32):
                    cell["paired_difference_vs_fp32_pct"] = compare.comparison(
                        final, fp32, floor, rules(study), "fp32", _operands(model, mine_key, (setting.in_fp32.label, method)))
                cell["time_to_accuracy"] = _tta_cell(tta_df, model, setting.label, method)
                out.append(cell)
    return decide(study, out)


FAMILIES = {"base": "paired_difference_vs_base_pct", "fp32": "paired_difference_vs_fp32_pct",
            "local": "local_difference_vs_base_pct", "compare": "difference_pct"}
"""The families of comparisons a report corrects together, one per table of paired differences
(against the base method; against FP32; the local test mode against the base method; the study's
``compare`` pairs), and the key each is recorded under."""


def pairs(study: Study, runs_df: pd.DataFrame) -> list[dict[str, Any]]:
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
                out.append({"model": model, "setting": setting.label, "a": a, "b": b,
                            "difference_pct": compare.comparison(fa, fb, floor, rules(study), "compare",
                                                                 _operands(model, (setting.label, a), (setting.label, b)))})
    return decide(study, out)


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


def _search_keys(study: Study) -> list[str]:
    return list(dict.fromkeys(k for space in study.search.values() for k in space))


# ----------------------------------------------------------------------------- table.md


def _cell_text(cell: Mapping[str, Any], study: Study) -> str:
    if not cell.get("n"):
        return "—"
    f = cell["final_accuracy_pct"]
    text = f"{f['mean']:.2f}" + (f" ± {f['std']:.2f}" if f["std"] is not None else "")
    d = cell.get("paired_difference_vs_base_pct")
    if d is not None:
        text += f" ({'↑' if d['mean'] >= 0 else '↓'} {abs(d['mean']):.2f})"
    if cell["converged"] < cell["n"]:
        text += " †"
    return text


def _grid(study: Study, cells_: Sequence[Mapping[str, Any]], text,
          settings: Sequence[Setting] | None = None) -> list[str]:
    """Rows model / method, a column per setting (default: the study's), each cell ``text(cell)``."""
    settings = study.settings if settings is None else settings
    by = {(c["model"], c["setting"], c["method"]): c for c in cells_}
    lines = ["| model | method | " + " | ".join(s.title for s in settings) + " |", "|---|---|" + "---|" * len(settings)]
    for model in study.models:
        for i, method in enumerate(study.methods):
            values = [text(by[(model, s.label, method)]) for s in settings]
            lines.append(f"| {model if i == 0 else ''} | {method} | " + " | ".join(values) + " |")
    return lines


def _interval(e: Mapping[str, Any] | None, signed: bool = False, bold: bool = False) -> str:
    if not e:
        return "—"
    fmt = "{:+.2f}" if signed else "{:.2f}"
    if e["ci_low"] is None:
        return fmt.format(e["mean"]) + " (n=1)"
    text = f"{fmt.format(e['mean'])} [{fmt.format(e['ci_low'])}, {fmt.format(e['ci_high'])}]"
    return f"**{text}**" if bold else text


def _median_range(entry: Mapping[str, Any], key: str, scale: float = 1.0, digits: int = 3) -> str:
    v = entry[key]
    if v["median"] is None:
        return "—"
    fmt = lambda x: f"{x * scale:.{digits}g}"  # noqa: E731
    return f"{fmt(v['median'])} [{fmt(v['min'])}–{fmt(v['max'])}]"


def table_markdown(study: Study, summary: Mapping[str, Any]) -> str:
    cells_ = summary["cells"]
    s = summary["study"]
    n_seeds = len(s["seeds"])
    lines = [f"# Accuracy study `{study.name}`", "",
             f"{summary['setting_note']}; {s['rounds']} rounds, {s['holdout_fraction']:g} validation hold-out, "
             f"evaluation seeds {s['seeds']}, tuning seeds {s['tuning_seeds']}. Report written at commit "
             f"{summary['git_commit']}; runs by commit: {_commits_text(summary['run_commits'])}; "
             + (f"their cost columns re-priced (`--reprice`) by commit: {_commits_text(summary['repriced_commits'])}; "
                if summary.get("repriced_commits") else "")
             + f"{summary['wall']['text']}.", "",
             f"## Final test accuracy (%), mean ± std over {_seeds_text(cells_, n_seeds)} (SphereFed Tab. 2 layout)",
             "",
             f"In parentheses: the mean paired change against {study.base} (same seeds: same partition, same initial "
             "weights); the next table says whether the seeds resolve it. †: not every seed's curve converged at its "
             f"end (the plateau rule: the last {study.plateau.last_rounds} rounds' mean within "
             f"{study.plateau.tolerance_pct:g} point(s) of the {study.plateau.last_rounds} before, and within "
             f"{2 * study.plateau.tolerance_pct:g} of each other; docs/study.md).", ""]
    lines += _grid(study, cells_, lambda c: _cell_text(c, study))
    m = f"{study.equivalence_margin_pts:g}"
    lines += ["", f"## Paired difference against {study.base} (points): mean [95 % Student-t interval], verdict", "",
              _verdict_rule(study), ""]
    lines += _grid(study, cells_, lambda c: "—" if c.get("method") == study.base or not c.get("n")
                   else _comparison_text(c.get("paired_difference_vs_base_pct")))
    if summary.get("pairs"):
        lines += ["", "## The study's other comparisons (`compare`), a - b (points)", "", _verdict_rule(study), "",
                  "| model | setting | a - b | difference |", "|---|---|---|---|"]
        lines += [f"| {p['model']} | {p['setting']} | {p['a']} - {p['b']} | {_comparison_text(p['difference_pct'])} |"
                  for p in summary["pairs"]]
    lines += ["", "## Final test accuracy (%): mean [95 % Student-t interval]", ""]
    lines += _grid(study, cells_, lambda c: _interval(c.get("final_accuracy_pct")) if c.get("n") else "—")
    if any("local_accuracy_pct" in c for c in cells_):
        lines += ["", "## Local test accuracy (%), mean ± std: the local test mode", "",
                  "Each client's model on the test samples of the classes it holds (Li et al., \"More "
                  "Industry-friendly\", Sec. 4.1), averaged over the clients: the global model for a method "
                  "without local parts; the double head's, the global weights with the client's own local head "
                  "and unshared layers predicting by both heads, over the clients that trained (docs/study.md); "
                  "— where the runs predate its record. In parentheses: the paired difference against "
                  f"{study.base}'s local test accuracy on the same seeds, its verdict (this table's comparisons are "
                  "one family, corrected as the others).", ""]
        lines += _grid(study, cells_,
                       lambda c: (_mean_std(c["local_accuracy_pct"]) if "local_accuracy_pct" in c else "—")
                       + (f" ({_comparison_text(c['local_difference_vs_base_pct'], short=True)} vs {study.base})"
                          if "local_difference_vs_base_pct" in c else ""))
    if any("participation" in c for c in cells_):
        lines += ["", "## Participation on a fleet: clients aggregated / sampled per round; drops per run by reason", "",
                  "Mean over the training rounds and the seeds; drops summed over a run's rounds, mean over seeds "
                  "(unavailable, memory, deadline, surplus: docs/fleets.md); — without a fleet (every sampled "
                  "client aggregated).", ""]
        lines += _grid(study, cells_, lambda c: "—" if "participation" not in c else _participation(c["participation"]))
    lines += fleet_markdown(summary.get("fleets", []))
    lines += ["", f"## Communication: bytes exchanged per run (MB, modeled, mean over seeds), × {study.base}'s", ""]
    lines += _grid(study, cells_, lambda c: "—" if not c.get("n") else f"{c['bytes'] / 1e6:.1f}"
                   + (f" (× {c['bytes_vs_base']:.3f})" if c.get("bytes_vs_base") is not None else ""))
    lines += ["", "## Best test accuracy over the rounds (%), mean ± std", ""]
    lines += _grid(study, cells_, lambda c: "—" if not c.get("n") else f"{c['best_accuracy_pct']['mean']:.2f}"
                   + (f" ± {c['best_accuracy_pct']['std']:.2f}" if c['best_accuracy_pct']['std'] is not None else ""))
    lines += ["", "## Convergence at the curve's end; still learning while the rate was high", "",
              "Seeds whose curve converged at its end (the plateau rule on its last rounds; other verdicts in "
              "parentheses), then the seeds whose curve was still rising over the rounds run at >= "
              f"{100 * study.plateau.rate_fraction:g} % of the peak learning rate (`high_rate_verdict` in runs.csv): "
              "a curve can do both, learning while its steps were large and flat at its end; then the least-squares slope "
              f"of each seed's last {2 * study.plateau.last_rounds} rounds, mean [95 % t interval] over the seeds "
              "(docs/study.md).", ""]
    lines += _grid(study, cells_, lambda c: "—" if not c.get("n") else f"{c['converged']}/{c['n']}" + (
        " (" + ", ".join(f"{k} {v}" for k, v in c["verdicts"].items() if k != "converged") + ")"
        if c["converged"] < c["n"] else "") + f"; rising at a high rate {c['rising_at_high_rate']}/{c['n']}"
        + (f"; slope of the last {2 * study.plateau.last_rounds} rounds {_interval(c['end_slope_pts_per_round'], signed=True)} "
           "points/round" if c.get("end_slope_pts_per_round") else ""))
    formats = [s for s in study.settings if s.number_format != "fp32"]
    if formats:
        lines += ["", "## Number formats: paired difference against FP32 (points), mean [95 % Student-t interval]", "",
                  "The same method, seeds and hyper-parameters (tuned in FP32) trained with every GEMM operand rounded "
                  "to the format (docs/numerics.md). " + _verdict_rule(study), ""]
        lines += _grid(study, cells_, lambda c: _comparison_text(c.get("paired_difference_vs_fp32_pct")), formats)
    lines += _seed_plan_lines(study, summary.get("seed_plans", []), cells_)
    lines += ["", "## Provenance", ""] + _provenance_lines(summary) + _plan_lines(summary)
    lines += ["", "## Time to accuracy: median [range] over seeds, modeled", "",
              "Targets fixed before the run (declared in the study file) or derived from the base method's "
              "validation curves only; a calibrated method's curve ends with its calibration. Wall time: the "
              "synchronous rounds on the default system model (links and devices, docs/rounds.md)"
              + ("; a fleet setting's, its rounds with a deadline on its own devices and links (docs/fleets.md)."
                 if any(s.fleet is not None for s in study.settings) else "."), "",
              "| model | setting | method | target (%) | reached | round | wall time (s) | energy (J) | MB |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in cells_:
        for t in c.get("time_to_accuracy", []):
            lines.append(f"| {c['model']} | {c['setting']} | {c['method']} | {t['target_pct']:.2f} | "
                         f"{t['reached']}/{t['of']} | {_median_range(t, 'round')} | {_median_range(t, 'wall_s')} | "
                         f"{_median_range(t, 'energy_j')} | {_median_range(t, 'bytes', 1e-6)} |")
    lines += ["", "Target sources: " + "; ".join(sorted({f"{t['target_pct']:.2f} %: {t['source']}"
                                                          for c in cells_ for t in c.get("time_to_accuracy", [])})), "",
              "## Tuning (validation only)", "",
              f"Score: mean validation accuracy of the last {study.tuning_last_rounds} rounds, averaged over the tuning "
              "seeds; the highest wins; equal scores" + (" and scores within one validation sample" if
                                                         study.near_tie == "centre" else "")
              + " tie, and a tie goes to the value nearest the centre of the values tried, then the smaller (never "
              "the grid's order). Decisive by: the choice's score minus the best other trial's, in validation "
              "samples; under 1, one validation sample decides it: a tie, not a win (docs/study.md, \"Tuning\"). "
              "A calibrated method takes its training method's "
              f"choice. A choice at the smallest or largest value tried extends the grid on that side, one geometric "
              f"step (the grid's own ratio there) at a time, up to {study.extend_steps} value(s) beyond the study "
              "file's grid (`[tuning] extend_steps`), until it is interior; each choice says which.", "",
              "| model | setting | method | chosen | validation score (%) | decisive by | every trial (score %) |",
              "|---|---|---|---|---|---|---|"]
    for ch in summary["choices"]:
        trials = "; ".join(f"{_values(t['trial'])}: " + ("failed" if t["score_pct"] is None else f"{t['score_pct']:.2f}")
                           for t in ch["scores"])
        chosen = "none (every trial failed)" if ch["trial"] is None else _values(ch["trial"]) + "".join(
            f"; {e['key']} {edge_text(e)}" for e in ch.get("extension", []))
        score_text = "—" if ch["score_pct"] is None else f"{ch['score_pct']:.2f}"
        lines.append(f"| {ch['model']} | {ch['setting']} | {ch['method']} | {chosen} | {score_text} | "
                     f"{_decisive_text(ch)} | {trials} |")
    return "\n".join(lines) + "\n"


def _verdict_rule(study: Study) -> str:
    m = f"{study.equivalence_margin_pts:g}"
    correction = {"holm": "Holm's step-down correction (family-wise error)",
                  "bh": "the Benjamini-Hochberg correction (false discovery rate)", "none": "no correction"}
    primary = compare.TEST_NAMES[study.primary_test]
    return (f"Each comparison is tested by the exact sign-flip permutation test and by the paired t-test (spread "
            f"floored at one test sample, 100 / N points); every p-value is adjusted for the table's family of "
            f"comparisons by {correction[study.correction]} (`[verdicts] correction`), and the words follow the "
            f"adjusted p-values of the study's primary test, the {primary} (`[verdicts] primary_test`), at α = 0.05: "
            f"\"different\" (bold), \"equivalent within ± {m}\" (the two one-sided tests against ± {m} point(s)), "
            f"both, or \"not resolved with n seeds\"; beside each word the adjusted p that carries it, and where the "
            f"other test's word differs, that word and its p. SW: the Shapiro-Wilk p of the paired differences (small: "
            f"not normal, the t-test's assumption fails). MDD: the smallest true difference these seeds detect "
            f"with {100 * study.power:g} % power (t-test); for ± {m}: the seeds an equivalence within ± {m} needs "
            "at this spread. Scope: the intervals and tests are over seeds on one fixed test set; the test images' "
            "sampling is not in them, and no images × seeds bootstrap is given because the runs record no per-image "
            "correctness (docs/study.md, \"Verdicts\").")


def _comparison_text(e: Mapping[str, Any] | None, short: bool = False) -> str:
    """A paired difference with its interval, the verdict with the adjusted p that carries it (and the
    other test's word where it differs), the normality diagnostic and what its seeds could detect."""
    if not e:
        return "—"
    text = _interval(e, signed=True, bold=e.get("verdict", "").startswith("different"))
    if e.get("p_difference") is None:
        return text
    if short:
        return f"{text}: {compare.carrying_text(e)}"
    return (f"{text}: {compare.carrying_text(e)}; SW {verdicts.p_text(e.get('shapiro_wilk_p'))}; "
            f"MDD {e['minimum_detectable_pts']:.2f}, for ± {e['margin_pts']:g}: {e['seeds_for_margin']} seeds")


def _seeds_text(cells_: Sequence[Mapping[str, Any]], n_seeds: int) -> str:
    ns = sorted({c["n"] for c in cells_ if c.get("n")})
    return f"{n_seeds} seeds" if ns in ([], [n_seeds]) else f"{ns[0]}-{ns[-1]} seeds (the seed plan's)"


def _decisive_text(choice: Mapping[str, Any]) -> str:
    m = choice.get("margin_samples")
    if m is None:
        return "—"
    if not choice.get("near"):
        return f"{m:.1f} samples"
    return f"tie ({m:+.1f} samples; within one: {'; '.join(_values(t) for t in choice['near'])})"


def _seed_plan_lines(study: Study, plans: Sequence[Mapping[str, Any]], cells_: Sequence[Mapping[str, Any]]) -> list[str]:
    if not plans:
        return []
    from bench.lib.study.power import SD_CONFIDENCE, delivered_power

    m = study.equivalence_margin_pts
    lines = ["", "## Seed plan (before the evaluation runs) and the power delivered", "",
             f"Per model and data setting, from the paired differences of the final validation accuracy on the tuning "
             f"seeds (the pilot): their mean, taken as the truth; their spread (floored at one validation sample) and "
             f"its upper {100 * SD_CONFIDENCE:g} % confidence bound, which the plan uses; each test at α / k (k the "
             f"comparisons against {study.base}: Holm's worst case); the seeds that resolve the comparison either way "
             f"(TOST within ± {m:g} or the difference test) with {100 * study.power:g} % power"
             + (", at least those the exact test needs to reach α / k" if study.primary_test == "permutation" else "")
             + f", the setting running the largest need within [{study.seed_plan.min_seeds}, "
             f"{study.seed_plan.max_seeds}] (bench/lib/study/power.py); the registered plan's count binds "
             "(`registration.json`). Power: the TOST's at the seeds run, planned (the plan's spread bound) and "
             "delivered (the spread of the test accuracies' paired differences, floored at one test sample).", "",
             "| model | setting | seeds run | comparison: pilot mean, sd → bound, α per test, seeds needed; TOST power "
             "planned → delivered |", "|---|---|---|---|"]
    by = {(c["model"], c["setting"], c["method"]): c.get("paired_difference_vs_base_pct") for c in cells_}
    for p in plans:
        parts = []
        for c in p["comparisons"]:
            e = by.get((p["model"], p["setting"], c["method"]))
            got = "—" if not e or e.get("std") is None else \
                f"{delivered_power(c, max(e['std'], e.get('std_floor', 0.0)), e['n'], m):.2f}"
            parts.append(f"{c['method']}: {c.get('mean_pts', 0.0):+.2f}, {c['sd_pts']:.2f} → "
                         f"{c.get('sd_upper_pts', c['sd_pts']):.2f}, {c.get('alpha', 0.05):.2g}, {c['seeds_needed']}; "
                         f"{c.get('planned_power', math.nan):.2f} → {got}")
        lines.append(f"| {p['model']} | {p['setting']} | {p['seeds']} | " + "; ".join(parts) + " |")
    return lines


def _provenance_lines(summary: Mapping[str, Any]) -> list[str]:
    missing = summary["missing_provenance"]
    total = sum(summary["run_commits"].values())
    lines = [f"Every run's record (`grid/runs/<run_id>/point.json`, `run.json`) and `runs.csv` give the commit of "
             f"the code that trained it (`git_commit`, `git_dirty`), the CPU kernels (`kernels`) and the machine "
             f"(`cpu`, `host`, `torch_threads`). Of {total} runs:"]
    for what, ids in missing.items():
        which = "" if not ids else " (all: recorded before runs recorded it)" if len(ids) == total else \
            f" (recorded before runs recorded it: {', '.join(ids)})"
        lines.append(f"* without `{what}`: {len(ids)}{which}")
    return lines


def _plan_lines(summary: Mapping[str, Any]) -> list[str]:
    """The registered plan (``registration.json``) and every declared deviation from it."""
    reg = summary.get("registration")
    lines = ["", "## Registered plan and deviations", ""]
    lines.append("No plan registered (the folder has no registration.json)." if not reg else
                 f"Plan sha256 {reg['sha256'][:12]}, {reg['note']} (`registration.json`): seeds "
                 f"{reg['planned']['seeds']}, margin ± {reg['planned']['equivalence_margin_pts']:g}, primary test "
                 f"{reg['planned']['primary_test']}, correction {reg['planned']['correction']}"
                 + (f", seed counts {reg['planned']['seed_counts']}" if reg["planned"].get("seed_counts") else "") + ".")
    devs = summary["study"].get("deviations") or []
    lines += ["", "Deviations declared in the study file:" if devs else "No deviation declared."]
    lines += [f"* {', '.join(d['keys'])}: {d['what']} Reason: {d['reason']}" for d in devs]
    return lines


def _mean_std(e: Mapping[str, Any]) -> str:
    return f"{e['mean']:.2f}" + (f" ± {e['std']:.2f}" if e["std"] is not None else "")


def _commits_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{commit} ({n})" for commit, n in counts.items()) or "none"


def _values(trial: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in trial.items())


# ----------------------------------------------------------------------------- summary and files


def busy_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds during which at least one interval is open: the length of the union of ``(start, end)``.

    A study resumed later (or extended by a data setting) has a gap between its invocations; the span
    from the first start to the last end counts the gap, the union does not.
    """
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def finished(run: StudyRun) -> list[Outcome]:
    """Each finished run once (an evaluation seed that is also a tuning seed reuses the tuning run)."""
    unique = {o.run_id: o for o in (*run.tuning, *run.evaluation) if o.status == "done"}
    return list(unique.values())


def _wall(run: StudyRun, started_unix_s: float) -> dict[str, Any]:
    done = finished(run)
    timed = [(o.start_unix_s, o.end_unix_s) for o in done if o.start_unix_s is not None and o.end_unix_s is not None]
    total = sum(o.elapsed_s or 0.0 for o in done)
    first = min(s for s, _ in timed) if timed else None
    last = max(e for _, e in timed) if timed else None
    span = (last - first) if timed else 0.0
    busy = busy_s(timed)
    stamp = lambda t: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))  # noqa: E731
    text = (f"{len(done)} runs from {stamp(first)} to {stamp(last)} ({busy / 3600:.2f} h of wall time with a run "
            f"in progress; {total / 3600:.2f} h of run time summed over runs)") if timed else "no run finished"
    return {"runs_first_start_unix_s": first, "runs_last_end_unix_s": last, "runs_span_s": span, "runs_busy_s": busy,
            "runs_sum_s": total, "this_invocation_s": time.time() - started_unix_s, "text": text}


def run_commits(run: StudyRun) -> dict[str, int]:
    """How many finished runs each commit ran ("not recorded": runs recorded before runs recorded it)."""
    counts: dict[str, int] = {}
    for o in finished(run):
        key = o.git_commit or "not recorded"
        counts[key] = counts.get(key, 0) + 1
    return counts


def repriced_commits(run: StudyRun) -> dict[str, int]:
    """How many finished runs each commit re-priced (``--reprice``: ``run.json``'s ``priced``); none
    for runs priced when they trained."""
    counts: dict[str, int] = {}
    for o in finished(run):
        key = o.info.get(PRICED_KEY, {}).get("git_commit")
        if key:
            counts[key] = counts.get(key, 0) + 1
    return counts


def _machines(run: StudyRun) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for o in finished(run):
        m = o.info.get("machine", {})
        key = json.dumps(m, sort_keys=True)
        seen.setdefault(key, {**m, "runs": 0})["runs"] += 1
    return list(seen.values())


def build_summary(study: Study, run: StudyRun, runs_df: pd.DataFrame, tta_df: pd.DataFrame, *, command: str,
                  started_unix_s: float, commit: str) -> dict[str, Any]:
    import torch

    from bench.study.phases import execution

    counts = {phase: {s: sum(o.status == s for o in outcomes) for s in ("done", "failed", "missing")}
              for phase, outcomes in (("tuning", run.tuning), ("evaluation", run.evaluation))}
    choices = [{"model": m, "setting": s, "method": t, "trial": None if c.trial is None else dict(c.trial),
                "score_pct": c.score_pct, "at_edge": list(c.at_edge), "extension": [dict(e) for e in c.extension],
                "margin_samples": c.margin_samples, "tie": c.tie, "near": [dict(t) for t in c.near],
                "point": _chosen_point(run, (m, s, t), c),
                "scores": [{"trial": dict(x.trial), "score_pct": x.score_pct,
                            "seed_scores_pct": {str(k): v for k, v in x.seed_scores_pct.items()}} for x in c.scores]}
               for (m, s, t), c in run.choices.items()]
    failures = [{"phase": o.planned.phase, "run": o.planned.describe(), "run_id": o.run_id, "error": o.error}
                for o in (*run.tuning, *run.evaluation) if o.status == "failed"]
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "command": command, "git_commit": commit,
            "study": study.describe(), "setting_note": _setting_note(study),
            "execution": execution(study).describe(), "machine": machine_info(), "run_machines": _machines(run),
            "run_commits": run_commits(run), **({"repriced_commits": r} if (r := repriced_commits(run)) else {}),
            "missing_provenance": missing_provenance(run), "torch": torch.__version__,
            "wall": _wall(run, started_unix_s),
            "counts": counts, "failures": failures,
            "choices": choices, "seed_plans": [p.record() for p in run.seed_plans],
            "cells": cells(study, runs_df, tta_df), "pairs": pairs(study, runs_df) if len(runs_df) else [],
            **({"fleets": answers} if (answers := fleet_answers(study, runs_df, tta_df)) else {})}


def _chosen_point(run: StudyRun, cell: tuple[str, str, str], choice) -> dict[str, Any] | None:
    """The settings of the chosen trial's runs but the seed (``fl``, ``hparams``, ``method``, ``execution``):
    what another command compares its own run with to know whether this study covers it."""
    if choice.trial is None:
        return None
    for o in run.tuning:
        p = o.planned
        if (p.model, p.setting.label, p.training) == cell and dict(p.trial) == dict(choice.trial):
            return {k: p.config[k] for k in ("method", "fl", "hparams", "execution")}
    return None


def _setting_note(study: Study) -> str:
    f, hp = study.preset.fl, study.preset.hp
    epochs = study.local_epochs or hp.local_epochs
    size = f"{f.image_size}x{f.image_size} " if f.image_size else ""
    return (f"{f.dataset} {size}(offline; not the paper's CIFAR-100), {f.num_clients} clients, batch {hp.batch_size}, "
            f"{epochs} local epoch(s), preset {study.preset.name}")


def _csv(df: pd.DataFrame, path: Path) -> None:
    atomic_write(path, lambda tmp: df.to_csv(tmp, index=False))


def write_report(out: str | Path, study: Study, run: StudyRun, *, command: str, started_unix_s: float,
                 commit: str) -> list[str]:
    """Every report file into ``out`` (module doc); returns their names. ``commit``: the code's commit,
    taken before the command wrote anything (its own outputs would otherwise mark the tree dirty)."""
    from bench.lib.plots.study import plot_study

    out = Path(out)
    runs = method_runs(study, run)
    runs_df, curves_df = runs_table(study, runs), curves_table(runs)
    tta_df = tta_table(study, runs)
    summary = build_summary(study, run, runs_df, tta_df, command=command, started_unix_s=started_unix_s,
                            commit=commit)
    _csv(runs_df, out / "runs.csv")
    _csv(curves_df, out / "curves.csv")
    _csv(tuning_table(study, run), out / "tuning.csv")
    _csv(tta_df, out / "tta.csv")
    summary["registration"] = registration.read(out)
    atomic_write_text(out / "table.md", table_markdown(study, summary))
    write_json(out / "summary.json", summary)
    pngs = plot_study(out, curves_df, study.models, [s.label for s in study.settings], list(study.methods)) \
        if len(curves_df) else []
    return [*FILES, *(p.name for p in pngs), *([registration.REGISTRATION] if summary["registration"] else [])]


def headline(out: str | Path) -> str:
    """The report's first table (Tab. 2's layout), as printed at the end of the command."""
    text = (Path(out) / "table.md").read_text(encoding="utf-8")
    part = text.split("\n## ")[1] if "\n## " in text else text
    return "## " + part.rstrip() + f"\n\nfull report: {Path(out) / 'table.md'}"

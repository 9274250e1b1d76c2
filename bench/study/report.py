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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from bench.lib.results import FORMAT_NAME, FORMAT_VERSION, write_json
from bench.lib.study.curves import Convergence, base_validation_target, end_slope_pts, first_reaching, judge
from bench.study.fleets import fleet_answers
from bench.study.phases import Outcome, StudyRun
from bench.lib.study.runner import machine_info
from bench.lib.study.reprice import PRICED_KEY
from bench.lib.study.spec import Setting, Study
from bench.lib.study import registration
from bench.lib.study.tuning import score
from bench.study.cells import COST_KEYS, ImagesByCell, cells, pairs
from bench.study.table import table_markdown
from iokit.bits import unpacked
from iokit.files import atomic_write, atomic_write_text

FILES = ("runs.csv", "curves.csv", "tuning.csv", "tta.csv", "table.md", "summary.json")


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


def run_images(runs: Sequence[MethodRun]) -> ImagesByCell:
    """(model, setting, method) -> seed -> right-or-wrong per test image, of the runs that recorded it
    (``run.json``'s ``test_correct``; runs from before it was recorded have none)."""
    out: dict[tuple[str, str, str], dict[int, Any]] = {}
    for r in runs:
        text = r.outcome.info.get("test_correct", {}).get(r.method)
        if text is not None:
            out.setdefault((r.model, r.setting.label, r.method), {})[r.seed] = unpacked(text, r.test_samples)
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


def _search_keys(study: Study) -> list[str]:
    return list(dict.fromkeys(k for space in study.search.values() for k in space))


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
                  started_unix_s: float, commit: str, images: ImagesByCell | None = None) -> dict[str, Any]:
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
            "cells": cells(study, runs_df, tta_df, images), "pairs": pairs(study, runs_df, images) if len(runs_df) else [],
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
                            commit=commit, images=run_images(runs))
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

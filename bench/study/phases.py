"""An accuracy study's two phases on the grid engine: tune on validation, then evaluate the choice
on the evaluation seeds (docs/study.md).

Both phases are points of one grid (``DIR/grid``, ``bench.lib.grid.engine``): content-addressed,
resumable, failures isolated, local (``workers`` processes side by side) or on Ray. Phase 1 runs
every trial of every cell (model x data setting x training method) on the tuning seeds; the
choice is made from their validation curves (``bench.lib.study.tuning``); phase 2 runs the chosen
hyper-parameters on every evaluation seed (with ``[seed_plan]``, the first n of them, n planned from
the tuning runs: ``bench.lib.study.power``). Rerunning a study skips every finished point; a point
whose settings coincide in both phases (a tuning seed that is also an evaluation seed) runs once.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bench.lib.grid.engine import GridSpec, run_grid
from bench.lib.grid.backends import Resources
from bench.lib.grid.point import PointResult, of_files, read_record, run_id
from bench.lib.grid.runners import resolve_runner
from bench.lib.study.runner import make_point
from bench.lib.study.run_files import CURVE_CSV, RUN_JSON, read_curve
from bench.lib.study import registration
from bench.lib.study.power import SettingPlan, final_val_pct, plan_setting, with_power
from bench.lib.study.spec import Setting, Study
from bench.lib.study.tuning import Choice, extension_value
from bench.study.choices import accepts_trial, choices_from, edge_text, trial_key
from iokit.provenance import git_commit
from workloads.fl.execution import Execution, clients_computing, execution_of

RUNNER = "bench.study"
GRID_FOLDER = "grid"


@dataclass(frozen=True)
class Planned:
    """One run of a study: its place (phase, cell, trial, seed) and the runner's point."""

    phase: str  # "tune" or "eval"
    model: str
    setting: Setting
    training: str  # the training method (its run also gives its calibrated method's curve)
    trial: Mapping[str, Any]  # the searched values
    seed: int
    config: Mapping[str, Any]  # the runner's point (bench.lib.study.runner)

    def values(self) -> str:
        """The searched values, e.g. ``lr=0.05``."""
        return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.trial.items())

    def describe(self) -> str:
        return f"{self.model} {self.setting.label} {self.config['method']} {self.values()} seed={self.seed}"


@dataclass(frozen=True)
class Outcome:
    """What a planned run left in the grid folder."""

    planned: Planned
    run_id: str
    status: str  # "done", "failed" or "missing" (not run: interrupted, or running elsewhere)
    curve: tuple[dict, ...] = ()  # curve.csv rows of every label
    info: Mapping[str, Any] = field(default_factory=dict)  # run.json
    elapsed_s: float | None = None
    start_unix_s: float | None = None
    end_unix_s: float | None = None
    git_commit: str = ""  # of the code that ran it ("" for a run recorded before runs recorded it)
    error: str = ""
    changed: tuple[str, ...] = ()  # with accept_changed: the files it read whose content changed since

    def label_curve(self, label: str) -> list[dict]:
        return [row for row in self.curve if row["method"] == label]


@dataclass(frozen=True)
class StudyRun:
    """Both phases' outcomes and the choices made between them."""

    tuning: tuple[Outcome, ...]
    choices: Mapping[tuple[str, str, str], Choice]  # (model, setting label, training method) -> choice
    evaluation: tuple[Outcome, ...]
    seed_plans: tuple[SettingPlan, ...] = ()  # with [seed_plan]: per model and tuned-on setting


def execution(study: Study) -> Execution:
    """Where the study's runs train: its device and the preset's [execution] options."""
    return execution_of(study.device, None, study.preset.execution, rounds=study.rounds)


def plan(study: Study, ex: Execution, phase: str, seeds: Sequence[int] | Callable[[str, Setting], Sequence[int]],
         trials: Callable[[str, Setting, str], list[Mapping[str, Any]]],
         settings: Sequence[Setting] | None = None) -> list[Planned]:
    """The runs of one phase: every model, setting (default the study's), training method, trial
    (``trials``) and seed (``seeds``, or per model and setting); each setting's runs in its number format
    or precision schedule (``clients_computing``)."""
    out = []
    for model in study.models:
        for setting in study.settings if settings is None else settings:
            in_format = clients_computing(ex, setting.number_format, study.rounds)
            for training in study.training_methods:
                job = study.job(training)
                for trial in trials(model, setting, training):
                    hp = study.hparams(job, trial)
                    for seed in seeds(model, setting) if callable(seeds) else seeds:
                        config = make_point(model, job, seed, study.fl(model, setting, seed), hp, in_format, study.hw,
                                            study.system, data_dir=study.data_dir, fleet=setting.fleet,
                                            deadline_s=setting.deadline_s)
                        out.append(Planned(phase, model, setting, training, dict(trial), seed, config))
    return out


def tuning_plan(study: Study, ex: Execution) -> list[Planned]:
    """Every trial on the tuning seeds, in FP32 only: a study's other number formats run at their
    method's FP32-tuned hyper-parameters (the question is what the format does to a tuned method)."""
    tuned = [s for s in study.settings if s == s.tuned_on]
    return plan(study, ex, "tune", study.tuning_seeds, lambda m, s, t: study.trials(t), tuned)


def evaluation_plan(study: Study, ex: Execution, choices: Mapping[tuple[str, str, str], Choice],
                    seed_plans: Sequence[SettingPlan] = ()) -> list[Planned]:
    """The chosen trial of every cell on every evaluation seed (cells whose tuning failed have none);
    a setting in another number format takes the choice of its FP32 setting. ``seed_plans``: the
    first n seeds of each planned setting (a setting takes its tuned-on setting's n; one not planned, as
    in the projection before the tuning has run, ``[seed_plan] max_seeds``)."""
    def chosen(model: str, setting: Setting, training: str) -> list[Mapping[str, Any]]:
        c = choices[(model, setting.tuned_on.label, training)]
        return [] if c.trial is None else [c.trial]

    n = {(p.model, p.setting): p.seeds for p in seed_plans}
    most = len(study.seeds) if study.seed_plan is None else study.seed_plan.max_seeds  # unplanned: the bound

    def seeds(model: str, setting: Setting) -> Sequence[int]:
        return study.seeds[:n.get((model, setting.tuned_on.label), most)]

    return plan(study, ex, "eval", seeds, chosen)


def seed_plans(study: Study, tuned: Sequence[Outcome], choices: Mapping[tuple[str, str, str], Choice]
               ) -> tuple[SettingPlan, ...]:
    """The evaluation seeds of every model and tuned-on setting (``bench.lib.study.power``); () without
    ``[seed_plan]``, or while a chosen trial's tuning runs are not all there."""
    if study.seed_plan is None:
        return ()
    out = []
    for model in study.models:
        for setting in (s for s in study.settings if s == s.tuned_on):
            finals: dict[str, dict[int, float]] = {}
            val_samples = None
            for o in tuned:
                p = o.planned
                c = choices.get((model, setting.label, p.training))
                if (p.model, p.setting) != (model, setting) or c is None or c.trial is None \
                        or dict(p.trial) != dict(c.trial) or o.status != "done":
                    continue
                val_samples = o.info.get("val_samples", val_samples)
                for label in study.labels(p.training):
                    v = final_val_pct(o.label_curve(label))
                    if v is not None:
                        finals.setdefault(label, {})[p.seed] = v
            if val_samples is None:
                return ()
            out.append(plan_setting(study, model, setting, finals, int(val_samples)))
    return tuple(out)


class _Points(GridSpec):
    """A grid of listed points (the engine's grids are cartesian products of axes)."""

    def __init__(self, name: str, runner: str, points: Sequence[Mapping[str, Any]]):
        keys = ("model", "method", "seed")
        axes = {k: list(dict.fromkeys(p[k] for p in points)) for k in keys}
        super().__init__(name=name, runner=runner, fixed={}, axes=axes)
        object.__setattr__(self, "_listed", tuple(points))

    def points(self) -> list[dict[str, Any]]:
        return [dict(p) for p in self._listed]


def grid_spec(study: Study, planned: Sequence[Planned], runner: str = RUNNER) -> GridSpec:
    """The grid of ``planned`` runs (each distinct point once)."""
    unique = {run_id(runner, p.config): p.config for p in planned}
    return _Points(f"study-{study.name}", runner, list(unique.values()))


def outcome(grid_dir: Path, planned: Planned, runner: str = RUNNER, accept_changed: bool = False) -> Outcome:
    """What ``planned`` left in the grid folder: its curve and run record, its failure, or nothing. A
    run whose files are not whole (the runner's ``complete`` check: a ``curve.csv`` cut before its
    last round) is not done. ``accept_changed``: a finished run whose files (hardware, system,
    fleet) changed since is read as done, its ``changed`` files named (``--reprice`` prices it
    with today's); else it is another run's, and missing."""
    rid = run_id(runner, dict(planned.config))
    registered = resolve_runner(runner)
    files = registered.files(planned.config)
    record, stale = of_files(grid_dir / "runs" / rid / "point.json", files, quiet=True)
    if stale and accept_changed:  # --reprice: the recorded run, to be priced with today's files
        record = read_record(grid_dir / "runs" / rid / "point.json", quiet=True)
    elif stale:  # the run of this point read other content (iokit.identity): not this run
        return Outcome(planned, rid, "missing", error=f"runs/{rid} read other content of {', '.join(stale)}; "
                                                      "rerun the study to run it with these files")
    if record is not None:
        folder = grid_dir / "runs" / rid
        cut = registered.incomplete(planned.config, folder)
        if cut:  # its files are not the whole run (cut or deleted since): not done, the engine runs it again
            return Outcome(planned, rid, "missing", error=f"runs/{rid} is incomplete ({cut}); rerun the study "
                                                          "to run it again")
        try:
            info = json.loads((folder / RUN_JSON).read_text(encoding="utf-8"))
            curve = read_curve(folder / CURVE_CSV)
        except (OSError, ValueError, KeyError, TypeError) as err:  # deleted or damaged after the run finished
            return Outcome(planned, rid, "failed", error=f"{folder} is damaged ({type(err).__name__}: "
                                                          f"{str(err)[:80]}); delete that folder to run it again")
        diverged = diverged_curve(curve)
        if diverged:  # a run that did not stop on it (recorded before runs did, a runner of yours): failed
            return Outcome(planned, rid, "failed", curve, info, error=diverged)
        return Outcome(planned, rid, "done", curve, info, record.get("elapsed_s"),
                       record.get("start_unix_s"), record.get("end_unix_s"), record.get("git_commit", ""),
                       changed=tuple(stale))
    failed = of_files(grid_dir / "failed" / f"{rid}.json", files, quiet=True)[0]
    if failed is not None:
        return Outcome(planned, rid, "failed", error=str(failed.get("error", "")))
    return Outcome(planned, rid, "missing")


def diverged_curve(curve: Sequence[Mapping[str, Any]]) -> str:
    """Why a run's ``curve.csv`` rows diverged (``workloads.fl.guard.check_divergence`` on each
    label's training rounds), or "": a diverged run is a failed run, never a trial to choose."""
    from workloads.fl.guard import DivergedError, check_divergence

    for label in dict.fromkeys(row["method"] for row in curve):
        history = [row for row in curve if row["method"] == label and row["stage"] == "train"]
        try:
            for t in range(2, len(history) + 1):
                check_divergence(history[:t], label)
        except DivergedError as err:
            return str(err)
    return ""


def extension_plan(study: Study, ex: Execution, choices: Mapping[tuple[str, str, str], Choice],
                   tuned: Sequence[Outcome]) -> list[Planned]:
    """The next trial of every cell whose choice is at a grid edge (``bench.lib.study.tuning``), on every
    tuning seed; none that was tried already."""
    tried = {(o.planned.model, o.planned.setting.label, o.planned.training, trial_key(o.planned.trial)) for o in tuned}
    settings = {s.label: s for s in study.settings}
    out = []
    for (model, label, training), c in choices.items():
        for k in c.at_edge:
            values = [o.planned.trial[k] for o in tuned
                      if (o.planned.model, o.planned.setting.label, o.planned.training) == (model, label, training)]
            state, value = extension_value(study.search[training][k], values, c.trial[k], study.extend_steps)
            trial = {**c.trial, k: value}
            if state != "extend" or (model, label, training, trial_key(trial)) in tried \
                    or not accepts_trial(study, training, trial):
                continue
            hp = study.hparams(study.job(training), trial)
            for seed in study.tuning_seeds:
                setting = settings[label]
                config = make_point(model, study.job(training), seed, study.fl(model, setting, seed), hp, ex,
                                    study.hw, study.system, data_dir=study.data_dir)
                out.append(Planned("tune", model, setting, training, trial, seed, config))
    return out


Progress = Callable[[str], None]


def left_text(ran_s: Sequence[float], left: int, workers: int) -> str:
    """The phase's remaining wall time at the pace of the runs it has trained so far (``ran_s``, each
    run's own seconds): ``left`` runs of their mean length, ``workers`` at a time; measured, so it
    counts what the projection before the first run leaves out (evaluation, pricing, start-up) and
    the machine's load as it is."""
    if not ran_s or left <= 0:
        return ""
    from workloads.fl.forecast import duration_text

    per_s = sum(ran_s) / len(ran_s)
    return f"; ~{duration_text(per_s * math.ceil(left / max(1, workers)))} left in this phase at the pace of its {len(ran_s)} run(s)"


def run_study(study: Study, out: str | Path, *, backend: str = "local", workers: int = 1, address: str | None = None,
              resources: Resources = Resources(), retry_failed: bool = False, progress: Progress | None = None,
              runner: str = RUNNER, commit: str | None = None, execute: bool = True,
              accept_changed: bool = False) -> StudyRun:
    """Both phases into ``out/grid`` (module doc); returns what they left there. ``resources``: each
    run's torch threads and, on Ray, its share of a GPU (``bench.lib.grid.engine``). ``commit``: the code's
    git commit for the runs' records (default: taken now, before the first phase writes anything).
    ``execute`` False: run nothing, read what the folder holds (a run not there is "missing");
    with ``accept_changed`` too, a finished run whose files changed since is read as done
    (``outcome``: what ``--reprice`` re-prices)."""
    assert execute is False or not accept_changed, "accept_changed reads a folder; it runs nothing"
    grid_dir = Path(out) / GRID_FOLDER
    commit = git_commit() if commit is None else commit
    ex = execution(study)
    say = progress or (lambda line: None)

    def run_phase(planned: list[Planned], phase: str) -> tuple[Outcome, ...]:
        if planned and execute:
            names = {run_id(runner, p.config): p.describe() for p in planned}
            ran: list[float] = []

            def show(result: PointResult, i: int, total: int) -> None:
                extra = f" ({result.elapsed_s:.1f} s)" if result.status == "done" else ""
                extra += f": {result.error}" if result.error else ""
                if result.status == "done":
                    ran.append(result.elapsed_s)
                    extra += left_text(ran, total - i, workers)
                say(f"[{phase} {i}/{total}] {names.get(result.run_id, result.run_id)}: {result.status}{extra}")

            run_grid(grid_spec(study, planned, runner), grid_dir, backend=backend, resources=resources,
                     retry_failed=retry_failed, address=address, progress=show, workers=workers,
                     commit=commit)
        return tuple(outcome(grid_dir, p, runner, accept_changed) for p in planned)

    tuned = run_phase(tuning_plan(study, ex), "tune")
    choices = choices_from(study, tuned)
    while True:  # the edge extension: ends, each side of each key adds at most extend_steps values
        more = extension_plan(study, ex, choices, tuned)
        if not more:
            break
        for line in sorted({f"{p.model} {p.setting.label} {p.training}: beyond the grid's edge, "
                            + p.values() for p in more}):
            say(f"extend {line}" + ("" if execute else " (not run: the report reads the folder only)"))
        tuned += run_phase(more, "tune")
        choices = choices_from(study, tuned)
    _say_choices(study, choices, say)
    plans = bind(study, Path(out), seed_plans(study, tuned, choices), commit, execute)
    _say_seed_plans(study, plans, say)
    evaluated = run_phase(evaluation_plan(study, ex, choices, plans), "eval")
    return StudyRun(tuned, choices, evaluated, plans)


def _say_choices(study: Study, choices: Mapping[tuple[str, str, str], Choice], say: Progress) -> None:
    """One line per cell: its tuned (or given) hyper-parameters and its edge status."""
    for (model, setting, training), c in choices.items():
        chosen = "every trial failed" if c.trial is None else \
            ", ".join(f"{k}={v}" for k, v in c.trial.items()) + f" (validation {c.score_pct:.2f} %)"
        one_value = len(study.trials(training)) == 1  # nothing to choose between: given, not tuned
        say(f"{'given (one value searched, not tuned)' if one_value else 'tuned'} {model} {setting} {training}: "
            f"{chosen}" + ("" if one_value else "".join(f"; {e['key']} {edge_text(e)}" for e in c.extension)))


def _say_seed_plans(study: Study, plans: Sequence[SettingPlan], say: Progress) -> None:
    """One line per model and setting: its evaluation seeds and the pilot they come from."""
    for p in plans:
        say(f"seed plan {p.model} {p.setting}: {p.seeds} evaluation seeds ("
            + "; ".join(f"{c.method}: mean {c.mean_pts:+.2f}, sd {c.sd_pts:.2f} (bound {c.sd_upper_pts:.2f}) over "
                        f"{c.tuning_seeds} tuning seeds needs {c.seeds_needed}"
                        for c in p.comparisons)
            + f"; bounds {study.seed_plan.min_seeds}-{study.seed_plan.max_seeds})")


def bind(study: Study, out: Path, plans: tuple[SettingPlan, ...], commit: str, execute: bool) -> tuple[SettingPlan, ...]:
    """The seed plans the evaluation runs (``bench.lib.study.registration``): a registered plan's
    counts where the folder has one (today's planner's comparisons kept beside them, for the report);
    without one, the plan is registered now, as the first evaluation run starts (not when only
    reading the folder, nor before the tuning has given every setting its plan)."""
    reg = registration.read(out)
    if reg is None:
        if execute and (plans or study.seed_plan is None):
            registration.write(out, registration.record(registration.planned(study.describe(), registration.counts(plans)),
                                                        commit, "registered as the first evaluation run started"))
        return plans
    registered = reg["planned"].get("seed_counts") or {}
    out = []
    for p in plans:
        n = registered.get(f"{p.model} {p.setting}", p.seeds)
        out.append(replace(p, seeds=n, comparisons=tuple(with_power(c, n, study.equivalence_margin_pts)
                                                         for c in p.comparisons)))
    return tuple(out)


# ----------------------------------------------------------------------------- the results folder

COMMAND = "bench.study"


def folder_hash(study: Study) -> str:
    """What a study folder belongs to: the study's name (its settings may change: the points are
    content-addressed, and the tables are rebuilt from the study as it is now)."""
    from iokit import outputs

    return outputs.config_hash({"command": COMMAND, "name": study.name})


def check_study_out(study: Study, out: str | Path) -> None:
    """``--out`` of a study: a new (or empty) folder, or this study's own (its manifest names
    ``bench.study`` and the same study name: rerunning resumes it). Anything else is refused before
    any point runs (``iokit.outputs.check_own_folder``)."""
    from iokit import outputs

    outputs.check_own_folder(out, command=COMMAND, config_sha256=folder_hash(study),
                             what=f"study (not {study.name!r})")

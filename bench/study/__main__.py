"""``python -m bench.study STUDY.toml``: an accuracy study (docs/study.md): tune every method on a
validation hold-out, run the choice on several paired seeds, report mean ± std, Student-t
intervals, paired differences against a base method, convergence and time-to-accuracy.

    python -m bench.study configs/studies/reference.toml [--out DIR] [--backend local|ray] [--workers N]
                          [--address ADDR] [--resources-per-run cpus=1,gpus=0] [--retry-failed] [--data-dir DIR]
                          [--report-only | --reprice]

Writes ``--out`` (default ``results/study-<name>``): ``runs.csv``, ``curves.csv``, ``tuning.csv``,
``tta.csv``, ``table.md``, ``summary.json``, ``curves_<model>.png``, the manifest, and ``grid/``
(every run's folder: ``bench.grid``). Rerunning the same command resumes: finished runs are skipped.
``--data-dir DIR``: the folder of the study's dataset (``dataset`` in the study file, else the
preset's: CIFAR-10 / CIFAR-100 / TinyImageNet; not for the offline digits or mnist5k). Before the first run it
prints the projected local-training time on this machine's device. ``--workers N`` runs N side
by side, on the study's device, a GPU too (each in its own process: docs/study.md, "Several runs
on one GPU"); on Ray, ``--resources-per-run cpus=1,gpus=0.25`` gives each run a quarter of a GPU.
``--report-only``: train
nothing, rebuild the report from the runs in ``--out`` (a run not there is reported missing).
``--reprice``: train nothing, price every finished run in ``--out`` again with today's code and
today's hardware and system files (its cost columns only: ``bench.study.reprice``), all or nothing,
then rebuild the report as ``--report-only`` does; a study that is not complete, or a fleet's run
whose files changed, is refused before anything is written.
Bad input: one line, exit 2, nothing written. Exit 1 when an evaluation run failed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.lib import resolve, spec
from bench.lib.grid.engine import validate_points
from bench.lib.grid.backends import add_backend_flags, check_backend, check_device, check_ray_address, parse_resources
from bench.lib.results import FORMAT_VERSION
from bench.study import phases, report
from bench.study.reprice import reprice_study
from bench.lib.study import registration
from bench.lib.study.study_file import load_study
from iokit import cli, outputs
from iokit.provenance import git_commit


def parser() -> cli.Parser:
    p = cli.Parser(prog="python -m bench.study", description=__doc__.split("\n\n")[0].split(": ", 1)[-1])
    p.add_argument("study", help="study file (TOML) or a name under configs/studies/, e.g. reference")
    p.add_argument("--out", help="results folder (default results/study-<name>); rerun with the same --out to resume")
    add_backend_flags(p)
    spec.add_flags(p, "bench.study", ["workers", "data_dir"], workers=1)  # --workers: the local backend's
    p.add_argument("--retry-failed", action="store_true", help="run again the runs that failed before")
    p.add_argument("--report-only", action="store_true", help="train nothing: rebuild the report from the runs "
                   "already in --out")
    p.add_argument("--reprice", action="store_true", help="train nothing: price the finished runs in --out again "
                   "with today's code and hardware and system files (their cost columns; accuracies kept byte for "
                   "byte), then rebuild the report")
    return p


def check_reprice(args, study, out: Path) -> None:
    """``--reprice`` is given a study's folder, and nothing that would train (ValueError naming the fix)."""
    if args.report_only or args.retry_failed:
        raise ValueError(f"--reprice with {'--report-only' if args.report_only else '--retry-failed'}: --reprice "
                         "trains nothing and rebuilds the report itself; drop one")
    if args.backend != "local":
        raise ValueError("--reprice runs in this process; drop --backend ray")
    manifest = outputs.Manifest.read(out)
    if manifest is None or manifest.command != phases.COMMAND or not (out / phases.GRID_FOLDER / "runs").is_dir():
        raise ValueError(f"--out {out}: not a study folder (no {outputs.MANIFEST} of bench.study with its "
                         f"{phases.GRID_FOLDER}/runs); --reprice re-prices the runs a study left there: give that folder")


def check_data_dir(study, data_dir: str | None) -> None:
    """The study's dataset and ``--data-dir`` agree (``bench.lib.resolve.check_data_dir``, every run's
    rule, in the study's words; ValueError naming the fix)."""
    resolve.check_data_dir(study.fl(study.models[0], study.settings[0], 0).dataset, data_dir, whose="the study's",
                           fix='or set dataset = "cifar10" in the study file')


def projection_lines(study, ex, out: Path, workers: int, cpus: float = 1.0) -> list[str]:
    """The projected local training of the runs still to do (module doc), before the first starts,
    timed with each run's torch threads (``cpus``, ``--resources-per-run``), as the runs will train."""
    from bench.lib.grid.point import torch_threads
    from bench.lib.study.runner import projected_local_training_s
    from workloads.fl.loop import duration_text

    first = {t: study.trials(t)[0] for t in study.training_methods}
    planned = phases.tuning_plan(study, ex) + phases.evaluation_plan(
        study, ex, {(m, s.label, t): phases.Choice(first[t], None, ()) for m in study.models
                    for s in study.settings for t in study.training_methods})
    todo = {phases.run_id(phases.RUNNER, p.config): p.config for p in planned
            if phases.outcome(out / phases.GRID_FOLDER, p).status != "done"}
    if not todo:
        return ["projected: every run is already in --out; nothing to train"]
    with torch_threads(cpus):
        per = projected_local_training_s(list(todo.values()))
    total = sum(s for _, s in per.values())
    lines = [f"projected local training, {n} run(s) of {model} {method}{'' if fmt == 'fp32' else ' in ' + fmt}: "
             f"{duration_text(s)}" for (model, method, fmt), (n, s) in per.items()]
    lines.append(f"projected local training of the study's {len(todo)} runs still to do on {ex.device}: "
                 f"{duration_text(total)} summed, {wall_time_text(total, workers, ex.device)} (evaluation, pricing "
                 f"and start-up not included; a choice at a grid edge "
                 f"adds up to {study.extend_steps} more trial(s) per tuning seed"
                 + ("; a fleet's runs counted with every sampled client training: an upper bound"
                    if any(s.fleet is not None for s in study.settings) else "") + ")")
    return lines


def wall_time_text(summed_s: float, workers: int, device: str) -> str:
    """The wall time of runs whose times sum to ``summed_s`` (each timed alone), ``workers`` side by
    side on ``device``: on the CPU a worker per core each runs at its own speed (summed / workers);
    on a GPU the workers share one device, so the wall time lies between summed / workers (a device
    with room for them all at once) and summed (one run fills it), unmeasured (docs/study.md)."""
    from workloads.fl.loop import duration_text

    shared = f"~{duration_text(summed_s / max(1, workers))}"
    if workers <= 1 or not device.startswith("cuda"):
        return f"{shared} of wall time with --workers {workers}"
    return (f"{shared} to ~{duration_text(summed_s)} of wall time with --workers {workers} sharing {device} (from "
            f"room for all {workers} at once to one run filling it: unmeasured, docs/study.md \"Several runs on one GPU\")")


def _checked(args: argparse.Namespace):
    """Everything checked before any work, in this order (one line and exit code 2 on bad input, under
    the caller's ``cli.bad_input``): the study and its data, the backend, the folder, the registered
    plan, the runs themselves; returns (study, resources, out, registered plan, the code's commit)."""
    study = replace(load_study(args.study), data_dir=args.data_dir)
    check_data_dir(study, args.data_dir)
    resources = parse_resources(args.resources_per_run)
    check_backend(args.backend, address=args.address, workers=args.workers, resources=resources)
    if not (args.report_only or args.reprice):
        check_device(phases.execution(study).device, args.backend, resources)
    out = outputs.out_folder(args.out, f"results/study-{study.name}")
    if args.reprice:
        check_reprice(args, study, out)
    planned = phases.tuning_plan(study, phases.execution(study))
    validate_points(phases.grid_spec(study, planned))
    phases.check_study_out(study, out)
    registered = check_plan(study, out)
    commit = git_commit()  # before this command writes anything (its lock, under --out): the code's state
    if not (args.report_only or args.reprice):
        check_committed(out, commit)
    check_runs(study, planned + phases.plan(study, phases.execution(study), "eval", study.seeds[:1],
                                            lambda m, s, t: study.trials(t)[:1]))  # every setting: its fleet
    # and deadline too (after the cheap checks: it loads the data and builds the models)
    if args.address:
        check_ray_address(args.address)
    if not (args.report_only or args.reprice):
        for line in projection_lines(study, phases.execution(study), out, args.workers, resources.cpus):
            print(line, file=sys.stderr, flush=True)
    return study, resources, out, registered, commit


@cli.command("interrupted; finished runs are kept under --out: rerun the same command to resume")
def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    args = parser().parse_args(argv)
    with cli.bad_input():
        study, resources, out, registered, commit = _checked(args)
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    with outputs.claim(out):
        started = time.time()
        if args.reprice:
            return reprice(study, out, argv, commit, say, started)
        before = outputs.Manifest.read(out)  # its report's files stay listed until the report is rebuilt
        out.mkdir(parents=True, exist_ok=True)
        if registered is not None and registration.read(out) is None:  # a study evaluated before plans were registered
            registration.write(out, registered)
        outputs.Manifest(phases.COMMAND, phases.folder_hash(study), FORMAT_VERSION, "running",
                         before.files if before else (), (phases.GRID_FOLDER,)).write(out)
        with cli.run_failure():
            run = phases.run_study(study, out, backend=args.backend, workers=args.workers, address=args.address,
                                   resources=resources, retry_failed=args.retry_failed, progress=say, commit=commit,
                                   execute=not args.report_only)
            files = report.write_report(out, study, run, command=shlex.join(["python", "-m", "bench.study", *argv]),
                                        started_unix_s=started, commit=commit)
        missing = incomplete(run)
        outputs.Manifest(phases.COMMAND, phases.folder_hash(study), FORMAT_VERSION,
                         "running" if missing else "complete", tuple(files), (phases.GRID_FOLDER,)).write(out)
    print(report.headline(out))
    if missing:
        print(f"error: study {study.name} ({study.source}) is not complete: {missing}; rerun the same command to "
              "resume (--retry-failed runs the failed runs again)", file=sys.stderr)
    return 1 if missing else 0


def check_plan(study, out: Path) -> dict | None:
    """The folder's registered plan (``bench.lib.study.registration``; a study evaluated before plans
    were registered: retroactively, from its last report), after checking that every change of the
    study file's planned part since is declared as a deviation (ValueError naming the key and the fix)."""
    reg = registration.read(out)
    if reg is None:
        summary = out / "summary.json"
        try:
            last = json.loads(summary.read_text(encoding="utf-8")) if summary.is_file() else None
        except ValueError:
            last = None
        if not isinstance(last, dict) or not isinstance(last.get("study"), dict) or not last.get("cells"):
            return None
        reg = registration.from_summary(last)
    current = registration.planned(study.describe(), None)
    declared = [k for d in study.deviations for k in d.keys]
    bad = registration.undeclared(current, reg, declared)
    if bad:
        raise ValueError(registration.refusal(study.source, out, bad[0], current, reg))
    return reg


def check_committed(out: Path, commit: str) -> None:
    """A reference study (``--out`` under results/reference/) trains only from committed code: a
    ``-dirty`` commit is refused before anything runs (docs/study.md, "A plan that binds")."""
    reference = (outputs.CHECKOUT_ROOT / "results" / "reference").resolve()
    if commit.endswith("-dirty") and reference in (out.resolve(), *out.resolve().parents):
        raise ValueError(f"--out {out}: a reference study trains only from committed code, and the working tree has "
                         f"changes ({commit}); commit them first (git commit), then run it")


def reprice(study, out: Path, argv: list[str], commit: str, say, started: float) -> int:
    """``--reprice`` (module doc; ``bench.study.reprice``), all or nothing: every finished run priced
    again in memory first, the study refused (exit 2, nothing written) when a run whose files changed
    cannot be (a fleet's) or when the study is not complete; then the runs' files replaced, the
    manifest ``running`` (its files listed) until the report is rebuilt. Interrupted while pricing:
    the folder as it was; interrupted after the runs were replaced: ``--report-only`` rebuilds the
    report from them, without pricing them again."""
    run = phases.run_study(study, out, commit=commit, execute=False, accept_changed=True)
    missing = incomplete(run)
    if missing:
        raise cli.UsageError(f"--reprice: study {study.name} in {out} is not complete ({missing}); finish it first "
                             f"(rerun python -m bench.study {study.source} --out {out} without --reprice: its finished "
                             "runs are kept), then re-price")
    try:
        with cli.bad_input():
            staged = reprice_study(run, out, commit, say)
    except KeyboardInterrupt as err:
        print(f"interrupted while pricing: nothing in {out} was changed; run the same command again to re-price it",
              file=sys.stderr)
        return cli.EXIT_TERMINATED if isinstance(err, cli.Terminated) else cli.EXIT_INTERRUPTED
    say(staged.line())
    before = outputs.Manifest.read(out)
    manifest = lambda state, files: outputs.Manifest(phases.COMMAND, phases.folder_hash(study),  # noqa: E731
                                                     FORMAT_VERSION, state, tuple(files), (phases.GRID_FOLDER,))
    manifest("running", before.files if before else ()).write(out)
    try:
        staged.write()  # every run's files, Ctrl-C held until the last: then it stops us here
        with cli.run_failure():
            run = phases.run_study(study, out, commit=commit, execute=False)  # the runs as re-priced
            files = report.write_report(out, study, run, command=shlex.join(["python", "-m", "bench.study", *argv]),
                                        started_unix_s=started, commit=commit)
    except KeyboardInterrupt as err:
        print(f"interrupted after the re-priced runs were written, before the report was: python -m bench.study "
              f"{study.source} --out {out} --report-only rebuilds it from them (no pricing)", file=sys.stderr)
        return cli.EXIT_TERMINATED if isinstance(err, cli.Terminated) else cli.EXIT_INTERRUPTED
    missing = incomplete(run)
    manifest("running" if missing else "complete", files).write(out)
    print(report.headline(out))
    if missing:  # not expected: every run read as done before was re-priced or left as it was
        print(f"error: study {study.name} ({study.source}) is not complete after re-pricing: {missing}",
              file=sys.stderr)
    return 1 if missing else 0


def check_runs(study, planned: list[phases.Planned]) -> None:
    """One run per model and setting prepared up to its training (``bench.lib.study.runner.prepare``:
    the hardware and system files, the fleet with its deadline and its clients, the data and its
    hold-out, the partition, the model), before any run: a bad input is one line naming the study
    file, not every trial failing (issue 33), nor a fleet's runs failing after the tuning (issue 46)."""
    from bench.lib.study.runner import prepare

    seen = set()
    for p in planned:
        if (p.model, p.setting.label) in seen:
            continue
        seen.add((p.model, p.setting.label))
        try:
            prepare(p.config)
        except (ValueError, SystemExit) as err:
            raise cli.UsageError(f"{study.source}: {p.model}, {p.setting.label}: {err}") from None


def incomplete(run: phases.StudyRun) -> str:
    """Why the study did not do the work it declared ("" when it did): a cell whose every tuning
    trial failed has no evaluation runs at all (so "every evaluation run done" alone would hold of
    nothing), an evaluation run failed or did not run."""
    no_choice = [cell for cell, c in run.choices.items() if c.trial is None]
    if no_choice:
        model, setting, training = no_choice[0]
        errors = [o.error for o in run.tuning if (o.planned.model, o.planned.setting.label, o.planned.training)
                  == no_choice[0] and o.error]
        return (f"every tuning trial of {model} {setting} {training} failed"
                + (f" (e.g. {errors[0]})" if errors else "")
                + (f", and of {len(no_choice) - 1} more cell(s)" if len(no_choice) > 1 else ""))
    if not run.evaluation:
        return "no evaluation run was planned"
    undone = [o for o in run.evaluation if o.status != "done"]
    if undone:
        counts = {s: sum(o.status == s for o in undone) for s in ("failed", "missing")}
        errors = [o.error for o in undone if o.error]
        return (f"{', '.join(f'{n} evaluation run(s) {s}' for s, n in counts.items() if n)} of {len(run.evaluation)}"
                + (f" (e.g. {errors[0]})" if errors else ""))
    return ""


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.dse SPACE.toml``: which accelerator suits which federated-learning method
(issue 24; docs/dse.md). Every point of the space is priced for every model and method (one step;
a calibration's client-statistics batch), sized on the FPGA of the space file's device, and the
Pareto fronts kept among the points that fit.

    python -m bench.dse configs/dse/paper.toml [--out DIR] [--overwrite] [--stream] [--max-points N] [--workers N]
    python -m bench.dse configs/dse/paper.toml --write-hw N [--out FILE.toml]
    python -m bench.dse configs/dse/paper.toml --run RUN_DIR [--target PCT]

Writes ``--out`` (default ``results/dse-<name>``): ``points.csv`` (one row per point, model and
method), ``pareto.csv``, ``pareto.png`` (``pareto_<model>.png`` for several models),
``summary.json`` and the manifest; with ``--run``, ``tta.csv`` (the run's accuracy curve re-priced
on every point: bench.dse.rerun). ``--write-hw N`` writes point N's hardware TOML (for
``python -m bench.run --hw``) and prices nothing. Bad input: one line, exit 2, nothing written.
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_sim.batch import TraceWork
from accel_sim.hardware import hardware_config_toml
from accel_sim.space import DEFAULT_MAX_POINTS, SpaceError
import pandas as pd

from bench.dse import accuracy, report, rerun
from bench.dse.explore import OBJECTIVE_PAIRS, explore, price_presets
from bench.dse.spec import DseError, load_dse
from bench.dse.traces import method_trace
from bench.lib import spec
from bench.lib.plots import save
from bench.lib.results import FORMAT_VERSION, write_json
from iokit import cli, outputs
from iokit.files import atomic_write_text
from iokit.provenance import git_commit
from workloads import model_spec

COMMAND = "bench.dse"
POINTS_MAX = 10**9


def parser() -> cli.Parser:
    p = cli.Parser(prog="python -m bench.dse", description=__doc__.split("\n\n")[0].split(": ", 1)[-1])
    p.add_argument("space", help="design-space file (TOML; docs/dse.md), e.g. configs/dse/paper.toml")
    p.add_argument("--out", help="results folder (default results/dse-<name>); with --write-hw the TOML file "
                                 "(default hw-<name>-<N>.toml)")
    p.add_argument("--cost-table", metavar="NAME",
                   help="the published table MACs are priced from (accel_sim.cost_tables: horowitz45, the default, "
                        "epfl28, aladdin40); replaces the space file's cost_table")
    p.add_argument("--overwrite", action="store_true", help="replace an existing results folder of this suite")
    p.add_argument("--stream", action="store_true",
                   help="allow a space over --max-points (rows go to points.csv chunk by chunk either way)")
    p.add_argument("--max-points", type=cli.int_in(1, POINTS_MAX), default=DEFAULT_MAX_POINTS, metavar="N",
                   help=f"the most points without --stream (default {DEFAULT_MAX_POINTS:,})")
    spec.add_flags(p, "bench.dse", ["workers"], workers=1)  # the outputs are the same for any N
    p.add_argument("--run", metavar="DIR", help="a finished bench.run results folder: re-price its accuracy "
                                                "curve on every point (tta.csv; docs/dse.md)")
    p.add_argument("--study", metavar="DIR", help="a finished bench.study folder with number formats: price every "
                                                  "point to the target with its own format's accuracy curve "
                                                  "(tta_study.csv, fronts_study.csv; docs/numerics.md)")
    p.add_argument("--setting", metavar="LABEL", help="with --study: its data setting (iid, alpha=0.1) when it has "
                                                      "several")
    p.add_argument("--target", type=cli.finite_float(positive=True, high=100.0), metavar="PCT",
                   help="with --run or --study: the target test accuracy in percent (default: the run's own "
                        "target, the study's first declared one)")
    p.add_argument("--write-hw", type=cli.int_in(0, 2**62), metavar="N",
                   help="write point N's hardware TOML (its grid index: points.csv's 'point') and stop")
    return p


@cli.command("interrupted; nothing written (--out appears only when complete)")
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    with cli.bad_input():
        dse = load_dse(args.space, max_points=args.max_points, stream=args.stream, cost_table=args.cost_table)
        if args.write_hw is not None:
            ignored = [flag for flag, given in (("--run", args.run), ("--target", args.target is not None),
                                                ("--overwrite", args.overwrite), ("--workers", args.workers != 1))
                       if given]
            if ignored:
                raise cli.UsageError(f"--write-hw writes one point's hardware TOML and prices nothing: drop "
                                     f"{', '.join(ignored)}")
            return write_hw(dse, args.write_hw, outputs.out_folder(args.out, f"hw-{dse.name}-{args.write_hw}.toml"))
        for model in dse.models:  # a paper model or package.module:factory, checked before any capture
            model_spec.build(model_spec.as_spec(model, dse.image_size), num_classes=dse.classes)
        if args.target is not None and args.run is None and args.study is None:
            raise cli.UsageError("--target goes with --run or --study; give one or drop --target")
        if args.setting is not None and args.study is None:
            raise cli.UsageError("--setting goes with --study; give --study DIR or drop --setting")
        if args.run is not None and args.study is not None:
            raise cli.UsageError("--run and --study both give the accuracy curve; give one")
        run = rerun.load_run(cli.check_folder(args.run, "--run"), dse, args.target) if args.run else None
        study = accuracy.load_study(cli.check_folder(args.study, "--study"), dse, args.target, args.setting) \
            if args.study else None
        out = outputs.out_folder(args.out, f"results/dse-{dse.name}")
        outputs.check_out(out, command=COMMAND, overwrite=args.overwrite)
    say = lambda line: print(line, file=sys.stderr, flush=True)
    config = dse.config()
    with outputs.claim(out), cli.run_failure():
        started = time.perf_counter()
        works = _capture(dse, say)
        job = _Job(dse, works, run, study, args.workers, tuple(argv), config, time.perf_counter() - started)
        say(f"{dse.name}: {dse.space.size:,} points of {dse.space.grid_size:,} in the grid, "
            f"{len(works)} model-method pair(s)")
        state: dict = {}
        outputs.write_results_dir(out, lambda tmp: _build(job, state, say, tmp), command=COMMAND,
                                  config_sha256=outputs.config_hash(config), version=FORMAT_VERSION,
                                  replace=args.overwrite)
    print("\n".join(state["lines"]))
    print(f"wrote {out}")
    return 0


@dataclass(frozen=True)
class _Job:
    """What one exploration writes from: the space, its captured work, the accuracy curve it re-prices
    (a run's or a study's, or none), the command and the capture's time."""

    dse: Any
    works: dict
    run: Any
    study: Any
    workers: int
    argv: tuple[str, ...]
    config: dict
    capture_s: float


def _capture(dse, say) -> dict:
    """Every model and method's step (or calibration batch) captured once, as ``TraceWork``."""
    works = {}
    for model in dse.models:
        for method in dse.methods:
            say(f"{model}: capturing one {method} {'calibration batch' if method in ('ccvr', 'ffc') else 'step'} "
                f"(batch {dse.batch_size})")
            works[(model, method)] = TraceWork.of(method_trace(model, method, batch_size=dse.batch_size,
                                                               num_classes=dse.classes, image_size=dse.image_size))
    return works


def _plots(dse, found, presets, tmp: Path) -> None:
    """The Pareto figure of each model: every method's fronts, a sample of its points and the presets."""
    from bench.lib.plots.dse import plot_pareto

    for model in dse.models:
        fronts = {(method, "|".join(pair)): found.front(model, method, pair)
                  for method in dse.methods for pair in OBJECTIVE_PAIRS}
        samples = {method: _concat(found.samples.get((model, method), [])) for method in dse.methods}
        mine = presets[presets["model"] == model] if not presets.empty else presets
        name = "pareto.png" if len(dse.models) == 1 else f"pareto_{model}.png"
        save(plot_pareto(model, list(dse.methods), OBJECTIVE_PAIRS, samples, fronts, mine,
                         f"{dse.name}: {found.fitting:,} of {found.points:,} points fit {dse.device.name}"),
             tmp / name)


def _build(job: _Job, state: dict, say, tmp: Path) -> None:
    """The results folder's files into ``tmp``; ``state["lines"]``: what the command prints after."""
    dse, works, run, study = job.dse, job.works, job.run, job.study
    with open(tmp / "points.csv", "w", newline="", encoding="utf-8") as f:
        found = explore(dse, works, points_csv=f, progress=say, workers=job.workers)
    presets = price_presets(dse, works)
    best = report.best_points(dse, found)
    compared = report.same_best(best)
    report.pareto_table(dse, found).to_csv(tmp / "pareto.csv", index=False)
    _plots(dse, found, presets, tmp)
    state["lines"] = report.printout(dse, found, best, compared)
    if run is not None:  # points.csv's price columns read back (6 of ~30)
        tta = pd.DataFrame() if not found.points else rerun.reprice(run, works, pd.read_csv(
            tmp / "points.csv", usecols=["point", "model", "method", "step_latency_s", "step_energy_j", "fits"]))
        tta.to_csv(tmp / "tta.csv", index=False)
        state["lines"] += rerun.printout(run, tta, lambda index: report.design_of_point(dse, index))
    if study is not None:  # points.csv's price, format and resource columns read back
        tta = pd.DataFrame() if not found.points else accuracy.reprice(study, dse, works, pd.read_csv(
            tmp / "points.csv", usecols=["point", "model", "method", "number_format", "step_latency_s",
                                         "step_energy_j", "fits", "asic_area_mm2", "dsp_slices"]))
        tta.to_csv(tmp / "tta_study.csv", index=False)
        accuracy.fronts(tta).to_csv(tmp / "fronts_study.csv", index=False)
        state["study_best"] = accuracy.best_records(tta, lambda index: report.design_of_point(dse, index))
        state["lines"] += accuracy.printout(study, tta, lambda index: report.design_of_point(dse, index))
    write_json(tmp / "summary.json", {
        "format": "fl-accel-bench-results", "version": FORMAT_VERSION, "command": shlex.join(
            ["python", "-m", "bench.dse", *job.argv]), "git_commit": git_commit(), "config": job.config,
        "counts": {"points": found.points, "fitting": found.fitting,
                   "beyond_fold_model": found.beyond_fold_model},
        "timing_s": {"capture": job.capture_s, "pricing": found.pricing_s}, "workers": job.workers,
        "run": None if run is None else {"folder": str(run.folder), "model": run.model,
                                         "target_accuracy_pct": run.target_pct},
        "study": None if study is None else {"folder": str(study.folder), "model": study.model,
                                             "setting": study.setting, "formats": list(study.formats),
                                             "seeds": study.seeds, "target_accuracy_pct": study.target_pct,
                                             "best": state.get("study_best", {})},
        "best": best, "best_compared": compared,
        "presets": [] if presets.empty else presets[
            ["model", "method", "preset", "step_latency_s", "step_energy_j", "asic_area_mm2", "fits"]
        ].to_dict("records")})


def _concat(frames):
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def write_hw(dse, index: int, path: Path) -> int:
    """Point ``index``'s HardwareConfig as a TOML file ``bench.run --hw`` reads (refuses an existing file)."""
    try:
        hw, fmt = dse.space.point(index)
    except SpaceError as err:
        raise DseError(f"--write-hw: {err}") from None
    if path.exists() or path.is_symlink():
        raise DseError(f"--out {path} exists; give a new file name for point {index}'s hardware TOML")
    outputs.check_writable(path, folder=False)
    atomic_write_text(path, hardware_config_toml(hw, f"Point {index} of the design space {dse.name} "
                                                     f"(python -m bench.dse); its MAC number format: {fmt.name}, "
                                                     f"whose word_bytes and energy.mac_pj these are "
                                                     f"(accel_sim.mac_energy.hardware_in_format)"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

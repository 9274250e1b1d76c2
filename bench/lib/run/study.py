"""``bench.run``'s study: every figure for every model, as data (``RunOutputs``), and its files.

``run_study`` prices the paper-shape steps and calibrations while the accuracy runs train (in
worker processes when there are several cores, ``bench.lib.fl.jobs``), then joins them; ``write_files``
writes ``summary.json``, ``ops.csv``, ``layers.csv``, ``breakdown.csv``, ``rounds.csv`` and the
figures (docs/results.md). ``run_point`` is the registered grid runner ``bench.run``
(``bench.lib.grid.runners``): the same study and files for one grid point, whose keys are the
command's flags (``bench.lib.spec.from_point``).
"""

from __future__ import annotations

import math
import shlex
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd
import torch

from bench.lib import formulas
from bench.lib.fl.jobs import resolve_workers, started, threads_per_worker
from bench.lib.grid.runners import grid_runner
from bench.lib.paper import WHY_DIFFERENT
from bench.lib.results import (BREAKDOWN_CSV, COST_COLUMNS, FORMAT_NAME, FORMAT_VERSION, LAYER_KEYS, LAYERS_COLUMNS,
                               LAYERS_CSV, OPS_COLUMNS, OPS_CSV, ROUNDS_CSV, ROUNDS_CSV_COLUMNS, write_json)
from bench.lib.run import compare_hw, figures, formats, reference
from bench.lib.run.breakdown import breakdown
from bench.lib.spec import RUN, RunSpec, from_point
from bench.lib.resolve import ResolvedRun
from bench.lib.run.config import accuracy_note, load_accuracy_data, resolved_runs, split_methods
from iokit.provenance import git_commit
from workloads.fl.execution import kernel_environment


@dataclass(frozen=True)
class RunOutputs:
    """Everything a run writes: the summary, one row per priced op, one row per method and round."""

    summary: dict
    ops: list[dict]
    rounds: list[dict]


def hardware_comparison(cfg: RunSpec, training, calibrations, progress) -> dict:
    """Every method of every model priced on each ``--hw`` accelerator (``bench/lib/run/compare_hw.py``)."""
    hws = compare_hw.load_hardware_set(cfg.compare_hw)
    return compare_hw.comparison({
        m: compare_hw.hardware_figures(m, cfg.model_spec(m), training, calibrations, batch_size=cfg.batch_size,
                                       num_classes=cfg.classes, seed=cfg.seed, hws=hws, progress=progress)
        for m in cfg.models}, hws)


def run_study(runs: Sequence[ResolvedRun], data, progress: Callable[[str], None] | None, command: str) -> RunOutputs:
    """Every figure for every model of ``runs`` (``bench.lib.run.config.resolved_runs``: one resolved
    run per model). ``progress`` takes one message per step (and the federated runs show progress
    bars where stderr is a terminal, never into a pipe or a log file); None runs silently (grid
    points). Raises ValueError / FloatingPointError on a failed accuracy run."""
    first = runs[0]
    cfg, hw, preset, system, execution = first.spec, first.hw, first.preset, first.system, first.execution
    bars = progress is not None and sys.stderr.isatty()
    progress = progress or (lambda msg: None)
    training, calibrations = split_methods(cfg.methods)
    workers = resolve_workers(cfg.workers, len(figures.run_pairs(training + calibrations)), execution.device)
    models, all_ops, ledgers, all_rounds = {}, [], {}, []
    for run in runs:
        model = run.fl.model
        inputs, jobs, pairs, rates = figures.accuracy_runs(run, training + calibrations, data)
        with started(jobs, inputs, workers=workers, progress=progress, bars=bars) as results:
            # with workers, the federated runs train in their processes while this one prices
            # the paper-shape step is a client's: on the client's accelerator (--low-precision-weights: no FP32 master)
            train_figs, op_rows = figures.training_figures(model, training, cfg, run.client_hw, progress)
            calibration = figures.calibration_figures(model, calibrations, hw, progress, spec=cfg.model_spec(model),
                                                      num_classes=cfg.classes)
            outcomes = results()
            accuracy, ledgers[model], round_rows = figures.accuracy_figures(training + calibrations, inputs, jobs,
                                                                            pairs, outcomes)
        # a reference study's runs trained every sampled client: beside a fleet's run they are another
        # experiment, not the same settings (its learning rates still apply: figures.accuracy_runs)
        references = None if run.fleet is not None else reference.reference_figures(
            model, training + calibrations, jobs, accuracy, inputs.fl, reference.studies(), inputs.execution)
        target_pct, target_rule = reference.target(cfg.target_accuracy_pct, preset.accuracy_targets_pct, references)
        all_ops += op_rows
        all_rounds += round_rows
        models[model] = {
            "training": train_figs,
            "calibration": calibration,
            # FedAvg's bytes are always there: Fig. 5 (a) is normalized to them (closed forms, no training)
            "communication": figures.communication_figures(
                model, list(dict.fromkeys(["fedavg", *training, *calibrations])), cfg, execution.comm_format),
            "accuracy": accuracy,
            "learning_rates": rates,
            "hparams": {job.name: job.hp.as_dict() for job in jobs},  # each run's own knobs, as it trained
            "time_to_accuracy": figures.time_to_accuracy_figures(round_rows, target_pct, target_rule),
            "reference": references,
            **({} if run.fleet is None else {"fleet": figures.fleet_figures(inputs, jobs, outcomes)}),
        }
    comparison = {"hardware_comparison": hardware_comparison(cfg, training, calibrations, progress)} \
        if cfg.compare_hw else {}
    summary = {
        "format": FORMAT_NAME, "version": FORMAT_VERSION, "command": command,
        "git_commit": git_commit(), "config": config_record(cfg), "hardware": asdict(hw),
        "execution": execution.describe(), "kernels": kernel_environment(),
        "hardware_label": f"{hw.rows}x{hw.cols} array, {hw.clock_hz / 1e6:g} MHz, "
                          f"DRAM {hw.dram_peak_bytes_per_s / 1e9:g} GB/s peak, dataflow "
                          f"{hw.dataflow_fwd}/{hw.dataflow_dx}/{hw.dataflow_dw}",
        "models": models,
        "number_formats": formats.figures(list(cfg.models), execution.number_format),
        "accuracy_setting": {"preset": preset.name, "fl": trained_setting(preset, cfg), "hparams": preset.hp.as_dict(),
                             "overrides": preset.overrides, "note": accuracy_note(preset), "train_note": data[0].note,
                             "workers": workers, "threads": threads_per_worker(workers) or torch.get_num_threads()},
        "system": system.describe(),
        "ledger_check": ledgers,
        "table1": [asdict(r) for r in formulas.table1(formulas.Table1Setup())],
        "paper_vs_model": figures.paper_vs_model(models),
        "paper_vs_model_explanation": WHY_DIFFERENT,
        **comparison,
    }
    return RunOutputs(summary, all_ops, all_rounds)


def config_record(cfg: RunSpec) -> dict:
    """``cfg`` as ``summary.json`` records it: its fields, an infinite ``deadline_s`` (no deadline)
    as ``"inf"`` (JSON has no infinity; the fleet record spells it the same way)."""
    doc = asdict(cfg)
    return {**doc, "deadline_s": "inf"} if doc["deadline_s"] == math.inf else doc


def trained_setting(preset, cfg: RunSpec) -> dict:
    """The preset's federated setting as the accuracy runs trained it (``figures.accuracy_runs``):
    the run's model (several joined by "+", as in the default folder name) and seed, not the
    preset's."""
    return asdict(replace(preset.fl, model="+".join(cfg.models), seed=cfg.seed))


def layer_rows(op_rows: list[dict]) -> pd.DataFrame:
    ops = pd.DataFrame(op_rows, columns=OPS_COLUMNS)
    return ops.groupby(list(LAYER_KEYS), sort=False, as_index=False)[
        list(COST_COLUMNS)].sum()[list(LAYERS_COLUMNS)]


def write_files(folder: Path, study: RunOutputs) -> None:
    """summary.json, the per-op, per-layer, per-block and per-round CSVs and the figures
    (``bench.lib.plots.run.run_figures``), into ``folder``."""
    from bench.lib.plots.run import plot_run

    ops = pd.DataFrame(study.ops, columns=OPS_COLUMNS)
    ops.to_csv(folder / OPS_CSV, index=False)
    layer_rows(study.ops).to_csv(folder / LAYERS_CSV, index=False)
    breakdown(ops).to_csv(folder / BREAKDOWN_CSV, index=False)
    pd.DataFrame(study.rounds, columns=ROUNDS_CSV_COLUMNS).to_csv(folder / ROUNDS_CSV, index=False)
    write_json(folder / "summary.json", study.summary)
    plot_run(folder)


def point_config(point: Mapping[str, Any]) -> RunSpec:
    """The ``RunSpec`` of one grid point: its keys are ``bench.run``'s flags without the dashes,
    parsed by the command's own flags (``bench.lib.spec.from_point``); a grid gives each point its
    cores, so its runs go one after another unless it sets ``workers``. ValueError naming an
    unknown key or a bad value."""
    if "model" not in point:
        raise ValueError("a bench.run grid point needs 'model'")
    return from_point({"workers": 1, **point}, RUN, where=f"bench.run grid point {dict(point)}")


@grid_runner("bench.run", validate=lambda point: resolved_runs(point_config(point)))
def run_point(point: Mapping[str, Any], out_dir: Path) -> dict[str, float]:
    """One grid point: the same study and files as the command, for one model, written straight
    into ``out_dir`` (the grid's temporary folder). Keys: ``bench.run``'s flags (``point_config``)."""
    runs = resolved_runs(point_config(point))
    study = run_study(runs, load_accuracy_data(runs), None,
                      shlex.join(["bench.grid point", *(f"{k}={v}" for k, v in point.items())]))
    mismatched = figures.ledger_mismatches(study.summary)
    if mismatched:
        raise ValueError(f"the ledger disagrees with the closed forms: {mismatched}")
    write_files(out_dir, study)
    return figures.headline_metrics(study.summary)

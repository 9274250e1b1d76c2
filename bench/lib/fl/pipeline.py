"""``python -m bench.fl`` as library functions: the accuracy and communication of FL methods under
one preset, every round priced on the modeled accelerator.

Four named steps, each a function the command (``bench/fl/__main__.py``) and other code call:

1. ``bench.lib.resolve.resolve``: the preset, the methods and their hyper-parameters, the hardware
   and system files, the execution options, checked (``ResolvedRun``; nothing loaded, nothing
   written), as every command resolves a run;
2. ``load``: the data (subsets, the validation hold-out), the partition, every model built once
   (``bench.lib.fl.jobs.RunInputs``);
3. ``train``: every method trained and priced (``bench.lib.fl.jobs.run_job``), checkpointed per round
   when given a folder for it;
4. ``write``: the results files into a folder (``results.json``, ``accuracy.csv``,
   ``ledger.csv``, ``partition.csv``, ``rounds.csv``; docs/results.md).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.lib.fl.jobs import Job, JobResult, RunInputs, participation_plan, run_inputs, run_job
from bench.lib.resolve import ResolvedRun, fleet_record
from bench.lib.results import FL_RESULTS, FORMAT_NAME, FORMAT_VERSION
from iokit.files import atomic_write_text
from iokit.provenance import git_commit
from workloads.cost.participation import ParticipationPlan, summary_line
from workloads.cost.rounds import RunPricer
from workloads.cost.system import CUMULATIVE_COLUMNS, ROUNDS_COLUMNS
from workloads.fl.comm import closed_form_bytes, closed_form_sizes, ledger_totals
from workloads.fl.execution import kernel_environment
from workloads.fl.local import prepare_model
from workloads.fl.loop import clients_per_round, duration_text, forecast
from workloads.fl.methods import MethodConfig
from workloads.fl.presets import load_data
from workloads.fl.width import submodel

RESULTS_FILES = (FL_RESULTS, "accuracy.csv", "ledger.csv", "partition.csv", "rounds.csv")


def written_files(run: ResolvedRun) -> tuple[str, ...]:
    """The files ``write`` writes: ``RESULTS_FILES``, and on a fleet its figure ``fleet_<model>.png``."""
    if run.fleet is None:
        return RESULTS_FILES
    from bench.lib.plots.fleet import fleet_png

    return (*RESULTS_FILES, fleet_png(run.fl.model))


COMMAND = "bench.fl"


def load(run: ResolvedRun) -> RunInputs:
    """Step 2: the dataset (subsets, hold-out), the partition (``bench.lib.fl.jobs.run_inputs``), and
    every model the methods need, built once so a bad model fails before any training."""
    inputs = run_inputs(run, load_data(run.fl, data_dir=run.spec.data_dir))
    for head in dict.fromkeys(m.head for m in run.methods):
        inputs.build(head)
    return inputs


def checkpoint_path(checkpoints: Path, method: MethodConfig) -> Path:
    return checkpoints / f"{method.name.replace('+', '_')}.pt"


def check_checkpoints(run: ResolvedRun, checkpoints: Path) -> None:
    """Before ``--resume`` does any work: every method's checkpoint that exists can be read (one
    line naming a damaged one; whether it belongs to this run is checked when it is loaded)."""
    from workloads.fl.loop import CHECKPOINT_FORMAT, load_checkpoint_document

    for method in run.methods:
        path = checkpoint_path(checkpoints, method)
        if path.exists():
            doc = load_checkpoint_document(path)
            if doc.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"checkpoint {path} is not a format-{CHECKPOINT_FORMAT} loop checkpoint; delete "
                                 "it to start that method over")


def train(run: ResolvedRun, inputs: RunInputs, *, progress: bool = False, checkpoints: Path | None = None,
          resume: bool = False) -> dict[str, JobResult]:
    """Step 3: a projection of every method's local training first (a few timed steps each; on a
    fleet, of the clients its participation plan lets arrive), then every method trained and
    priced, one after another, sharing one ``RunPricer``."""
    print(f"data: {inputs.train.note}", file=sys.stderr)  # which dataset, which split: in every run's output
    print(f"device: {run.execution.device} ({run.execution.describe()['device_name']})", file=sys.stderr)
    for name, rate in run.rates.items():
        print(f"{name:28s} lr {rate['lr']:g} from {rate['from']}", file=sys.stderr)
    for method in run.methods:
        if method.algo.buffered and run.fleet is None:
            print(f"{method.name:28s} no fleet, so no clock: synchronous rounds, every update fresh (FedAvg's "
                  "rounds; give --fleet for its buffered server)", file=sys.stderr)
    pricer = RunPricer(inputs.priced_model())
    jobs = {method.name: Job(method.name, run.hparams[method.name]) for method in run.methods}
    plans, planning_s = {}, {}
    for name, job in jobs.items():
        start = time.perf_counter()
        plans[name] = participation_plan(inputs, job.method, job.hp, pricer)
        planning_s[name] = time.perf_counter() - start
    forecasts = {}
    for method in run.methods:
        plan = plans[method.name]
        forecasts[method.name] = forecast(method, model_fn=functools.partial(inputs.build, method.head),
                                          train=inputs.train, parts=inputs.parts, cfg=run.fl,
                                          hp=run.hparams[method.name], execution=run.execution,
                                          arrivals=None if plan is None else plan.arrivals)
        print(forecasts[method.name].line(), file=sys.stderr, flush=True)
    total = sum(f.wall_s for f in forecasts.values())
    print(f"projected local training of the whole run: {duration_text(total)}"
          + (" (before resuming: completed rounds will be skipped)" if resume else ""), file=sys.stderr, flush=True)
    outcomes = {}
    for method in run.methods:
        checkpoint = None if checkpoints is None else str(checkpoint_path(checkpoints, method))
        outcome = run_job(jobs[method.name], inputs, pricer=pricer, bars=progress, checkpoint=checkpoint,
                          resume=resume, plan=plans[method.name])
        outcome = replace(outcome, pricing_wall_s=outcome.pricing_wall_s + planning_s[method.name])
        outcomes[method.name] = outcome
        r, rows = outcome.result, outcome.rows
        if outcome.plan is not None:
            print(f"{method.name:28s} {summary_line(outcome.plan.summary(run.fleet))}", file=sys.stderr)
        print(f"{method.name:28s} accuracy {r.accuracy:.4f}"
              + (f" (before calibration {r.accuracy_before_calibration:.4f})" if method.calibration else "")
              + (f"  validation {r.val_accuracy:.4f}" if r.val_accuracy is not None else "")
              + f"  total {ledger_totals(r.transfers)['total_bytes']:,} B  modeled {rows[-1]['cum_wall_s']:.1f} s, "
              f"{rows[-1]['cum_energy_j']:.3g} J  ({outcome.wall_s:.1f} s run + {outcome.pricing_wall_s:.1f} s "
              "pricing)", file=sys.stderr)
    return {"forecasts": forecasts, "outcomes": outcomes}


def closed_form_for(method: MethodConfig, inputs: RunInputs, run: ResolvedRun, plan: ParticipationPlan | None = None) -> dict:
    """The closed-form communication totals (``workloads.fl.comm.closed_form_bytes``) for this run
    (with a fleet's ``plan``: over each round's arrivals, the calibration's too; a width-scaled
    method's plan: each arrival at its submodel's sizes, summed over the widths)."""
    model = prepare_model(inputs.build(method.head), method, seed=run.fl.seed)
    clients = ({"clients_per_round": clients_per_round(run.fl.num_clients, run.fl.participation)} if plan is None
               else plan.closed_form_counts())
    hp, fmt = run.hparams[method.name], run.execution.communication
    if plan is None or not plan.widths:
        return closed_form_bytes(method, hp, closed_form_sizes(model, method, fmt), rounds=run.fl.rounds,
                                 **clients, num_clients=run.fl.num_clients)
    totals = {"down_bytes": 0, "up_bytes": 0, "total_bytes": 0}
    for width in sorted(set(plan.widths)):
        per_round = [sum(plan.widths[k] == width for k in r.arrived) for r in plan.rounds]
        sized = closed_form_bytes(method, hp, closed_form_sizes(submodel(model, width), method, fmt),
                                  rounds=run.fl.rounds, clients_per_round=per_round, num_clients=run.fl.num_clients)
        totals = {key: totals[key] + sized[key] for key in totals}
    return totals


def results_doc(run: ResolvedRun, inputs: RunInputs, trained: dict, command: str) -> dict:
    """results.json: every method's accuracy, history, communication and modeled cost, the resolved
    config, the command and the git commit."""
    import torch

    outcomes, forecasts = trained["outcomes"], trained["forecasts"]
    cfg = run.fl
    methods = {}
    for method in run.methods:
        o = outcomes[method.name]
        r, rows = o.result, o.rows
        methods[method.name] = {
            "accuracy": r.accuracy, "accuracy_before_calibration": r.accuracy_before_calibration,
            "val_accuracy": r.val_accuracy, "val_accuracy_before_calibration": r.val_accuracy_before_calibration,
            "local_accuracy": r.local_accuracy, "local_accuracy_before_calibration": r.local_accuracy_before_calibration,
            "wall_s": round(o.wall_s, 3), "pricing_wall_s": round(o.pricing_wall_s, 3),
            "projected_wall_s": round(forecasts[method.name].wall_s, 3),
            "resumed_after_round": r.resumed_after_round, "samples_trained": r.samples_trained,
            "modeled": {key: rows[-1][key] for key in CUMULATIVE_COLUMNS},
            **({} if o.plan is None else {"fleet": o.plan.summary(run.fleet)}),
            "comm": ledger_totals(r.transfers), "comm_closed_form": closed_form_for(method, inputs, run, o.plan),
            "history": list(r.history)}
    val = inputs.val
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "preset": run.preset.name, "command": command,
            "git_commit": git_commit(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "execution": run.execution.describe(), "kernels": kernel_environment(), "dataset_note": inputs.train.note, "test_note": inputs.test.note,
            "config": asdict(cfg), "hparams": {k: v.as_dict() for k, v in run.hparams.items()},
            "learning_rates": dict(run.rates),
            "targets_accuracy_pct": list(run.preset.accuracy_targets_pct),
            "hardware": asdict(run.hw), "system": run.system.describe(),
            **({} if run.fleet is None else {"fleet": fleet_record(run.fleet, run.classes)}),
            "holdout": {"fraction": cfg.holdout_fraction, "val_samples": 0 if val is None else len(val),
                        "note": None if val is None else val.note},
            "partition_sizes": [int(len(p)) for p in inputs.parts], "methods": methods}


def _csv(rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    return buf.getvalue()


def write(folder: Path, run: ResolvedRun, inputs: RunInputs, trained: dict, doc: dict) -> None:
    """Step 4: every results file into ``folder`` (a temporary folder renamed by the caller)."""
    from workloads.fl.partition import save_partition_summary

    outcomes = trained["outcomes"]
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"  # every figure finite, or an error before writing
    ledger = [["method", "round", "client", "direction", "group", "bytes"]]
    for name, o in outcomes.items():
        ledger += [[name, t.round, t.client, t.direction, t.group, t.nbytes] for t in o.result.transfers]
    save_partition_summary(folder / "partition.csv", inputs.train.y.numpy(), inputs.parts, inputs.train.num_classes)
    atomic_write_text(folder / "ledger.csv", _csv(ledger))
    atomic_write_text(folder / "accuracy.csv", _csv(
        [["method", "accuracy", "accuracy_before_calibration", "val_accuracy", "total_bytes"]]
        + [[m, v["accuracy"], v["accuracy_before_calibration"], v["val_accuracy"], v["comm"]["total_bytes"]]
           for m, v in doc["methods"].items()]))
    rows = [row for o in outcomes.values() for row in o.rows]
    atomic_write_text(folder / "rounds.csv", _csv([list(ROUNDS_COLUMNS)] + [[row[c] for c in ROUNDS_COLUMNS]
                                                                            for row in rows]))
    atomic_write_text(folder / FL_RESULTS, text)
    if run.fleet is not None:  # fleet_<model>.png, drawn from the files just written (bench.lib.plots.run)
        from bench.lib.plots.run import plot_run

        plot_run(folder)

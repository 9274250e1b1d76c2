"""``python -m bench.fl`` as library functions: the accuracy and communication of FL methods under
one preset, every round priced on the modeled accelerator.

Four named steps, each a function the command (``bench/fl/__main__.py``) and other code call:

1. ``resolve``: the preset, the methods and their hyper-parameters, the hardware and system files,
   the execution options, checked (``FLRun``; nothing loaded, nothing written);
2. ``load``: the data (subsets, the validation hold-out), the partition, every model built once
   (``FLData``);
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from accel_sim.hardware import HardwareConfig
from accel_sim.mac_energy import hardware_in_format
from bench.lib.fl.jobs import Job, JobResult, RunInputs, participation_plan, run_job
from bench.lib.resolve import hparams_of, load_spec, preset_of
from bench.lib.results import FL_RESULTS, FORMAT_NAME, FORMAT_VERSION
from bench.lib.spec import RunSpec
from iokit import checks
from iokit.files import atomic_write_text
from iokit.provenance import git_commit
from workloads import model_spec
from workloads.cost.fleet import Fleet, ParticipationPlan, assign_classes, client_formats, summary_line
from workloads.cost.rounds import Device, RunPricer, client_devices, devices_by_round, fleet_devices, fleet_system
from workloads.cost.system import CUMULATIVE_COLUMNS, ROUNDS_COLUMNS, SystemModel
from workloads.fl.comm import closed_form_bytes, closed_form_sizes, ledger_totals
from workloads.fl.data import Dataset
from workloads.fl.execution import Execution, kernel_environment
from workloads.fl.hparams import Hparams
from workloads.fl.local import prepare_model
from workloads.fl.loop import duration_text, forecast, sample_clients
from workloads.fl.methods import MethodConfig, distinct_methods, parse_method
from workloads.fl.presets import Preset, client_data, load_data
from workloads.fl.width import submodel

RESULTS_FILES = (FL_RESULTS, "accuracy.csv", "ledger.csv", "partition.csv", "rounds.csv")


def written_files(run: "FLRun") -> tuple[str, ...]:
    """The files ``write`` writes: ``RESULTS_FILES``, and on a fleet its figure ``fleet_<model>.png``."""
    if run.fleet is None:
        return RESULTS_FILES
    from bench.lib.plots.fleet import fleet_png

    return (*RESULTS_FILES, fleet_png(run.cfg.model))
COMMAND = "bench.fl"


@dataclass(frozen=True)
class FLRun:
    """A run's validated inputs (step 1): nothing heavy has been loaded and nothing written."""

    preset: Preset  # with the command's changes (seed, rounds, hold-out, model) applied
    methods: tuple[MethodConfig, ...]
    hparams: Mapping[str, Hparams]  # per method name
    data_dir: str | None
    classifier: str | None
    hw: HardwareConfig
    system: SystemModel
    devices: tuple[Device, ...]
    execution: Execution
    fleet: Fleet | None = None  # rounds with deadlines on a fleet (docs/fleets.md); then devices and system are its
    classes: tuple[int, ...] = ()  # with a fleet: client k's device class
    rates: Mapping[str, Mapping] = field(default_factory=dict)  # per method: its lr and where it comes from
    by_round: tuple[tuple[Device, ...], ...] = ()  # a precision schedule's devices per round (``devices_by_round``)

    @property
    def cfg(self):
        return self.preset.fl

    def config(self) -> dict[str, Any]:
        """The resolved config, as recorded in results.json and hashed into the folder's manifest
        (a fleet's key only where there is one: a run without one keeps its hash)."""
        doc = {"preset": self.preset.name, "fl": asdict(self.cfg), "methods": [m.name for m in self.methods],
               "hparams": {k: v.as_dict() for k, v in self.hparams.items()}, "classifier": self.classifier,
               "hardware": asdict(self.hw), "system": self.system.describe(),
               "execution": self.execution.settings()}
        return doc if self.fleet is None else {**doc, "fleet": fleet_record(self.fleet, self.classes)}


def fleet_record(fleet: Fleet, classes: Sequence[int]) -> dict:
    """A fleet as results files record it: its classes and rule, and each client's class."""
    return {**fleet.describe(), "client_classes": [fleet.classes[c].name for c in classes]}


def method_list(names: Sequence[str]) -> tuple[MethodConfig, ...]:
    """Method names as given to ``--methods`` (space-separated), each once, parsed."""
    parsed = []
    for name in checks.distinct(list(names), name="--methods"):
        if "," in name:
            raise ValueError(f"--methods {name!r}: give the methods separated by spaces "
                             f"(--methods {' '.join(n for n in name.split(',') if n)})")
        parsed.append(parse_method(name))
    distinct_methods(names, name="--methods")  # one method under two spellings (fedavg+ccvr and ccvr, a path)
    return tuple(parsed)


def resolve(spec: RunSpec) -> FLRun:
    """Step 1: every input of the run ``spec`` checked (ValueError naming it). ``None`` keeps the
    preset's value (its first model where ``spec.models`` is empty); the execution options given
    win over the preset's ``[execution]``; ``fleet_path``: a fleet file (docs/fleets.md), which then
    gives every client's device and link, its round rule replaced by ``deadline_s`` / ``overcommit``
    (only with a fleet: ``run_fleet``); ``lr_from``: each method's learning rate from the preset or
    a covering reference study (``bench.lib.run.reference.rates``), recorded with its source."""
    from bench.lib.run.reference import rates

    if len(spec.models) > 1:
        raise ValueError(f"--models {' '.join(spec.models)}: {COMMAND} trains one model; give --model NAME")
    preset = preset_of(spec, model=spec.models[0] if spec.models else None)
    chosen = method_list(spec.methods if spec.methods is not None else preset.methods)
    jobs, sources = rates([Job(name, hp) for name, hp in hparams_of(preset, chosen).items()], preset.fl.model,
                          preset.fl, preset, spec.lr_from)
    return assemble(spec, preset, chosen, {j.name: j.hp for j in jobs}, sources)


def assemble(spec: RunSpec, preset: Preset, methods: Sequence[MethodConfig], hparams: Mapping[str, Hparams],
             rates: Mapping[str, Mapping] | None = None) -> FLRun:
    """The ``FLRun`` of ``spec`` on ``preset`` (its changes applied) training ``methods`` at
    ``hparams``: what ``spec`` names loaded and checked once (``bench.lib.resolve.load_spec``), as
    ``bench.fl``, a ``bench.study`` cell and ``bench.flower --fleet`` resolve it."""
    loaded = load_spec(spec, preset)
    return fl_run(preset, methods, hparams, spec.data_dir, spec.classifier, loaded.hw, loaded.system,
                  loaded.execution, fleet=loaded.fleet, rates=rates)


def fl_run(preset: Preset, methods: Sequence[MethodConfig], hparams: Mapping[str, Hparams], data_dir: str | None,
           classifier: str | None, hw: HardwareConfig, system: SystemModel, execution: Execution,
           fleet: Fleet | None = None, rates: Mapping[str, Mapping] | None = None) -> FLRun:
    """The ``FLRun`` of these inputs, priced on ``hw`` computing in the run's number format
    (``accel_sim.mac_energy.hardware_in_format``: the format's word size and MAC energy; FP32 leaves
    it as given), and its clients' devices (``client_devices``, each in that format too). With a
    ``fleet``, each client's device and link are its class's (``assign_classes`` from the seed) and
    ``system`` is not used; the server stays on ``hw``. A fleet whose classes declare a number format
    trains and prices each client in its class's (``Execution.client_formats``); the server
    aggregates in FP32 as always. A precision schedule prices each round's clients in that round's
    format (``devices_by_round``); the server stays on ``hw`` (the run's ``number_format``, fp32)."""
    master = not execution.low_precision_weights
    base_hw = hw
    hw = hardware_in_format(hw, execution.number_format, master_weights=master)
    by_round = devices_by_round(execution, preset.fl.rounds, lambda fmt: client_devices(
        system, base_hw, preset.fl.num_clients, seed=preset.fl.seed, number_format=fmt, master_weights=master), fleet)
    if fleet is not None:
        classes = assign_classes(fleet, preset.fl.num_clients, seed=preset.fl.seed)
        execution = replace(execution, client_formats=client_formats(fleet, classes, execution.number_format))
        return FLRun(preset, tuple(methods), hparams, data_dir, classifier, hw, fleet_system(fleet, classes),
                     fleet_devices(fleet, classes, number_format=execution.number_format, master_weights=master),
                     execution, fleet, classes, rates or {})
    devices = client_devices(system, hw, preset.fl.num_clients, seed=preset.fl.seed,
                             number_format=execution.number_format, master_weights=master)
    return FLRun(preset, tuple(methods), hparams, data_dir, classifier, hw, system, devices, execution,
                 rates=rates or {}, by_round=by_round)


@dataclass(frozen=True)
class FLData:
    """The data, partition and model builder of a run (step 2)."""

    inputs: RunInputs  # what every method's job shares
    clients_per_round: int

    @property
    def train(self) -> Dataset:
        return self.inputs.train


def load(run: FLRun) -> FLData:
    """Step 2: the dataset (subsets, hold-out), the partition, and every model the methods need,
    built once so a bad model fails before any training."""
    cfg = run.cfg
    train, test = load_data(cfg, data_dir=run.data_dir)
    train, val, parts = client_data(train, cfg)
    spec = model_spec.ModelSpec(cfg.model, tuple(train.x.shape[1:]), run.classifier)
    inputs = RunInputs(spec, cfg, train, test, tuple(parts), run.hw, run.system, run.devices, cfg.seed, run.execution, val,
                       run.fleet, run.classes, run.by_round)
    for head in dict.fromkeys(m.head for m in run.methods):
        inputs.build(head)
    clients_per_round = len(sample_clients(cfg.num_clients, cfg.participation, seed=cfg.seed, round=1))
    return FLData(inputs, clients_per_round)


def checkpoint_path(checkpoints: Path, method: MethodConfig) -> Path:
    return checkpoints / f"{method.name.replace('+', '_')}.pt"


def check_checkpoints(run: FLRun, checkpoints: Path) -> None:
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


def train(run: FLRun, data: FLData, *, progress: bool = False, checkpoints: Path | None = None,
          resume: bool = False) -> dict[str, JobResult]:
    """Step 3: a projection of every method's local training first (a few timed steps each; on a
    fleet, of the clients its participation plan lets arrive), then every method trained and
    priced, one after another, sharing one ``RunPricer``."""
    inputs = data.inputs
    print(f"data: {inputs.train.note}", file=sys.stderr)  # which dataset, which split: in every run's output
    print(f"device: {run.execution.device} ({run.execution.describe()['device_name']})", file=sys.stderr)
    for name, rate in run.rates.items():
        print(f"{name:28s} lr {rate['lr']:g} from {rate['from']}", file=sys.stderr)
    for method in run.methods:
        if method.algo.buffered and run.fleet is None:
            print(f"{method.name:28s} no fleet, so no clock: synchronous rounds, every update fresh (FedAvg's "
                  "rounds; give --fleet for its buffered server)", file=sys.stderr)
    pricer = RunPricer(inputs.run_spec())
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
                                          train=inputs.train, parts=inputs.parts, cfg=run.cfg,
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


def closed_form_for(method: MethodConfig, data: FLData, run: FLRun, plan: ParticipationPlan | None = None) -> dict:
    """The closed-form communication totals (``workloads.fl.comm.closed_form_bytes``) for this run
    (with a fleet's ``plan``: over each round's arrivals, the calibration's too; a width-scaled
    method's plan: each arrival at its submodel's sizes, summed over the widths)."""
    model = prepare_model(data.inputs.build(method.head), method, seed=run.cfg.seed)
    clients = {"clients_per_round": data.clients_per_round} if plan is None else plan.closed_form_counts()
    if plan is None or not plan.widths:
        return closed_form_bytes(method, run.hparams[method.name], rounds=run.cfg.rounds,
                                 **clients, num_clients=run.cfg.num_clients,
                                 **closed_form_sizes(model, method, run.execution.communication))
    totals = {"down_bytes": 0, "up_bytes": 0, "total_bytes": 0}
    for width in sorted(set(plan.widths)):
        per_round = [sum(plan.widths[k] == width for k in r.arrived) for r in plan.rounds]
        sized = closed_form_bytes(method, run.hparams[method.name], rounds=run.cfg.rounds, clients_per_round=per_round,
                                  num_clients=run.cfg.num_clients,
                                  **closed_form_sizes(submodel(model, width), method, run.execution.communication))
        totals = {key: totals[key] + sized[key] for key in totals}
    return totals


def results_doc(run: FLRun, data: FLData, trained: dict, command: str) -> dict:
    """results.json: every method's accuracy, history, communication and modeled cost, the resolved
    config, the command and the git commit."""
    import torch

    outcomes, forecasts = trained["outcomes"], trained["forecasts"]
    inputs, cfg = data.inputs, run.cfg
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
            "comm": ledger_totals(r.transfers), "comm_closed_form": closed_form_for(method, data, run, o.plan),
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


def write(folder: Path, run: FLRun, data: FLData, trained: dict, doc: dict) -> None:
    """Step 4: every results file into ``folder`` (a temporary folder renamed by the caller)."""
    from workloads.fl.partition import save_partition_summary

    inputs, outcomes = data.inputs, trained["outcomes"]
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

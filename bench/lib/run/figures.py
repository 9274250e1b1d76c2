"""The figures of ``bench.run``: Fig. 5's training, calibration and communication at the paper's
shapes, the accuracy runs' accuracy, priced rounds and time-to-accuracy, and the paper's claims
beside ours (SphereFed, Dong et al., ECCV 2022, Sec. 5.4, Fig. 5, Table 1)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from accel_sim.formats import NumberFormat
from accel_sim.hardware import HardwareConfig
from bench.lib import formulas
from bench.lib.fl.jobs import Job, JobResult, RunInputs, run_inputs
from bench.lib.paper import PAPER, PAPER_CLAIMS, saving_pct
from bench.lib.resolve import ResolvedRun
from bench.lib.run.breakdown import energy_by_kind
from bench.lib.run.config import job_name, run_pairs
from bench.lib.spec import RunSpec
from workloads import model_spec
from workloads.cost.calibration import calibration_cost
from workloads.cost.step import method_step_trace, simulate_complete
from workloads.cost.system import time_to_accuracy
from workloads.fl.comm import closed_form_bytes, closed_form_sizes, ledger_totals
from workloads.fl.hparams import Hparams
from workloads.fl.local import prepare_model
from workloads.fl.loop import clients_per_round
from workloads.fl.methods import MethodConfig, calibration_named, is_calibration, parse_method
from workloads.model_spec import ModelSpec, as_spec

Progress = Callable[[str], None]


def op_row(model: str, method: str, region: str, c, clock_hz: float) -> dict:
    """One ``ops.csv`` row of a priced op (``bench.lib.results.OPS_COLUMNS``)."""
    return {"model": model, "method": method, "region": region, "idx": c.idx, "aten": c.aten, "layer": c.layer,
            "phase": c.phase, "work": f"{c.work_kind}:{c.work_op}" if c.work_op else c.work_kind,
            "gemm_groups": c.gemm_groups, "macs": c.macs, "total_cycles": c.total_cycles,
            "latency_s": c.total_cycles / clock_hz, "compute_cycles": c.compute_cycles,
            "stall_cycles": c.stall_cycles, "energy_j": c.energy_j,
            **{f"energy_{k}_j": v for k, v in c.energy.by_component_j().items()}}


def training_figures(model: str, methods: Sequence[str], cfg: RunSpec, hw: HardwareConfig,
                     progress: Progress) -> tuple[dict, list[dict]]:
    """Per method: the priced step at the paper's shapes, the round, the peak; plus per-op rows."""
    steps_per_round = PAPER.steps_per_round(cfg.batch_size)
    figures, op_rows = {}, []
    for method in methods:
        progress(f"{model}: capturing and pricing one {method} training step (batch {cfg.batch_size})")
        trace = method_step_trace(cfg.model_spec(model), method, batch_size=cfg.batch_size, num_classes=cfg.classes,
                                  image_size=PAPER.image_size, seed=cfg.seed)
        report = simulate_complete(trace, hw, f"{model} {method} training step")
        figures[method] = {
            "step_total_cycles": report.total_cycles, "step_latency_s": report.latency_s,
            "steps_per_round": steps_per_round, "round_latency_s": report.latency_s * steps_per_round,
            "peak_memory_bytes": report.peak_memory_bytes, "peak_memory_by_kind_bytes": dict(report.peak.by_kind_bytes),
            "macs": report.macs, "unsupported_ops": report.unsupported_ops(),
            "step_energy_j": report.energy_j, "round_energy_j": report.energy_j * steps_per_round,
            "step_energy_by_component_j": report.energy.by_component_j(),
            "step_energy_by_kind_j": energy_by_kind(report),
        }
        op_rows += [op_row(model, method, "training", c, hw.clock_hz) for c in report.ops]
    return figures, op_rows


def calibration_figures(model: str, calibrations: Sequence[str], hw: HardwareConfig, progress: Progress, *,
                        spec: ModelSpec | None = None, num_classes: int = PAPER.num_classes) -> dict:
    """Per calibration: the average client plus the server at the paper's setting."""
    out = {}
    for calibration in calibrations:
        progress(f"{model}: pricing {calibration} calibration (average client + server)")
        cost = calibration_cost(calibration, spec or model, train_samples=PAPER.train_samples,
                                num_clients=PAPER.num_clients, num_classes=num_classes, image_size=PAPER.image_size,
                                hp=Hparams(), hw=hw)
        out[calibration] = {"client_total_cycles": cost.client_total_cycles, "server_total_cycles": cost.server_total_cycles,
                            "latency_s": cost.latency_s, "client_energy_j": cost.client_energy_j,
                            "server_energy_j": cost.server_energy_j, "energy_j": cost.energy_j}
    return out


def comm_method(name: str) -> MethodConfig:
    """The FL method whose communication a Fig. 5 (a) bar shows (calibrations on their base)."""
    return parse_method(f"{calibration_named(name).trained_with}+{name}" if is_calibration(name) else name)


def model_closed_form_bytes(model_name: str | ModelSpec, method: MethodConfig, hp: Hparams, *, num_classes: int,
                            image_size: int, rounds: int, num_clients: int, seed: int,
                            comm_format: str = "fp32", clients_per_round: Sequence[int] | None = None,
                            calibration_clients: int | None = None) -> dict[str, int]:
    """``closed_form_bytes`` of the FL code for a whole run, from the prepared model's shapes
    (``closed_form_sizes``: per sharing layer, so double head's gradual sharing and local head count
    as the ledger does), each tensor as sent in ``comm_format``; every client in every round, or
    ``clients_per_round`` and ``calibration_clients`` (a fleet's arrivals:
    ``ParticipationPlan.closed_form_counts``)."""
    torch.manual_seed(seed)
    model = prepare_model(model_spec.build(as_spec(model_name, image_size), num_classes=num_classes,
                                           head=method.head), method, seed=seed)
    return closed_form_bytes(method, hp, closed_form_sizes(model, method, NumberFormat.parse(comm_format)),
                             rounds=rounds, num_clients=num_clients,
                             clients_per_round=num_clients if clients_per_round is None else clients_per_round,
                             calibration_clients=calibration_clients)


def communication_figures(model: str, names: Sequence[str], cfg: RunSpec, comm_format: str = "fp32") -> dict:
    """Fig. 5 (a) for the paper's run (its tensors sent in ``comm_format``), and the classifier's
    share from Table 1's closed forms (FP32, as the paper counts)."""
    setup = formulas.Table1Setup(feature_dim=model_spec.build(cfg.model_spec(model), num_classes=cfg.classes).feature_dim,
                                 num_classes=cfg.classes)
    table1_name = {"fedavg": "fedavg", "ccvr": "ccvr", "spherefed": "spherefed", "ffc": "spherefed"}
    out = {}
    for name in names:
        method = comm_method(name)
        totals = model_closed_form_bytes(cfg.model_spec(model), method, Hparams(), num_classes=cfg.classes,
                                         image_size=PAPER.image_size, rounds=PAPER.rounds,
                                         num_clients=PAPER.num_clients, seed=cfg.seed, comm_format=comm_format)
        out[name] = {"method": method.name, "total_bytes": totals["total_bytes"],
                     "per_client_bytes": totals["total_bytes"] // PAPER.num_clients}
        if name in table1_name:
            out[name]["classifier_per_client_bytes_table1"] = formulas.per_client_bytes(table1_name[name], setup)
    return out


def accuracy_runs(run: ResolvedRun, names: Sequence[str], data) -> tuple[RunInputs, list[Job], list[tuple], dict]:
    """The federated runs of ``run`` (one model of bench.run, ``bench.lib.resolve.resolve``) that
    give ``names``' accuracies, what they share (``run_inputs``: the data held out and partitioned
    as bench.fl and bench.study do), each job's (base name, calibration) pair, and where each job's
    learning rate comes from (resolved: the preset's, or with ``lr_from = "study"`` a covering
    reference study's); with a fleet, rounds with its deadline on its devices."""
    pairs = run_pairs(names)
    jobs = [Job(job_name(base, calib), run.hparams[parse_method(job_name(base, calib)).name]) for base, calib in pairs]
    return run_inputs(run, data), jobs, pairs, {job.name: run.rates[job.method.name] for job in jobs}


def accuracy_figures(names: Sequence[str], inputs: RunInputs, jobs: list[Job], pairs: list[tuple],
                     results: list[JobResult]) -> tuple[dict, dict, list[dict]]:
    """Accuracy per method from the runs' results (calibrations reuse their base run), every round
    priced (``rounds.csv`` rows, labelled with ``names``), and the ledger check: every run's ledger
    total against ``closed_form_bytes`` at the run's own settings (its clients per round from the
    participation, ``workloads.fl.loop.clients_per_round``, or a fleet's arrivals)."""
    training = [n for n in names if not is_calibration(n)]
    fl, num_classes = inputs.fl, inputs.train.num_classes
    accuracy, ledger, rounds = {}, {}, {}
    for job, (base, calibration), outcome in zip(jobs, pairs, results):
        result = outcome.result
        if calibration:
            accuracy[calibration] = {"accuracy_pct": 100 * result.accuracy}
            rounds[calibration] = outcome.rows
        if base in training:
            before = result.accuracy_before_calibration if calibration else result.accuracy
            accuracy[base] = {"accuracy_pct": 100 * before}
            rounds[base] = [row for row in outcome.rows if row["stage"] == "train"]
        closed = model_closed_form_bytes(inputs.spec, job.method, job.hp, num_classes=num_classes,
                                         image_size=int(inputs.train.x.shape[-1]), rounds=fl.rounds,
                                         num_clients=fl.num_clients, seed=inputs.seed,
                                         comm_format=inputs.execution.comm_format,
                                         **({"clients_per_round": clients_per_round(fl.num_clients, fl.participation)}
                                            if outcome.plan is None else outcome.plan.closed_form_counts()))
        ledger[job.name] = {"ledger": {"total_bytes": ledger_totals(result.transfers)["total_bytes"]},
                            "closed_form": {"total_bytes": closed["total_bytes"]}}
    round_rows = [{"model": fl.model, **row, "method": name} for name in names for row in rounds[name]]
    return {n: accuracy[n] for n in names}, ledger, round_rows


def time_to_accuracy_figures(round_rows: list[dict], target_pct: float | None, rule: str) -> dict:
    """Per method, the modeled wall time, device time, energy and bytes to first reach the target
    (fixed before the run: ``bench.lib.run.reference.target``; None: no target, no figures)."""
    if target_pct is None:
        return {"target_accuracy_pct": None, "rule": rule, "methods": {}}
    reached = time_to_accuracy(round_rows, target_pct / 100)
    return {"target_accuracy_pct": target_pct, "rule": rule,
            "methods": {m: {"reached": t.reached, "round": t.round, "wall_s": t.wall_s, "device_s": t.device_s,
                            "energy_j": t.energy_j, "bytes": t.bytes} for m, t in reached.items()}}


def paper_vs_model(models: dict) -> list[dict]:
    """Each of the paper's claims beside ours, with the model that saves most."""
    rows = []
    for claim, section, metric, base, other, paper in PAPER_CLAIMS:
        ours = {m: saving_pct(s[section][base][metric], s[section][other][metric])
                for m, s in models.items() if base in s[section] and other in s[section]}
        if ours:
            best = max(ours, key=ours.get)
            rows.append({"claim": claim, "paper_up_to_pct": paper, "model_up_to_pct": ours[best],
                         "model_with_most": best, "model_pct_by_model": ours})
    return rows


def fleet_figures(inputs: RunInputs, jobs: list[Job], results: list[JobResult]) -> dict:
    """Per federated run on a fleet, its participation plan's totals (``ParticipationPlan.summary``:
    updates sampled and arrived, dropped by reason, each class's peak memory and whether it fits)."""
    return {**inputs.fleet.describe(),
            "methods": {job.name: outcome.plan.summary(inputs.fleet) for job, outcome in zip(jobs, results)}}


def ledger_mismatches(summary: dict) -> dict[str, dict]:
    """Every run whose ledger total differs from the closed form (there should be none), keyed
    ``"<model> <run>"``, with its two totals."""
    return {f"{m} {r}": {"ledger_bytes": v["ledger"]["total_bytes"], "closed_form_bytes": v["closed_form"]["total_bytes"]}
            for m, runs in summary["ledger_check"].items() for r, v in runs.items()
            if v["ledger"]["total_bytes"] != v["closed_form"]["total_bytes"]}


def headline_metrics(summary: dict) -> dict[str, float]:
    """Flat ``<model>.<method>.<figure>`` numbers of a run, for grid tables."""
    out: dict[str, float] = {}
    for model, s in summary["models"].items():
        for method, v in s["training"].items():
            for key in ("step_latency_s", "round_latency_s", "peak_memory_bytes", "step_energy_j", "round_energy_j"):
                out[f"{model}.{method}.{key}"] = v[key]
        for method, v in s["calibration"].items():
            out[f"{model}.{method}.calibration_latency_s"] = v["latency_s"]
            out[f"{model}.{method}.calibration_energy_j"] = v["energy_j"]
        for method, v in s["communication"].items():
            out[f"{model}.{method}.total_bytes"] = v["total_bytes"]
        for method, v in s["accuracy"].items():
            out[f"{model}.{method}.accuracy_pct"] = v["accuracy_pct"]
        for method, v in s.get("fleet", {}).get("methods", {}).items():
            out[f"{model}.{method}.fleet_arrived"] = v["arrived"]
            out[f"{model}.{method}.fleet_sampled"] = v["sampled"]
        for method, v in s["time_to_accuracy"]["methods"].items():
            if v["reached"]:
                for key in ("wall_s", "energy_j", "bytes"):
                    out[f"{model}.{method}.tta_{key}"] = v[key]
    return out

"""``python -m bench.run --model mobilenetv2``: SphereFed's efficiency study (Table 1, Fig. 5, Sec. 5.4).

For every model it reports, on the modeled accelerator (``accel_sim``, ``--hw``):

* one-round local training, FedAvg vs SphereFed: latency (cycles, seconds, and the round: E local
  epochs over the average client's |D| / K samples) and peak memory with its breakdown, from one
  step of the federated loop's own client trainer captured at the paper's shapes (CIFAR-100:
  3x32x32, 100 classes, ``--batch-size`` 64);
* calibration, CCVR vs FFC: the average client plus the server (``workloads.fl.calibration_cost``);
* communication for the paper's run (10 clients, 100 rounds, every client every round): whole-model
  totals from the FL code's closed forms (``workloads.fl.comm.closed_form_bytes``) and the
  classifier's share from Table 1's (``bench.formulas``); the accuracy run's ledger is checked
  against the same closed forms at its own settings;
* accuracy of the same methods from a federated run with the same model code, every round priced
  on the accelerator (``workloads.fl.round_cost``: ``rounds.csv``) and the time, energy and bytes
  each method needs to reach a target accuracy (time-to-accuracy, ``tta.png``). ``--preset``
  names a TOML file under ``configs/presets/`` (or a path): ``quick`` (default) is a real
  comparison on the offline scikit-learn digits that fits the command in a few minutes on a 2-core
  CPU (not the paper's data: the output says so); ``smoke`` the smallest run, for grids;
  ``paper --data-dir`` uses CIFAR-100 with the paper's settings (hours on a GPU). The preset's
  ``model`` and ``methods`` are ignored: ``--model`` and ``--methods`` decide.

It prints one table (absolute and normalized to FedAvg / CCVR, as Fig. 5) and the paper's claims
beside ours, and writes ``results/<run>/`` (docs/results.md) through a temporary folder renamed
at the end. All arguments are checked, and the dataset loaded, before any work.
"""

from __future__ import annotations

import math
import shlex
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
import torch

from accel_sim.hardware import HardwareConfig, HardwareConfigError, load_hardware_config
from accel_sim.rounds import DEFAULT_TARGET_FRACTION, SystemModel, default_target, load_system_model, time_to_accuracy
from bench import compare_hw, formulas
from bench.accuracy_jobs import Job, JobResult, RunInputs, resolve_workers, started, threads_per_worker
from bench.breakdown import breakdown, energy_by_kind
from bench.plots import plot_run
from bench.paper import PAPER_CLAIMS, saving_pct
from bench.results import (BREAKDOWN_CSV, COST_COLUMNS, FORMAT_NAME, FORMAT_VERSION, LAYERS_COLUMNS, LAYERS_CSV,
                           OPS_COLUMNS, OPS_CSV, ROUNDS_CSV, ROUNDS_CSV_COLUMNS, ResultsError, check_out_dir,
                           write_json, write_run_dir)
from bench.traces import local_training_trace
from bench.tta import format_time_to_accuracy, plot_time_to_accuracy
from workloads.fl.calibration_cost import TRAINED_WITH, calibration_cost
from workloads.fl.comm import closed_form_bytes, closed_form_sizes
from workloads.fl.data import Dataset, load_dataset, subset
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import prepare_model
from workloads.fl.execution import Execution, add_execution_args, execution_from_args, resolve_device
from workloads.fl.methods import CALIBRATIONS, MethodConfig, parse_method
from workloads.fl.round_cost import client_devices
from workloads.fl.run import DEFAULT_SYSTEM, load_preset, make_partition, method_hparams
from workloads.fl.step_cost import simulate_complete
from workloads import cli, model_spec
from workloads.model_spec import DEFAULT_INPUT_SHAPE, ModelSpec, as_spec, parse_input_shape
from workloads.models import MODELS
from workloads.provenance import git_commit

DEFAULT_METHODS = ("fedavg", "spherefed", "ccvr", "ffc")
PAPER_CLASSES = 100  # CIFAR-100 (Fig. 5)
PAPER_IMAGE_SIZE = 32
PAPER_CLIENTS = 10  # Sec. 5.1
PAPER_ROUNDS = 100  # Table 16
PAPER_DATASET = "cifar100"
PAPER_TRAIN_SAMPLES = 50_000  # CIFAR-100 train split
WHY_DIFFERENT = (
    "Our figures price the real autograd graph of one step on the modeled array: SphereFed removes "
    "only the classifier's weight gradient and momentum (l x C = 0.05% of a MobileNetV2 step's MACs) "
    "and adds FeatureNorm and the MSE loss, so one-round latency barely moves; its peak memory is "
    "lower by the classifier's gradient and momentum only, activations dominate. The paper's board, "
    "memory manager and batch are not published; the sweep (python -m bench.sweep) shows how far "
    "each unpublished parameter moves our figures. FFC vs CCVR: both clients extract the same "
    "features; CCVR's server samples and re-trains (10 epochs assumed, unpublished)."
)


@dataclass(frozen=True)
class Preset:
    """The accuracy run's settings, read from ``configs/presets/<name>.toml`` (the FL CLI's presets)."""

    name: str
    fl: FLConfig  # model and methods are bench.run's own
    hp: Hparams  # defaults for every method
    overrides: dict  # [methods.<name>] tables
    execution: dict  # [execution]: throughput and data-path options (workloads.fl.execution.OPTIONS)

    def hparams(self, method: MethodConfig) -> Hparams:
        return method_hparams(method, self.hp, self.overrides)

    @property
    def note(self) -> str:
        """One line on what the accuracy run is, and that it is not the paper's where it is not."""
        f, hp = self.fl, self.hp
        size = f"{f.image_size}x{f.image_size} inputs, " if f.image_size else ""
        what = (f"{size}{f.num_clients} clients, {f.partition} {f.alpha:g}, {f.rounds} round(s) of {hp.local_epochs} "
                f"local epoch(s), batch {hp.batch_size}")
        if f.dataset == PAPER_DATASET:
            return f"{f.dataset}: {what} (SphereFed Sec. 5.1 / Table 16)"
        return (f"{f.dataset} (offline, not the paper's CIFAR-100; accuracy not comparable with the paper's): "
                f"{what}")


def load_bench_preset(name: str, alpha: float | None) -> Preset:
    preset = load_preset(name)
    fl = replace(preset.fl, eval_every=1) if alpha is None else replace(preset.fl, eval_every=1, alpha=alpha)
    return Preset(preset.name, fl, preset.hp, preset.overrides, preset.execution)


@dataclass(frozen=True)
class RunConfig:
    models: tuple[str, ...]
    methods: tuple[str, ...]
    batch_size: int
    seed: int
    preset: str
    data_dir: str | None
    hw_path: str | None
    out: str
    overwrite: bool
    alpha: float | None = None  # overrides the preset's Dirichlet concentration
    target_accuracy_pct: float | None = None  # time-to-accuracy target (None: the default rule)
    system_path: str = str(DEFAULT_SYSTEM)  # clients' links and devices (accel_sim.rounds)
    input_shape: tuple[int, int, int] | None = None  # --input-shape; None: 3x32x32 priced, the preset's size trained
    classifier: str | None = None  # the nn.Linear the methods act on (user models; None: the last one)
    classes: int = PAPER_CLASSES  # C of the priced figures (the accuracy run has its dataset's)
    compare_hw: tuple[str, ...] = ()  # every --hw when several are given (bench/compare_hw.py); the first is hw_path
    workers: int | None = None  # accuracy runs side by side (bench/accuracy_jobs.py); None: one per run, <= cores
    device: str = "auto"  # where the accuracy runs train (workloads.fl.execution.resolve_device)
    augment: bool | None = None  # --augment / --no-augment; None: the preset's [execution] (else off)
    channels_last: bool | None = None  # likewise
    bf16: bool | None = None
    compile: bool | None = None

    def execution(self, preset: Preset) -> Execution:
        """Where and how the accuracy runs train: --device, and each option from its flag or the preset."""
        return execution_from_args(self, preset.execution)

    def spec(self, model: str, input_shape: tuple[int, ...] | None = None) -> ModelSpec:
        """``model`` at ``input_shape`` (default: --input-shape, else 3x32x32) with --classifier."""
        return ModelSpec(model, input_shape or self.input_shape or DEFAULT_INPUT_SHAPE, self.classifier)


# ---- argument checking -------------------------------------------------------------------------


def _split_methods(methods) -> tuple[list[str], list[str]]:
    """(training methods, calibrations); raises ValueError naming a bad one."""
    training, calibrations = [], []
    for name in methods:
        if name in CALIBRATIONS:
            calibrations.append(name)
            continue
        method = parse_method(name)
        if method.calibration:
            raise ValueError(f"method {name!r}: give calibrations on their own ({', '.join(sorted(CALIBRATIONS))}): "
                             f"CCVR is priced on FedAvg, FFC on SphereFed")
        training.append(name)
    if training and "fedavg" not in training:
        raise ValueError("the training methods are normalized to FedAvg: include 'fedavg' in --methods")
    if calibrations and "ccvr" not in calibrations:
        raise ValueError("calibrations are normalized to CCVR: include 'ccvr' in --methods")
    return training, calibrations


def parse_args(argv=None) -> RunConfig:
    p = cli.Parser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--model", help=f"one model ({', '.join(sorted(MODELS))}, or package.module:factory, "
                                   "torchvision:NAME, timm:NAME: docs/byom.md)")
    p.add_argument("--models", nargs="+", metavar="MODEL", help="several models")
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), metavar="METHOD",
                   help=f"training methods (any FL method, e.g. fedprox, fedavg+spherefed) and calibrations "
                        f"(ccvr, ffc); default: {' '.join(DEFAULT_METHODS)}")
    p.add_argument("--batch-size", type=cli.int_in(1, cli.BATCH_SIZE_MAX), default=64,
                   help=f"local batch size of the priced step (default 64, at most {cli.BATCH_SIZE_MAX:,})")
    p.add_argument("--seed", type=cli.int_in(0, cli.SEED_MAX), default=0, help=f"0 to {cli.SEED_MAX:,} (default 0)")
    p.add_argument("--preset", default="quick",
                   help="accuracy run settings: a name under configs/presets/ (quick, smoke, paper, ...) or a .toml "
                        "path (default quick)")
    p.add_argument("--data-dir", help="dataset folder (needed by --preset paper: CIFAR-100)")
    p.add_argument("--hw", nargs="+", metavar="HW_TOML",
                   help="hardware config TOML (default: accel_sim's paper defaults); several: each priced side "
                        "by side, the first is the run's (docs/byom.md)")
    p.add_argument("--out", help="results folder (default results/<models>-<preset>)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    p.add_argument("--alpha", type=cli.finite_float(positive=True), help="Dirichlet concentration of the accuracy run (default: the preset's)")
    p.add_argument("--target", type=cli.finite_float(), metavar="PCT",
                   help="time-to-accuracy target, test accuracy in percent (default: "
                        f"{100 * DEFAULT_TARGET_FRACTION:g} %% of the best final accuracy among the methods)")
    p.add_argument("--system", default=str(DEFAULT_SYSTEM),
                   help="system-model TOML of the priced rounds: links and devices (default configs/system/default.toml)")
    p.add_argument("--input-shape", metavar="C,H,W",
                   help="one sample's input shape, priced and trained (3,S,S; default: 3,32,32 priced, the "
                        "preset's size trained)")
    p.add_argument("--classifier", metavar="DOTTED.NAME", help="the nn.Linear the methods act on (default: the last)")
    p.add_argument("--classes", type=cli.int_in(1, cli.CLASSES_MAX), default=PAPER_CLASSES,
                   help=f"classes of the priced figures (default 100, at most {cli.CLASSES_MAX:,})")
    p.add_argument("--workers", type=cli.int_in(1, 1024), metavar="N",
                   help="federated runs side by side in N processes, each with cores/N torch threads (default: one "
                        "per run, at most one per core; 1: one after another in this process)")
    add_execution_args(p)
    a = p.parse_args(argv)
    if a.model and a.models:
        p.error(f"give either --model {a.model} or --models {' '.join(a.models)}, not both")
    models = tuple(a.models or ([a.model] if a.model else []))
    if not models:
        p.error("give --model NAME or --models NAME [NAME ...]")
    out = a.out or str(Path("results") / f"{'+'.join(models).replace(':', '-')}-{Path(a.preset).stem}")
    try:
        shape = parse_input_shape(a.input_shape) if a.input_shape else None
    except ValueError as exc:
        p.error(str(exc))
    hws = tuple(a.hw or ())
    return RunConfig(models, tuple(a.methods), a.batch_size, a.seed, a.preset, a.data_dir, hws[0] if hws else None,
                     out, a.overwrite, a.alpha, a.target, a.system, shape, a.classifier, a.classes,
                     hws if len(hws) > 1 else (), a.workers, a.device, a.augment, a.channels_last, a.bf16, a.compile)


def validate(cfg: RunConfig) -> tuple[HardwareConfig, Preset, SystemModel]:
    """Every check that needs no heavy work; raises ValueError / HardwareConfigError / ResultsError."""
    _split_methods(cfg.methods)
    resolve_device(cfg.device)
    check_models(cfg, classes=cfg.classes, input_shape=cfg.spec("").input_shape)
    if cfg.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {cfg.batch_size}")
    if cfg.alpha is not None and not cfg.alpha > 0:
        raise ValueError(f"--alpha must be positive, got {cfg.alpha}")
    if cfg.target_accuracy_pct is not None and not 0 < cfg.target_accuracy_pct <= 100:
        raise ValueError(f"--target is a test accuracy in percent, in (0, 100]; got {cfg.target_accuracy_pct}")
    preset = load_bench_preset(cfg.preset, cfg.alpha)
    if preset.fl.dataset != "digits" and not cfg.data_dir:
        raise ValueError(f"--preset {cfg.preset} needs --data-dir pointing at {preset.fl.dataset} "
                         "(nothing can be downloaded here)")
    if cfg.data_dir:
        cli.check_folder(cfg.data_dir, "--data-dir")
    hw = load_hardware_config(cfg.hw_path) if cfg.hw_path else HardwareConfig()
    compare_hw.load_hardware_set(cfg.compare_hw)
    system = load_system_model(cfg.system_path)
    client_devices(system, hw, preset.fl.num_clients, seed=cfg.seed)  # loads every per-client hardware file
    return hw, preset, system


def check_models(cfg: RunConfig, *, classes: int, input_shape: tuple[int, ...]) -> None:
    """Build every model once (import, classifier, input shape: docs/byom.md; SphereFed's C <= l);
    ValueError (ModelSpecError) if one cannot be built."""
    training, calibrations = _split_methods(cfg.methods)
    spherefed = any(parse_method(m).spherefed for m in training) or "ffc" in calibrations
    if cfg.input_shape and (cfg.input_shape[0], cfg.input_shape[1]) != (3, cfg.input_shape[2]):
        raise ValueError(f"--input-shape {','.join(map(str, cfg.input_shape))}: the accuracy run feeds 3-channel "
                         "square images (3,S,S); price other shapes with python -m workloads.fl.capture or bench.price "
                         "(docs/byom.md)")
    if classes < 1:
        raise ValueError(f"--classes must be at least 1, got {classes}")
    for model in cfg.models:
        l = model_spec.build(cfg.spec(model, input_shape), num_classes=classes, spherefed=spherefed).feature_dim
        if spherefed and classes > l:
            raise ValueError(f"SphereFed's orthonormal classifier needs classes <= features: {model} has {l} "
                             f"features, {classes} classes (--classes, or the accuracy run's dataset)")


def load_accuracy_data(preset: Preset, cfg: RunConfig) -> tuple[Dataset, Dataset]:
    """The preset's data, at --input-shape's size when given (else the preset's); every model is
    checked on it before any work."""
    fl = preset.fl
    image_size = cfg.input_shape[-1] if cfg.input_shape else fl.image_size
    train, test = load_dataset(fl.dataset, data_dir=cfg.data_dir, image_size=image_size)
    try:
        check_models(cfg, classes=train.num_classes, input_shape=tuple(train.x.shape[1:]))
    except model_spec.ModelSpecError as exc:
        raise model_spec.ModelSpecError(f"{exc} [the accuracy run's {fl.dataset} images are "
                                        f"{'x'.join(map(str, train.x.shape[1:]))}: --input-shape sets them]") from None
    return (subset(train, fl.max_train_samples, cfg.seed, "train"),
            subset(test, fl.max_test_samples, cfg.seed + 1, "test"))


# ---- the figures ---------------------------------------------------------------------------------


def training_figures(model: str, methods, cfg: RunConfig, hw: HardwareConfig, progress):
    """Per method: the priced step, the round, the peak; plus per-op and per-layer rows."""
    steps_per_round = Hparams().local_epochs * math.ceil(PAPER_TRAIN_SAMPLES / PAPER_CLIENTS / cfg.batch_size)
    figures, op_rows = {}, []
    for method in methods:
        progress(f"{model}: capturing and pricing one {method} training step (batch {cfg.batch_size})")
        trace = local_training_trace(cfg.spec(model), method, batch_size=cfg.batch_size, num_classes=cfg.classes,
                                     image_size=PAPER_IMAGE_SIZE, seed=cfg.seed)
        report = simulate_complete(trace, hw, f"{model} {method} training step")
        figures[method] = {
            "step_cycles": report.total_cycles, "step_latency_s": report.latency_s,
            "steps_per_round": steps_per_round, "round_latency_s": report.latency_s * steps_per_round,
            "peak_memory_bytes": report.peak_memory_bytes, "peak_memory_by_kind_bytes": dict(report.peak.by_kind_bytes),
            "macs": report.macs, "unsupported_ops": report.unsupported_ops(),
            "step_energy_j": report.energy_j, "round_energy_j": report.energy_j * steps_per_round,
            "step_energy_by_component_j": report.energy.by_component_j(),
            "step_energy_by_kind_j": energy_by_kind(report),
        }
        op_rows += [{"model": model, "method": method, "region": "training", "idx": c.idx, "aten": c.aten,
                     "layer": c.layer, "phase": c.phase, "work": f"{c.work_kind}:{c.work_op}" if c.work_op else c.work_kind,
                     "gemm_groups": c.gemm_groups, "macs": c.macs, "cycles": c.total_cycles, "latency_s": c.total_cycles / hw.clock_hz,
                     "compute_cycles": c.compute_cycles, "stall_cycles": c.stall_cycles, "energy_j": c.energy_j,
                     **{f"energy_{k}_j": v for k, v in c.energy.by_component_j().items()}}
                    for c in report.ops]
    return figures, op_rows


def calibration_figures(model: str, calibrations, hw: HardwareConfig, progress, *, spec: ModelSpec | None = None,
                        num_classes: int = PAPER_CLASSES) -> dict:
    out = {}
    for calibration in calibrations:
        progress(f"{model}: pricing {calibration} calibration (average client + server)")
        cost = calibration_cost(calibration, spec or model, train_samples=PAPER_TRAIN_SAMPLES,
                                num_clients=PAPER_CLIENTS, num_classes=num_classes, image_size=PAPER_IMAGE_SIZE,
                                hp=Hparams(), hw=hw)
        out[calibration] = {"client_cycles": cost.client_cycles, "server_cycles": cost.server_cycles,
                            "latency_s": cost.latency_s, "client_energy_j": cost.client_energy_j,
                            "server_energy_j": cost.server_energy_j, "energy_j": cost.energy_j}
    return out


def _comm_method(name: str) -> MethodConfig:
    """The FL method whose communication a Fig. 5 (a) bar shows (calibrations on their base)."""
    return parse_method(f"{TRAINED_WITH[name]}+{name}" if name in CALIBRATIONS else name)


def model_closed_form_bytes(model_name: str | ModelSpec, method: MethodConfig, hp: Hparams, *, num_classes: int,
                            image_size: int, rounds: int, num_clients: int, seed: int) -> dict[str, int]:
    """``closed_form_bytes`` of the FL code for a whole run, from the prepared model's shapes
    (``closed_form_sizes``: per sharing layer, so double head's gradual sharing and local head count
    as the ledger does)."""
    torch.manual_seed(seed)
    model = prepare_model(model_spec.build(as_spec(model_name, image_size), num_classes=num_classes,
                                           spherefed=method.spherefed), method, seed=seed)
    return closed_form_bytes(method, hp, rounds=rounds, clients_per_round=num_clients, num_clients=num_clients,
                             **closed_form_sizes(model))


def communication_figures(model: str, names, cfg: RunConfig) -> dict:
    """Fig. 5 (a) for the paper's run, and the classifier's share from Table 1's closed forms."""
    setup = formulas.Table1Setup(feature_dim=model_spec.build(cfg.spec(model), num_classes=cfg.classes,
                                                              spherefed=False).feature_dim, num_classes=cfg.classes)
    table1_name = {"fedavg": "fedavg", "ccvr": "ccvr", "spherefed": "spherefed", "ffc": "spherefed"}
    out = {}
    for name in names:
        method = _comm_method(name)
        totals = model_closed_form_bytes(cfg.spec(model), method, Hparams(), num_classes=cfg.classes,
                                         image_size=PAPER_IMAGE_SIZE, rounds=PAPER_ROUNDS,
                                         num_clients=PAPER_CLIENTS, seed=cfg.seed)
        out[name] = {"method": method.name, "total_bytes": totals["total_bytes"],
                     "per_client_bytes": totals["total_bytes"] // PAPER_CLIENTS}
        if name in table1_name:
            out[name]["classifier_per_client_bytes_table1"] = formulas.comm_bytes_per_client(table1_name[name], setup)
    return out


def run_pairs(names) -> list[tuple[str, str | None]]:
    """The federated runs that give ``names``' accuracies: each training method with the calibration
    that reuses its run (CCVR on FedAvg, FFC on SphereFed), and a calibration's base run where its
    base is not asked for."""
    training = [n for n in names if n not in CALIBRATIONS]
    calibrations = [n for n in names if n in CALIBRATIONS]
    pairs = [(t, next((c for c in calibrations if TRAINED_WITH[c] == t), None)) for t in training]
    return pairs + [(TRAINED_WITH[c], c) for c in calibrations if TRAINED_WITH[c] not in training]


def accuracy_runs(model: str, names, preset: Preset, data, cfg: RunConfig, hw: HardwareConfig,
                  system: SystemModel, execution: Execution) -> tuple[RunInputs, list[Job]]:
    """The federated runs that give ``names``' accuracies, and what they share."""
    train, test = data
    fl = replace(preset.fl, model=model, seed=cfg.seed)
    inputs = RunInputs(cfg.spec(model, tuple(train.x.shape[1:])), fl, train, test,
                       tuple(make_partition(train.y.numpy(), fl)), hw, system,
                       client_devices(system, hw, fl.num_clients, seed=cfg.seed), cfg.seed, execution)
    jobs = [Job(base, calib, preset.hparams(parse_method(f"{base}+{calib}" if calib else base)))
            for base, calib in run_pairs(names)]
    return inputs, jobs


def accuracy_figures(names, inputs: RunInputs, jobs: list[Job], results: list[JobResult]
                     ) -> tuple[dict, dict, list[dict]]:
    """Accuracy per method from the runs' results (calibrations reuse their base run), every round
    priced (``rounds.csv`` rows, labelled with ``names``), and the ledger check: every run's ledger
    total against ``closed_form_bytes`` at the run's own settings."""
    training = [n for n in names if n not in CALIBRATIONS]
    fl, num_classes = inputs.fl, inputs.train.num_classes
    accuracy, ledger, rounds = {}, {}, {}
    for job, result in zip(jobs, results):
        if job.calibration:
            accuracy[job.calibration] = {"accuracy_pct": 100 * result.accuracy}
            rounds[job.calibration] = result.rows
        if job.base in training:
            before = result.accuracy_before_calibration if job.calibration else result.accuracy
            accuracy[job.base] = {"accuracy_pct": 100 * before}
            rounds[job.base] = [row for row in result.rows if row["stage"] == "train"]
        closed = model_closed_form_bytes(inputs.spec, parse_method(job.name), job.hp, num_classes=num_classes,
                                         image_size=int(inputs.train.x.shape[-1]), rounds=fl.rounds,
                                         num_clients=fl.num_clients, seed=inputs.seed)
        ledger[job.name] = {"ledger_total_bytes": result.ledger_total_bytes,
                            "closed_form_total_bytes": closed["total_bytes"]}
    round_rows = [{"model": fl.model, **row, "method": name} for name in names for row in rounds[name]]
    return {n: accuracy[n] for n in names}, ledger, round_rows


def time_to_accuracy_figures(round_rows: list[dict], target_pct: float | None) -> dict:
    """Per method, the modeled wall time, device time, energy and bytes to first reach the target."""
    target = default_target(round_rows) if target_pct is None else target_pct / 100
    rule = (f"{100 * DEFAULT_TARGET_FRACTION:g} % of the best final accuracy among the methods"
            if target_pct is None else "--target")
    reached = time_to_accuracy(round_rows, target)
    return {"target_accuracy_pct": 100 * target, "rule": rule,
            "methods": {m: {"reached": t.reached, "round": t.round, "wall_s": t.wall_s, "device_s": t.device_s,
                            "energy_j": t.energy_j, "bytes": t.bytes} for m, t in reached.items()}}


def paper_vs_model(models: dict) -> list[dict]:
    rows = []
    for claim, section, metric, base, other, paper in PAPER_CLAIMS:
        ours = {m: saving_pct(s[section][base][metric], s[section][other][metric])
                for m, s in models.items() if base in s[section] and other in s[section]}
        if ours:
            best = max(ours, key=ours.get)
            rows.append({"claim": claim, "paper_up_to_pct": paper, "model_up_to_pct": ours[best],
                         "model_with_most": best, "model_pct_by_model": ours})
    return rows


# ---- output ------------------------------------------------------------------------------------


def layer_rows(op_rows: list[dict]) -> pd.DataFrame:
    ops = pd.DataFrame(op_rows, columns=OPS_COLUMNS)
    return ops.groupby(["model", "method", "region", "layer", "phase"], sort=False, as_index=False)[
        list(COST_COLUMNS)].sum()[list(LAYERS_COLUMNS)]


def shapes_label(config: dict) -> str:
    """"CIFAR-100 shapes" for the paper's input and classes, else "input CxHxW, C classes"."""
    shape = tuple(config.get("input_shape") or DEFAULT_INPUT_SHAPE)
    classes = config.get("classes", PAPER_CLASSES)
    if (shape, classes) == (DEFAULT_INPUT_SHAPE, PAPER_CLASSES):
        return "CIFAR-100 shapes"
    return f"input {'x'.join(map(str, shape))}, {classes} classes"


def format_table(summary: dict) -> str:
    lines = []
    for model, s in summary["models"].items():
        lines.append(f"== {model} ({shapes_label(summary['config'])}, batch {summary['config']['batch_size']}, "
                     f"{summary['hardware_label']})")
        lines.append(f"{'figure':<34} {'method':<12} {'value':>16} {'normalized':>11}")
        for section, metric, base, unit, scale in (
            ("communication", "total_bytes", "fedavg", "MB", 1e-6),
            ("training", "peak_memory_bytes", "fedavg", "MB", 1e-6),
            ("training", "step_latency_s", "fedavg", "ms", 1e3),
            ("training", "round_latency_s", "fedavg", "s", 1),
            ("training", "step_energy_j", "fedavg", "mJ", 1e3),
            ("training", "round_energy_j", "fedavg", "J", 1),
            ("calibration", "latency_s", "ccvr", "s", 1),
            ("calibration", "energy_j", "ccvr", "J", 1),
            ("accuracy", "accuracy_pct", None, "%", 1),
        ):
            for method, v in s[section].items():
                value = v[metric]
                norm = f"{value / s[section][base][metric]:.4f}" if base and base in s[section] else ""
                lines.append(f"{section + ' ' + metric:<34} {method:<12} {value * scale:>13.4g} {unit:<2} {norm:>11}")
        for method, v in s["training"].items():
            parts = v["step_energy_by_component_j"]
            lines.append(f"step energy {method}: " + ", ".join(
                f"{k} {100 * e / v['step_energy_j']:.1f}%" for k, e in sorted(parts.items(), key=lambda kv: -kv[1])))
    lines.append("")
    lines.append(f"{'paper claim (Sec. 5.4)':<58} {'paper':>8} {'ours':>8}  model")
    for row in summary["paper_vs_model"]:
        lines.append(f"{row['claim']:<58} {row['paper_up_to_pct']:>7.1f}% {row['model_up_to_pct']:>7.2f}%  "
                     f"{row['model_with_most']}")
    lines.append(f"accuracy: {summary['accuracy_setting']['note']}")
    for model, s in summary["models"].items():
        lines.append("")
        lines.append(format_time_to_accuracy(model, s["time_to_accuracy"]))
    return "\n".join(lines)


@dataclass(frozen=True)
class Study:
    """Everything a run writes: the summary, one row per priced op, one row per method and round."""

    summary: dict
    ops: list[dict]
    rounds: list[dict]


def hardware_comparison(cfg: RunConfig, training, calibrations, progress) -> dict:
    """Every method of every model priced on each ``--hw`` accelerator (``bench/compare_hw.py``)."""
    hws = compare_hw.load_hardware_set(cfg.compare_hw)
    steps = Hparams().local_epochs * math.ceil(PAPER_TRAIN_SAMPLES / PAPER_CLIENTS / cfg.batch_size)
    return compare_hw.comparison({
        m: compare_hw.hardware_figures(m, cfg.spec(m), training, calibrations, batch_size=cfg.batch_size,
                                       num_classes=cfg.classes, steps_per_round=steps,
                                       train_samples=PAPER_TRAIN_SAMPLES, num_clients=PAPER_CLIENTS,
                                       seed=cfg.seed, hws=hws, progress=progress)
        for m in cfg.models}, hws)


def run_study(cfg: RunConfig, hw: HardwareConfig, preset: Preset, system: SystemModel, data, progress,
              argv) -> Study:
    """Every figure for every model of ``cfg``. ``progress`` takes one message per step (and the
    federated runs show progress bars); None runs silently (grid points). Raises ValueError /
    FloatingPointError on a failed accuracy run."""
    bars = progress is not None
    progress = progress or (lambda msg: None)
    training, calibrations = _split_methods(cfg.methods)
    execution = cfg.execution(preset)
    workers = resolve_workers(cfg.workers, len(run_pairs(training + calibrations)), execution.device)
    models, all_ops, ledgers, all_rounds = {}, [], {}, []
    for model in cfg.models:
        inputs, jobs = accuracy_runs(model, training + calibrations, preset, data, cfg, hw, system, execution)
        with started(jobs, inputs, workers=workers, progress=progress, bars=bars) as results:
            # with workers, the federated runs train in their processes while this one prices
            train_figs, op_rows = training_figures(model, training, cfg, hw, progress)
            calibration = calibration_figures(model, calibrations, hw, progress, spec=cfg.spec(model),
                                              num_classes=cfg.classes)
            accuracy, ledgers[model], round_rows = accuracy_figures(training + calibrations, inputs, jobs, results())
        all_ops += op_rows
        all_rounds += round_rows
        models[model] = {
            "training": train_figs,
            "calibration": calibration,
            # FedAvg's bytes are always there: Fig. 5 (a) is normalized to them (closed forms, no training)
            "communication": communication_figures(model, list(dict.fromkeys(["fedavg", *training, *calibrations])),
                                                    cfg),
            "accuracy": accuracy,
            "time_to_accuracy": time_to_accuracy_figures(round_rows, cfg.target_accuracy_pct),
        }
    comparison = {"hardware_comparison": hardware_comparison(cfg, training, calibrations, progress)} \
        if cfg.compare_hw else {}
    summary = {
        "format": FORMAT_NAME, "version": FORMAT_VERSION,
        "command": shlex.join(["python", "-m", "bench.run", *argv]),
        "git_commit": git_commit(), "config": asdict(cfg), "hardware": asdict(hw),
        "execution": execution.describe(),
        "hardware_label": f"{hw.rows}x{hw.cols} array, {hw.clock_hz / 1e6:g} MHz, "
                          f"DRAM {hw.dram_peak_bytes_per_s / 1e9:g} GB/s peak, dataflow "
                          f"{hw.dataflow_fwd}/{hw.dataflow_dx}/{hw.dataflow_dw}",
        "models": models,
        "accuracy_setting": {"preset": preset.name, "fl": asdict(preset.fl), "hparams": asdict(preset.hp),
                             "overrides": preset.overrides, "note": preset.note, "train_note": data[0].note,
                             "workers": workers, "threads": threads_per_worker(workers) or torch.get_num_threads()},
        "system": system.describe(),
        "ledger_check": ledgers,
        "table1": [asdict(r) for r in formulas.table1(formulas.Table1Setup())],
        "paper_vs_model": paper_vs_model(models),
        "paper_vs_model_explanation": WHY_DIFFERENT,
        **comparison,
    }
    return Study(summary, all_ops, all_rounds)


def write_files(folder: Path, study: Study) -> None:
    """summary.json, the per-op, per-layer, per-block and per-round CSVs and the plots, into ``folder``."""
    ops = pd.DataFrame(study.ops, columns=OPS_COLUMNS)
    ops.to_csv(folder / OPS_CSV, index=False)
    layer_rows(study.ops).to_csv(folder / LAYERS_CSV, index=False)
    breakdown(ops).to_csv(folder / BREAKDOWN_CSV, index=False)
    pd.DataFrame(study.rounds, columns=ROUNDS_CSV_COLUMNS).to_csv(folder / ROUNDS_CSV, index=False)
    write_json(folder / "summary.json", study.summary)
    plot_run(folder)
    plot_time_to_accuracy(folder)
    if "hardware_comparison" in study.summary:
        compare_hw.plot_comparison(study.summary, folder)


def ledger_mismatches(summary: dict) -> dict:
    return {m: r for m, runs in summary["ledger_check"].items() for r, v in runs.items()
            if v["ledger_total_bytes"] != v["closed_form_total_bytes"]}


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
            out[f"{model}.{method}.communication_bytes"] = v["total_bytes"]
        for method, v in s["accuracy"].items():
            out[f"{model}.{method}.accuracy_pct"] = v["accuracy_pct"]
        for method, v in s["time_to_accuracy"]["methods"].items():
            if v["reached"]:
                for key in ("wall_s", "energy_j", "bytes"):
                    out[f"{model}.{method}.tta_{key}"] = v[key]
    return out


GRID_KEYS = {"model", "methods", "batch_size", "seed", "preset", "data_dir", "hw", "alpha", "target", "system",
             "input_shape", "classifier", "classes", "workers", "device"}


def run_point(config: dict, out_dir: Path) -> dict[str, float]:
    """One grid point (``bench.grid``): the same study and files as the CLI, for one model, written
    straight into ``out_dir`` (the grid's temporary folder). Keys: ``GRID_KEYS``."""
    unknown = set(config) - GRID_KEYS
    if unknown:
        raise ValueError(f"unknown grid setting(s) {sorted(unknown)} for bench.run; use {sorted(GRID_KEYS)}")
    if "model" not in config:
        raise ValueError("a bench.run grid point needs 'model'")
    # a grid gives each point its cores (--resources-per-run): its runs go one after another unless it sets workers
    argv = ["--model", str(config["model"]), "--out", str(out_dir), "--workers", str(config.get("workers", 1))]
    for key in ("batch_size", "seed", "preset", "data_dir", "hw", "alpha", "target", "system", "input_shape",
                "classifier", "classes", "device"):
        if key in config:
            value = config[key]
            if key == "hw" and isinstance(value, list):  # several accelerators side by side
                argv += ["--hw", *map(str, value)]
            else:
                argv += [f"--{key.replace('_', '-')}", ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    if "methods" in config:
        methods = config["methods"]
        if not isinstance(methods, list) or not methods or not all(isinstance(m, str) for m in methods):
            raise ValueError(f"grid setting methods = {methods!r}: give a non-empty list of method names, "
                             'e.g. methods = ["fedavg", "spherefed"]')
        argv += ["--methods", *methods]
    cfg = parse_args(argv)
    hw, preset, system = validate(cfg)
    study = run_study(cfg, hw, preset, system, load_accuracy_data(preset, cfg), None, argv)
    if ledger_mismatches(study.summary):
        raise ValueError(f"the ledger disagrees with the closed forms: {ledger_mismatches(study.summary)}")
    write_files(out_dir, study)
    return headline_metrics(study.summary)


@cli.command("interrupted; nothing written (a results folder appears only when complete)")
def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    try:
        cfg = parse_args(argv)
        check_out_dir(Path(cfg.out), overwrite=cfg.overwrite)
        hw, preset, system = validate(cfg)
        data = load_accuracy_data(preset, cfg)
    except (ValueError, HardwareConfigError, ResultsError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        study = run_study(cfg, hw, preset, system, data, progress, argv)
    except (ValueError, FloatingPointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:  # checked before the work; only another process writing the same --out meanwhile fails here
        write_run_dir(Path(cfg.out), lambda tmp: write_files(tmp, study), overwrite=cfg.overwrite)
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    summary = study.summary
    print(format_table(summary))
    if "hardware_comparison" in summary:
        print(f"\n{compare_hw.format_comparison(summary)}")
    mismatched = ledger_mismatches(summary)
    if mismatched:
        print(f"warning: the ledger disagrees with the closed forms for {mismatched}", file=sys.stderr)
    print(f"wrote {cfg.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

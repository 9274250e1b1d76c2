"""CLI: accuracy and communication of FL methods under one preset.

    python -m workloads.fl.run --preset small [--methods fedavg,spherefed+ffc] [--seed 0]
                               [--data-dir DIR] [--rounds N] [--out DIR] [--threads N] [--progress]
                               [--overwrite] [--hw HW.toml] [--system SYSTEM.toml]
                               [--model NAME|package.module:factory] [--classifier DOTTED.NAME]
                               [--device auto|cpu|cuda|cuda:N] [--augment] [--channels-last] [--bf16]
                               [--compile] [--resume]

``--preset`` is a name under ``configs/presets/`` or a path to a TOML file with tables
``[run]`` (``FLConfig`` fields plus ``methods``, the default method list), ``[hparams]`` (defaults
for every method) and ``[methods.<name>]`` (overrides, applied in this order: the base algorithm,
``spherefed`` for any SphereFed variant, the calibration, then the full method name).

Writes ``--out`` (default ``results/fl/<preset>-seed<seed>``) as a whole: a temporary folder beside
it, renamed at the end, so the results files are complete or absent; an existing ``--out`` is only replaced
with ``--overwrite``. It holds ``results.json`` (accuracy per method, per-round history, ledger totals beside the
closed forms, measured and projected wall time, resolved config, ``execution`` (device and its
name, speed and augmentation options), command, git commit, dataset note), ``accuracy.csv``,
``ledger.csv`` (every transfer), ``partition.csv`` (samples per client per class) and
``rounds.csv`` (every round of every method priced on the modeled accelerator: wall time, device
time, energy, bytes, accuracy; ``workloads.fl.round_cost``, docs/rounds.md) under the hardware of
``--hw`` and the links and devices of ``--system`` (default ``configs/system/default.toml``).
Before any training a few local steps of every method are timed and the projected wall time of
each method's local training and of the whole run is printed; the progress bar shows the ETA by
round. After every round the loop's state is checkpointed under ``--out``/checkpoints/ (gone when
the run's folder is written); ``--resume`` continues an interrupted run from the last completed
round of each method, with results identical to an uninterrupted run (docs/fl.md).

Errors (unknown method, bad flag or preset value, unwritable or existing ``--out``, missing data,
bad hardware or system file) are found before any training, print one line and exit with 2;
Ctrl-C or SIGTERM print one line and exit with 130 (``workloads.cli``). ``_main`` runs four named
steps: ``validate`` (parse and check), ``build`` (data, partition, models), ``run`` (train and
price), ``write``.

Validation hold-out: ``holdout_fraction`` in ``[run]`` (or ``--holdout``) sets aside that fraction
of the training split, drawn uniformly with the run's seed before partitioning (SphereFed Sec. 5.1
tunes hyper-parameters on 15 %); clients train on the rest and each method's final global model
is also scored on the hold-out (``val_accuracy``). 0 (the default) keeps every training sample.
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from accel_sim.rounds import ROUNDS_COLUMNS
from accel_sim.tomlfile import read_toml
from workloads import cli
from workloads.atomic import atomic_write_dir, atomic_write_text
from workloads.fl.comm import closed_form_bytes, closed_form_sizes, ledger_totals
from workloads.fl.execution import add_execution_args, execution_from_args, preset_options
from workloads.fl.hparams import FLConfig, Hparams, from_mapping, override
from workloads.fl.methods import MethodConfig, parse_method
from workloads.provenance import git_commit

PRESET_DIR = Path(__file__).resolve().parents[2] / "configs" / "presets"
DEFAULT_SYSTEM = Path(__file__).resolve().parents[2] / "configs" / "system" / "default.toml"
ROUNDS_MAX = 100_000  # --rounds: 1,000 times the paper's 100 (Tab. 16)


@dataclass(frozen=True)
class PresetFile:
    """A preset TOML, checked: ``[run]``, ``[hparams]``, ``[methods.<name>]``, ``[execution]``."""

    name: str  # the file's stem
    fl: FLConfig
    methods: list[str]  # [run] methods: the default method list
    hp: Hparams  # defaults for every method
    overrides: dict[str, dict]  # [methods.<name>] tables
    execution: dict[str, bool]  # [execution]: throughput and data-path options (workloads.fl.execution.OPTIONS)


def load_preset(preset: str) -> PresetFile:
    """A preset by name (under configs/presets/) or .toml path; ValueError naming file and key."""
    path = Path(preset) if preset.endswith(".toml") else PRESET_DIR / f"{preset}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESET_DIR.glob("*.toml"))
        raise ValueError(f"preset {preset!r} not found (looked for {path}); known presets: {known}")
    doc = read_toml(path, ValueError, "preset")
    unknown = sorted(set(doc) - {"run", "hparams", "methods", "execution"})
    if unknown:
        raise ValueError(f"{path}: unknown table(s) {unknown}; expected [run], [hparams], [methods.<name>], "
                         "[execution]")
    run = dict(doc.get("run", {}))
    methods = run.pop("methods", ["fedavg"])
    if not isinstance(methods, list) or not methods or not all(isinstance(m, str) for m in methods):
        raise ValueError(f"{path} [run]: methods = {methods!r} must be a non-empty list of method names, "
                         'e.g. methods = ["fedavg", "spherefed"]')
    for method in methods:
        try:
            parse_method(method)
        except ValueError as err:
            raise ValueError(f"{path} [run]: methods: {err}") from None
    for table in ("hparams", "methods"):
        if not isinstance(doc.get(table, {}), dict):
            raise ValueError(f"{path}: {table} must be a table ([{table}])")
    cfg = from_mapping(FLConfig, run, where=f"{path} [run]")
    hp = from_mapping(Hparams, doc.get("hparams", {}), where=f"{path} [hparams]")
    overrides = doc.get("methods", {})
    for name, table in overrides.items():
        if not isinstance(table, dict):
            raise ValueError(f"{path}: methods.{name} must be a table ([methods.{name}]) of hyper-parameters")
        override(hp, table, where=f"{path} [methods.{name}]")  # validate now, not mid-run
    execution = preset_options(doc.get("execution", {}), where=str(path))
    return PresetFile(path.stem, cfg, list(methods), hp, overrides, execution)


def method_hparams(method: MethodConfig, hp: Hparams, overrides: dict[str, dict]) -> Hparams:
    keys = [method.algorithm] + (["spherefed"] if method.spherefed else [])
    keys += [method.calibration] if method.calibration else []
    keys.append(method.name)
    for key in dict.fromkeys(keys):
        if key in overrides:
            hp = override(hp, overrides[key], where=f"[methods.{key}]")
    return hp


def make_partition(labels: np.ndarray, cfg: FLConfig) -> list[np.ndarray]:
    from workloads.fl.partition import PARTITIONS

    if cfg.partition not in PARTITIONS:
        raise ValueError(f"unknown partition {cfg.partition!r}; choose one of {sorted(PARTITIONS)}")
    fn = PARTITIONS[cfg.partition]
    extra = {"dirichlet": {"alpha": cfg.alpha, "min_size": cfg.min_client_size},
             "fedcos": {"non_iid_fraction": cfg.non_iid_fraction},
             "dispatch": {"classes_per_client": cfg.classes_per_client}}.get(cfg.partition, {})
    return fn(labels, cfg.num_clients, seed=cfg.seed, **extra)


def split_holdout(train, fraction: float, *, seed: int):
    """(train without the hold-out, hold-out) or (train, None) when ``fraction`` is 0."""
    if not fraction:
        return train, None
    import torch

    from workloads.fl.data import Dataset
    from workloads.fl.partition import holdout_split

    fit, val = holdout_split(np.arange(len(train)), fraction, seed=seed)
    if len(val) == 0 or len(fit) == 0:
        raise ValueError(f"holdout_fraction {fraction} of {len(train)} training samples leaves an empty split")

    def subset(idx, note):
        idx = torch.from_numpy(idx.astype(np.int64))
        return Dataset(train.name, train.x[idx], train.y[idx], train.num_classes, note)

    return (subset(fit, f"{train.note}; {len(fit)} samples after a {fraction:g} validation hold-out"),
            subset(val, f"validation hold-out: {len(val)} samples ({fraction:g}) of {train.note}, seed {seed}"))


def _csv(rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    return buf.getvalue()


def closed_form_for(method: MethodConfig, model, hp: Hparams, cfg: FLConfig, clients_per_round: int) -> dict:
    """The closed-form totals of ``comm.closed_form_bytes`` for this run's model."""
    return closed_form_bytes(method, hp, rounds=cfg.rounds, clients_per_round=clients_per_round,
                             num_clients=cfg.num_clients, **closed_form_sizes(model))


def parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m workloads.fl.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", required=True, help="name under configs/presets/ or a .toml path")
    p.add_argument("--methods", help="comma-separated method names (default: the preset's list)")
    p.add_argument("--seed", type=cli.int_in(0, cli.SEED_MAX), help="overrides the preset's seed")
    p.add_argument("--rounds", type=cli.int_in(1, ROUNDS_MAX), help="overrides the preset's number of rounds")
    p.add_argument("--holdout", type=cli.finite_float(), metavar="FRACTION",
                   help="validation hold-out drawn from train before partitioning (Sec. 5.1: 0.15; default: the preset's)")
    p.add_argument("--data-dir", help="folder holding the dataset (not needed for digits)")
    p.add_argument("--out", help="output folder (default results/fl/<preset>-seed<seed>)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    p.add_argument("--threads", type=cli.int_in(1, 1024), help="torch CPU threads (default: torch's choice); 1 avoids "
                   "OpenMP stalls when other processes share a small CPU")
    p.add_argument("--progress", action="store_true",
                   help="show a progress bar per method on stderr (default: when stderr is a terminal)")
    p.add_argument("--hw", help="hardware TOML the rounds are priced on (default: accel_sim's paper defaults)")
    p.add_argument("--model", help="overrides the preset's model: a paper model, package.module:factory, "
                   "torchvision:NAME or timm:NAME (docs/byom.md)")
    p.add_argument("--classifier", metavar="DOTTED.NAME",
                   help="the nn.Linear of a user model the methods act on (default: its last nn.Linear)")
    p.add_argument("--system", default=str(DEFAULT_SYSTEM),
                   help="system-model TOML: clients' links and devices (default configs/system/default.toml)")
    add_execution_args(p)
    p.add_argument("--resume", action="store_true",
                   help="continue from the checkpoints under --out/checkpoints/ of an interrupted run")
    return p


@cli.command("interrupted; the results are written only when complete (completed rounds are checkpointed "
             "under --out/checkpoints/: rerun with --resume to continue)")
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return _main(args, list(sys.argv[1:] if argv is None else argv))
    except (ValueError, FloatingPointError) as err:  # HardwareConfigError, SystemModelError are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return 2


@dataclass(frozen=True)
class Setup:
    """A run's validated inputs (step 1): nothing heavy has been loaded and nothing written."""

    preset: str  # the preset's name
    cfg: FLConfig
    methods: tuple[MethodConfig, ...]
    hparams: dict[str, Hparams]  # per method name
    out: Path
    overwrite: bool
    data_dir: str | None
    classifier: str | None
    hw: Any  # accel_sim.hardware.HardwareConfig
    system: Any  # accel_sim.rounds.SystemModel
    devices: Any  # per-client devices (workloads.fl.round_cost.client_devices)
    progress: bool
    command: str
    execution: Any  # workloads.fl.execution.Execution: device, speed and augmentation options
    resume: bool


@dataclass(frozen=True)
class Built:
    """The data, partition and model builder of a run (step 2)."""

    train: Any  # workloads.fl.data.Dataset
    test: Any
    val: Any  # the hold-out, or None
    parts: list
    build: Any  # spherefed: bool -> nn.Module
    pricer: Any  # workloads.fl.round_cost.RunPricer
    clients_per_round: int


def validate(args: argparse.Namespace, argv: list[str]) -> Setup:
    """Step 1, parse and validate: every flag, the preset, the methods, --out (writable, and the
    --overwrite rule), --data-dir, the hardware and system files. Raises ValueError."""
    import torch

    from accel_sim.hardware import HardwareConfig, load_hardware_config
    from accel_sim.rounds import load_system_model
    from workloads.fl.round_cost import client_devices

    preset = load_preset(args.preset)
    name, cfg, default_methods, hp0, overrides = preset.name, preset.fl, preset.methods, preset.hp, preset.overrides
    execution = execution_from_args(args, preset.execution)
    changes = {k: v for k, v in (("seed", args.seed), ("rounds", args.rounds), ("holdout_fraction", args.holdout),
                                 ("model", args.model)) if v is not None}
    cfg = FLConfig(**{**asdict(cfg), **changes})
    methods = tuple(parse_method(m) for m in (args.methods.split(",") if args.methods else default_methods))
    out = Path(args.out or f"results/fl/{name}-seed{cfg.seed}")
    if args.resume:  # --out holds the interrupted run's checkpoints; the folder is replaced when complete
        if not (out / "checkpoints").is_dir():
            raise ValueError(f"--resume: no checkpoints under {out / 'checkpoints'} (nothing to resume: "
                             "check --out, or run without --resume)")
        cli.check_writable(out.parent, "--out")
    else:
        cli.check_out_dir(out, overwrite=args.overwrite)
    if args.data_dir:
        cli.check_folder(args.data_dir, "--data-dir")
    hw = load_hardware_config(args.hw) if args.hw else HardwareConfig()
    system = load_system_model(args.system)
    devices = client_devices(system, hw, cfg.num_clients, seed=cfg.seed)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    return Setup(name, cfg, methods, {m.name: method_hparams(m, hp0, overrides) for m in methods}, out,
                 args.overwrite, args.data_dir, args.classifier, hw, system, devices,
                 args.progress or sys.stderr.isatty(), "python -m workloads.fl.run " + " ".join(argv),
                 execution, args.resume)


def build(setup: Setup) -> Built:
    """Step 2, build: the dataset (subsets, hold-out), the partition, and every model the methods
    need, checked before any training."""
    from workloads import model_spec
    from workloads.fl.data import load_dataset, subset
    from workloads.fl.loop import sample_clients
    from workloads.fl.round_cost import RunPricer, RunSpec

    cfg = setup.cfg
    train, test = load_dataset(cfg.dataset, data_dir=setup.data_dir, image_size=cfg.image_size)
    train = subset(train, cfg.max_train_samples, cfg.seed, "train")
    test = subset(test, cfg.max_test_samples, cfg.seed + 1, "test")
    train, val = split_holdout(train, cfg.holdout_fraction, seed=cfg.seed)
    spec = model_spec.ModelSpec(cfg.model, tuple(train.x.shape[1:]), setup.classifier)
    parts = make_partition(train.y.numpy(), cfg)

    def build_model(spherefed: bool):
        return model_spec.build(spec, num_classes=train.num_classes, norm=cfg.norm, spherefed=spherefed)

    for spherefed in sorted({m.spherefed for m in setup.methods}):  # the model is checked before any training
        build_model(spherefed)
    pricer = RunPricer(RunSpec(build_model, cfg.model, tuple(train.x.shape[1:]), train.num_classes, cfg.seed))
    clients_per_round = len(sample_clients(cfg.num_clients, cfg.participation, seed=cfg.seed, round=1))
    return Built(train, test, val, parts, build_model, pricer, clients_per_round)


def run(setup: Setup, built: Built) -> tuple[dict, list[list], list[dict]]:
    """Step 3, run: train and price every method; (results per method, ledger rows, priced rounds)."""
    from workloads.fl.local import prepare_model
    from workloads.fl.loop import duration_text, evaluate, forecast, run_method
    from workloads.fl.round_cost import price_run

    cfg, train, val = setup.cfg, built.train, built.val
    labels = train.y.numpy()
    client_labels = [labels[p] for p in built.parts]
    results, ledger_rows, round_rows = {}, [["method", "round", "client", "direction", "group", "bytes"]], []
    execution = setup.execution
    print(f"device: {execution.device} ({execution.describe()['device_name']})", file=sys.stderr)
    checkpoints = setup.out / "checkpoints"
    forecasts = {}  # know before you wait: a few timed steps per method, before any training
    for method in setup.methods:
        forecasts[method.name] = forecast(method, model_fn=functools.partial(built.build, method.spherefed),
                                          train=train, parts=built.parts, cfg=cfg, hp=setup.hparams[method.name],
                                          execution=execution)
        print(forecasts[method.name].line(), file=sys.stderr, flush=True)
    print(f"projected local training of the whole run: {duration_text(sum(f.wall_s for f in forecasts.values()))}"
          + (" (before resuming: completed rounds will be skipped)" if setup.resume else ""), file=sys.stderr,
          flush=True)
    for method in setup.methods:
        hp = setup.hparams[method.name]
        start = time.perf_counter()
        r = run_method(method, model_fn=functools.partial(built.build, method.spherefed), train=train,
                       test=built.test, parts=built.parts, cfg=cfg, hp=hp, execution=execution,
                       progress=setup.progress,
                       checkpoint=checkpoints / f"{method.name.replace('+', '_')}.pt", resume=setup.resume)
        elapsed = time.perf_counter() - start
        start = time.perf_counter()
        rows = price_run(r, method, hp, pricer=built.pricer, client_labels=client_labels, hw=setup.hw,
                         system=setup.system, devices=setup.devices)
        pricing_s = time.perf_counter() - start
        round_rows += rows
        probe = prepare_model(built.build(method.spherefed), method, seed=cfg.seed)
        val_accuracy = None
        if val is not None:  # the final global model (calibrated classifier included) on the hold-out
            probe.load_state_dict(r.weights)
            val_accuracy = evaluate(probe, val.x, val.y)
        results[method.name] = {
            "accuracy": r.accuracy, "accuracy_before_calibration": r.accuracy_before_calibration,
            "val_accuracy": val_accuracy,
            "wall_s": round(elapsed, 3), "pricing_wall_s": round(pricing_s, 3),
            "projected_wall_s": round(forecasts[method.name].wall_s, 3),
            "resumed_after_round": r.resumed_after_round,
            "samples_trained": r.samples_trained,
            "modeled": {key: rows[-1][key] for key in ("cum_wall_s", "cum_device_s", "cum_energy_j", "cum_bytes")},
            "comm": ledger_totals(r.transfers),
            "comm_closed_form": closed_form_for(method, probe, hp, cfg, built.clients_per_round),
            "history": list(r.history)}
        ledger_rows += [[method.name, t.round, t.client, t.direction, t.group, t.nbytes] for t in r.transfers]
        print(f"{method.name:28s} accuracy {r.accuracy:.4f}"
              + (f" (before calibration {r.accuracy_before_calibration:.4f})" if method.calibration else "")
              + (f"  validation {val_accuracy:.4f}" if val is not None else "")
              + f"  total {results[method.name]['comm']['total_bytes']:,} B  modeled {rows[-1]['cum_wall_s']:.1f} s, "
              f"{rows[-1]['cum_energy_j']:.3g} J  ({elapsed:.1f} s run + {pricing_s:.1f} s pricing)", file=sys.stderr)
    return results, ledger_rows, round_rows


def write(setup: Setup, built: Built, results: dict, ledger_rows: list[list], round_rows: list[dict]) -> Path:
    """Step 4, write: every file into a temporary folder renamed to --out at the end
    (``workloads.atomic.atomic_write_dir``): the results files are complete or absent."""
    import torch

    from workloads.fl.partition import save_partition_summary

    cfg, train, val = setup.cfg, built.train, built.val
    doc = {"preset": setup.preset, "command": setup.command,
           "git_commit": git_commit(), "torch": torch.__version__,
           "torch_threads": torch.get_num_threads(), "execution": setup.execution.describe(),
           "dataset_note": train.note,
           "test_note": built.test.note, "config": asdict(cfg),
           "hparams": {k: asdict(v) for k, v in setup.hparams.items()},
           "hardware": asdict(setup.hw), "system": setup.system.describe(),
           "holdout": {"fraction": cfg.holdout_fraction, "val_samples": 0 if val is None else len(val),
                       "note": None if val is None else val.note},
           "partition_sizes": [int(len(p)) for p in built.parts], "methods": results}
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"  # every figure finite, or an error before writing

    def files(tmp: Path) -> None:
        save_partition_summary(tmp / "partition.csv", train.y.numpy(), built.parts, train.num_classes)
        atomic_write_text(tmp / "ledger.csv", _csv(ledger_rows))
        atomic_write_text(tmp / "accuracy.csv",
                          _csv([["method", "accuracy", "accuracy_before_calibration", "val_accuracy", "total_bytes"]]
                               + [[m, v["accuracy"], v["accuracy_before_calibration"], v["val_accuracy"],
                                   v["comm"]["total_bytes"]] for m, v in results.items()]))
        atomic_write_text(tmp / "rounds.csv", _csv([list(ROUNDS_COLUMNS)]
                                                   + [[row[c] for c in ROUNDS_COLUMNS] for row in round_rows]))
        atomic_write_text(tmp / "results.json", text)

    # --out was checked before the work; it exists now only if it held the run's own checkpoints (or
    # --overwrite / --resume allowed it): the complete folder replaces it, checkpoints included
    return atomic_write_dir(setup.out, files, overwrite=True)


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    """Parse and validate, build, run, write."""
    setup = validate(args, argv)
    built = build(setup)
    results, ledger_rows, round_rows = run(setup, built)
    out = write(setup, built, results, ledger_rows, round_rows)
    print(f"wrote {out}/results.json, accuracy.csv, ledger.csv, partition.csv, rounds.csv", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

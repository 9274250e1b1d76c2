"""CLI: accuracy and communication of FL methods under one preset.

    python -m workloads.fl.run --preset small [--methods fedavg,spherefed+ffc] [--seed 0]
                               [--data-dir DIR] [--rounds N] [--out DIR] [--threads N] [--progress]
                               [--hw HW.toml] [--system SYSTEM.toml]
                               [--model NAME|package.module:factory] [--classifier DOTTED.NAME]
                               [--device auto|cpu|cuda|cuda:N] [--augment] [--channels-last] [--bf16]
                               [--compile] [--resume]

``--preset`` is a name under ``configs/presets/`` or a path to a TOML file with tables
``[run]`` (``FLConfig`` fields plus ``methods``, the default method list), ``[hparams]`` (defaults
for every method) and ``[methods.<name>]`` (overrides, applied in this order: the base algorithm,
``spherefed`` for any SphereFed variant, the calibration, then the full method name).

Writes into ``--out`` (default ``results/fl/<preset>-seed<seed>``), each file to a temporary name
then renamed: ``results.json`` (accuracy per method, per-round history, ledger totals beside the
closed forms, measured and projected wall time, resolved config, ``execution`` (device and its
name, speed and augmentation options), command, git commit, dataset note), ``accuracy.csv``,
``ledger.csv`` (every transfer), ``partition.csv`` (samples per client per class) and
``rounds.csv`` (every round of every method priced on the modeled accelerator: wall time, device
time, energy, bytes, accuracy; ``workloads.fl.round_cost``, docs/rounds.md) under the hardware of
``--hw`` and the links and devices of ``--system`` (default ``configs/system/default.toml``).
Before any training a few local steps of every method are timed and the projected wall time of
each method's local training and of the whole run is printed; the progress bar shows the ETA by
round. After every round the loop's state
is checkpointed under ``--out``/checkpoints/ (removed when the run's files are written);
``--resume`` continues an interrupted run from the last completed round of each method, with
results identical to an uninterrupted run (docs/fl.md). Errors (unknown method, bad preset value, missing data, bad hardware or system file) print one
message and exit with 2.

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
import shutil
import sys
import time
import tomllib
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from accel_sim.rounds import ROUNDS_COLUMNS
from workloads.atomic import atomic_write_text
from workloads.fl.comm import closed_form_bytes, closed_form_sizes, ledger_totals
from workloads.fl.execution import add_execution_args, execution_from_args
from workloads.fl.hparams import FLConfig, Hparams, from_mapping, override
from workloads.fl.methods import MethodConfig, parse_method
from workloads.provenance import git_commit

PRESET_DIR = Path(__file__).resolve().parents[2] / "configs" / "presets"
DEFAULT_SYSTEM = Path(__file__).resolve().parents[2] / "configs" / "system" / "default.toml"


def load_preset(preset: str) -> tuple[str, FLConfig, list[str], Hparams, dict[str, dict]]:
    """(name, FLConfig, default methods, default Hparams, per-method overrides) of a preset."""
    path = Path(preset) if preset.endswith(".toml") else PRESET_DIR / f"{preset}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESET_DIR.glob("*.toml"))
        raise ValueError(f"preset {preset!r} not found (looked for {path}); known presets: {known}")
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: {err}") from err
    unknown = sorted(set(doc) - {"run", "hparams", "methods"})
    if unknown:
        raise ValueError(f"{path}: unknown table(s) {unknown}; expected [run], [hparams], [methods.<name>]")
    run = dict(doc.get("run", {}))
    methods = run.pop("methods", ["fedavg"])
    cfg = from_mapping(FLConfig, run, where=f"{path} [run]")
    hp = from_mapping(Hparams, doc.get("hparams", {}), where=f"{path} [hparams]")
    overrides = doc.get("methods", {})
    for name, table in overrides.items():
        override(hp, table, where=f"{path} [methods.{name}]")  # validate now, not mid-run
    return path.stem, cfg, list(methods), hp, overrides


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
    p = argparse.ArgumentParser(prog="python -m workloads.fl.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", required=True, help="name under configs/presets/ or a .toml path")
    p.add_argument("--methods", help="comma-separated method names (default: the preset's list)")
    p.add_argument("--seed", type=int, help="overrides the preset's seed")
    p.add_argument("--rounds", type=int, help="overrides the preset's number of rounds")
    p.add_argument("--holdout", type=float, metavar="FRACTION",
                   help="validation hold-out drawn from train before partitioning (Sec. 5.1: 0.15; default: the preset's)")
    p.add_argument("--data-dir", help="folder holding the dataset (not needed for digits)")
    p.add_argument("--out", help="output folder (default results/fl/<preset>-seed<seed>)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice); 1 avoids "
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return _main(args, list(sys.argv[1:] if argv is None else argv))
    except (ValueError, FloatingPointError) as err:  # HardwareConfigError, SystemModelError are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    import torch

    from accel_sim.hardware import HardwareConfig, load_hardware_config
    from accel_sim.rounds import load_system_model
    from workloads.fl.data import load_dataset, subset
    from workloads.fl.local import prepare_model
    from workloads.fl.loop import duration_text, evaluate, forecast, run_method, sample_clients
    from workloads.fl.partition import save_partition_summary
    from workloads.fl.round_cost import RunPricer, RunSpec, client_devices, price_run
    from workloads import model_spec

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    execution = execution_from_args(args)
    name, cfg, default_methods, hp0, overrides = load_preset(args.preset)
    changes = {k: v for k, v in (("seed", args.seed), ("rounds", args.rounds), ("holdout_fraction", args.holdout),
                                 ("model", args.model)) if v is not None}
    cfg = FLConfig(**{**asdict(cfg), **changes})
    methods = [parse_method(m) for m in (args.methods.split(",") if args.methods else default_methods)]
    method_hps = {m.name: method_hparams(m, hp0, overrides) for m in methods}
    out = Path(args.out or f"results/fl/{name}-seed{cfg.seed}")
    if args.resume and not (out / "checkpoints").is_dir():
        raise ValueError(f"--resume: no checkpoints under {out / 'checkpoints'} (nothing to resume: "
                         "check --out, or run without --resume)")
    hw = load_hardware_config(args.hw) if args.hw else HardwareConfig()
    system = load_system_model(args.system)
    devices = client_devices(system, hw, cfg.num_clients, seed=cfg.seed)
    train, test = load_dataset(cfg.dataset, data_dir=args.data_dir, image_size=cfg.image_size)
    train = subset(train, cfg.max_train_samples, cfg.seed, "train")
    test = subset(test, cfg.max_test_samples, cfg.seed + 1, "test")
    train, val = split_holdout(train, cfg.holdout_fraction, seed=cfg.seed)
    spec = model_spec.ModelSpec(cfg.model, tuple(train.x.shape[1:]), args.classifier)
    labels = train.y.numpy()
    parts = make_partition(labels, cfg)
    clients_per_round = len(sample_clients(cfg.num_clients, cfg.participation, seed=cfg.seed, round=1))

    def build(spherefed: bool):
        return model_spec.build(spec, num_classes=train.num_classes, norm=cfg.norm, spherefed=spherefed)

    for spherefed in sorted({m.spherefed for m in methods}):  # the model is checked before any training
        build(spherefed)

    pricer = RunPricer(RunSpec(build, cfg.model, tuple(train.x.shape[1:]), train.num_classes, cfg.seed))
    client_labels = [labels[p] for p in parts]
    results, ledger_rows, round_rows = {}, [["method", "round", "client", "direction", "group", "bytes"]], []
    print(f"device: {execution.device} ({execution.describe()['device_name']})", file=sys.stderr)
    checkpoints = out / "checkpoints"
    forecasts = {}  # know before you wait: a few timed steps per method, before any training
    for method in methods:
        forecasts[method.name] = forecast(method, model_fn=functools.partial(build, method.spherefed), train=train,
                                          parts=parts, cfg=cfg, hp=method_hps[method.name], execution=execution)
        print(forecasts[method.name].line(), file=sys.stderr, flush=True)
    print(f"projected local training of the whole run: {duration_text(sum(f.wall_s for f in forecasts.values()))}"
          + (" (before resuming: completed rounds will be skipped)" if args.resume else ""), file=sys.stderr, flush=True)
    for method in methods:
        hp = method_hparams(method, hp0, overrides)
        start = time.perf_counter()
        r = run_method(method, model_fn=functools.partial(build, method.spherefed), train=train, test=test,
                       parts=parts, cfg=cfg, hp=hp, execution=execution,
                       progress=args.progress or sys.stderr.isatty(),
                       checkpoint=checkpoints / f"{method.name.replace('+', '_')}.pt", resume=args.resume)
        elapsed = time.perf_counter() - start
        start = time.perf_counter()
        rows = price_run(r, method, hp, pricer=pricer, client_labels=client_labels, hw=hw, system=system,
                         devices=devices)
        pricing_s = time.perf_counter() - start
        round_rows += rows
        probe = prepare_model(build(method.spherefed), method, seed=cfg.seed)
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
            "comm_closed_form": closed_form_for(method, probe, hp, cfg, clients_per_round),
            "history": list(r.history)}
        ledger_rows += [[method.name, t.round, t.client, t.direction, t.group, t.nbytes] for t in r.transfers]
        print(f"{method.name:28s} accuracy {r.accuracy:.4f}"
              + (f" (before calibration {r.accuracy_before_calibration:.4f})" if method.calibration else "")
              + (f"  validation {val_accuracy:.4f}" if val is not None else "")
              + f"  total {results[method.name]['comm']['total_bytes']:,} B  modeled {rows[-1]['cum_wall_s']:.1f} s, "
              f"{rows[-1]['cum_energy_j']:.3g} J  ({elapsed:.1f} s run + {pricing_s:.1f} s pricing)", file=sys.stderr)
    doc = {"preset": name, "command": "python -m workloads.fl.run " + " ".join(argv),
           "git_commit": git_commit(), "torch": torch.__version__,
           "torch_threads": torch.get_num_threads(), "execution": execution.describe(), "dataset_note": train.note,
           "test_note": test.note, "config": asdict(cfg), "hparams": {k: asdict(v) for k, v in method_hps.items()},
           "hardware": asdict(hw), "system": asdict(system),
           "holdout": {"fraction": cfg.holdout_fraction, "val_samples": 0 if val is None else len(val),
                       "note": None if val is None else val.note},
           "partition_sizes": [int(len(p)) for p in parts], "methods": results}
    save_partition_summary(out / "partition.csv", labels, parts, train.num_classes)
    atomic_write_text(out / "ledger.csv", _csv(ledger_rows))
    atomic_write_text(out / "accuracy.csv",
                      _csv([["method", "accuracy", "accuracy_before_calibration", "val_accuracy", "total_bytes"]]
                           + [[m, v["accuracy"], v["accuracy_before_calibration"], v["val_accuracy"],
                               v["comm"]["total_bytes"]] for m, v in results.items()]))
    atomic_write_text(out / "rounds.csv", _csv([list(ROUNDS_COLUMNS)]
                                               + [[row[c] for c in ROUNDS_COLUMNS] for row in round_rows]))
    atomic_write_text(out / "results.json", json.dumps(doc, indent=1) + "\n")
    shutil.rmtree(checkpoints, ignore_errors=True)  # the run is complete: nothing to resume
    print(f"wrote {out}/results.json, accuracy.csv, ledger.csv, partition.csv, rounds.csv", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

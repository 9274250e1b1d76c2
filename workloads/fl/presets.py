"""Presets: a federated run's settings in one TOML file, and what the run derives from them
(each method's hyper-parameters, the partition, the validation hold-out).

A preset is a name under ``configs/presets/`` or a path to a ``.toml`` file with the tables

* ``[run]``: ``FLConfig`` fields plus ``methods``, the default method list;
* ``[hparams]``: the local training's knobs for every method, and knobs of particular methods
  (FedProx's ``prox_mu``, CCVR's ``ccvr_lr``), used by the methods that have them; a run where
  one of them belongs to no method it trains is refused (``Preset.check_knobs``);
* ``[methods.<name>]``: per-method overrides, applied in this order: the base algorithm,
  ``spherefed`` for any SphereFed variant, the calibration, then the full method name. Each
  ``<name>`` must be one of those (a misspelt table is an error, not silently unused);
* ``[execution]``: throughput and data-path options and the number format (``workloads.fl.execution.SETTINGS``);
* ``[targets]``: ``accuracy_pct``, the time-to-accuracy targets (test accuracies in percent) a
  report of the run uses, declared before the run: a list, spelt as a study file's
  (``accuracy_targets_pct``); ``bench.run`` reports the first.

Every key and value is checked when the file is read, with one line naming the file, table and key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from iokit import checks
from iokit.toml import read_toml
from workloads.fl.execution import preset_options
from workloads.fl.hparams import FLConfig, Hparams, hparams_from_table, override
from workloads.fl.knob import Knob
from workloads.fl.methods import (ALGORITHMS, CALIBRATIONS, NAME_PARTS, MethodConfig, check_file_spelling,
                                  built_in_name, distinct_methods, method_identity, parse_method)

PRESET_DIR = Path(__file__).resolve().parents[2] / "configs" / "presets"
TABLES = ("run", "hparams", "methods", "execution", "targets")


@dataclass(frozen=True)
class Preset:
    """A preset file, checked."""

    name: str  # the file's stem
    fl: FLConfig
    methods: tuple[str, ...]  # [run] methods: the default method list
    hp: Hparams  # the local training's knobs, for every method
    overrides: Mapping[str, Mapping]  # [methods.<name>] tables
    execution: Mapping[str, bool]  # [execution]
    accuracy_targets_pct: tuple[float, ...] = ()  # [targets] accuracy_pct: declared before the run
    knob_values: Mapping[str, Any] = field(default_factory=dict)  # [hparams] knobs of particular methods
    source: str = ""  # the file, for messages

    def hparams(self, method: MethodConfig) -> Hparams:
        """``method``'s hyper-parameters: the defaults, the ``[hparams]`` values of its own knobs
        (``knob_values``), then its override tables in order."""
        return method_hparams(method, self.hp, self.overrides, self.knob_values)

    def check_knobs(self, methods: Sequence[MethodConfig]) -> None:
        """Every knob ``[hparams]`` sets for particular methods (``knob_values``: FedProx's ``prox_mu``,
        a method of yours' own) belongs to a method the run trains: else one line naming the preset,
        the knob, its methods and the fix (ValueError); a value that no method of the run reads
        would look as if it were used."""
        trained = {k.name for m in methods for k in m.knobs}
        for name in self.knob_values:
            if name not in trained:
                owners = knob_owners(name) or ["a method of yours"]
                raise ValueError(f"{self.source or self.name} [hparams]: {name} is a knob of {' and '.join(owners)}, "
                                 f"which this run does not train (methods: {', '.join(m.name for m in methods)}); "
                                 f"set it in [methods.{owners[0]}] (used when {owners[0]} trains) or train "
                                 f"{owners[0]}")

    @property
    def note(self) -> str:
        """One line on what the run is (data, clients, partition, rounds, epochs, batch)."""
        f, hp = self.fl, self.hp
        size = f"{f.image_size}x{f.image_size} inputs, " if f.image_size else ""
        split = f"{f.partition} {f.alpha:g}" if f.partition == "dirichlet" else f.partition
        return (f"{size}{f.num_clients} clients, {split}, {f.rounds} round(s) of {hp.local_epochs} local epoch(s), "
                f"batch {hp.batch_size}")


def preset_path(preset: str) -> Path:
    return Path(preset) if preset.endswith(".toml") else PRESET_DIR / f"{preset}.toml"


def load_preset(preset: str) -> Preset:
    """A preset by name (under configs/presets/) or .toml path; ValueError naming file, table and key."""
    path = preset_path(preset)
    if not preset.endswith(".toml") and not path.is_file():
        known = sorted(p.stem for p in PRESET_DIR.glob("*.toml"))
        raise ValueError(f"preset {preset!r} not found (looked for {path}); known presets: {', '.join(known)}, "
                         "or give a .toml path")
    doc = read_toml(path, ValueError, "preset")
    checks.unknown_keys(doc, TABLES, where=str(path))
    for table in TABLES:
        if not isinstance(doc.get(table, {}), dict):
            raise ValueError(f"{path}: {table} must be a table ([{table}])")
    if "run" not in doc:
        raise ValueError(f"{path}: no [run] table; a preset needs at least [run] with dataset = ... "
                         "(see configs/presets/quick.toml)")
    run = dict(doc["run"])
    methods = run.pop("methods", ["fedavg"])
    if not isinstance(methods, list) or not methods or not all(isinstance(m, str) for m in methods):
        raise ValueError(f"{path} [run]: methods = {methods!r} must be a non-empty list of method names, "
                         'e.g. methods = ["fedavg", "spherefed"]')
    checks.distinct(methods, name=f"{path} [run] methods")
    for method in methods:
        try:
            parse_method(method)
        except ValueError as err:
            raise ValueError(f"{path} [run]: methods: {err}") from None
        check_file_spelling(method, where=f"{path} [run] methods")
    distinct_methods(methods, name=f"{path} [run] methods")
    cfg = checks.from_table(FLConfig, run, where=f"{path} [run]")
    common = doc.get("hparams", {})
    every = Hparams().names()  # the local training's: every run declares them
    method_knobs = {k.name: k for m in (*ALGORITHMS, *CALIBRATIONS, *methods) for k in part_knobs(m)}
    try:
        checks.unknown_keys(common, tuple(dict.fromkeys((*every, *method_knobs))), where=f"{path} [hparams]")
    except ValueError as err:  # a knob of a method of yours that [run] methods does not list: its own table
        raise ValueError(f"{err} (a knob of a method of yours not in [run] methods: set it in "
                         '[methods."package.module:Class"], used when that method trains)') from None
    knob_values = {k: v for k, v in common.items() if k not in every}
    for name, value in knob_values.items():  # checked now, not mid-run; used by the methods that own them
        try:
            method_knobs[name].check(value)
        except ValueError as err:
            raise ValueError(f"{path} [hparams]: {err}") from None
    hp = hparams_from_table({k: v for k, v in common.items() if k in every}, where=f"{path} [hparams]")
    overrides = doc.get("methods", {})
    for name, table in overrides.items():
        check_override_name(name, where=f"{path} [methods.{name}]")
        if not isinstance(table, dict):
            raise ValueError(f"{path}: methods.{name} must be a table ([methods.{name}]) of hyper-parameters")
        check_table(hp.with_knobs(part_knobs(name)), table, where=f"{path} [methods.{name}]")  # now, not mid-run
    execution = preset_options(doc.get("execution", {}), where=str(path))
    targets = doc.get("targets", {})
    checks.unknown_keys(targets, ("accuracy_pct",), where=f"{path} [targets]")
    return Preset(path.stem, cfg, tuple(methods), hp, overrides, execution,
                  accuracy_targets_pct(targets.get("accuracy_pct", []), where=f"{path} [targets]"), knob_values,
                  str(path))


def part_knobs(name: str) -> tuple[Knob, ...]:
    """The knobs of what a ``[methods.<name>]`` table (or a ``[run]`` method) names: a built-in
    algorithm's or calibration's own (MOON's ``moon_mu``, whether or not ``[run]`` lists it), none
    for ``spherefed``, else the method's (a full name, a method of yours)."""
    part = {**ALGORITHMS, **CALIBRATIONS}.get(name)
    if part is not None:
        return tuple(part.knobs)
    return () if name in NAME_PARTS else parse_method(name).knobs


def check_table(hp: Hparams, table: Mapping[str, Any], *, where: str) -> None:
    """A ``[methods.<name>]`` table's keys and values, for ``hp`` (the local training's knobs and that
    method's): a knob of another method is refused naming its methods and where it belongs."""
    foreign = foreign_knob(hp, table)
    if foreign:
        knob, owners = foreign
        raise ValueError(f"{where}: {knob} is a knob of {' and '.join(owners)}, not of this table's method; "
                         f"set it in [methods.{owners[0]}] (or the table of a method that trains {owners[0]}, "
                         f'e.g. [methods."{owners[0]}+spherefed"])')
    override(hp, table, where=where)


def knob_owners(name: str) -> list[str]:
    """The built-in methods whose knob ``name`` is."""
    return [m for m, part in {**ALGORITHMS, **CALIBRATIONS}.items() if any(k.name == name for k in part.knobs)]


def foreign_knob(hp: Hparams, keys: Iterable[str]) -> tuple[str, list[str]] | None:
    """The first of ``keys`` that ``hp`` does not declare but another built-in method has as a knob,
    with the methods that have it (``knob_owners``); None when there is none (an unknown key is
    ``override``'s to refuse)."""
    for key in keys:
        if key not in hp.names() and (owners := knob_owners(key)):
            return key, owners
    return None


def accuracy_targets_pct(value: object, *, where: str, error: type[Exception] = ValueError) -> tuple[float, ...]:
    """``[targets] accuracy_pct`` of a preset or a study file (one spelling for both): a list of
    distinct test accuracies in percent, each in (0, 100]. A lone number (a preset's spelling before
    the two were one) is refused with the list it means."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise error(f"{where}: accuracy_pct = {value!r} must be a list of percentages, as in a study file: "
                    f"give accuracy_pct = [{value!r}]")
    if not isinstance(value, list):
        raise error(f"{where}: accuracy_pct = {value!r} must be a list of percentages, e.g. [90.0]")
    for pct in value:
        checks.number_in(pct, 0.0, 100.0, name=f"{where} accuracy_pct", error=error, low_open=True)
    checks.distinct(value, name=f"{where} accuracy_pct", error=error)
    return tuple(float(pct) for pct in value)


def check_override_name(name: str, *, where: str) -> None:
    """A ``[methods.<name>]`` table names an algorithm, ``spherefed``, a calibration or a full
    method name; anything else (a typo such as ``spherfed``) is refused."""
    if name in NAME_PARTS:
        return
    try:
        parse_method(name)
    except ValueError:
        hint = checks.closest(name, NAME_PARTS)
        raise ValueError(f"{where}: {name!r} is not a method" + (f" (did you mean {hint!r}?)" if hint else "")
                         + f"; name an algorithm, spherefed, a calibration or a full method ({', '.join(NAME_PARTS)})"
                         ) from None
    if parse_method(name).name != name or method_identity(name) != name:
        raise ValueError(f"{where}: write the method as {method_identity(name)!r} (its canonical name), "
                         f"so that it matches the run's method")


def method_hparams(method: MethodConfig, hp: Hparams, overrides: Mapping[str, Mapping],
                   knob_values: Mapping[str, Any] | None = None) -> Hparams:
    """``hp`` (the local training's knobs) with ``method``'s own knobs (their defaults, then
    ``knob_values``' values of them: a preset's ``[hparams]``) and ``overrides``' tables for
    ``method`` applied: base algorithm, ``spherefed``, calibration, full name, each by
    its built-in name where a part is a built-in's class named by its path (``built_in_name``: the
    same method, the same tables)."""
    hp = hp.with_knobs(method.knobs)
    own = {k.name for k in method.knobs}
    hp = hp.replace(**{k: v for k, v in (knob_values or {}).items() if k in own})
    keys = [built_in_name(method.algorithm)] + ([method.modifier] if method.modifier else [])
    keys += [built_in_name(method.calibration)] if method.calibration else []
    keys.append(method_identity(method.name))
    for key in dict.fromkeys(keys):
        if key in overrides:
            hp = override(hp, overrides[key], where=f"[methods.{key}]")
    return hp


def make_partition(labels: np.ndarray, cfg: FLConfig) -> list[np.ndarray]:
    """The clients' sample indices under ``cfg``'s partition (``workloads.fl.partition.PARTITIONS``)."""
    from workloads.fl.partition import PARTITIONS

    checks.one_of(cfg.partition, PARTITIONS, name="partition")
    fn = PARTITIONS[cfg.partition]
    extra = {"dirichlet": {"alpha": cfg.alpha, "min_size": cfg.min_client_size},
             "fedcos": {"non_iid_fraction": cfg.non_iid_fraction},
             "dispatch": {"classes_per_client": cfg.classes_per_client}}.get(cfg.partition, {})
    return fn(labels, cfg.num_clients, seed=cfg.seed, **extra)


def load_data(fl: FLConfig, *, data_dir: str | Path | None = None, image_size: int | None = None):
    """``(train, test)`` of ``fl``'s dataset at ``image_size`` (default: ``fl``'s), each a seeded
    subset (``max_train_samples`` with the run's seed, ``max_test_samples`` with seed + 1): the first
    half of every command's data preparation (``bench.fl``, ``bench.run``, ``bench.study``'s runs,
    the Flower app); ``client_data`` is the second."""
    from workloads.fl.data import load_dataset
    from workloads.fl.dataset import subset

    train, test = load_dataset(fl.dataset, data_dir=data_dir, image_size=image_size or fl.image_size)
    return (subset(train, fl.max_train_samples, fl.seed, "train"),
            subset(test, fl.max_test_samples, fl.seed + 1, "test"))


def client_data(train, fl: FLConfig) -> tuple:
    """``(train, validation hold-out or None, the clients' partition)``: the hold-out drawn from
    ``load_data``'s train with the run's seed before partitioning (``split_holdout``), the rest
    partitioned as ``fl`` says (``make_partition``)."""
    train, val = split_holdout(train, fl.holdout_fraction, seed=fl.seed)
    return train, val, make_partition(train.y.numpy(), fl)


def split_holdout(train, fraction: float, *, seed: int):
    """(train without the hold-out, hold-out) or (train, None) when ``fraction`` is 0. The hold-out
    is drawn uniformly with ``seed`` before partitioning (SphereFed Sec. 5.1 tunes on 15 %)."""
    if not fraction:
        return train, None
    import torch

    from workloads.fl.dataset import Dataset
    from workloads.fl.partition import holdout_split

    fit, val = holdout_split(np.arange(len(train)), fraction, seed=seed)
    if len(val) == 0 or len(fit) == 0:
        raise ValueError(f"holdout_fraction {fraction} of {len(train)} training samples leaves an empty split")

    def subset(idx, note):
        idx = torch.from_numpy(idx.astype(np.int64))
        return Dataset(train.name, train.x[idx], train.y[idx], train.num_classes, note)

    return (subset(fit, f"{train.note}; {len(fit)} samples after a {fraction:g} validation hold-out"),
            subset(val, f"validation hold-out: {len(val)} samples ({fraction:g}) of {train.note}, seed {seed}"))


def with_changes(preset: Preset, **changes) -> Preset:
    """``preset`` with ``FLConfig`` fields replaced (None values ignored)."""
    changes = {k: v for k, v in changes.items() if v is not None}
    return replace(preset, fl=replace(preset.fl, **changes)) if changes else preset

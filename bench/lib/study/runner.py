"""The grid runner ``bench.study``: one federated training run of an accuracy study, every round
priced, its curves written (docs/study.md).

A point is self-contained, so that its id (``bench.lib.grid.point.run_id``: a hash of the runner and
the point) changes exactly when something that decides the result changes, and a tuning run and
an evaluation run with the same settings are one run::

    {"model": "convnet", "method": "fedavg+ccvr", "seed": 0,
     "fl": {FLConfig fields but model and seed}, "hparams": {every Hparams field},
     "execution": {device and options}, "hw": null, "system": null}

and, only where given, the optional keys (``optional_keys``): ``"data_dir": DIR`` for a dataset
read from a folder (CIFAR-10 / CIFAR-100 / TinyImageNet; absent for digits and mnist5k), a
``"fleet"`` and its ``"deadline_s"``, and every other ``bench.fl`` flag a point may carry.

A point is a ``Cell``: the ``bench.fl`` run (``bench.lib.spec.RunSpec``) its settings are, parsed
as a grid point's flags, on the preset its ``fl`` and ``hparams`` tables are; ``Cell.point()`` gives
the point back key for key (its id unchanged), and the cell is resolved as every run is
(``bench.lib.resolve.resolve`` on the cell's preset).

The run is ``bench.fl``'s (``pipeline.load`` then ``jobs.run_job``): the data, the validation
hold-out and the partition from the seed, the model built under the seed. It writes into its
folder ``curve.csv`` (``CURVE_COLUMNS``: one row per method label and round, the training rounds
and, for a calibrated method, the calibration as round R + 1) and ``run.json`` (wall times and
the machine), and returns ``<label>.accuracy`` / ``<label>.val_accuracy`` per label. A calibrated
job (``fedavg+ccvr``) gives two labels: its training method (``fedavg``, the curve before
calibration) and itself.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from bench.lib.grid.runners import grid_runner
from bench.lib.study.run_files import (CURVE_CSV, RUN_JSON, curve_rows, correct_by_label, missing_rounds, out_of_range,
                                       participation, read_curve, write_run)
from bench.lib.spec import FL, RunSpec, from_point, is_resource, spec_flags
from iokit import checks
from iokit.cli import is_default
from workloads.fl.execution import SETTINGS, Execution, kernel_environment
from workloads.fl.hparams import FLConfig, Hparams, hparams_from_table
from workloads.fl.methods import MethodConfig, parse_method
from workloads.fl.presets import Preset

POINT_KEYS = ("model", "method", "seed", "fl", "hparams", "execution", "hw", "system")
TABLE_FIELDS = ("models", "methods", "seed", "preset", "alpha", "rounds", "holdout", "lr_from", "hw_path",
                "system_path", "device", *SETTINGS)
"""The ``RunSpec`` fields a point holds in ``POINT_KEYS`` and its tables (``fl``, ``hparams``,
``execution``). Every other ``bench.fl`` flag is an optional key of a point (``optional_keys``)."""
FL_KEYS = tuple(f.name for f in fields(FLConfig) if f.name not in ("model", "seed"))


POINT_PRESET = "study"  # a cell's RunSpec.preset: the preset is the point's own fl and hparams tables


@dataclass(frozen=True)
class Cell:
    """A point as what it is: the ``bench.fl`` run ``spec`` (model, method, seed, files, device and
    execution options: every setting a flag names) on the preset its ``fl`` and ``hparams`` tables
    are (``preset``), with its ``execution`` resolved (no fleet's per-class formats: those come
    with the fleet, ``bench.lib.resolve.resolve``)."""

    spec: RunSpec
    preset: Preset
    execution: Execution

    @property
    def model(self) -> str:
        return self.spec.models[0]

    @property
    def method(self) -> MethodConfig:
        return parse_method(self.spec.methods[0])

    @property
    def fl(self) -> FLConfig:
        return self.preset.fl

    @property
    def hp(self) -> Hparams:
        return self.preset.hp

    @property
    def fleet(self) -> str | None:
        return self.spec.fleet_path

    @property
    def deadline_s(self) -> float | None:
        return self.spec.deadline_s

    def point(self) -> dict[str, Any]:
        """The point this cell was read from (``make_point``): the on-disk format, hashed into the run's id."""
        s = self.spec
        system = None if is_default(s.system_path) else s.system_path
        return make_point(self.model, s.methods[0], s.seed, self.fl, self.hp, self.execution, s.hw_path, system,
                          **{key: getattr(s, name) for name, key in optional_keys().items()})


def optional_keys() -> dict[str, str]:
    """RunSpec field -> point key of every ``bench.fl`` flag a point carries beside its tables, a key
    only where given: today ``data_dir`` (a folder dataset's), ``classifier``, ``fleet`` and its
    ``deadline_s`` (``"inf"``: none) and ``overcommit`` (docs/fleets.md); a run option added to
    ``RunSpec`` is one more, so a point without it keeps its id. A field declared a resource
    (``bench.lib.spec.flag(resource=True)``: ``client_threads``) is none: it does not decide a run's result."""
    return {name: flag.names[0].removeprefix("--").replace("-", "_") for name, flag in spec_flags(FL)
            if name not in TABLE_FIELDS and not is_resource(name)}


def parse_point(point: Mapping[str, Any]) -> Cell:
    """A ``bench.study`` point (module doc) as the ``Cell`` it is; ValueError naming the bad key.
    Its flag settings are parsed as a grid point of ``bench.fl`` is (``bench.lib.spec.from_point``):
    one set of rules, one vocabulary. Files are read when the cell is resolved (``check_point``)."""
    where = "bench.study point"
    checks.unknown_keys(point, (*POINT_KEYS, *optional_keys().values()), where=where)
    missing = [k for k in POINT_KEYS if k not in point]
    if missing:
        raise ValueError(f"{where}: missing key {missing[0]!r}")
    for key in ("fl", "hparams", "execution"):
        if not isinstance(point[key], Mapping):
            raise ValueError(f"{where}: {key} must be a table")
    checks.unknown_keys(point["fl"], FL_KEYS, where=f"{where} fl")
    if not isinstance(point["model"], str) or not isinstance(point["method"], str):
        raise ValueError(f"{where}: model and method must be names")
    fl = checks.from_table(FLConfig, {**_set(FLConfig, point["fl"]), "model": point["model"], "seed": point["seed"]},
                           where=f"{where} fl")
    method = parse_method(point["method"])
    hp = hparams_from_table(point["hparams"], knobs=method.knobs, where=f"{where} hparams")
    checks.unknown_keys(point["execution"], ("device", *SETTINGS), where=f"{where} execution")
    spec = from_point(point_flags(point), FL, where=where)
    preset = Preset(POINT_PRESET, fl, (method.name,), hp, {}, {})
    try:
        return Cell(spec, preset, spec.execution(preset))
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def point_flags(point: Mapping[str, Any]) -> dict[str, Any]:
    """A point's settings as ``bench.fl``'s flags (a grid point's keys): model, method, seed, the
    execution table, its files and its optional keys; a deadline of ``"inf"`` (JSON has no infinity) as inf."""
    given = {key: point.get(key) for key in ("hw", "system", *optional_keys().values())}
    given = {k: math.inf if k == "deadline_s" and v == "inf" else v for k, v in given.items() if v is not None}
    return {"preset": POINT_PRESET, "model": point["model"], "methods": [point["method"]], "seed": point["seed"],
            **point["execution"], **given}


def _set(cls: type, table: Mapping[str, Any]) -> dict[str, Any]:
    """``table`` without the null values of fields whose default is None (JSON's null, TOML's absence)."""
    defaults = {f.name: f.default for f in fields(cls)}
    return {k: v for k, v in table.items() if not (v is None and k in defaults and defaults[k] is None)}


def make_point(model: str, method: str, seed: int, fl: FLConfig, hp: Hparams, execution: Execution,
               hw: str | None = None, system: str | None = None, **given: Any) -> dict[str, Any]:
    """The point of one run (module doc): every setting that decides its result. ``given``: its
    optional keys (``optional_keys``: ``data_dir``, ``fleet``, ``deadline_s``, ...), each a key only
    when not None, so the offline digits' points without a fleet keep their ids; an infinite
    deadline as ``"inf"``, a folder as text."""
    checks.unknown_keys(given, optional_keys().values(), where="make_point")
    point = {"model": model, "method": parse_method(method).name, "seed": seed,
             "fl": {k: v for k, v in asdict(fl).items() if k not in ("model", "seed")}, "hparams": hp.as_dict(),
             "execution": {k: v for k, v in execution.settings().items() if k != "run_options"},  # optional keys
             "hw": hw, "system": system}
    for key, value in given.items():
        if value is not None:
            point[key] = "inf" if value == math.inf else str(value) if isinstance(value, Path) else value
    return point


def machine_info() -> dict[str, Any]:
    """Where a run ran: host, CPU model, cores, torch version and threads."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"host": socket.gethostname(), "cpu": cpu, "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "kernels": kernel_environment()}


def check_point(point: Mapping[str, Any]) -> Cell:
    """The grid's ``validate``, every point before any run, cheap: the point parsed (``parse_point``),
    its dataset's folder checked (``bench.lib.resolve.check_data_dir``) and its model known;
    ValueError naming the point. Its files are read by ``prepare`` (the study command prepares one
    point per setting before any run, naming the study file and the setting)."""
    from bench.lib.resolve import check_data_dir
    from workloads.models import MODELS

    cell = parse_point(point)
    try:
        check_data_dir(cell.fl.dataset, cell.spec.data_dir)
    except ValueError as err:
        raise ValueError(f"bench.study point: {err}") from None
    if cell.model not in MODELS and ":" not in cell.model:
        raise ValueError(f"model {cell.model!r} is not known; give one of {', '.join(sorted(MODELS))}")
    return cell


def prepare(point: Mapping[str, Any]):
    """Everything one run does before it trains: the point resolved as every run is
    (``bench.lib.resolve.resolve`` on the cell's preset: the hardware, system and fleet files read),
    the data loaded, the hold-out split, the partition made and the model built
    (``bench.lib.fl.pipeline.load``); (the ``Cell``, its ``bench.lib.fl.jobs.RunInputs``), ValueError
    naming what cannot be used. The study command calls it on one point per model and data setting
    before any run (a malformed file, a hold-out that leaves no data, a factory that is not a model:
    refused up front, not as every trial failing)."""
    from bench.lib.fl import pipeline
    from bench.lib.resolve import resolve

    cell = parse_point(point)
    return cell, pipeline.load(resolve(cell.spec, preset=cell.preset))


def projected_local_training_s(points: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], tuple[int, float]]:
    """Per (model, method, arithmetic): how many of ``points`` and their projected local training
    in seconds on this machine and device (``workloads.fl.loop.forecast``: a few timed steps on the
    first point of each, loaded once, in that point's number format or precision schedule, whose
    emulation costs time; each point's samples counted on that point's partition, whose sizes differ
    from another seed's or setting's only in the batch rounding; evaluation and pricing not included)."""
    import functools

    from workloads.fl.loop import forecast, planned_samples

    out: dict[tuple[str, str, str], tuple[int, float]] = {}
    first: dict[tuple[str, str, str], tuple[Any, float]] = {}
    for point in points:
        execution = point["execution"]
        key = (point["model"], point["method"],
               execution.get("precision_schedule") or execution.get("number_format", "fp32"))
        if key not in first:
            p, inputs = prepare(point)
            f = forecast(p.method, model_fn=functools.partial(inputs.build, p.method.head),
                         train=inputs.train, parts=inputs.parts, cfg=p.fl, hp=p.hp, execution=p.execution)
            first[key] = (inputs.parts, f.samples_per_s)
        parts, rate = first[key]
        spec = parse_point(point)
        n, s = out.get(key, (0, 0.0))
        out[key] = (n + 1, s + planned_samples(parts, spec.fl, spec.hp) / rate)
    return out


def files_read(point: Mapping[str, Any]) -> dict[str, Any]:
    """The files a point's run reads, role -> path (``grid_runner``'s ``reads``; ``iokit.identity``):
    its hardware file, its system file (the default one when none is named; not read on a fleet),
    its fleet file and each of the fleet's classes' hardware files. A finished run whose files
    have changed since is run again, so a table never labels a run with content it did not read."""
    from workloads.cost.fleet import FleetError, fleet_path, load_fleet, resolve_hw_path
    from workloads.cost.system import DEFAULT_SYSTEM_PATH

    fleet = point.get("fleet")
    files: dict[str, Any] = {"hw": point.get("hw"),
                             "system": point.get("system") or (DEFAULT_SYSTEM_PATH if fleet is None else None)}
    if fleet is not None:
        path = fleet_path(fleet)
        files["fleet"] = path
        try:
            classes = load_fleet(path).classes
        except FleetError:  # the run fails on it, and says why
            classes = ()
        for c in classes:
            files[f"fleet class {c.name} hw"] = resolve_hw_path(c.hw_path, path.parent)
    return files


def incomplete_run(point: Mapping[str, Any], folder: Path) -> str:
    """The grid's ``complete`` check of a finished study run (``bench.lib.grid.runners``): why
    ``folder`` does not hold the whole run of ``point`` ("" when it does): ``run.json`` readable,
    ``curve.csv`` with every round (``missing_rounds``)."""
    folder = Path(folder)
    try:
        json.loads((folder / RUN_JSON).read_text(encoding="utf-8"))
        curve = read_curve(folder / CURVE_CSV)
        return missing_rounds(point, curve) or out_of_range(curve)
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{type(err).__name__}: {str(err)[:80]}"


@grid_runner("bench.study", validate=check_point, reads=files_read, complete=incomplete_run)
def run_point(point: Mapping[str, Any], out_dir: Path) -> dict[str, float]:
    """One run of an accuracy study (module doc)."""
    from bench.lib.fl.jobs import Job, run_job

    p, inputs = prepare(point)
    outcome = run_job(Job(p.method.name, p.hp), inputs)
    result = outcome.result
    curve = curve_rows(p.method, result.history, outcome.rows, result.val_accuracy if p.method.calibration else None)
    info = {"wall_s": outcome.wall_s, "pricing_wall_s": outcome.pricing_wall_s, "machine": machine_info(),
            "execution": p.execution.describe(), "train_samples": len(inputs.train),
            "val_samples": 0 if inputs.val is None else len(inputs.val),
            "test_samples": len(inputs.test), "partition_sizes": [len(x) for x in inputs.parts],
            "local_accuracy": result.local_accuracy,
            "local_accuracy_before_calibration": result.local_accuracy_before_calibration,
            "test_correct": correct_by_label(p.method, result)}
    if p.fleet is not None:  # who took part in each training round (docs/fleets.md); a run without a fleet: all sampled
        info["participation"] = participation(outcome.rows)
    metrics = write_run(out_dir, curve, info)
    if result.local_accuracy is not None:  # the local test mode (docs/study.md)
        metrics[f"{p.method.name}.local_accuracy"] = result.local_accuracy
    return metrics

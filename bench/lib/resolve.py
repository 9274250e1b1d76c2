"""A run resolved once: ``resolve(spec) -> ResolvedRun``, what every command that trains a
``bench.lib.spec.RunSpec`` (``bench.run``, ``bench.fl``, a ``bench.study`` cell, a grid point,
``bench.flower`` and its fleet plan) checks, loads and assembles before any work, written here and
nowhere else.

* ``preset_of``: the spec's preset with the spec's changes (seed, rounds, hold-out, alpha, model);
* ``check_data_dir``: the preset's dataset and ``--data-dir`` agree (an offline dataset takes no
  folder, a folder dataset needs one, and it is a folder);
* ``check_classifier``: ``--classifier`` names the nn.Linear of a user model, never a paper model's;
* ``method_list`` and ``hparams_of``: the methods, each once, and their hyper-parameters on the
  preset, a knob the preset's ``[hparams]`` sets for a method the run does not train refused;
* the learning rate's source (``--lr-from``: ``bench.lib.run.reference.rates``), recorded per method;
* ``load_files``: the hardware file, the system file, the fleet with the spec's round rule and the
  execution options, each checked;
* the assembly, once: the server's accelerator and every client's device in the run's number
  format (``accel_sim.mac_energy.hardware_in_format``), a fleet's classes, links and per-class
  formats, a precision schedule's devices per round.

One vocabulary: every message names the flag (``--data-dir``, ``--fleet``, ...); a study cell or a
grid point is parsed as its flags (``bench.lib.spec.from_point``), so its errors are the same words
with the point named before them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

from accel_sim.hardware import HardwareConfig, load_hardware_config
from accel_sim.mac_energy import hardware_in_format
from bench.lib.spec import FL, RUN, RunSpec
from iokit import checks
from workloads.cost.fleet import Fleet, assign_classes, check_fleet_flags, client_formats, run_fleet
from workloads.cost.rounds import Device, client_devices, devices_by_round, fleet_devices, fleet_system
from workloads.cost.system import SystemModel, load_system_model
from workloads.fl.data import PACKAGED_DATASETS
from workloads.fl.execution import Execution
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.methods import MethodConfig, distinct_methods, parse_method
from workloads.fl.presets import Preset, load_preset, with_changes
from workloads.models import MODELS


@dataclass(frozen=True)
class ResolvedRun:
    """One federated run (one model) as every command trains and prices it: the spec, its preset,
    its methods at their hyper-parameters and where each rate comes from, and the accelerators,
    devices, links and formats assembled once (``resolve``). Nothing heavy is loaded (the data
    is loaded from it: ``bench.lib.fl.jobs.run_inputs``)."""

    spec: RunSpec  # its seed resolved (the preset's where not given)
    preset: Preset  # with the spec's changes; ``preset.fl.model`` is the model trained
    methods: tuple[MethodConfig, ...]
    hparams: Mapping[str, Hparams]  # per method name, at the rate ``rates`` says
    rates: Mapping[str, Mapping]  # per method name: its lr and where it comes from (``--lr-from``)
    hw: HardwareConfig  # the server's accelerator: --hw in the run's number format, its weights in FP32
    client_hw: HardwareConfig  # --hw as a client computes on it: the format, its FP32 master copy unless
    # --low-precision-weights (bench.run's paper-shape step; ``devices`` are built alike)
    system: SystemModel  # on a fleet, its classes' links (``fleet_system``)
    devices: tuple[Device, ...]  # client k's accelerator and speed
    execution: Execution  # on a fleet, with its per-class formats (``client_formats``)
    fleet: Fleet | None = None  # with the spec's deadline and over-commitment
    classes: tuple[int, ...] = ()  # with a fleet: client k's device class
    by_round: tuple[tuple[Device, ...], ...] = ()  # a precision schedule's devices per round

    @property
    def fl(self) -> FLConfig:
        return self.preset.fl

    def identity(self) -> dict[str, Any]:
        """The resolved config, as ``bench.fl`` records it in results.json and hashes it into its
        folder's manifest (``iokit.outputs.config_hash``): every key that decides the result. A
        field added to ``RunSpec`` is in it by default (``execution.run_options``, only where set:
        ``bench.lib.spec.RunSpec.run_options``); a fleet's key only where there is one: a run
        without them keeps its hash."""
        doc = {"preset": self.preset.name, "fl": asdict(self.fl), "methods": [m.name for m in self.methods],
               "hparams": {k: v.as_dict() for k, v in self.hparams.items()}, "classifier": self.spec.classifier,
               "hardware": asdict(self.hw), "system": self.system.describe(),
               "execution": self.execution.settings()}
        return doc if self.fleet is None else {**doc, "fleet": fleet_record(self.fleet, self.classes)}


@dataclass(frozen=True)
class Files:
    """What a ``RunSpec`` names, loaded and checked on its preset (nothing heavy)."""

    hw: HardwareConfig  # as given (FP32)
    system: SystemModel
    execution: Execution
    fleet: Fleet | None  # with the spec's deadline and over-commitment


def resolve(spec: RunSpec, *, command: str = FL, preset: Preset | None = None, model: str | None = None) -> ResolvedRun:
    """The run ``spec`` describes, for ``command`` (``bench.lib.spec.FL``: bench.fl, a study cell,
    bench.flower; ``RUN``: bench.run's run of ``model``, one of its models), every input
    checked before any work (ValueError naming the flag). ``preset``: the run's preset when it is no
    file's (a study cell's tables, bench.flower's client count); default ``preset_of(spec)`` with the
    model (bench.run: evaluation after every round, for the time-to-accuracy curve). ``None`` in the
    spec keeps the preset's value; the methods are ``spec.methods`` (bench.run: the federated runs
    that give its labels, ``bench.lib.run.config.trained_names``), each at its preset's rates or,
    with ``lr_from = "study"``, a covering reference study's (``bench.lib.run.reference.rates``)."""
    from bench.lib.fl.jobs import Job
    from bench.lib.run.reference import rates

    if command != RUN and len(spec.models) > 1:
        raise ValueError(f"--models {' '.join(spec.models)}: {command} trains one model; give --model NAME")
    model = model or (spec.models[0] if spec.models else None)
    if preset is None:
        preset = preset_of(spec, model=model, **({"eval_every": 1} if command == RUN else {}))
    spec = replace(spec, seed=preset.fl.seed)
    if command == RUN:
        from bench.lib.run.config import trained_names

        names = trained_names(spec.methods)
    else:
        names = spec.methods if spec.methods is not None else preset.methods
    methods = method_list(names)
    jobs, sources = rates([Job(m.name, hp) for m, hp in zip(methods, hparams_of(preset, methods).values())],
                          preset.fl.model, preset.fl, preset, spec.lr_from)
    files = load_files(spec, preset)
    return assembled(spec, preset, methods, {j.name: j.hp for j in jobs}, sources, files)


def assembled(spec: RunSpec, preset: Preset, methods: Sequence[MethodConfig], hparams: Mapping[str, Hparams],
              rates: Mapping[str, Mapping], files: Files) -> ResolvedRun:
    """The run's accelerators, devices, links and formats, assembled once. Every accelerator computes
    in the run's number format (``hardware_in_format``: the format's word size and MAC energy; FP32
    leaves it as given). The server keeps its weights in FP32 whatever the clients do: it aggregates
    in FP32 (``workloads.fl.aggregate``), so its accelerator holds an FP32 master copy; a client's
    weights live in the format only under ``--low-precision-weights`` (``client_hw``, ``devices``).
    With a fleet, client k's device, link and format are its class's (``assign_classes`` from the
    seed); a precision schedule prices each round's clients in that round's format
    (``devices_by_round``)."""
    execution, fl = files.execution, preset.fl
    master = not execution.low_precision_weights
    server_hw = hardware_in_format(files.hw, execution.number_format, master_weights=True)
    client_hw = hardware_in_format(files.hw, execution.number_format, master_weights=master)

    def devices_in(number_format: str) -> tuple[Device, ...]:
        return client_devices(files.system, files.hw, fl.num_clients, seed=fl.seed, number_format=number_format,
                              master_weights=master)

    by_round = devices_by_round(execution, fl.rounds, devices_in, files.fleet)
    common = dict(spec=spec, preset=preset, methods=tuple(methods), hparams=dict(hparams), rates=dict(rates),
                  hw=server_hw, client_hw=client_hw)
    if files.fleet is None:
        return ResolvedRun(**common, system=files.system, devices=devices_in(execution.number_format),
                           execution=execution, by_round=by_round)
    classes = assign_classes(files.fleet, fl.num_clients, seed=fl.seed)
    return ResolvedRun(**common, system=fleet_system(files.fleet, classes),
                       devices=fleet_devices(files.fleet, classes, number_format=execution.number_format,
                                             master_weights=master),
                       execution=replace(execution, client_formats=client_formats(files.fleet, classes,
                                                                                  execution.number_format)),
                       fleet=files.fleet, classes=tuple(classes), by_round=by_round)


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


def preset_of(spec: RunSpec, **changes) -> Preset:
    """The spec's preset (a name under configs/presets/ or a .toml path) with the spec's seed,
    rounds, hold-out and alpha where given, and ``changes`` (None: the preset's)."""
    return with_changes(load_preset(spec.preset), seed=spec.seed, rounds=spec.rounds,
                        holdout_fraction=spec.holdout, alpha=spec.alpha, **changes)


def hparams_of(preset: Preset, methods: Sequence[MethodConfig]) -> dict[str, Hparams]:
    """Every method's hyper-parameters on ``preset`` (``Preset.hparams``: its own knobs' values from
    ``[hparams]`` and its ``[methods.<name>]`` tables), once a run's methods are final; ValueError
    when ``[hparams]`` sets a knob of a method the run does not train (``Preset.check_knobs``)."""
    preset.check_knobs(methods)
    return {m.name: preset.hparams(m) for m in methods}

def check_data_dir(dataset: str, data_dir: str | None, *, whose: str = "the preset's",
                   fix: str = "or choose a CIFAR / TinyImageNet preset: --preset paper") -> None:
    """``dataset`` (``whose`` it is) and ``--data-dir`` agree: an offline dataset takes no folder, a
    folder dataset needs one that exists (ValueError / UsageError naming the fix)."""
    if dataset in PACKAGED_DATASETS and data_dir:
        raise ValueError(f"--data-dir {data_dir}: {whose} dataset is the offline {dataset}, which ships with "
                         f"{PACKAGED_DATASETS[dataset]}; leave --data-dir out ({fix})")
    if dataset not in PACKAGED_DATASETS and not data_dir:
        raise ValueError(f"{whose} dataset is {dataset}: give its folder with --data-dir DIR (nothing can be "
                         "downloaded here; docs/data.md)")
    if data_dir:
        from iokit.cli import check_folder

        check_folder(data_dir, "--data-dir")


def check_classifier(classifier: str | None, models: Sequence[str]) -> None:
    """``--classifier`` only with user models: a paper model has its classifier built in."""
    for model in models:
        if classifier is not None and model in MODELS:
            raise ValueError(f"--classifier {classifier}: the paper model {model!r} has its classifier built in; "
                             "--classifier picks the nn.Linear of a user model (docs/byom.md)")


def load_files(spec: RunSpec, preset: Preset) -> Files:
    """Every file and option of ``spec`` loaded and checked on ``preset`` (which gives the dataset,
    the client count, the rounds and the ``[execution]`` defaults); ValueError naming the flag."""
    check_data_dir(preset.fl.dataset, spec.data_dir)
    check_classifier(spec.classifier, spec.models or (preset.fl.model,))
    check_fleet_flags(spec.fleet_path, spec.system_path)
    hw = load_hardware_config(spec.hw_path) if spec.hw_path else HardwareConfig()
    system = load_system_model(spec.system_path)
    fleet = run_fleet(spec.fleet_path, deadline_s=spec.deadline_s, overcommit=spec.overcommit)
    execution = spec.execution(preset)
    if fleet is not None:
        fleet.check_clients(preset.fl.num_clients, source=f"--fleet {spec.fleet_path}")
        key = "precision_schedule" if execution.precision_schedule else "number_format"
        given = f"--{key.replace('_', '-')}" if getattr(spec, key) else f"the preset's [execution] {key}"
        fleet.check_run_format(execution.number_format, execution.precision_schedule, given)
    return Files(hw, system, execution, fleet)

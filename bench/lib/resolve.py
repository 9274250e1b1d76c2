"""A run's settings resolved once: what every command that trains a ``bench.lib.spec.RunSpec``
(``bench.run``, ``bench.fl``, a ``bench.study`` cell, ``bench.flower``) checks and loads before any
work, written here and nowhere else.

* ``preset_of``: the spec's preset with the spec's changes (seed, rounds, hold-out, alpha, model);
* ``check_data_dir``: the preset's dataset and ``--data-dir`` agree (an offline dataset takes no
  folder, a folder dataset needs one, and it is a folder);
* ``check_classifier``: ``--classifier`` names the nn.Linear of a user model, never a paper model's;
* ``hparams_of``: every method's hyper-parameters on the preset, a knob the preset's ``[hparams]``
  sets for a method the run does not train refused;
* ``load_spec``: the hardware file (as given: each command prices it in the run's number format), the
  system file, the fleet with the spec's round rule and the execution options, each checked.

One vocabulary: every message names the flag (``--data-dir``, ``--fleet``, ...); a study cell or a
grid point is parsed as its flags (``bench.lib.spec.from_point``), so its errors are the same words
with the point named before them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from accel_sim.hardware import HardwareConfig, load_hardware_config
from bench.lib.spec import RunSpec
from workloads.cost.fleet import Fleet, check_fleet_flags, run_fleet
from workloads.cost.system import SystemModel, load_system_model
from workloads.fl.data import PACKAGED_DATASETS
from workloads.fl.execution import Execution
from workloads.fl.hparams import Hparams
from workloads.fl.methods import MethodConfig
from workloads.fl.presets import Preset, load_preset, with_changes
from workloads.models import MODELS


@dataclass(frozen=True)
class Loaded:
    """What a ``RunSpec`` names, loaded and checked on its preset (nothing heavy)."""

    hw: HardwareConfig  # as given (FP32); the commands price it in the run's number format
    system: SystemModel
    execution: Execution
    fleet: Fleet | None  # with the spec's deadline and over-commitment


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


def load_spec(spec: RunSpec, preset: Preset) -> Loaded:
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
    return Loaded(hw, system, execution, fleet)

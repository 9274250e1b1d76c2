"""``bench.run``'s resolved configuration: what to price and train, checked before any work.

``RunConfig`` is the study's whole input (the command line's, or a grid point's); ``resolve`` checks
it and loads what is cheap (the hardware and system files, the preset); ``load_accuracy_data``
loads the accuracy run's data and builds every model once on it, so a bad model fails before any
work starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from accel_sim.hardware import HardwareConfig, load_hardware_config
from accel_sim.mac_energy import hardware_in_format
from bench.lib.paper import PAPER
from bench.lib.run import compare_hw
from iokit import checks
from iokit.cli import Default
from workloads import model_spec
from workloads.cost.rounds import client_devices
from workloads.cost.fleet import Fleet, check_fleet_flags, run_fleet
from workloads.cost.system import DEFAULT_SYSTEM_PATH, SystemModel, load_system_model
from workloads.fl.data import PACKAGED_DATASETS, Dataset, load_dataset, subset
from workloads.fl.execution import SETTINGS, Execution, execution_of
from workloads.fl.methods import CALIBRATIONS, calibration_named, is_calibration, parse_method
from workloads.fl.presets import Preset, load_preset, with_changes
from workloads.model_spec import DEFAULT_INPUT_SHAPE, ModelSpec

DEFAULT_METHODS = ("fedavg", "spherefed", "ccvr", "ffc")


@dataclass(frozen=True)
class RunConfig:
    """Everything ``bench.run`` takes (docs/bench.md lists the flags)."""

    models: tuple[str, ...]
    methods: tuple[str, ...] = DEFAULT_METHODS
    batch_size: int = PAPER.batch_size
    seed: int = 0
    preset: str = "quick"
    data_dir: str | None = None
    hw_path: str | None = None
    out: str = ""
    overwrite: bool = False
    alpha: float | None = None  # overrides the preset's Dirichlet concentration
    target_accuracy_pct: float | None = None  # time-to-accuracy target (None: the preset's rule)
    system_path: str = Default(DEFAULT_SYSTEM_PATH)  # clients' links and devices (workloads.cost.system)
    input_shape: tuple[int, int, int] | None = None  # None: 3x32x32 priced, the preset's size trained
    classifier: str | None = None  # the nn.Linear the methods act on (user models; None: the last one)
    classes: int = PAPER.num_classes  # C of the priced figures (the accuracy run has its dataset's)
    compare_hw: tuple[str, ...] = ()  # every --hw when several are given; the first is hw_path
    workers: int | None = None  # accuracy runs side by side (bench/lib/fl/jobs.py); None: one per run, <= cores
    device: str = "auto"  # where the accuracy runs train (workloads.fl.execution.resolve_device)
    augment: bool | None = None  # --augment / --no-augment; None: the preset's [execution] (else off)
    channels_last: bool | None = None  # likewise
    bf16: bool | None = None
    compile: bool | None = None
    number_format: str | None = None  # --number-format: the arithmetic of training and pricing (None: the preset's)
    comm_format: str | None = None  # --comm-format: what the model and updates travel in (None: the preset's)
    fleet_path: str | None = None  # --fleet: rounds with a deadline on a fleet of devices (docs/fleets.md)
    deadline_s: float | None = None  # --deadline-s: the fleet's reporting deadline instead of its file's (inf: none)
    overcommit: float | None = None  # --overcommit: the fleet's over-commitment instead of its file's
    low_precision_weights: bool | None = None  # --low-precision-weights; None: the preset's (else off)

    def execution(self, preset: Preset) -> Execution:
        """Where and how the accuracy runs train: --device, and each option from its flag or the preset."""
        return execution_of(self.device, {k: getattr(self, k) for k in SETTINGS}, preset.execution)

    def spec(self, model: str, input_shape: tuple[int, ...] | None = None) -> ModelSpec:
        """``model`` at ``input_shape`` (default: --input-shape, else 3x32x32) with --classifier."""
        return ModelSpec(model, input_shape or self.input_shape or DEFAULT_INPUT_SHAPE, self.classifier)


@dataclass(frozen=True)
class Resolved:
    """A checked ``RunConfig`` with what it names loaded (nothing heavy)."""

    cfg: RunConfig
    hw: HardwareConfig
    preset: Preset  # with --alpha and evaluation after every round
    system: SystemModel
    execution: Execution
    fleet: Fleet | None = None  # --fleet, loaded (its hardware files checked)


def split_methods(methods: Sequence[str]) -> tuple[list[str], list[str]]:
    """(training methods, calibrations); raises ValueError naming a bad, repeated or missing one."""
    checks.distinct(list(methods), name="--methods")
    training, calibrations = [], []
    for name in methods:
        if is_calibration(name):
            calibrations.append(name)
            continue
        method = parse_method(name)
        if method.calibration:
            raise ValueError(f"method {name!r}: give calibrations on their own ({', '.join(sorted(CALIBRATIONS))}): "
                             f"CCVR is priced on FedAvg, FFC on SphereFed")
        training.append(name)
    checks.distinct([parse_method(t).name for t in training], name="--methods (as methods)")
    if training and "fedavg" not in training:
        raise ValueError("the training methods are normalized to FedAvg: include 'fedavg' in --methods")
    if calibrations and "ccvr" not in calibrations:
        raise ValueError("calibrations are normalized to CCVR: include 'ccvr' in --methods")
    return training, calibrations


def resolve(cfg: RunConfig) -> Resolved:
    """Every check that needs no heavy work (ValueError naming the input); the preset with
    ``--alpha`` applied and evaluation after every round (the time-to-accuracy curve)."""
    checks.distinct(list(cfg.models), name="--models")
    split_methods(cfg.methods)
    if cfg.target_accuracy_pct is not None and not 0 < cfg.target_accuracy_pct <= 100:
        raise ValueError(f"--target is a test accuracy in percent, in (0, 100]; got {cfg.target_accuracy_pct}")
    if cfg.input_shape and (cfg.input_shape[0], cfg.input_shape[1]) != (3, cfg.input_shape[2]):
        raise ValueError(f"--input-shape {','.join(map(str, cfg.input_shape))}: the accuracy run feeds 3-channel "
                         "square images (3,S,S); price other shapes with python -m bench.capture or bench.price "
                         "(docs/byom.md)")
    preset = with_changes(load_preset(cfg.preset), alpha=cfg.alpha, eval_every=1)
    if preset.fl.dataset in PACKAGED_DATASETS and cfg.data_dir:
        raise ValueError(f"--data-dir {cfg.data_dir}: --preset {cfg.preset} trains on the offline "
                         f"{preset.fl.dataset}, which ships with {PACKAGED_DATASETS[preset.fl.dataset]}; leave "
                         "--data-dir out, or choose a CIFAR preset (--preset paper)")
    if preset.fl.dataset not in PACKAGED_DATASETS and not cfg.data_dir:
        raise ValueError(f"--preset {cfg.preset} needs --data-dir pointing at {preset.fl.dataset} "
                         "(nothing can be downloaded here)")
    if cfg.data_dir:
        from iokit.cli import check_folder

        check_folder(cfg.data_dir, "--data-dir")
    execution = cfg.execution(preset)
    # every figure is priced on the hardware computing in the run's number format (FP32: as given)
    hw = hardware_in_format(load_hardware_config(cfg.hw_path) if cfg.hw_path else HardwareConfig(),
                            execution.number_format)
    compare_hw.load_hardware_set(cfg.compare_hw)
    system = load_system_model(cfg.system_path)
    client_devices(system, hw, preset.fl.num_clients, seed=cfg.seed)  # loads every per-client hardware file
    check_fleet_flags(cfg.fleet_path, cfg.system_path)
    fleet = run_fleet(cfg.fleet_path, deadline_s=cfg.deadline_s, overcommit=cfg.overcommit)
    if fleet is not None:
        fleet.check_clients(preset.fl.num_clients)
    check_models(cfg, classes=cfg.classes, input_shape=cfg.spec("").input_shape)
    return Resolved(cfg, hw, preset, system, execution, fleet)


def check_models(cfg: RunConfig, *, classes: int, input_shape: tuple[int, ...]) -> None:
    """Build every model once (import, classifier, input shape: docs/byom.md; SphereFed's C <= l);
    ValueError (ModelSpecError) if one cannot be built."""
    training, calibrations = split_methods(cfg.methods)
    spherefed = any(parse_method(m).spherefed for m in training + [calibration_named(c).trained_with
                                                                   for c in calibrations])
    for model in cfg.models:
        if cfg.classifier is not None and model in model_spec.MODELS:
            raise ValueError(f"--classifier {cfg.classifier}: the paper model {model!r} has its classifier built in; "
                             "--classifier picks the nn.Linear of a user model (docs/byom.md)")
        feature_dim = model_spec.build(cfg.spec(model, input_shape), num_classes=classes,
                                       spherefed=spherefed).feature_dim
        if spherefed and classes > feature_dim:
            raise ValueError(f"SphereFed's orthonormal classifier needs classes <= features: {model} has "
                             f"{feature_dim} features, {classes} classes (--classes, or the accuracy run's dataset)")


def load_accuracy_data(resolved: Resolved) -> tuple[Dataset, Dataset]:
    """The preset's data, at --input-shape's size when given (else the preset's); every model is
    checked on it before any work."""
    cfg, fl = resolved.cfg, resolved.preset.fl
    image_size = cfg.input_shape[-1] if cfg.input_shape else fl.image_size
    train, test = load_dataset(fl.dataset, data_dir=cfg.data_dir, image_size=image_size)
    try:
        check_models(cfg, classes=train.num_classes, input_shape=tuple(train.x.shape[1:]))
    except model_spec.ModelSpecError as exc:
        where = "--input-shape" if cfg.input_shape else f"the preset's image_size = {fl.image_size}"
        raise model_spec.ModelSpecError(f"{exc} [the accuracy run's {fl.dataset} images are "
                                        f"{'x'.join(map(str, train.x.shape[1:]))}: {where} sets them]") from None
    return (subset(train, fl.max_train_samples, cfg.seed, "train"),
            subset(test, fl.max_test_samples, cfg.seed + 1, "test"))


def accuracy_note(preset: Preset) -> str:
    """One line on what the accuracy run is, and that it is not the paper's where it is not."""
    if preset.fl.dataset == PAPER.dataset:
        return f"{preset.fl.dataset}: {preset.note} (SphereFed Sec. 5.1 / Table 16)"
    return (f"{preset.fl.dataset} (offline, not the paper's CIFAR-100; accuracy not comparable with the paper's): "
            f"{preset.note}")

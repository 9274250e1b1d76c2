"""``bench.run``'s runs: what to price and train, checked before any work.

A ``bench.lib.spec.RunSpec`` is the study's whole input (the command line's, or a grid point's);
``resolved_runs`` checks what only ``bench.run`` takes (its method labels, ``--target``,
``--input-shape``, ``--hw`` several, the models at the priced shapes) and resolves one run per
model as every command does (``bench.lib.resolve.resolve``: the preset, the seed, the rates, the
files, the devices); ``load_accuracy_data`` loads the accuracy run's data
(``workloads.fl.presets.load_data``) and builds every model once on it, so a bad model fails
before any work starts.
"""

from __future__ import annotations

from typing import Sequence

from bench.lib.paper import PAPER
from bench.lib.resolve import ResolvedRun, check_classifier, resolve
from bench.lib.run import compare_hw
from bench.lib.spec import COMMAND_DEFAULTS, RUN, RunSpec
from iokit import checks
from workloads import model_spec
from workloads.fl.dataset import Dataset
from workloads.fl.methods import calibration_named, distinct_methods, is_calibration, parse_method
from workloads.fl.presets import Preset, load_data

DEFAULT_METHODS = COMMAND_DEFAULTS[RUN]["methods"]


def run_label(name: str) -> str:
    """``name`` as ``bench.run`` labels it: a calibrated method written in full (``spherefed+ffc``,
    ``fedavg+ccvr``) by its calibration alone, which means the same method in every command
    (``workloads.fl.methods.parse_method``: a calibration alone is it after its ``trained_with``).
    ValueError, with the name to give, for a calibration after another method: Fig. 5 (d) prices
    each calibration on its own ``trained_with`` only."""
    method = parse_method(name)
    if not method.calibration or is_calibration(name):
        return name
    alone = parse_method(method.calibration)
    if method != alone:
        raise ValueError(f"method {name!r}: bench.run prices {method.calibration} after {alone.training.name} only "
                         f"(SphereFed Fig. 5 d): give {method.calibration} (= {alone.name}); train {name} with "
                         "python -m bench.fl or a study (docs/fl.md)")
    return method.calibration


def split_methods(methods: Sequence[str]) -> tuple[list[str], list[str]]:
    """(training methods, calibrations), labelled as ``run_label`` does; raises ValueError naming a
    bad, repeated or missing one."""
    checks.distinct(list(methods), name="--methods")
    training, calibrations = [], []
    for name in methods:
        label = run_label(name)
        (calibrations if is_calibration(label) else training).append(label)
    distinct_methods(training + calibrations, name="--methods (as methods)")
    if training and "fedavg" not in training:
        raise ValueError("the training methods are normalized to FedAvg: include 'fedavg' in --methods")
    if calibrations and "ccvr" not in calibrations:
        raise ValueError("calibrations are normalized to CCVR: include 'ccvr' in --methods")
    return training, calibrations


def run_pairs(names: Sequence[str]) -> list[tuple[str, str | None]]:
    """The federated runs that give ``names``' accuracies: each training method with the calibration
    that reuses its run (CCVR on FedAvg, FFC on SphereFed), and a calibration's base run where its
    base is not asked for."""
    training = [n for n in names if not is_calibration(n)]
    base = {c: calibration_named(c).trained_with for c in names if is_calibration(c)}
    pairs = [(t, next((c for c in base if base[c] == t), None)) for t in training]
    return pairs + [(base[c], c) for c in base if base[c] not in training]


def job_name(base: str, calibration: str | None) -> str:
    """The name of the federated run of ``run_pairs``' pair (``spherefed+ffc``)."""
    return f"{base}+{calibration}" if calibration else base


def trained_names(methods: Sequence[str]) -> list[str]:
    """The federated runs ``bench.run`` trains for its method labels ``methods`` (``run_pairs``)."""
    training, calibrations = split_methods(methods)
    return [job_name(base, calibration) for base, calibration in run_pairs(training + calibrations)]


def resolved_runs(cfg: RunSpec) -> tuple[ResolvedRun, ...]:
    """``bench.run``'s runs, one per model, every check that needs no heavy work first (ValueError
    naming the input); each model's run resolved as every run is (``bench.lib.resolve.resolve``:
    the preset with ``--alpha`` applied and evaluation after every round, the time-to-accuracy
    curve; the seed, the preset's where not given)."""
    checks.distinct(list(cfg.models), name="--models")
    split_methods(cfg.methods)
    if cfg.target_accuracy_pct is not None and not 0 < cfg.target_accuracy_pct <= 100:
        raise ValueError(f"--target is a test accuracy in percent, in (0, 100]; got {cfg.target_accuracy_pct}")
    if cfg.input_shape and (cfg.input_shape[0], cfg.input_shape[1]) != (3, cfg.input_shape[2]):
        raise ValueError(f"--input-shape {','.join(map(str, cfg.input_shape))}: the accuracy run feeds 3-channel "
                         "square images (3,S,S); price other shapes with python -m bench.capture or bench.price "
                         "(docs/byom.md)")
    runs = tuple(resolve(cfg, command=RUN, model=model) for model in cfg.models)
    cfg = runs[0].spec
    compare_hw.load_hardware_set(cfg.compare_hw)
    check_models(cfg, classes=cfg.classes, input_shape=cfg.model_spec("").input_shape)
    return runs


def check_models(cfg: RunSpec, *, classes: int, input_shape: tuple[int, ...]) -> None:
    """Build every model once (import, classifier, input shape: docs/byom.md; a modifier's head fits, SphereFed's C <= l);
    ValueError (ModelSpecError) if one cannot be built."""
    training, calibrations = split_methods(cfg.methods)
    modifiers = dict.fromkeys(parse_method(m).mod for m in training + [calibration_named(c).trained_with
                                                                        for c in calibrations])
    check_classifier(cfg.classifier, cfg.models)
    for model in cfg.models:
        feature_dim = model_spec.build(cfg.model_spec(model, input_shape), num_classes=classes).feature_dim
        unfit = next(filter(None, (m.unfit(classes, feature_dim) for m in modifiers)), None)
        if unfit:
            raise ValueError(f"model {model}: {unfit} (--classes, or the accuracy run's dataset)")


def load_accuracy_data(runs: Sequence[ResolvedRun]) -> tuple[Dataset, Dataset]:
    """The preset's data, at --input-shape's size when given (else the preset's); every model is
    checked on it before any work."""
    cfg, fl = runs[0].spec, runs[0].fl
    image_size = cfg.input_shape[-1] if cfg.input_shape else fl.image_size
    train, test = load_data(fl, data_dir=cfg.data_dir, image_size=image_size)
    try:
        check_models(cfg, classes=train.num_classes, input_shape=tuple(train.x.shape[1:]))
    except model_spec.ModelSpecError as exc:
        where = "--input-shape" if cfg.input_shape else f"the preset's image_size = {fl.image_size}"
        raise model_spec.ModelSpecError(f"{exc} [the accuracy run's {fl.dataset} images are "
                                        f"{'x'.join(map(str, train.x.shape[1:]))}: {where} sets them]") from None
    return train, test


def accuracy_note(preset: Preset) -> str:
    """One line on what the accuracy run is, and that it is not the paper's where it is not."""
    if preset.fl.dataset == PAPER.dataset:
        return f"{preset.fl.dataset}: {preset.note} (SphereFed Sec. 5.1 / Table 16)"
    return (f"{preset.fl.dataset} (offline, not the paper's CIFAR-100; accuracy not comparable with the paper's): "
            f"{preset.note}")

"""A study file: what an accuracy study trains, how it tunes, and what it reports (docs/study.md).

A study file (TOML) declares, before anything runs::

    name = "reference"                    # names the results folder: results/study-<name>
    preset = "quick"                      # the federated setting's other values: data, clients, batch, ...
    models = ["convnet", "mobilenetv2"]
    methods = ["fedavg", "spherefed", "fedavg+ccvr", "spherefed+ffc"]
    base = "fedavg"                       # paired differences are taken against it
    compare = [["spherefed+ffc", "fedavg+ccvr"]]  # optional: more paired comparisons, a - b, one family
    iid = true                            # data settings: IID and / or Dirichlet alphas
    alphas = [0.5, 0.1]
    number_formats = ["fp32", "bfp_m4_g16"]  # optional (default fp32): the clients' arithmetic; other
                                          # formats run at their method's FP32-tuned hyper-parameters
    rounds = 20
    local_epochs = 2                      # optional: else the preset's
    holdout_fraction = 0.15               # validation hold-out (SphereFed Sec. 5.1: 15 %)
    seeds = [0, 1, 2]                     # evaluation seeds (paired: same partition and initial weights)
    tuning_seeds = [100]                  # seeds the search runs on (validation accuracy only)
    equivalence_margin_pts = 1.0          # optional: TOST margin of "equivalent within ± m" (default 1)
    dataset = "cifar10"                   # optional: else the preset's; a folder dataset needs --data-dir

    [search.fedavg]                       # one table per training method: candidate values of its knobs
    lr = [0.025, 0.05, 0.1]
    [search.spherefed]
    lr = [0.25, 0.5, 1.0]

    [tuning]
    last_rounds = 3                       # score: mean validation accuracy of the last 3 rounds
    extend_steps = 3                      # a choice at a grid edge: up to 3 more geometric steps that way
    near_tie = "best"                     # "centre": trials within one validation sample tie too
    [verdicts]
    correction = "holm"                   # each table's family of comparisons: holm, bh or none
    power = 0.8                           # the seed plan's and the minimum detectable difference's
    [seed_plan]                           # optional: the evaluation seeds planned from the tuning seeds
    min_seeds = 10                        # (the first n of ``seeds``; bench.lib.study.power)
    max_seeds = 40
    [convergence]
    last_rounds = 3                       # plateau rule: windows of 3 rounds ...
    tolerance_pct = 1.0                   # ... whose means differ by less than 1 point
    rate_fraction = 0.5                   # judged on the rounds at >= 50 % of the peak learning rate too
    [targets]
    accuracy_pct = [90.0]                 # absolute time-to-accuracy targets, declared before the run
    base_validation_fraction = 0.95       # and / or: 95 % of the base method's best mean validation accuracy

A calibrated method (``fedavg+ccvr``) is its training method's run calibrated after the last
round: it reuses that run (no extra training) and takes that method's tuned hyper-parameters. Every
key and value is checked when the file is read, with one line naming the file, key and fix, before
any folder exists.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from bench.lib.study.compare import DEFAULT_PRIMARY_TEST, TESTS
from bench.lib.study.stats import CORRECTIONS, DEFAULT_EQUIVALENCE_MARGIN_PTS, DEFAULT_POWER
from bench.lib.study.tuning import NEAR_TIE_RULES
from iokit import checks, identity
from iokit.outputs import CHECKOUT_ROOT
from iokit.toml import read_toml
from workloads.fl.data import DATASETS
from workloads.fl.execution import resolve_device
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.methods import MethodConfig, check_file_spelling, distinct_methods, method_identity, parse_method
from workloads.fl.presets import Preset, accuracy_targets_pct, load_preset
from workloads.numerics import NumberFormat
from workloads.numerics.schedule import canonical, format_at, is_schedule, steps_of

STUDY_DIR = CHECKOUT_ROOT / "configs" / "studies"
KEYS = ("name", "preset", "models", "methods", "base", "iid", "alphas", "number_formats", "rounds", "local_epochs",
        "holdout_fraction", "seeds", "tuning_seeds", "device", "hw", "system", "search", "tuning", "convergence",
        "targets", "equivalence_margin_pts", "dataset", "fleets", "deadlines_s", "verdicts", "seed_plan",
        "compare", "equivalence_margin_argument", "deviations")
REQUIRED = ("name", "preset", "models", "methods", "base", "rounds", "seeds", "tuning_seeds", "search")
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
DEFAULT_HOLDOUT_FRACTION = 0.15  # SphereFed Sec. 5.1: "we use 15 % of training data for validation"
DEFAULT_RATE_FRACTION = 0.5  # bench.lib.study.curves.convergence's high-rate part: our choice (docs/study.md)
DEFAULT_EXTEND_STEPS = 3  # bench.lib.study.tuning.extension_value: geometric steps beyond an edge, our choice
DEFAULT_CORRECTION = "holm"  # [verdicts] correction: Holm keeps the family-wise error rate (docs/study.md)


class StudyError(ValueError):
    """A study file that cannot be run; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Setting:
    """One setting of the runs: the data (IID, or a Dirichlet partition with concentration ``alpha``)
    and the clients' number format (``accel_sim.formats``; ``fp32`` rounds nothing)."""

    partition: str  # "iid" or "dirichlet"
    alpha: float | None = None
    number_format: str = "fp32"
    fleet: str | None = None  # a fleet file (docs/fleets.md): rounds with a deadline; None: every sampled client
    deadline_s: float | None = None  # the fleet's reporting deadline instead of its file's (``deadlines_s``; inf: none)

    @property
    def data_label(self) -> str:
        return "iid" if self.partition == "iid" else f"alpha={self.alpha:g}"

    @property
    def _suffix(self) -> str:
        return (("" if self.number_format == "fp32" else f" {self.number_format}")
                + ("" if self.fleet is None else f" fleet={Path(self.fleet).stem}")
                + ("" if self.deadline_s is None else " deadline=inf" if math.isinf(self.deadline_s)
                   else f" deadline={self.deadline_s:g}s"))

    @property
    def label(self) -> str:
        """``iid``, ``alpha=0.1``; with a format other than FP32 ``alpha=0.1 bfp_m4_g16``; on a
        fleet ``alpha=0.1 fleet=mixed``, at a deadline of the study's ``alpha=0.1 fleet=mixed deadline=6s``."""
        return self.data_label + self._suffix

    @property
    def title(self) -> str:
        """Tab. 2's column header."""
        return ("IID" if self.partition == "iid" else f"α={self.alpha:g}") + self._suffix

    @property
    def in_fp32(self) -> "Setting":
        """The same data in FP32 (on the same fleet): what its accuracy is compared with."""
        return replace(self, number_format="fp32")

    @property
    def tuned_on(self) -> "Setting":
        """Where this setting's hyper-parameters are tuned: the same data in FP32, every sampled
        client taking part (a fleet's runs take the hyper-parameters tuned without it)."""
        return replace(self, number_format="fp32", fleet=None, deadline_s=None)

    @property
    def without_deadline_axis(self) -> "Setting":
        """The same setting at its fleet file's own deadline: what a deadline sweep is grouped by."""
        return replace(self, deadline_s=None)


@dataclass(frozen=True)
class Plateau:
    """The plateau rule (``bench.lib.study.curves.plateau``): windows of ``last_rounds`` rounds."""

    last_rounds: int = 3
    tolerance_pct: float = 1.0
    rate_fraction: float = DEFAULT_RATE_FRACTION  # the high-rate part: rounds at >= this fraction of the peak lr


@dataclass(frozen=True)
class Targets:
    """Time-to-accuracy targets, fixed before any compared method's result is known."""

    accuracy_pct: tuple[float, ...] = ()
    base_validation_fraction: float | None = None  # of the base method's best mean validation accuracy


@dataclass(frozen=True)
class SeedPlan:
    """``[seed_plan]``: the evaluation runs use the first n of ``seeds``, n planned per model and data
    setting from the tuning seeds' paired spread (``bench.lib.study.power``), within these bounds."""

    min_seeds: int
    max_seeds: int


PLAN_KEYS = ("seeds", "seed_counts", "equivalence_margin_pts", "families", "primary_test", "correction", "power",
             "code")
"""What a study's registered plan binds (``bench.lib.study.registration``), each a key a deviation
may name: the evaluation seeds, the seed plan's counts, the margin, the families of comparisons
(methods, settings, formats, pairs), the test that carries the words, the family correction, the
power, and ``code``: the runs come from committed code."""


@dataclass(frozen=True)
class Deviation:
    """``[[deviations]]``: a change of the registered plan, declared with what changed and why."""

    keys: tuple[str, ...]  # of PLAN_KEYS
    what: str
    reason: str


@dataclass(frozen=True)
class Study:
    """A study file, checked (module doc)."""

    name: str
    preset: Preset
    models: tuple[str, ...]
    methods: tuple[str, ...]  # canonical method names, file order
    base: str  # canonical
    settings: tuple[Setting, ...]
    rounds: int
    local_epochs: int | None
    holdout_fraction: float
    seeds: tuple[int, ...]
    tuning_seeds: tuple[int, ...]
    search: Mapping[str, Mapping[str, tuple]]  # training method -> Hparams field -> candidate values
    tuning_last_rounds: int
    plateau: Plateau
    targets: Targets
    device: str = "auto"
    hw: str | None = None
    system: str | None = None
    source: str = "<study>"
    equivalence_margin_pts: float = DEFAULT_EQUIVALENCE_MARGIN_PTS  # TOST margin (bench.lib.study.stats.tost)
    dataset: str | None = None  # None: the preset's
    extend_steps: int = DEFAULT_EXTEND_STEPS  # [tuning] extend_steps: edge extension bound (bench.lib.study.tuning)
    near_tie: str = "best"  # [tuning] near_tie (bench.lib.study.tuning.choose)
    correction: str = DEFAULT_CORRECTION  # [verdicts] correction (bench.lib.study.stats.adjusted)
    power: float = DEFAULT_POWER  # [verdicts] power
    seed_plan: SeedPlan | None = None  # [seed_plan]; None: every seed of ``seeds``
    compare: tuple[tuple[str, str], ...] = ()  # more paired comparisons (a, b): a - b, canonical names
    data_dir: str | None = None  # the dataset's folder: the command's --data-dir, not a key of the file
    primary_test: str = DEFAULT_PRIMARY_TEST  # [verdicts] primary_test: the test that carries the words
    margin_argument: str | None = None  # equivalence_margin_argument: why the margin is what it is
    deviations: tuple[Deviation, ...] = ()  # [[deviations]]: declared changes of the registered plan

    @property
    def training_methods(self) -> tuple[str, ...]:
        """The methods that train (a calibrated method's training method), in file order."""
        return tuple(dict.fromkeys(training_method(m) for m in self.methods))

    def job(self, training: str) -> str:
        """The run that gives ``training``'s accuracy and its calibrated method's, if the study has one."""
        calibrated = [m for m in self.methods if training_method(m) == training and parse_method(m).calibration]
        return calibrated[0] if calibrated else training

    def labels(self, training: str) -> tuple[str, ...]:
        """The study's methods that the run of ``training`` gives (itself, its calibration)."""
        return tuple(m for m in self.methods if training_method(m) == training)

    def trials(self, training: str) -> list[dict[str, Any]]:
        """Every combination of ``training``'s search values, in file order (keys, then values)."""
        space = self.search[training]
        return [dict(zip(space, values)) for values in itertools.product(*space.values())]

    def hparams(self, method: str, trial: Mapping[str, Any]) -> Hparams:
        """The preset's hyper-parameters of ``method`` with the study's local epochs and ``trial``."""
        hp = self.preset.hparams(parse_method(method))
        if self.local_epochs is not None:
            hp = hp.replace(local_epochs=self.local_epochs)
        return hp.replace(**dict(trial))

    def fl(self, model: str, setting: Setting, seed: int) -> FLConfig:
        """The federated setting of one run: the preset's, with the study's model, data setting,
        rounds, hold-out and seed, evaluated after every round."""
        alpha = setting.alpha if setting.partition == "dirichlet" else FLConfig.alpha
        return replace(self.preset.fl, model=model, partition=setting.partition, alpha=alpha, rounds=self.rounds,
                       holdout_fraction=self.holdout_fraction, seed=seed, eval_every=1,
                       dataset=self.dataset or self.preset.fl.dataset)

    def describe(self) -> dict[str, Any]:
        """The resolved study, as recorded in summary.json."""
        return {"name": self.name, "source": self.source, "preset": self.preset.name, "models": list(self.models),
                "methods": list(self.methods), "base": self.base, "settings": [s.label for s in self.settings],
                "number_formats": list(dict.fromkeys(s.number_format for s in self.settings)),
                "rounds": self.rounds, "local_epochs": self.local_epochs, "holdout_fraction": self.holdout_fraction,
                "seeds": list(self.seeds), "tuning_seeds": list(self.tuning_seeds),
                "search": {m: {k: list(v) for k, v in s.items()} for m, s in self.search.items()},
                "tuning": {"rule": "best mean validation accuracy over the last rounds, averaged over the tuning "
                                   "seeds; ties: nearest the centre of the values tried, then the smaller",
                           "last_rounds": self.tuning_last_rounds, "extend_steps": self.extend_steps,
                           "near_tie": self.near_tie},
                "equivalence_margin_pts": self.equivalence_margin_pts,
                "equivalence_margin_argument": self.margin_argument,
                "verdicts": {"correction": self.correction, "power": self.power, "primary_test": self.primary_test},
                "deviations": [asdict(d) for d in self.deviations],
                "seed_plan": None if self.seed_plan is None else asdict(self.seed_plan),
                "compare": [list(pair) for pair in self.compare],
                "dataset": self.dataset or self.preset.fl.dataset,
                "convergence": asdict(self.plateau),
                "targets": {"accuracy_pct": list(self.targets.accuracy_pct),
                            "base_validation_fraction": self.targets.base_validation_fraction},
                "device": self.device, "hw": self.hw, "system": self.system}


def training_method(method: str) -> str:
    """``method`` without its calibration (canonical): the method whose run it reuses."""
    return replace(parse_method(method), calibration=None).name


def study_path(study: str) -> Path:
    return Path(study) if study.endswith(".toml") else STUDY_DIR / f"{study}.toml"


def load_study(study: str | Path) -> Study:
    """A study by name (under configs/studies/) or .toml path, checked; StudyError naming the key."""
    path = study_path(str(study))
    return parse_study(read_toml(path, StudyError, "study"), str(path))


def _method(name: Any, *, key: str) -> MethodConfig:
    if not isinstance(name, str):
        raise StudyError(f"{key} = {name!r}: give a method name such as \"fedavg\" or \"spherefed+ffc\"")
    try:
        method = parse_method(name)
        check_file_spelling(name, where=key)
    except ValueError as err:
        raise StudyError(str(err) if str(err).startswith(key) else f"{key}: {err}") from None
    return method


def _list(doc: Mapping, key: str, where: str, kind: type, *, low=None, high=None) -> list:
    value = doc[key]
    if not isinstance(value, list) or not value:
        raise StudyError(f"{where}: {key} = {value!r} must be a non-empty list")
    for v in value:
        if kind is int:
            checks.integer_in(v, low, high, name=key, error=StudyError)
        elif kind is float:
            checks.number_in(v, low, high, name=key, error=StudyError, low_open=True)
        elif not isinstance(v, str):
            raise StudyError(f"{where}: {key} = {value!r} must be a list of strings")
    return checks.distinct(value, name=f"{where}: {key}", error=StudyError)


def parse_study(doc: Mapping[str, Any], source: str = "<study>") -> Study:
    """A study file's table, checked (module doc); StudyError naming ``source``, the key and the fix
    (every message starts with ``source``, the shared checks' too)."""
    try:
        return _parse_study(doc, source)
    except StudyError as err:
        if str(err).startswith(source):
            raise
        raise StudyError(f"{source}: {err}") from None


def _parse_study(doc: Mapping[str, Any], source: str) -> Study:
    where = source
    checks.unknown_keys(doc, KEYS, where=where, error=StudyError)
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise StudyError(f"{where}: missing key {missing[0]!r} (configs/studies/digits.toml shows every key)")
    name = doc["name"]
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise StudyError(f"{where}: name = {name!r} must be a file-name-safe word (letters, digits, '.', '_', '-'): "
                         "it names the results folder results/study-<name>")
    if not isinstance(doc["preset"], str):
        raise StudyError(f"{where}: preset = {doc['preset']!r}: give a preset name (configs/presets/) or a .toml path")
    try:
        preset = load_preset(doc["preset"])
    except ValueError as err:
        raise StudyError(f"{where}: preset: {err}") from None
    models = _list(doc, "models", where, str)
    from workloads.models import MODELS

    for model in models:
        if model not in MODELS and ":" not in model:
            raise StudyError(f"{where}: models: {model!r} is not a model; give one of {', '.join(sorted(MODELS))} "
                             "or package.module:factory (docs/byom.md)")
    given = _list(doc, "methods", where, str)
    methods = [_method(m, key=f"{where}: methods").name for m in given]
    distinct_methods(given, name=f"{where}: methods", error=StudyError)  # one method under two spellings
    base = _method(doc["base"], key=f"{where}: base").name
    same = [m for g, m in zip(given, methods) if method_identity(g) == method_identity(doc["base"]) and m != base]
    if same:  # one method under two spellings (a class's path, a calibration alone): the methods' spelling
        raise StudyError(f"{where}: base = {doc['base']!r} is the method {same[0]!r} of methods under another "
                         f"spelling; write base = {same[0]!r}")
    if base not in methods:
        raise StudyError(f"{where}: base = {doc['base']!r} is not one of the methods {methods}; name the method the "
                         "others are compared with")
    try:  # a knob the preset's [hparams] sets for a method the study does not train
        preset.check_knobs([parse_method(m) for m in methods])
    except ValueError as err:
        raise StudyError(f"{where}: preset: {err}") from None
    by_training: dict[str, list[str]] = {}
    for m in methods:
        if parse_method(m).calibration:
            by_training.setdefault(training_method(m), []).append(m)
    for training, calibrated in by_training.items():
        if len(calibrated) > 1:
            raise StudyError(f"{where}: methods {calibrated} calibrate the same run of {training}; a study calibrates "
                             "each training method once: give one of them (or a second study)")
    settings = [Setting("iid")] if doc.get("iid", False) else []
    if not isinstance(doc.get("iid", False), bool):
        raise StudyError(f"{where}: iid = {doc['iid']!r} must be true or false")
    if "alphas" in doc:
        settings += [Setting("dirichlet", float(a)) for a in _list(doc, "alphas", where, float, low=0.0, high=1e6)]
    if not settings:
        raise StudyError(f"{where}: no data setting: give iid = true and / or alphas = [0.5, 0.1]")
    rounds = checks.integer_in(doc["rounds"], 1, checks.ROUNDS_MAX, name="rounds", error=StudyError)
    formats = _number_formats(doc, where, rounds)
    fleets, deadlines = _fleets(doc, where), _deadlines(doc, where)
    settings = [replace(s, number_format=f, fleet=fleet, deadline_s=_own_deadline(fleet, d))
                for s in settings for f in formats for fleet in fleets for d in (deadlines if fleet else (None,))
                if f == "fp32" or not _sets_every_format(fleet)]  # one setting under two names: its FP32 one
    local_epochs = doc.get("local_epochs")
    if local_epochs is not None:
        checks.integer_in(local_epochs, 1, 10_000, name="local_epochs", error=StudyError)
    holdout = doc.get("holdout_fraction", DEFAULT_HOLDOUT_FRACTION)
    checks.number_in(holdout, 0.0, 0.95, name="holdout_fraction", error=StudyError, low_open=True)
    seeds = _list(doc, "seeds", where, int, low=0, high=checks.SEED_MAX)
    if len(seeds) < 2:
        raise StudyError(f"{where}: seeds = {seeds}: give at least 2 evaluation seeds (3 or more for a "
                         "confidence interval worth the name)")
    tuning_seeds = _list(doc, "tuning_seeds", where, int, low=0, high=checks.SEED_MAX)
    search = _search(doc["search"], methods, where)
    tuning = _table(doc, "tuning", ("last_rounds", "extend_steps", "near_tie"), where)
    near_tie = tuning.get("near_tie", "best")
    if near_tie not in NEAR_TIE_RULES:
        raise StudyError(f"{where}: [tuning] near_tie = {near_tie!r}: give \"best\" (ties are equal scores) or "
                         "\"centre\" (scores within one validation sample tie too)")
    verdict_table = _table(doc, "verdicts", ("correction", "power", "primary_test"), where)
    primary_test = verdict_table.get("primary_test", DEFAULT_PRIMARY_TEST)
    if primary_test not in TESTS:
        raise StudyError(f"{where}: [verdicts] primary_test = {primary_test!r}: give \"permutation\" (the exact "
                         "sign-flip test, the default) or \"t\" (the paired t-test; docs/study.md)")
    correction = verdict_table.get("correction", DEFAULT_CORRECTION)
    if correction not in CORRECTIONS:
        raise StudyError(f"{where}: [verdicts] correction = {correction!r}: give \"holm\" (family-wise error), "
                         "\"bh\" (Benjamini-Hochberg, false discovery rate) or \"none\"")
    power = float(checks.number_in(verdict_table.get("power", DEFAULT_POWER), 0.0, 1.0, name="[verdicts] power",
                                   error=StudyError, low_open=True))
    if power >= 1:
        raise StudyError(f"{where}: [verdicts] power = {power:g} must be below 1, e.g. 0.8")
    seed_plan = None
    if "seed_plan" in doc:
        plan = _table(doc, "seed_plan", ("min_seeds", "max_seeds"), where)
        low = checks.integer_in(plan.get("min_seeds", 3), 2, len(seeds), name="[seed_plan] min_seeds",
                                error=StudyError)
        high = checks.integer_in(plan.get("max_seeds", len(seeds)), low, len(seeds), name="[seed_plan] max_seeds",
                                 error=StudyError)
        seed_plan = SeedPlan(low, high)
    tuning_last = checks.integer_in(tuning.get("last_rounds", 3), 1, rounds, name="[tuning] last_rounds",
                                    error=StudyError)
    extend_steps = checks.integer_in(tuning.get("extend_steps", DEFAULT_EXTEND_STEPS), 0, 20,
                                     name="[tuning] extend_steps", error=StudyError)
    conv = _table(doc, "convergence", ("last_rounds", "tolerance_pct", "rate_fraction"), where)
    plateau = Plateau(checks.integer_in(conv.get("last_rounds", 3), 1, checks.ROUNDS_MAX,
                                        name="[convergence] last_rounds", error=StudyError),
                      float(checks.number_in(conv.get("tolerance_pct", 1.0), 0.0, 100.0,
                                             name="[convergence] tolerance_pct", error=StudyError, low_open=True)),
                      float(checks.number_in(conv.get("rate_fraction", DEFAULT_RATE_FRACTION), 0.0, 1.0,
                                             name="[convergence] rate_fraction", error=StudyError, low_open=True)))
    margin = checks.number_in(doc.get("equivalence_margin_pts", DEFAULT_EQUIVALENCE_MARGIN_PTS), 0.0, 100.0,
                              name="equivalence_margin_pts", error=StudyError, low_open=True)
    dataset = doc.get("dataset")
    if dataset is not None and dataset not in DATASETS:
        raise StudyError(f"{where}: dataset = {dataset!r} is not a dataset bench.fl reads; give one of "
                         f"{', '.join(sorted(DATASETS))} (or leave it out for the preset's)")
    if 2 * plateau.last_rounds > rounds:
        raise StudyError(f"{where}: [convergence] last_rounds = {plateau.last_rounds} needs at least "
                         f"{2 * plateau.last_rounds} rounds (two windows); rounds = {rounds}")
    targets = _targets(_table(doc, "targets", ("accuracy_pct", "base_validation_fraction"), where), where)
    device = doc.get("device", "auto")
    if not isinstance(device, str):
        raise StudyError(f"{where}: device = {device!r}: give auto, cpu, cuda or cuda:N")
    try:
        resolve_device(device)
    except ValueError as err:  # its words are the flag's (--device); here it is the key
        raise StudyError(f"{where}: device = {device!r}" + str(err).split(device, 1)[-1].lstrip("'")
                         .replace("use --device cpu (or auto)", 'use device = "cpu" (or "auto")')) from None
    for key in ("hw", "system"):
        if key in doc and (not isinstance(doc[key], str) or not Path(doc[key]).is_file()):
            raise StudyError(f"{where}: {key} = {doc[key]!r} is not a TOML file; give its path or leave {key} out")
    compare = _compare(doc.get("compare", []), methods, base, where)
    study = Study(name, preset, tuple(models), tuple(methods), base, tuple(settings), rounds, local_epochs,
                  float(holdout), tuple(seeds), tuple(tuning_seeds), search, tuning_last, plateau, targets, device,
                  doc.get("hw"), doc.get("system"), source, equivalence_margin_pts=float(margin), dataset=dataset,
                  extend_steps=extend_steps, near_tie=near_tie, correction=correction, power=power,
                  seed_plan=seed_plan, compare=compare, primary_test=primary_test,
                  margin_argument=_text(doc, "equivalence_margin_argument", where),
                  deviations=_deviations(doc.get("deviations", []), where))
    for training in study.training_methods:  # every trial's hyper-parameters are valid Hparams
        for trial in study.trials(training):
            for m in study.labels(training):
                try:
                    study.hparams(m, trial)
                except ValueError as err:
                    raise StudyError(f"{where}: [search.{training}] {trial}: {err}") from None
    return study


def _text(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    value = doc.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise StudyError(f"{where}: {key} = {value!r}: give a sentence (a string)")
    return value


def _deviations(table: Any, where: str) -> tuple[Deviation, ...]:
    """``[[deviations]]``: each names the planned keys it changes (``PLAN_KEYS``), what changed and why."""
    fix = ('add [[deviations]] tables, each keys = ["seeds"], what = "what changed, with the facts", '
           'reason = "why"')
    if not isinstance(table, list) or not all(isinstance(d, dict) for d in table):
        raise StudyError(f"{where}: deviations = {table!r}: {fix}")
    out = []
    for i, d in enumerate(table):
        checks.unknown_keys(d, ("keys", "what", "reason"), where=f"{where} [[deviations]] {i + 1}", error=StudyError)
        keys = d.get("keys")
        if not isinstance(keys, list) or not keys or any(k not in PLAN_KEYS for k in keys):
            raise StudyError(f"{where}: [[deviations]] {i + 1}: keys = {keys!r}: name the planned keys it changes, "
                             f"of {', '.join(PLAN_KEYS)}")
        for key in ("what", "reason"):
            if not isinstance(d.get(key), str) or not d[key].strip():
                raise StudyError(f"{where}: [[deviations]] {i + 1}: no {key}: {fix}")
        out.append(Deviation(tuple(keys), d["what"], d["reason"]))
    return tuple(out)


def _compare(pairs: Any, methods: list[str], base: str, where: str) -> tuple[tuple[str, str], ...]:
    """``compare``: pairs of the study's methods (canonical), each once, none the base comparison again."""
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise StudyError(f"{where}: compare = {pairs!r} must be a list of [a, b] method pairs, e.g. "
                         "[[\"spherefed+ffc\", \"fedavg+ccvr\"]]")
    out = []
    for a, b in pairs:
        pair = (_method(a, key=f"{where}: compare").name, _method(b, key=f"{where}: compare").name)
        for m in pair:
            if m not in methods:
                raise StudyError(f"{where}: compare: {m!r} is not one of the study's methods {methods}")
        if pair[0] == pair[1] or pair[1] == base:
            raise StudyError(f"{where}: compare = {[a, b]}: compare two different methods, neither against the base "
                             f"{base!r} (every method is compared with it already)")
        out.append(pair)
    return tuple(checks.distinct(out, name=f"{where}: compare", error=StudyError))


def _table(doc: Mapping, key: str, known: tuple[str, ...], where: str) -> Mapping[str, Any]:
    table = doc.get(key, {})
    if not isinstance(table, dict):
        raise StudyError(f"{where}: {key} must be a table ([{key}])")
    checks.unknown_keys(table, known, where=f"{where} [{key}]", error=StudyError)
    return table


def _search(table: Any, methods: list[str], where: str) -> dict[str, dict[str, tuple]]:
    """[search.<method>] tables: one per training method, each an Hparams field -> candidate list."""
    if not isinstance(table, dict):
        raise StudyError(f"{where}: search must be tables [search.<method>] with lr = [...]")
    trainings = list(dict.fromkeys(training_method(m) for m in methods))
    search: dict[str, dict[str, tuple]] = {}
    for key, space in table.items():
        method = _method(key, key=f"{where}: [search.{key}]")
        if method.calibration or method.name not in trainings:
            raise StudyError(f"{where}: [search.{key}] names no training method of the study; give one table per "
                             f"training method: {', '.join(trainings)} (a calibrated method takes its training "
                             "method's values)")
        if method.name in search:
            raise StudyError(f"{where}: [search.{key}] repeats the search of {method.name}")
        if not isinstance(space, dict) or "lr" not in space:
            raise StudyError(f"{where}: [search.{key}] must search at least lr, e.g. lr = [0.025, 0.05, 0.1]")
        searchable = Hparams(declared=method.knobs)  # the registered methods' knobs and a method of yours's
        checks.unknown_keys(space, searchable.names(), where=f"{where} [search.{key}]", error=StudyError)
        for field, values in space.items():
            if not isinstance(values, list) or not values:
                raise StudyError(f"{where}: [search.{key}] {field} = {values!r} must be a non-empty list of values")
            for value in values:  # of the field's type (lr = ["0.1"] is refused here, not by a traceback later)
                problem = searchable.knob(field).type_problem(value)
                if problem:
                    raise StudyError(f"{where} [search.{key}]: {problem}")
            checks.distinct(values, name=f"{where}: [search.{key}] {field}", error=StudyError)
        search[method.name] = {field: tuple(values) for field, values in space.items()}
    missing = [t for t in trainings if t not in search]
    if missing:
        raise StudyError(f"{where}: no [search.{missing[0]}] table: every training method needs one, at least "
                         "lr = [...] (a single value tunes nothing)")
    return {t: search[t] for t in trainings}


def _number_formats(doc: Mapping[str, Any], where: str, rounds: int) -> list[str]:
    """``number_formats``: format names (``accel_sim.formats``) or precision schedules
    (``workloads.numerics.schedule``: a shipped name as written, ``ROUND:FORMAT,...`` canonical,
    checked over the study's ``rounds``), FP32 among them when there are others (it is where they
    are tuned and what they are compared with); canonical, file order."""
    if "number_formats" not in doc:
        return ["fp32"]
    names = _list(doc, "number_formats", where, str)
    try:
        formats = [canonical(n, rounds) if is_schedule(n) else NumberFormat.parse(n).name for n in names]
    except ValueError as err:
        raise StudyError(f"{where}: number_formats: {err}") from None
    identity.distinct_resolved(  # one arithmetic under two spellings: "fast" and its steps, "bf16" and "1:bf16"
        names, lambda n: rounds_formats(n, rounds), name=f"{where}: number_formats (over the study's {rounds} rounds)",
        error=StudyError)
    if "fp32" not in formats:
        raise StudyError(f"{where}: number_formats = {names}: add \"fp32\": the other formats run at the "
                         "hyper-parameters tuned in FP32 and are compared with it")
    return ["fp32", *(f for f in formats if f != "fp32")]


def rounds_formats(text: str, rounds: int) -> str:
    """What a ``number_formats`` entry trains over the study's ``rounds``, whether written as a format
    or a schedule: the format of each round as its shortest schedule (``1:bfp_m2_g16_sr,2:bfp_m4_g16_sr``),
    a format alone where every round computes in it (``bf16`` for ``1:bf16``). A calibration after
    the last round computes in the last round's format, so the rounds decide it too."""
    if not is_schedule(text):
        return NumberFormat.parse(text).name
    per_round = [format_at(steps_of(text, rounds), t) for t in range(1, rounds + 1)]
    steps = [f"{t}:{f}" for t, f in enumerate(per_round, 1) if t == 1 or per_round[t - 2] != f]
    return per_round[0] if len(steps) == 1 else ",".join(steps)


def _fleets(doc: Mapping[str, Any], where: str) -> list[str | None]:
    """``fleets``: ``"none"`` (every sampled client, synchronous rounds: where the hyper-parameters
    are tuned) and fleet files or names under configs/fleets/ (docs/fleets.md), each loaded and so
    checked; None for ``"none"``, file order after it."""
    if "fleets" not in doc:
        return [None]
    from workloads.cost.fleet import FleetError, fleet_path, load_fleet

    names = identity.distinct_resolved(  # each fleet once by its file, not its spelling ("mixed", its path)
        _list(doc, "fleets", where, str), lambda n: n if n == "none" else identity.resolved_file(fleet_path(n)),
        name=f"{where}: fleets", error=StudyError)
    if "none" not in names:
        raise StudyError(f"{where}: fleets = {names}: add \"none\": the fleets run at the hyper-parameters tuned "
                         "with every client taking part, and are compared with that run")
    for name in names:
        if name != "none":
            try:
                load_fleet(name)
            except FleetError as err:
                raise StudyError(f"{where}: fleets: {err}") from None
    return [None, *(n for n in names if n != "none")]


def _deadlines(doc: Mapping[str, Any], where: str) -> tuple[float | None, ...]:
    """``deadlines_s``: every fleet of ``fleets`` run at each of these reporting deadlines (seconds,
    ``inf``: none) instead of its file's own (docs/fleets.md, "Which deadline minimizes
    time-to-accuracy"); ``(None,)`` without the key: the file's."""
    if "deadlines_s" not in doc:
        return (None,)
    if not any(name != "none" for name in doc.get("fleets", [])):
        raise StudyError(f"{where}: deadlines_s needs a fleet: add fleets = [\"none\", \"mixed\"] (the deadlines "
                         "apply to each fleet's rounds)")
    values = doc["deadlines_s"]
    if (not isinstance(values, list) or not values
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and not math.isnan(v)
                       for v in values)):
        raise StudyError(f"{where}: deadlines_s = {values!r}: give a list of seconds > 0, e.g. deadlines_s = [6.0, 20.0, inf]")
    from workloads.cost.fleet import DEADLINE_S_BOUNDS

    for v in values:  # a fleet's own bounds (1e308 s is not a deadline: inf is none)
        if not math.isinf(v):
            checks.number_in(v, *DEADLINE_S_BOUNDS, name="deadlines_s", error=StudyError)
    return tuple(checks.distinct([float(v) for v in values], name=f"{where}: deadlines_s", error=StudyError))


def _sets_every_format(fleet: str | None) -> bool:
    """Whether every class of ``fleet`` sets its own number format (``Fleet.sets_every_format``): then
    the study's other formats on it train exactly its FP32 setting (no client computes in the run's
    format), so they are one setting, kept once, as its FP32 setting (docs/study.md)."""
    from workloads.cost.fleet import load_fleet

    return fleet is not None and load_fleet(fleet).sets_every_format


def _own_deadline(fleet: str | None, deadline_s: float | None) -> float | None:
    """A setting's ``deadline_s``: None without a fleet, or where it is the fleet file's own (so
    the fleet's runs at its file's deadline keep the points, and ids, of a study without
    ``deadlines_s``)."""
    if fleet is None or deadline_s is None:
        return None
    from workloads.cost.fleet import load_fleet

    return None if deadline_s == load_fleet(fleet).deadline_s else deadline_s


def _targets(table: Mapping[str, Any], where: str) -> Targets:
    pct = accuracy_targets_pct(table.get("accuracy_pct", []), where=f"{where}: [targets]", error=StudyError)
    fraction = table.get("base_validation_fraction")
    if fraction is not None:
        checks.number_in(fraction, 0.0, 1.0, name="[targets] base_validation_fraction", error=StudyError,
                         low_open=True)
    if not pct and fraction is None:
        raise StudyError(f"{where}: [targets] declares no target: give accuracy_pct = [90.0] and / or "
                         "base_validation_fraction = 0.95")
    return Targets(pct, None if fraction is None else float(fraction))

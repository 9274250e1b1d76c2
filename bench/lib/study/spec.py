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
any folder exists (``bench.lib.study.study_file``: ``load_study``, ``parse_study``; its data settings
``bench.lib.study.study_settings``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from bench.lib.study.compare import DEFAULT_PRIMARY_TEST
from bench.lib.study.stats import DEFAULT_EQUIVALENCE_MARGIN_PTS, DEFAULT_POWER
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.methods import parse_method
from workloads.fl.presets import Preset

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

"""Hyper-parameters of one federated run, as frozen dataclasses.

Each knob (``workloads.fl.knob.Knob``) is declared by the method it belongs to, with its default,
bounds and source: the SphereFed paper's (appendix 0.F.2, Tab. 16, FedAvg/MobileNetV2 column) where
the paper gives one; every other default is our choice and says so. Presets
(``configs/presets/*.toml``) override them per method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from iokit import checks
from iokit.checks import SEED_MAX
from workloads.fl.knob import LOCAL_TRAINING, Knob


@dataclass(frozen=True, init=False, repr=False)
class Hparams:
    """Local training and method hyper-parameters for one method: a value for every declared knob.

    The knobs are the local training's (``LOCAL_TRAINING``) and those passed as ``declared``: a
    run's are its method's own (``MethodConfig.knobs``: FedProx its mu, CCVR its re-training, ...),
    so a run records no other method's knob. ``Hparams(declared=method.knobs, lr=0.05)`` sets values
    by name, each checked by its knob; ``hp.prox_mu`` reads one; ``hp.replace(...)`` (or
    ``dataclasses.replace``) changes some; ``hp.with_knobs(method.knobs)`` adds a method's at their
    defaults; ``hp.as_dict()`` is the flat name -> value table results files record.
    """

    declared: tuple[Knob, ...]  # in declaration order: local training, then the methods'
    values: tuple[Any, ...]  # one per declared knob

    def __init__(self, *, declared: Sequence[Knob] = (), values: Sequence[Any] | None = None, **settings: Any) -> None:
        """``declared``: knobs besides the local training's (a method's); ``values``:
        one per ``declared`` knob (as ``dataclasses.replace`` and ``Hparams(**hp.__dict__)`` pass
        them back); ``settings``: values by name, over those."""
        known: dict[str, Knob] = {}
        for knob in (*LOCAL_TRAINING, *declared):
            if known.setdefault(knob.name, knob) != knob:
                raise ValueError(f"hyper-parameter {knob.name} is declared twice, differently ({known[knob.name]} "
                                 f"and {knob}); give one of the methods' knobs another name")
        given = {**({} if values is None else {k.name: v for k, v in zip(declared, values)}), **settings}
        unknown = [name for name in given if name not in known]
        if unknown:
            hint = checks.closest(unknown[0], known)
            raise ValueError(f"unknown hyper-parameter {unknown[0]!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                             + f"; known: {', '.join(known)}")
        object.__setattr__(self, "declared", tuple(known.values()))
        object.__setattr__(self, "values", tuple(k.check(given[k.name]) if k.name in given else k.default
                                                 for k in known.values()))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("declared", "values"):  # unpickling, copying: not a knob
            raise AttributeError(name)
        for knob, value in zip(self.declared, self.values):
            if knob.name == name:
                return value
        raise AttributeError(f"no hyper-parameter {name!r}; known: {', '.join(self.names())}")

    def __repr__(self) -> str:
        return "Hparams(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.declared)

    def knob(self, name: str) -> Knob:
        return next(k for k in self.declared if k.name == name)

    def as_dict(self) -> dict[str, Any]:
        """Name -> value, in declaration order (what results files record as a method's hparams)."""
        return {k.name: v for k, v in zip(self.declared, self.values)}

    def replace(self, **changes: Any) -> "Hparams":
        """A copy with ``changes`` (names of declared knobs, each value checked)."""
        return Hparams(declared=self.declared, values=self.values, **changes)

    def with_knobs(self, knobs: Sequence[Knob]) -> "Hparams":
        """A copy that also declares ``knobs`` (at their defaults where not set yet)."""
        new = [k for k in knobs if k not in self.declared]
        return Hparams(declared=(*self.declared, *new), values=(*self.values, *(k.default for k in new)))


@dataclass(frozen=True)
class FLConfig:
    """The federated setting shared by all methods of one run."""

    dataset: str = "cifar100"
    image_size: int | None = None  # None: the dataset's native size
    model: str = "mobilenetv2"
    norm: str = "bn"
    num_clients: int = 10  # K, Sec. 5.1
    rounds: int = 100  # Tab. 16
    participation: float = 1.0  # fraction of clients sampled per round (Sec. 5.1: all 10)
    partition: str = "dirichlet"  # a key of workloads.fl.partition.PARTITIONS
    alpha: float = 0.5  # Dirichlet concentration (Tab. 2 columns: 0.5, 0.1)
    non_iid_fraction: float = 1.0  # FedCos splits: 1.0, 0.9, 0.7
    classes_per_client: int = 2  # dispatch split
    min_client_size: int = 10  # NIID-Bench (Li et al., "Federated Learning on Non-IID Data Silos", ICDE 2022)
    eval_every: int = 0  # evaluate the global model every N rounds (0: only after the last)
    holdout_fraction: float = 0.0  # validation hold-out drawn from train before partitioning (Sec. 5.1: 0.15)
    max_train_samples: int | None = None  # a seeded subset of the train split (None: all of it)
    max_test_samples: int | None = None  # a seeded subset of the test split (None: all of it)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_clients < 1 or self.rounds < 1:
            raise ValueError("num_clients and rounds must be >= 1")
        if not 0.0 < self.participation <= 1.0:
            raise ValueError(f"participation must be in (0, 1], got {self.participation!r}")
        for name in ("max_train_samples", "max_test_samples"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer (or left out for all samples), got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= SEED_MAX:
            raise ValueError(f"seed must be an integer in [0, {SEED_MAX}], got {self.seed!r}")
        for name in ("participation", "alpha", "non_iid_fraction", "holdout_fraction"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)!r}")
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must be in [0, 1) (SphereFed Sec. 5.1 uses 0.15), "
                             f"got {self.holdout_fraction!r}")


def hparams_from_table(values: Mapping[str, Any], *, where: str, knobs: Sequence[Knob] = (),
                       error: type[Exception] = ValueError) -> Hparams:
    """``Hparams`` of a config table (the local training's knobs and ``knobs``, a method's, at their
    defaults, with ``values`` set); unknown keys and bad values rejected, naming ``where``."""
    return override(Hparams(declared=knobs), values, where=where, error=error)


def override(hp: Hparams, values: Mapping[str, Any], *, where: str, error: type[Exception] = ValueError) -> Hparams:
    """``hp`` with the keys of ``values`` replaced (unknown keys and bad values rejected, naming ``where``)."""
    checks.unknown_keys(values, hp.names(), where=where, error=error)
    try:
        return hp.replace(**dict(values))
    except ValueError as err:
        raise error(f"{where}: {err}") from None

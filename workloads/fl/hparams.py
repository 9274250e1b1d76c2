"""Hyper-parameters of one federated run, as frozen dataclasses.

Defaults are the SphereFed paper's (appendix 0.F.2, Tab. 16, FedAvg/MobileNetV2 column) where the
paper gives one; every other default is our choice and says so in its comment. Presets
(``configs/presets/*.toml``) override them per method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from iokit import checks
from iokit.checks import SEED_MAX


@dataclass(frozen=True)
class Hparams:
    """Local training and method hyper-parameters for one method."""

    lr: float = 0.1  # Tab. 16, FedAvg (MobileNetV2)
    momentum: float = 0.9  # Tab. 16 / Sec. 5.1: SGD momentum 0.9 for all approaches
    weight_decay: float = 1e-5  # Tab. 16
    local_epochs: int = 10  # E, Tab. 16
    batch_size: int = 64  # B, Tab. 16
    lr_min: float = 0.0  # cosine annealing floor (torch CosineAnnealingLR default eta_min = 0)
    prox_mu: float = 0.001  # FedProx mu, Tab. 16 (FedProx / ResNet18 row)
    fedcos_mu: float = 0.02  # FedCos mu: FedCos paper's best setting, its Tab. (FedCos(0.02))
    server_lr: float = 1.0  # FedOpt on-server SGD learning rate, Tab. 16
    server_momentum: float = 0.3  # FedOpt on-server momentum, Tab. 16
    avgm_momentum: float = 0.9  # FedAvgM server momentum: our choice (Hsu et al. sweep; 0.9 common)
    # gradual sharing F (Li et al., "More Industry-friendly: Federated Learning with High Efficient
    # Design", Alg. 2); 0 = share everything from round 1
    share_every_rounds: int = 0
    ffc_ridge: float = 0.0  # FFC L2 penalty lambda (appendix 0.C.1); paper keeps 0 in main runs
    ffc_stats_dtype: str = "float64"  # dtype FFC statistics are accumulated and sent in: our choice (Z^T Z squares the condition number)
    ccvr_virtual_per_class: int = 500  # M_c, Tab. 16 (CIFAR-100)
    ccvr_lr: float = 1e-5  # CCVR fine-tuning learning rate, Tab. 16
    ccvr_epochs: int = 10  # classifier re-training epochs over the virtual features: our choice
    ccvr_batch_size: int = 64  # our choice (the local batch size of Tab. 16)
    ccvr_cov_eps: float = 1e-5  # diagonal added to pooled covariances before sampling: our choice (they may be singular)

    def __post_init__(self) -> None:
        positive = ("lr", "local_epochs", "batch_size", "server_lr", "ccvr_virtual_per_class",
                    "ccvr_epochs", "ccvr_batch_size")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"hyper-parameter {name} must be > 0, got {getattr(self, name)!r}")
        for name in ("momentum", "server_momentum", "avgm_momentum"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"hyper-parameter {name} must be in [0, 1), got {getattr(self, name)!r}")
        for name in ("weight_decay", "lr_min", "prox_mu", "fedcos_mu", "share_every_rounds",
                     "ffc_ridge", "ccvr_lr", "ccvr_cov_eps"):
            if getattr(self, name) < 0:
                raise ValueError(f"hyper-parameter {name} must be >= 0, got {getattr(self, name)!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"hyper-parameter {f.name} must be a finite number, got {value!r}")
        if self.ffc_stats_dtype not in ("float32", "float64"):
            raise ValueError(f"ffc_stats_dtype must be 'float32' or 'float64', got {self.ffc_stats_dtype!r}")


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


def override(hp: Hparams, values: Mapping[str, Any], *, where: str) -> Hparams:
    """``hp`` with the keys of ``values`` replaced (unknown keys and bad values rejected, naming ``where``)."""
    checks.typed_table(Hparams, values, where=where)
    try:
        return replace(hp, **dict(values))
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None

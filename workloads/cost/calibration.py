"""Cost of the classifier calibration on the modeled accelerator: CCVR vs FFC (Fig. 5 (d)).

SphereFed Sec. 5.4: "the reported latency consists of both the average latency on one client and
the on-server latency". We price, with the FL code's own functions (``workloads/fl/methods``):

* client: feature extraction of every local sample plus the statistics. FFC:
  ``ffc_client_statistics`` over batches of B (V, U of Eq. 9) with the SphereFed model. CCVR:
  ``ccvr_client_statistics`` over single-class batches (per-class counts, means, covariances) with
  the FedAvg model. Fig. 5 (d) prices the average client (|D| / K samples, classes balanced, so
  |D| / (K.C) samples per class: ``calibration_cost``); a federated run's ledger prices each client
  from its own class counts (``client_cost``).
* server: FFC ``FFC.server_calibrate`` (sum V and U over K clients, solve Eq. 10). CCVR the steps
  of ``CCVR.server_calibrate``: ``pool_class_statistics``, ``sample_virtual_features``
  (M_c per class) and ``retrain_classifier`` (``ccvr_epochs`` epochs over C.M_c virtual features).

Every step of a loop over batches runs the same ops on the same shapes, so instead of capturing
thousands of identical steps we capture one and two of them (on the ``meta`` device) and
extrapolate: cost(n) = cost(1) + (n - 1) (cost(2) - cost(1)), cycles and energy alike (energy is
linear in the counts the cycles come from, ``accel_sim.energy``); for the
re-training, whose first SGD step creates the momentum buffers, from two and three steps.
``tests/test_calibration.py`` checks this against full captures on small shapes. A last partial
batch is priced as a full one (n = ceil(samples / B)), a slight over-estimate, and the
re-training's E epochs are priced as one epoch of E times the steps (one shuffle of E x the rows
instead of E shuffles: the same elements).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Sequence

import torch
import torch.nn.functional as F

from accel_sim.hardware import HardwareConfig
from workloads.fl.hparams import Hparams
from workloads.fl.methods import CALIBRATIONS
from workloads.fl.methods.ccvr import pool_class_statistics, retrain_classifier, sample_virtual_features
from workloads.fl.methods.ffc import FFC
from workloads.cost.step import simulate_complete
from workloads.model_spec import ModelSpec, as_spec, example_batch
from workloads.cost.step import method_setup
from workloads.capture import capture

TRAINED_WITH = {"ccvr": "fedavg", "ffc": "spherefed"}  # Fig. 5 (d): CCVR on FedAvg, FFC on SphereFed


@dataclass(frozen=True)
class Cost:
    """Cycles and energy of some work on one accelerator; adds, subtracts and scales by a count
    (so ``extrapolate`` applies to it as to plain numbers)."""

    total_cycles: int
    energy_j: float

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.total_cycles + other.total_cycles, self.energy_j + other.energy_j)

    def __sub__(self, other: "Cost") -> "Cost":
        return Cost(self.total_cycles - other.total_cycles, self.energy_j - other.energy_j)

    def __mul__(self, times: int) -> "Cost":
        return Cost(self.total_cycles * times, self.energy_j * times)

    __rmul__ = __mul__


ZERO = Cost(0, 0.0)


@dataclass(frozen=True)
class CalibrationCost:
    client: Cost  # the average client
    server: Cost
    clock_hz: float

    @property
    def client_total_cycles(self) -> int:
        return self.client.total_cycles

    @property
    def server_total_cycles(self) -> int:
        return self.server.total_cycles

    @property
    def client_energy_j(self) -> float:
        return self.client.energy_j

    @property
    def server_energy_j(self) -> float:
        return self.server.energy_j

    @property
    def latency_s(self) -> float:
        return (self.client.total_cycles + self.server.total_cycles) / self.clock_hz

    @property
    def energy_j(self) -> float:
        return self.client.energy_j + self.server.energy_j


def extrapolate(at_a, at_a_plus_1, n: int, a: int = 1):
    """Cost of n loop steps from captures of a and a + 1 steps: at_a + (n - a)(at_a_plus_1 - at_a)
    (numbers or ``Cost``).

    Exact when every step from the (a+1)-th on costs the same. a = 1 for feature statistics; a = 2
    for SGD loops, whose first step differs (it creates the momentum buffers).
    """
    return at_a + (at_a_plus_1 - at_a) * (n - a)


def _cost(fn, *args, hw: HardwareConfig, model=None, **kwargs) -> Cost:
    captured = capture(fn, *args, model=model, default_phase="calibration", **kwargs)
    report = simulate_complete(captured.trace, hw, f"calibration step {getattr(fn, '__qualname__', fn)}")
    return Cost(report.total_cycles, report.energy_j)


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


@functools.lru_cache(maxsize=64)
def _client_batch_costs(calibration: str, model_name: str | ModelSpec, batch: int, num_classes: int, image_size: int,
                        hp: Hparams, hw: HardwareConfig) -> tuple[Cost, Cost]:
    """Cost of the client statistics over one and over two batches of ``batch`` samples."""
    model, _ = method_setup(TRAINED_WITH[calibration], model_name, num_classes=num_classes,
                            image_size=image_size, norm="bn")
    model = model.to("meta").eval()
    calib = CALIBRATIONS[calibration]

    def stats_fn(batches):
        return calib.client_statistics(model, batches, num_classes=num_classes, hp=hp)

    x = example_batch(as_spec(model_name, image_size), batch)
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    return _cost(stats_fn, [(x, y)], hw=hw, model=model), _cost(stats_fn, [(x, y), (x, y)], hw=hw, model=model)


def client_batches(calibration: str, class_counts: Sequence[int], batch_size: int) -> int:
    """Batches a client's statistics run over: ``ceil(n_k / B)`` over all its samples (FFC), or
    ``sum_c ceil(n_kc / B)`` for a calibration that needs single-class batches (CCVR,
    ``workloads.fl.methods.ccvr.class_batches``)."""
    if CALIBRATIONS[calibration].single_class_batches:
        return sum(math.ceil(n / batch_size) for n in class_counts)
    return math.ceil(sum(class_counts) / batch_size)


def client_cost(calibration: str, model_name: str | ModelSpec, *, class_counts: Sequence[int], num_classes: int,
                image_size: int, hp: Hparams, hw: HardwareConfig) -> Cost:
    """One client's statistics over its own samples (``class_counts[c]`` of class c), batches of B
    (a partial batch priced as a full one)."""
    n_batches = client_batches(calibration, class_counts, hp.batch_size)
    if n_batches == 0:
        return ZERO
    one, two = _client_batch_costs(calibration, model_name, hp.batch_size, num_classes, image_size, hp, hw)
    return extrapolate(one, two, n_batches)


def average_client_cost(calibration: str, model_name: str | ModelSpec, *, samples: int, num_classes: int, image_size: int,
                        hp: Hparams, hw: HardwareConfig) -> Cost:
    """The average client's statistics over ``samples`` local samples, classes balanced (Fig. 5 d)."""
    if CALIBRATIONS[calibration].single_class_batches:
        per_class = max(1, samples // num_classes)
        batch = min(hp.batch_size, per_class)
        n_batches = num_classes * math.ceil(per_class / batch)
    else:
        batch, n_batches = hp.batch_size, math.ceil(samples / hp.batch_size)
    one, two = _client_batch_costs(calibration, model_name, batch, num_classes, image_size, hp, hw)
    return extrapolate(one, two, n_batches)


def ffc_server_cost(*, feature_dim: int, num_classes: int, num_clients: int, hp: Hparams,
                    hw: HardwareConfig) -> Cost:
    """Eq. 10 on the server: sum of K clients' V and U, then the solve."""
    dtype = getattr(torch, hp.ffc_stats_dtype)
    stats = [{"ffc_V": _meta(feature_dim, feature_dim, dtype=dtype), "ffc_U": _meta(feature_dim, num_classes, dtype=dtype)}
             for _ in range(num_clients)]
    return _cost(FFC().server_calibrate, stats, classifier_weight=_meta(num_classes, feature_dim), hp=hp, hw=hw)


def _ccvr_loss(outputs, targets):
    """FedAvg's loss per sample (CCVR re-trains with the base method's loss)."""
    return F.cross_entropy(outputs, targets, reduction="none")


def ccvr_server_cost(*, feature_dim: int, num_classes: int, num_clients: int, hp: Hparams,
                     hw: HardwareConfig) -> Cost:
    """Pool K clients' statistics, sample C.M_c virtual features, re-train the classifier."""
    l, c = feature_dim, num_classes
    stats = [{"ccvr_counts": _meta(c, dtype=torch.float64), "ccvr_means": _meta(c, l, dtype=torch.float64),
              "ccvr_covs": _meta(c, l, l, dtype=torch.float64)} for _ in range(num_clients)]

    def pool_and_sample(stats):
        n, mu, cov = pool_class_statistics(stats)
        return sample_virtual_features(n, mu, cov, per_class=hp.ccvr_virtual_per_class, eps=hp.ccvr_cov_eps)

    prepare = _cost(pool_and_sample, stats, hw=hw)
    one_epoch = replace(hp, ccvr_epochs=1)
    w = _meta(c, l)

    def retrain(steps):
        rows = steps * hp.ccvr_batch_size
        return _cost(retrain_classifier, w, _meta(rows, l), torch.zeros(rows, dtype=torch.long, device="meta"),
                       _meta(rows), per_sample_loss=_ccvr_loss, hp=one_epoch, hw=hw)

    steps = hp.ccvr_epochs * math.ceil(c * hp.ccvr_virtual_per_class / hp.ccvr_batch_size)
    return prepare + extrapolate(retrain(2), retrain(3), steps, a=2)


SERVER_COSTS = {"ffc": ffc_server_cost, "ccvr": ccvr_server_cost}


def server_cost(calibration: str, *, feature_dim: int, num_classes: int, num_clients: int, hp: Hparams,
                hw: HardwareConfig) -> Cost:
    """The server's side of one calibration over ``num_clients`` clients' statistics."""
    return SERVER_COSTS[calibration](feature_dim=feature_dim, num_classes=num_classes, num_clients=num_clients,
                                     hp=hp, hw=hw)


def calibration_cost(calibration: str, model_name: str | ModelSpec, *, train_samples: int, num_clients: int,
                     num_classes: int, image_size: int, hp: Hparams, hw: HardwareConfig) -> CalibrationCost:
    """Average client plus server cost of one calibration (``"ccvr"`` or ``"ffc"``)."""
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {calibration!r}; choose one of {', '.join(sorted(CALIBRATIONS))}")
    model, _ = method_setup("fedavg", model_name, num_classes=num_classes, image_size=image_size, norm="bn")
    client = average_client_cost(calibration, model_name, samples=train_samples // num_clients,
                                 num_classes=num_classes, image_size=image_size, hp=hp, hw=hw)
    server = server_cost(calibration, feature_dim=model.feature_dim, num_classes=num_classes,
                         num_clients=num_clients, hp=hp, hw=hw)
    return CalibrationCost(client, server, hw.clock_hz)

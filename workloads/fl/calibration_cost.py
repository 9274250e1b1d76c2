"""Latency of the classifier calibration on the modeled accelerator: CCVR vs FFC (Fig. 5 (d)).

SphereFed Sec. 5.4: "the reported latency consists of both the average latency on one client and
the on-server latency". We price, with the FL code's own functions (``workloads/fl/methods``):

* client (the average client, |D| / K samples): feature extraction of every local sample plus the
  statistics. FFC: ``ffc_client_statistics`` over batches of B (V, U of Eq. 9) with the SphereFed
  model. CCVR: ``ccvr_client_statistics`` over single-class batches (per-class counts, means,
  covariances) with the FedAvg model; classes balanced, so |D| / (K.C) samples per class.
* server: FFC ``FFC.server_calibrate`` (sum V and U over K clients, solve Eq. 10). CCVR the steps
  of ``CCVR.server_calibrate``: ``pool_class_statistics``, ``sample_virtual_features``
  (M_c per class) and ``retrain_classifier`` (``ccvr_epochs`` epochs over C.M_c virtual features).

Every step of a loop over batches runs the same ops on the same shapes, so instead of capturing
thousands of identical steps we capture one and two of them (on the ``meta`` device) and
extrapolate: cycles(n) = cycles(1) + (n - 1) (cycles(2) - cycles(1)); for the re-training, whose
first SGD step creates the momentum buffers, from two and three steps. ``tests/test_calibration.py``
checks this against full captures on small shapes. A last partial batch is priced as a full one
(n = ceil(samples / B)), a slight over-estimate, and the re-training's E epochs are priced as one
epoch of E times the steps (one shuffle of E x the rows instead of E shuffles: the same elements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from accel_sim.hardware import HardwareConfig
from workloads.fl.step_cost import simulate_complete
from workloads.fl.hparams import Hparams
from workloads.fl.methods.ccvr import ccvr_client_statistics, pool_class_statistics, retrain_classifier, \
    sample_virtual_features
from workloads.fl.methods.ffc import FFC, ffc_client_statistics
from workloads.model_spec import ModelSpec, as_spec, example_batch
from workloads.trace import capture, method_setup

CALIBRATIONS = ("ccvr", "ffc")
TRAINED_WITH = {"ccvr": "fedavg", "ffc": "spherefed"}  # Fig. 5 (d): CCVR on FedAvg, FFC on SphereFed


@dataclass(frozen=True)
class CalibrationCost:
    client_cycles: int  # the average client
    server_cycles: int
    clock_hz: float

    @property
    def latency_s(self) -> float:
        return (self.client_cycles + self.server_cycles) / self.clock_hz


def extrapolate(at_a: int, at_a_plus_1: int, n: int, a: int = 1) -> int:
    """Cycles of n loop steps from captures of a and a + 1 steps: at_a + (n - a)(at_a_plus_1 - at_a).

    Exact when every step from the (a+1)-th on costs the same. a = 1 for feature statistics; a = 2
    for SGD loops, whose first step differs (it creates the momentum buffers).
    """
    return at_a + (n - a) * (at_a_plus_1 - at_a)


def _cycles(fn, *args, hw: HardwareConfig, model=None, **kwargs) -> int:
    captured = capture(fn, *args, model=model, default_phase="calibration", **kwargs)
    return simulate_complete(captured.trace, hw, f"calibration step {getattr(fn, '__qualname__', fn)}").total_cycles


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def client_cycles(calibration: str, model_name: str | ModelSpec, *, samples: int, num_classes: int, image_size: int,
                  hp: Hparams, hw: HardwareConfig) -> int:
    """The average client's statistics over ``samples`` local samples (feature extraction included)."""
    model, _ = method_setup(TRAINED_WITH[calibration], model_name, num_classes=num_classes,
                            image_size=image_size, norm="bn")
    model = model.to("meta").eval()
    if calibration == "ffc":
        batch, n_batches = hp.batch_size, math.ceil(samples / hp.batch_size)
        stats_fn = lambda batches: ffc_client_statistics(model, batches, num_classes=num_classes, hp=hp)  # noqa: E731
    else:
        per_class = max(1, samples // num_classes)
        batch = min(hp.batch_size, per_class)
        n_batches = num_classes * math.ceil(per_class / batch)
        stats_fn = lambda batches: ccvr_client_statistics(model, batches, num_classes=num_classes)  # noqa: E731
    x = example_batch(as_spec(model_name, image_size), batch)
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    one = _cycles(stats_fn, [(x, y)], hw=hw, model=model)
    two = _cycles(stats_fn, [(x, y), (x, y)], hw=hw, model=model)
    return extrapolate(one, two, n_batches)


def ffc_server_cycles(*, feature_dim: int, num_classes: int, num_clients: int, hp: Hparams,
                      hw: HardwareConfig) -> int:
    """Eq. 10 on the server: sum of K clients' V and U, then the solve."""
    dtype = getattr(torch, hp.ffc_stats_dtype)
    stats = [{"ffc_V": _meta(feature_dim, feature_dim, dtype=dtype), "ffc_U": _meta(feature_dim, num_classes, dtype=dtype)}
             for _ in range(num_clients)]
    return _cycles(FFC().server_calibrate, stats, classifier_weight=_meta(num_classes, feature_dim), hp=hp, hw=hw)


def _ccvr_loss(outputs, targets):
    """FedAvg's loss per sample (CCVR re-trains with the base method's loss)."""
    return F.cross_entropy(outputs, targets, reduction="none")


def ccvr_server_cycles(*, feature_dim: int, num_classes: int, num_clients: int, hp: Hparams,
                       hw: HardwareConfig) -> int:
    """Pool K clients' statistics, sample C.M_c virtual features, re-train the classifier."""
    l, c = feature_dim, num_classes
    stats = [{"ccvr_counts": _meta(c, dtype=torch.float64), "ccvr_means": _meta(c, l, dtype=torch.float64),
              "ccvr_covs": _meta(c, l, l, dtype=torch.float64)} for _ in range(num_clients)]

    def pool_and_sample(stats):
        n, mu, cov = pool_class_statistics(stats)
        return sample_virtual_features(n, mu, cov, per_class=hp.ccvr_virtual_per_class, eps=hp.ccvr_cov_eps)

    prepare = _cycles(pool_and_sample, stats, hw=hw)
    one_epoch = replace(hp, ccvr_epochs=1)
    w = _meta(c, l)

    def retrain(steps):
        rows = steps * hp.ccvr_batch_size
        return _cycles(retrain_classifier, w, _meta(rows, l), torch.zeros(rows, dtype=torch.long, device="meta"),
                       _meta(rows), per_sample_loss=_ccvr_loss, hp=one_epoch, hw=hw)

    steps = hp.ccvr_epochs * math.ceil(c * hp.ccvr_virtual_per_class / hp.ccvr_batch_size)
    return prepare + extrapolate(retrain(2), retrain(3), steps, a=2)


def calibration_cost(calibration: str, model_name: str | ModelSpec, *, train_samples: int, num_clients: int,
                     num_classes: int, image_size: int, hp: Hparams, hw: HardwareConfig) -> CalibrationCost:
    """Average client plus server cycles of one calibration (``"ccvr"`` or ``"ffc"``)."""
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {calibration!r}; choose one of {', '.join(CALIBRATIONS)}")
    model, _ = method_setup("fedavg", model_name, num_classes=num_classes, image_size=image_size, norm="bn")
    feature_dim = model.feature_dim
    client = client_cycles(calibration, model_name, samples=train_samples // num_clients, num_classes=num_classes,
                           image_size=image_size, hp=hp, hw=hw)
    server_fn = ffc_server_cycles if calibration == "ffc" else ccvr_server_cycles
    server = server_fn(feature_dim=feature_dim, num_classes=num_classes, num_clients=num_clients, hp=hp, hw=hw)
    return CalibrationCost(client, server, hw.clock_hz)

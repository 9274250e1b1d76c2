"""Cost of the classifier calibration on the modeled accelerator: CCVR vs FFC (Fig. 5 (d)).

SphereFed Sec. 5.4: "the reported latency consists of both the average latency on one client and
the on-server latency". We price, with the FL code's own functions (``workloads/fl/methods``):

* client: feature extraction of every local sample plus the statistics. FFC:
  ``ffc_client_statistics`` over batches of B (V, U of Eq. 9) with the SphereFed model. CCVR:
  ``ccvr_client_statistics`` over single-class batches (per-class counts, means, covariances) with
  the FedAvg model. Fig. 5 (d) prices the average client (|D| / K samples, classes balanced, so
  |D| / (K.C) samples per class: ``calibration_cost``); a federated run's ledger prices each client
  from its own class counts (``client_cost``), and a fleet checks its device holds the peak memory
  of that work (``client_peak_memory_bytes``).
* server: the work the calibration declares (``Calibration.server_work``), on inputs of the shapes
  of its declared ``statistics``. FFC ``FFC.server_calibrate`` (sum V and U over K clients, solve
  Eq. 10). CCVR the steps of ``CCVR.server_calibrate``: ``pool_class_statistics``,
  ``sample_virtual_features`` (M_c per class) and ``retrain_classifier`` (``ccvr_epochs`` epochs
  over C.M_c virtual features), re-training with the loss of the method it calibrates
  (``trained_with``).

Which model a calibration's client side is priced on is the calibration's ``trained_with`` (Fig.
5 (d): CCVR on FedAvg's, FFC on SphereFed's). This module names no calibration.

Every step of a loop over batches runs the same ops on the same shapes, so instead of capturing
thousands of identical steps we capture one and two of them (on the ``meta`` device, once, priced
once per accelerator) and extrapolate: cost(n) = cost(1) + (n - 1) (cost(2) - cost(1)), cycles
and energy alike (energy is linear in the counts the cycles come from, ``accel_sim.energy``); for
the re-training, whose first SGD step creates the momentum buffers, from two and three steps.
``tests/test_calibration.py`` checks this against full captures on small shapes. A last partial
batch is priced as a full one (n = ceil(samples / B)), a slight over-estimate, and the
re-training's E epochs are priced as one epoch of E times the steps (one shuffle of E x the rows
instead of E shuffles: the same elements).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import torch

from accel_sim.hardware import HardwareConfig
from accel_sim.trace_schema import Trace
from workloads.capture import capture
from workloads.cost.step import StepPrice, method_setup, simulate_complete
from workloads.fl.hparams import Hparams
from workloads.fl.local import per_sample_loss
from workloads.fl.methods import calibration_named, parse_method
from workloads.fl.methods.calibration import ServerWork
from workloads.model_spec import ModelSpec, as_spec, example_batch


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


@dataclass(frozen=True)
class Priced:
    """Captured work priced on one accelerator: its cost and the most memory it holds at once
    (``accel_sim.lifetimes``: weights, buffers, inputs and live intermediates at the word size)."""

    cost: Cost
    peak_memory_bytes: int


def _trace(fn, *args, model=None, **kwargs) -> Trace:
    return capture(fn, *args, model=model, default_phase="calibration", **kwargs).trace


def _priced(trace: Trace, hw: HardwareConfig, what: str) -> Priced:
    report = simulate_complete(trace, hw, f"calibration step {what}")
    return Priced(Cost(report.total_cycles, report.energy_j), report.peak_memory_bytes)


@functools.lru_cache(maxsize=64)
def _client_batch_traces(calibration: str, model_name: str | ModelSpec, batch: int, num_classes: int,
                         image_size: int, hp: Hparams) -> tuple[Trace, Trace]:
    """The client statistics over one and over two batches of ``batch`` samples, captured on ``meta``."""
    calib = calibration_named(calibration)
    model, _ = method_setup(calib.trained_with, model_name, num_classes=num_classes, image_size=image_size, norm="bn")
    model = model.to("meta").eval()

    def stats_fn(batches):
        return calib.client_statistics(model, batches, num_classes=num_classes, hp=hp)

    x = example_batch(as_spec(model_name, image_size), batch)
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    return _trace(stats_fn, [(x, y)], model=model), _trace(stats_fn, [(x, y), (x, y)], model=model)


@functools.lru_cache(maxsize=256)
def _client_batches_priced(calibration: str, model_name: str | ModelSpec, batch: int, num_classes: int,
                           image_size: int, hp: Hparams, hw: HardwareConfig) -> tuple[Priced, Priced]:
    """``_client_batch_traces`` priced on ``hw`` (captured once, priced once per accelerator)."""
    one, two = _client_batch_traces(calibration, model_name, batch, num_classes, image_size, hp)
    what = f"{calibration} client statistics"
    return _priced(one, hw, what), _priced(two, hw, what)


def client_batches(calibration: str, class_counts: Sequence[int], batch_size: int) -> int:
    """Batches a client's statistics run over: ``ceil(n_k / B)`` over all its samples (FFC), or
    ``sum_c ceil(n_kc / B)`` for a calibration that needs single-class batches (CCVR,
    ``workloads.fl.methods.ccvr.class_batches``)."""
    if calibration_named(calibration).single_class_batches:
        return sum(math.ceil(n / batch_size) for n in class_counts)
    return math.ceil(sum(class_counts) / batch_size)


def largest_batch(calibration: str, class_counts: Sequence[int], batch_size: int) -> int:
    """The largest batch a client's statistics run over: ``min(B, n_k)``, or ``min(B, max_c n_kc)``
    for a calibration in single-class batches (CCVR)."""
    if calibration_named(calibration).single_class_batches:
        return min(batch_size, max(class_counts, default=0))
    return min(batch_size, sum(class_counts))


def client_cost(calibration: str, model_name: str | ModelSpec, *, class_counts: Sequence[int], num_classes: int,
                image_size: int, hp: Hparams, hw: HardwareConfig) -> Cost:
    """One client's statistics over its own samples (``class_counts[c]`` of class c), batches of B
    (a partial batch priced as a full one)."""
    n_batches = client_batches(calibration, class_counts, hp.batch_size)
    if n_batches == 0:
        return ZERO
    hp = hp.with_knobs(calibration_named(calibration).knobs)
    one, two = _client_batches_priced(calibration, model_name, hp.batch_size, num_classes, image_size, hp, hw)
    return extrapolate(one.cost, two.cost, n_batches)


def client_peak_memory_bytes(calibration: str, model_name: str | ModelSpec, *, class_counts: Sequence[int],
                             num_classes: int, image_size: int, hp: Hparams, hw: HardwareConfig) -> int:
    """The most memory one client's statistics hold at once (the extractor's weights and buffers, a
    batch and its features, the statistics' accumulators), as a training step's peak is priced: the
    peak of the captured work at the client's largest batch (``largest_batch``), over two batches
    (the loop's steady state: the accumulators live while the next batch's features are formed) or
    over its one batch."""
    n_batches = client_batches(calibration, class_counts, hp.batch_size)
    if n_batches == 0:
        return 0
    hp = hp.with_knobs(calibration_named(calibration).knobs)
    one, two = _client_batches_priced(calibration, model_name, largest_batch(calibration, class_counts, hp.batch_size),
                                      num_classes, image_size, hp, hw)
    return (one if n_batches == 1 else two).peak_memory_bytes


def client_price(calibration: str, model_name: str | ModelSpec, *, class_counts: Sequence[int], num_classes: int,
                 image_size: int, hp: Hparams, hw: HardwareConfig) -> StepPrice:
    """One client's statistics on ``hw`` as one piece of work, as the Flower app's meter charges
    it: seconds at the accelerator's own speed (``client_cost``'s cycles / clock, as ``bench.fl``'s
    ledger charges them, ``RunPricer.calibration``), energy and peak memory
    (``client_peak_memory_bytes``)."""
    args = dict(class_counts=class_counts, num_classes=num_classes, image_size=image_size, hp=hp, hw=hw)
    cost = client_cost(calibration, model_name, **args)
    return StepPrice(cost.total_cycles / hw.clock_hz, cost.energy_j,
                     client_peak_memory_bytes(calibration, model_name, **args))


def average_client_cost(calibration: str, model_name: str | ModelSpec, *, samples: int, num_classes: int, image_size: int,
                        hp: Hparams, hw: HardwareConfig) -> Cost:
    """The average client's statistics over ``samples`` local samples, classes balanced (Fig. 5 d)."""
    hp = hp.with_knobs(calibration_named(calibration).knobs)
    if calibration_named(calibration).single_class_batches:
        per_class = max(1, samples // num_classes)
        batch = min(hp.batch_size, per_class)
        n_batches = num_classes * math.ceil(per_class / batch)
    else:
        batch, n_batches = hp.batch_size, math.ceil(samples / hp.batch_size)
    one, two = _client_batches_priced(calibration, model_name, batch, num_classes, image_size, hp, hw)
    return extrapolate(one.cost, two.cost, n_batches)


def server_cost(calibration: str, *, feature_dim: int, num_classes: int, num_clients: int, hp: Hparams,
                hw: HardwareConfig) -> Cost:
    """The server's side of one calibration over ``num_clients`` clients' statistics: the work the
    calibration declares (``Calibration.server_work``), each piece captured on ``meta`` and a loop
    of identical steps extrapolated from two captures (``extrapolate``)."""
    calib = calibration_named(calibration)
    hp = hp.with_knobs(calib.knobs)  # its knobs' defaults where ``hp`` lacks them
    loss_fn = per_sample_loss(parse_method(calib.trained_with))
    total = ZERO
    for work in calib.server_work(feature_dim=feature_dim, num_classes=num_classes, num_clients=num_clients,
                                  hp=hp, loss_fn=loss_fn):
        at_steady = _captured(work, work.steady, hw)
        total += at_steady if work.steps == work.steady else extrapolate(
            at_steady, _captured(work, work.steady + 1, hw), work.steps, a=work.steady)
    return total


def server_seconds(calibration: str, *, feature_dim: int, num_classes: int, num_clients: int, hp: Hparams,
                   hw: HardwareConfig) -> float:
    """``server_cost`` in seconds on ``hw``: the calibration round's ``server_s`` (``bench.fl``'s
    ledger, ``RunPricer.calibration_server_s``, and the Flower app's)."""
    cost = server_cost(calibration, feature_dim=feature_dim, num_classes=num_classes, num_clients=num_clients,
                       hp=hp, hw=hw)
    return cost.total_cycles / hw.clock_hz


def _captured(work: ServerWork, steps: int, hw: HardwareConfig) -> Cost:
    fn, args, kwargs = work.call(steps)
    return _priced(_trace(fn, *args, **kwargs), hw, getattr(fn, "__qualname__", str(fn))).cost


def calibration_cost(calibration: str, model_name: str | ModelSpec, *, train_samples: int, num_clients: int,
                     num_classes: int, image_size: int, hp: Hparams, hw: HardwareConfig) -> CalibrationCost:
    """Average client plus server cost of one calibration (``"ccvr"`` or ``"ffc"``)."""
    model, _ = method_setup(calibration_named(calibration).trained_with, model_name, num_classes=num_classes,
                            image_size=image_size, norm="bn")
    client = average_client_cost(calibration, model_name, samples=train_samples // num_clients,
                                 num_classes=num_classes, image_size=image_size, hp=hp, hw=hw)
    server = server_cost(calibration, feature_dim=model.feature_dim, num_classes=num_classes,
                         num_clients=num_clients, hp=hp, hw=hw)
    return CalibrationCost(client, server, hw.clock_hz)

"""Each round of a federated run, priced: the ``rounds.csv`` ledger (docs/rounds.md).

From the run's own facts (``RunResult``: the clients sampled in each round, what each sent and
received, the accuracy after each evaluated round; the partition: each client's samples) and the
price of each distinct piece of work on the modeled accelerator:

* a sampled client's local training is ``E`` epochs of its mini-batches (``loop.batch_starts``:
  ``ceil(n_k / B)`` steps per epoch, the last partial batch at its real size, a trailing batch of
  one skipped as the loop skips it), each step priced from a capture of the loop's own step
  (``workloads.cost.step.local_step_trace``) at that batch size, on the client's device;
* its calibration (CCVR / FFC, after the last round) from ``workloads.cost.calibration`` (on a
  fleet, the calibration round is planned as a training round is: ``calibration_plan``);
* the server's aggregation from a capture of the method's own ``aggregate`` over the round's
  updates, and the calibration's server side, on the run's accelerator (``--hw``);
* bytes from the loop's ledger (``RunResult.transfers``).

Each distinct capture (step program, batch size, what the method receives that round, accelerator)
is taken once per run and shared by the run's methods (``RunPricer``). The round model itself (links, speed
factors, the synchronous max) is ``workloads.cost.system``.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from accel_sim.hardware import HardwareConfig, load_hardware_config
from accel_sim.mac_energy import hardware_in_format
from workloads.cost.fleet import Fleet
from workloads.cost.participation import ClientOffer, ParticipationPlan, RoundPlan, online, plan_round, sampled_count
from workloads.cost.widths import chosen_width
from workloads.cost.system import ClientRound, RoundCost, SystemModel, ledger_rows, on_device, round_cost
from workloads.fl.execution import Execution
from workloads.fl.aggregate import moving_average
from workloads.fl.comm import ModelSizes, calibration_client_bytes, client_round_bytes, closed_form_sizes
from workloads.cost import calibration as calibration_cost
from workloads.fl.hparams import Hparams
from workloads.fl.local import prepare_model
from workloads.fl.loop import RunResult, batch_starts, clients_per_round, draw_clients
from workloads.fl.methods import MethodConfig
from workloads.fl.methods.base import ClientUpdate, ServerState, step_identity, trainable_keys
from workloads.fl.width import submodel
from workloads.models import Head
from workloads.cost.step import StepPrice, after_training_price, local_step_trace, simulate_complete
from workloads.capture import capture
from workloads.numerics import NumberFormat


@dataclass(frozen=True)
class Device:
    """One client's device: an accelerator and a speed factor (``workloads.cost.system``)."""

    hw: HardwareConfig
    speed: float

    def runs(self, modeled_s: float, energy_j: float) -> tuple[float, float]:
        """(seconds, joules) on this device of work priced at ``modeled_s``, ``energy_j``
        (``workloads.cost.system.on_device``)."""
        return on_device(modeled_s, energy_j, static_w=self.hw.energy.static_w, speed=self.speed)


def client_devices(system: SystemModel, hw: HardwareConfig, num_clients: int, *, seed: int,
                   number_format: str = "fp32", master_weights: bool = True) -> tuple[Device, ...]:
    """Every client's device: the system model's hardware list (round-robin) or ``hw``, and its
    speed factor drawn with the run's seed. Loads (and so checks) every hardware file once. Each
    device computes in the run's ``number_format`` (``accel_sim.mac_energy.hardware_in_format``:
    the format's word size and MAC energy; ``fp32`` leaves the hardware as given; ``master_weights``:
    whether the weights keep an FP32 master copy)."""
    loaded = {path: load_hardware_config(path) for path in dict.fromkeys(system.client_hw)}
    speeds = system.speed_factors(num_clients, seed=seed)
    return tuple(Device(hardware_in_format(hw if system.hw_path(k) is None else loaded[system.hw_path(k)],
                                           number_format, master_weights=master_weights), speeds[k])
                 for k in range(num_clients))


def epoch_batch_sizes(n: int, batch_size: int) -> list[int]:
    """The mini-batch sizes of one local epoch over ``n`` samples, as the loop runs them."""
    return [min(batch_size, n - s) for s in batch_starts(n, batch_size)]


@dataclass(frozen=True)
class PricedModel:
    """What the priced work looks like: the run's model factory (``model_fn(head)``, the method's ``workloads.models.Head``, unprepared),
    its input shape and classes, and the seed the loop builds models with."""

    model_fn: Callable[[Head], nn.Module]
    model_name: str  # the name ``workloads.models.build_model`` knows (calibration pricing)
    input_shape: tuple[int, ...]  # (C, H, W)
    num_classes: int
    seed: int


def _local_step_key(method: MethodConfig, hp: Hparams, round: int) -> tuple:
    """What decides the program of a local step in round ``round``: the algorithm's
    ``step_identity`` (every member of its class that can change the step, derived from the class,
    so no hook is left out by hand), what it receives that round (``extra_downloads``), its modifier (SphereFed),
    and the hyper-parameters (the learning rate and batch size aside: the first changes no op, the
    second is priced separately). Methods with equal keys (FedAvg, FedNova; a method and its
    calibrated variant) share captures; a step may depend on the round only through what it receives."""
    return (step_identity(method.algo), method.algo.extra_downloads(round), method.modifier,
            hp.replace(lr=1.0, batch_size=1))


class RunPricer:
    """Prices of one run's distinct pieces of work, each captured once and shared by all the
    methods of the run (a cache of prices, not of results)."""

    def __init__(self, spec: PricedModel) -> None:
        self.spec = spec
        self._models: dict[tuple, nn.Module] = {}
        self._traces: dict[tuple, object] = {}
        self._steps: dict[tuple, StepPrice] = {}
        self._aggregations: dict[tuple, float] = {}

    def prepared(self, method: MethodConfig) -> nn.Module:
        """The method's prepared model on ``meta`` (shapes and frozen parts only)."""
        key = (type(method.algo).prepare_model, method.modifier)
        if key not in self._models:
            torch.manual_seed(self.spec.seed)
            self._models[key] = prepare_model(self.spec.model_fn(method.head), method.training,
                                              seed=self.spec.seed).to("meta")
        return self._models[key]

    def step(self, method: MethodConfig, hp: Hparams, batch_size: int, round: int,
             hw: HardwareConfig, width: float = 1.0) -> StepPrice:
        """One local step of round ``round`` at ``batch_size`` on ``hw`` (with what the method
        receives that round and the state its client keeps): captured once per step program,
        batch size and submodel ``width`` (``workloads.fl.width.submodel``), priced once per
        accelerator (so a fleet's device classes share one capture)."""
        program = (_local_step_key(method, hp, round), batch_size, width)
        key = (*program, hw)
        if key not in self._steps:
            if program not in self._traces:
                self._traces[program] = local_step_trace(
                    lambda: self.spec.model_fn(method.head), method.training, hp, batch_size=batch_size,
                    input_shape=self.spec.input_shape, round=round, seed=self.spec.seed,
                    model_name=self.spec.model_name, width=width)
            report = simulate_complete(self._traces[program], hw, f"{method.name} local step at batch {batch_size}"
                                       + (f", width {width:g}" if width < 1 else ""))
            self._steps[key] = StepPrice.of(report)
        return self._steps[key]

    def peak_memory_bytes(self, method: MethodConfig, hp: Hparams, n: int, round: int,
                          hw: HardwareConfig, width: float = 1.0) -> int:
        """The most memory one client's local training over ``n`` samples in round ``round`` holds
        at once: the peak of its largest mini-batch's step on ``hw`` (its word size), the method's
        received tensors and client state included, or of its ``after_training`` hook if higher;
        a client of largest submodel ``width``: the peak over the widths it trains (``width_mix``)."""
        widths = [w for w, _ in method.algo.width_mix(width, hp.with_knobs(method.knobs))]
        return max(self.after_training(method, hp, round, hw).peak_memory_bytes,
                   *(self.step(method, hp, b, round, hw, w).peak_memory_bytes
                     for b in set(epoch_batch_sizes(n, hp.batch_size)) for w in widths))

    def local_training(self, method: MethodConfig, hp: Hparams, n: int, round: int,
                       device: Device, width: float = 1.0) -> tuple[float, float]:
        """(compute seconds, energy in joules) of one client's local epochs over ``n`` samples in
        round ``round``, and its method's ``after_training`` hook (``after_training``); a client of
        largest submodel ``width`` trains each width of its method's ``width_mix`` with its
        probability (HeteroFL: its own; FjORD: each allowed level alike), so its steps are priced as
        that mix: the expected local training."""
        sizes = Counter(epoch_batch_sizes(n, hp.batch_size))
        mix = method.algo.width_mix(width, hp.with_knobs(method.knobs))
        prices = {(b, w): self.step(method, hp, b, round, device.hw, w) for b in sizes for w, _ in mix}
        after = self.after_training(method, hp, round, device.hw)
        modeled_s = hp.local_epochs * sum(count * share * prices[b, w].latency_s for b, count in sizes.items()
                                          for w, share in mix) + after.latency_s
        energy_j = hp.local_epochs * sum(count * share * prices[b, w].energy_j for b, count in sizes.items()
                                         for w, share in mix) + after.energy_j
        return device.runs(modeled_s, energy_j)

    def after_training(self, method: MethodConfig, hp: Hparams, round: int, hw: HardwareConfig) -> StepPrice:
        """The method's ``after_training`` hook (``workloads.cost.step.after_training_price``) on
        ``hw``, on the prepared model, captured once per hook and step program."""
        key = (type(method.algo).after_training, _local_step_key(method, hp, round), hw)
        if key not in self._steps:
            self._steps[key] = after_training_price(method, hp, round, self.prepared(method), hw)
        return self._steps[key]

    def calibration(self, method: MethodConfig, hp: Hparams, class_counts: Sequence[int],
                    device: Device) -> tuple[float, float]:
        """(compute seconds, energy in joules) of one client's calibration statistics over its own
        samples (``class_counts[c]`` of class c) on its device (``calibration_cost.client_cost``)."""
        cost = calibration_cost.client_cost(method.calibration, self.spec.model_name, class_counts=class_counts,
                                            num_classes=self.spec.num_classes, image_size=self.spec.input_shape[-1],
                                            hp=hp, hw=device.hw)
        return device.runs(cost.total_cycles / device.hw.clock_hz, cost.energy_j)

    def calibration_peak_memory_bytes(self, method: MethodConfig, hp: Hparams, class_counts: Sequence[int],
                                      hw: HardwareConfig) -> int:
        """The most memory one client's calibration statistics hold at once on ``hw`` (its word
        size): ``calibration_cost.client_peak_memory_bytes``, at its largest batch."""
        return calibration_cost.client_peak_memory_bytes(
            method.calibration, self.spec.model_name, class_counts=class_counts, num_classes=self.spec.num_classes,
            image_size=self.spec.input_shape[-1], hp=hp, hw=hw)

    def calibration_server_s(self, method: MethodConfig, hp: Hparams, num_clients: int, hw: HardwareConfig) -> float:
        """Server seconds of the calibration over ``num_clients`` clients' statistics on ``hw``
        (``calibration_cost.server_seconds``)."""
        return calibration_cost.server_seconds(method.calibration,
                                               feature_dim=self.spec.model_fn(method.head).feature_dim,
                                               num_classes=self.spec.num_classes, num_clients=num_clients, hp=hp,
                                               hw=hw)

    def aggregation_s(self, method: MethodConfig, hp: Hparams, round: int, num_updates: int,
                      hw: HardwareConfig) -> float:
        """Server seconds of the method's ``aggregate`` over ``num_updates`` updates of the keys it
        shares in round ``round``, in steady state (a first, uncaptured aggregation creates any
        server momentum)."""
        model = self.prepared(method)
        shared = tuple(method.algo.shared_keys(model, round, hp))
        key = (type(method.algo).aggregate, method.algo.extra_uploads(round), shared, num_updates, hp.replace(lr=1.0), hw)
        if key not in self._aggregations:
            hp = hp.with_knobs(method.knobs)  # the method's knobs: their defaults where ``hp`` lacks them
            weights = {k: v.detach() for k, v in model.state_dict().items()}
            params = set(trainable_keys(model))
            keys = [k for k in shared if k in params]
            uploads = {group: {k: torch.empty_like(weights[k]) for k in keys} for group in method.algo.extra_uploads(round)}
            updates = [ClientUpdate(i, {k: torch.empty_like(weights[k]) for k in shared}, 1, 1, uploads)
                       for i in range(num_updates)]
            server = method.algo.aggregate(ServerState(weights=weights), updates, hp, keys)
            captured = capture(method.algo.aggregate, server, updates, hp, keys, default_phase="aggregation")
            self._aggregations[key] = simulate_complete(captured.trace, hw, f"{method.name} aggregation").latency_s
        return self._aggregations[key]


    def moving_average_s(self, method: MethodConfig, hp: Hparams, round: int, hw: HardwareConfig) -> float:
        """Server seconds of the moving average of the aggregates (``--server-average``,
        ``workloads.fl.aggregate.moving_average``) over the trainable keys the method shares in
        round ``round``, captured once per key set on the prepared model on ``meta``."""
        model = self.prepared(method)
        params = set(trainable_keys(model))
        keys = tuple(k for k in method.algo.shared_keys(model, round, hp) if k in params)
        key = (moving_average, keys, hw)
        if key not in self._aggregations:
            weights = {k: v.detach() for k, v in model.state_dict().items()}
            aggregated = {k: torch.empty_like(weights[k]) for k in weights}
            captured = capture(moving_average, weights, aggregated, keys, decay=0.5, default_phase="aggregation")
            self._aggregations[key] = simulate_complete(captured.trace, hw, f"{method.name} moving average").latency_s
        return self._aggregations[key]


def _bytes_by_round_client(result: RunResult) -> dict[tuple[int, int], dict[str, int]]:
    out: dict[tuple[int, int], dict[str, int]] = defaultdict(lambda: {"down": 0, "up": 0})
    for t in result.transfers:
        out[(t.round, t.client)][t.direction] += t.nbytes
    return out


def fleet_devices(fleet: Fleet, classes: Sequence[int], *, number_format: str = "fp32",
                  master_weights: bool = True) -> tuple[Device, ...]:
    """Every client's device in a fleet: its class's accelerator in its class's number format, else
    the run's (``DeviceClass.format_in``, ``client_devices``), at speed 1 (the class's accelerator is
    the device)."""
    in_format = [hardware_in_format(c.hw, c.format_in(number_format), master_weights=master_weights)
                 for c in fleet.classes]
    return tuple(Device(in_format[c], 1.0) for c in classes)


def fleet_system(fleet: Fleet, classes: Sequence[int]) -> SystemModel:
    """The system model of a fleet: client k's link is its class's (lists over the clients)."""
    links = [fleet.classes[c].link for c in classes]
    return SystemModel(downlink_bytes_per_s=tuple(l.downlink_bytes_per_s for l in links),
                       uplink_bytes_per_s=tuple(l.uplink_bytes_per_s for l in links),
                       latency_s=tuple(l.latency_s for l in links))


def class_counts_of(labels: np.ndarray, num_classes: int) -> list[int]:
    """A client's samples per class, from its training labels."""
    return np.bincount(np.asarray(labels), minlength=num_classes).tolist()


def plan_run(fleet: Fleet, classes: Sequence[int], method: MethodConfig, hp: Hparams, *, pricer: RunPricer,
             client_labels: Sequence[np.ndarray], devices: Sequence[Device], system: SystemModel, rounds: int,
             participation: float, seed: int, comm_format: NumberFormat | None = None,
             number_format: str = "fp32", master_weights: bool = True) -> ParticipationPlan:
    """The participation plan of one method's run on ``fleet`` (``workloads.cost.fleet``), from
    deterministic prices only, before the run: per round, the sampled clients (over-committed),
    each one's download, local training on its own device (this method's captured step at its
    batch sizes, ``RunPricer``), upload and peak memory, and so who arrives.

    A calibrated method (CCVR, FFC) has a calibration round R + 1 under the same rule
    (``calibration_plan``). ``classes[k]``: client k's class (``assign_classes``);
    ``client_labels[k]``: its training labels; ``devices``, ``system``: from ``fleet_devices`` and
    ``fleet_system``; ``comm_format``: the run's communication format (the bytes each transfer
    carries, ``workloads.fl.comm.client_round_bytes``); ``number_format``: the run's, the devices'
    (for each class's peak memory at the full batch).

    A width-scaled method (HeteroFL, FjORD) prices each client at its submodel width
    (``client_widths``: its class's, or chosen by ``workloads.cost.widths``): its steps, peak memory
    and bytes are the submodel's; the plan records each client's width (``ParticipationPlan.widths``)
    and each class's peak at its widest client's width."""
    client_sizes = [len(y) for y in client_labels]
    num_clients = len(client_sizes)
    target = clients_per_round(num_clients, participation)
    count = sampled_count(target, fleet.overcommit, num_clients)
    sizes = closed_form_sizes(pricer.prepared(method), method, comm_format)
    sized = _SizedWork(pricer, method, hp, comm_format)
    work: dict[tuple, tuple[float, float, bool]] = {}

    def training(k: int, round: int, width: float) -> tuple[float, float, bool]:
        device, memory = devices[k], fleet.classes[classes[k]].memory_bytes
        key = (client_sizes[k], method.algo.extra_downloads(round), device, memory, width)
        if key not in work:
            compute_s, energy_j = pricer.local_training(method, hp, client_sizes[k], round, device, width)
            fits = pricer.peak_memory_bytes(method, hp, client_sizes[k], round, device.hw, width) <= memory
            work[key] = (compute_s, energy_j, fits)
        return work[key]

    widths = client_widths(fleet, classes, method, hp, lambda k, w: _works(training(k, 1, w), sized.transfer(1, w),
                                                                           system.link(k), fleet.deadline_s))
    plans = []
    for t in range(1, rounds + 1):
        plans.append(_planned_round(fleet, classes, t, draw_clients(num_clients, count, seed=seed, round=t),
                                    lambda k, t=t: training(k, t, widths[k]),
                                    lambda k, t=t: sized.transfer(t, widths[k]), target=target, system=system,
                                    seed=seed))
    mix = functools.partial(method.algo.width_mix, hp=hp.with_knobs(method.knobs))
    peaks = tuple(max(pricer.step(method, hp, hp.batch_size, 1,
                                  hardware_in_format(c.hw, c.format_in(number_format), master_weights=master_weights),
                                  w).peak_memory_bytes
                      for w, _ in mix(max((w for w, k in zip(widths, classes) if k == i), default=1.0)))
                  for i, c in enumerate(fleet.classes))
    calibration = None
    if method.calib is not None:
        calibration = calibration_plan(fleet, classes, method, hp, pricer=pricer, client_labels=client_labels,
                                       devices=devices, system=system, round=rounds + 1, seed=seed, sizes=sizes)
    return ParticipationPlan(tuple(plans), peaks, calibration, widths if method.algo.sized_to_device else ())


class _SizedWork:
    """A method's per-client bytes at each submodel width (``closed_form_sizes`` of
    ``workloads.fl.width.submodel``), built once per width."""

    def __init__(self, pricer: RunPricer, method: MethodConfig, hp: Hparams, comm_format: NumberFormat | None) -> None:
        self.pricer, self.method, self.hp, self.comm_format = pricer, method, hp, comm_format
        self._sizes: dict[float, ModelSizes] = {}

    def sizes(self, width: float) -> ModelSizes:
        if width not in self._sizes:
            prepared = self.pricer.prepared(self.method)
            self._sizes[width] = closed_form_sizes(prepared if width >= 1.0 else submodel(prepared, width),
                                                   self.method, self.comm_format)
        return self._sizes[width]

    def transfer(self, round: int, width: float) -> tuple[int, int]:
        """(down, up) bytes of a client of ``width`` in round ``round`` (``client_round_bytes``)."""
        return client_round_bytes(self.method, self.hp, round, self.sizes(width))


def _works(training: tuple[float, float, bool], transfer: tuple[int, int], link, deadline_s: float) -> bool:
    """Whether a client's work (compute seconds, energy, whether it fits) and its (down, up) bytes
    on ``link`` fit its device and end by ``deadline_s`` (``ClientOffer.finish_s``)."""
    compute_s, _, fits = training
    return fits and link.download_s(transfer[0]) + compute_s + link.upload_s(transfer[1]) <= deadline_s


def client_widths(fleet: Fleet, classes: Sequence[int], method: MethodConfig, hp: Hparams,
                  works) -> tuple[float, ...]:
    """Client k's submodel width (``workloads.cost.widths.chosen_width``): its class's, or with
    ``"auto"`` the widest of the method's ``rates`` for which ``works(k, width)``; 1 for every
    client of a method that is not width-scaled."""
    if not method.algo.sized_to_device:
        return tuple(1.0 for _ in classes)
    rates = method.algo.rates(hp.with_knobs(method.knobs))
    return tuple(chosen_width(fleet.classes[c].width, rates, functools.partial(works, k))
                 for k, c in enumerate(classes))


def calibration_plan(fleet: Fleet, classes: Sequence[int], method: MethodConfig, hp: Hparams, *, pricer: RunPricer,
                     client_labels: Sequence[np.ndarray], devices: Sequence[Device], system: SystemModel, round: int,
                     seed: int, sizes: ModelSizes) -> RoundPlan:
    """The calibration round R + 1 on ``fleet``, under the training rounds' rule (``plan_round``).

    Every client is asked, as both calibrations gather statistics from all K clients (CCVR: Luo
    et al., "No Fear of Heterogeneity: Classifier Calibration for Federated Learning with Non-IID
    Data", NeurIPS 2021, Sec. 4; FFC: Dong et al., "SphereFed: Hyperspherical Federated Learning",
    ECCV 2022, Sec. 4.3), and all K are wanted, so there is no over-commitment and no surplus. A
    client offline in round R + 1 never answers; one whose device cannot hold its statistics' peak
    memory (``RunPricer.calibration_peak_memory_bytes``) declines; every other downloads the final
    feature extractor, computes its statistics on its own class's accelerator
    (``RunPricer.calibration``) and uploads them (the bytes the calibration's ``statistics``
    declare: ``workloads.fl.comm.calibration_client_bytes``), and misses the fleet's deadline if
    that takes longer. ``sizes``: the prepared model's ``closed_form_sizes`` in the run's
    communication format."""
    down_up = calibration_client_bytes(method, hp, sizes)

    def statistics(k: int) -> tuple[float, float, bool]:
        counts = class_counts_of(client_labels[k], sizes.num_classes)
        compute_s, energy_j = pricer.calibration(method, hp, counts, devices[k])
        peak = pricer.calibration_peak_memory_bytes(method, hp, counts, devices[k].hw)
        return compute_s, energy_j, peak <= fleet.classes[classes[k]].memory_bytes

    everyone = range(len(client_labels))
    return _planned_round(fleet, classes, round, everyone, statistics, lambda k: down_up, target=len(everyone),
                          system=system, seed=seed)


def _planned_round(fleet: Fleet, classes: Sequence[int], round: int, asked: Sequence[int],
                   work: Callable[[int], tuple[float, float, bool]], transfer: Callable[[int], tuple[int, int]], *,
                   target: int, system: SystemModel, seed: int) -> RoundPlan:
    """Round ``round`` over the ``asked`` clients (``plan_round``): each one's availability that
    round, ``work(k)`` (its compute seconds and energy on its device, and whether the device holds
    the work's peak memory), its link's download and upload of ``transfer(k)`` = (down, up) bytes."""
    is_online = online(fleet, classes, round, seed=seed)
    offers = []
    for k in asked:
        compute_s, energy_j, fits = work(k)
        down, up = transfer(k)
        link = system.link(k)
        offers.append(ClientOffer(k, bool(is_online[k]), fits, link.download_s(down), compute_s, link.upload_s(up),
                                  energy_j, down, up))
    return plan_round(round, offers, target=target, deadline_s=fleet.deadline_s)


def devices_by_round(execution: Execution, rounds: int, devices_in: Callable[[str], Sequence[Device]],
                     fleet: Fleet | None = None) -> tuple[tuple[Device, ...], ...]:
    """With a precision schedule, per round (``Execution.round_formats``: rounds 1..R and the
    calibration round) the clients' devices computing in that round's format, ``devices_in(format)``
    built once per format; () without one. A schedule on a ``fleet`` is refused (not priced yet)."""
    if not execution.precision_schedule:
        return ()
    if fleet is not None:
        raise ValueError(f"--precision-schedule {execution.precision_schedule} with --fleet: a fleet's rounds are "
                         "not priced per round's format yet; drop one")
    formats = execution.round_formats(rounds)
    built = {f: tuple(devices_in(f)) for f in dict.fromkeys(formats)}
    return tuple(built[f] for f in formats)


def price_run(result: RunResult, method: MethodConfig, hp: Hparams, *, pricer: RunPricer,
              client_labels: Sequence[np.ndarray], hw: HardwareConfig, system: SystemModel,
              devices: Sequence[Device], plan: ParticipationPlan | None = None,
              by_round: Sequence[Sequence[Device]] = (), server_average: float = 0.0) -> list[dict]:
    """``rounds.csv`` rows (``workloads.cost.system.ROUNDS_COLUMNS``) of one method's run.

    ``pricer``: the run's (shared by its methods); ``client_labels[k]``: client k's training labels;
    ``devices[k]``: its device (``client_devices``); ``hw``: the server's accelerator. ``plan``: the
    participation plan the run trained with (``plan_run``): each round is its ``RoundPlan``'s cost
    (the dropped clients' work included) and the server aggregates its arrivals, the calibration
    round's too (the server calibrates over its arrivals' statistics); None: the synchronous round
    over the clients the loop sampled, and the calibration over every client. ``by_round``: a
    precision schedule's devices, round t's at index t - 1 (``devices_by_round``; the calibration
    round's last), instead of ``devices`` in every round. ``server_average``: the decay of the
    server's moving average (``--server-average``; 0: none), whose work the server adds from round 2
    on (``RunPricer.moving_average_s``)."""

    def server_s(t: int, updates: int) -> float:
        averaged = pricer.moving_average_s(method, hp, t, hw) if server_average and t > 1 else 0.0
        return pricer.aggregation_s(method, hp, t, updates, hw) + averaged

    moved = _bytes_by_round_client(result)
    sizes = [len(y) for y in client_labels]
    rounds: list[tuple[int, str, int, float | None, RoundCost]] = []
    for entry in result.history:
        t, clients = entry["round"], entry["clients"]
        if plan is not None:
            planned = plan.rounds[t - 1]
            if list(planned.arrived) != list(clients):
                raise ValueError(f"round {t}: the loop trained clients {clients}, the plan's arrivals are "
                                 f"{list(planned.arrived)}")
            rounds.append((t, "train", len(clients), entry["accuracy"],
                           planned.cost(server_s(t, len(clients)) if clients else 0.0)))
            continue
        work = []
        on = by_round[t - 1] if by_round else devices
        for k in clients:
            compute_s, energy_j = pricer.local_training(method, hp, sizes[k], t, on[k])
            b = moved[(t, k)]
            work.append(ClientRound(k, compute_s, energy_j, b["down"], b["up"], system.link(k)))
        rounds.append((t, "train", len(clients), entry["accuracy"],
                       round_cost(work, server_s=server_s(t, len(clients)))))
    if method.calib is not None:
        if plan is None:
            rounds.append(_calibration_round(result, method, hp, pricer=pricer, client_labels=client_labels, hw=hw,
                                             system=system, devices=by_round[len(result.history)] if by_round
                                             else devices, moved=moved))
        else:
            rounds.append(_planned_calibration_round(result, method, hp, pricer=pricer, hw=hw, planned=plan.calibration,
                                                     moved=moved))
    return ledger_rows(method.name, rounds)


def _calibration_round(result: RunResult, method: MethodConfig, hp: Hparams, *, pricer: RunPricer, client_labels,
                       hw: HardwareConfig, system: SystemModel, devices: Sequence[Device], moved
                       ) -> tuple[int, str, int, float | None, RoundCost]:
    """Round R + 1: every client extracts features and sends statistics; the server calibrates."""
    t = len(result.history) + 1
    work = []
    for k, labels in enumerate(client_labels):
        compute_s, energy_j = pricer.calibration(method, hp, class_counts_of(labels, pricer.spec.num_classes),
                                                 devices[k])
        b = moved[(t, k)]
        work.append(ClientRound(k, compute_s, energy_j, b["down"], b["up"], system.link(k)))
    server_s = pricer.calibration_server_s(method, hp, len(client_labels), hw)
    return t, "calibration", len(client_labels), result.accuracy, round_cost(work, server_s=server_s)


def _planned_calibration_round(result: RunResult, method: MethodConfig, hp: Hparams, *, pricer: RunPricer,
                               hw: HardwareConfig, planned: RoundPlan, moved
                               ) -> tuple[int, str, int, float | None, RoundCost]:
    """Round R + 1 on a fleet: the plan's calibration round (``calibration_plan``; its dropped
    clients' work included); the server calibrates over the arrivals' statistics, or does nothing
    where none arrived (the model is left uncalibrated)."""
    t = len(result.history) + 1
    calibrated = sorted(k for (r, k), b in moved.items() if r == t and b["up"])
    if calibrated != list(planned.arrived):
        raise ValueError(f"calibration round {t}: the loop calibrated with clients {calibrated}, the plan's "
                         f"arrivals are {list(planned.arrived)}")
    server_s = pricer.calibration_server_s(method, hp, len(calibrated), hw) if calibrated else 0.0
    return t, "calibration", len(calibrated), result.accuracy, planned.cost(server_s)

"""FedBuff's run on a fleet, planned before it trains: the server steps of its virtual clock
(``workloads.cost.buffered``) as a ``ParticipationPlan`` the loop trains by (each step's updates
its arrivals, their staleness beside them) and the ledger prices (each step a ``RoundPlan``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from accel_sim.mac_energy import hardware_in_format
from workloads.cost.buffered import BufferRule, ServerStep, buffered_steps
from workloads.cost.fleet import Fleet
from workloads.cost.participation import ParticipationPlan, RoundPlan, online, sampled_count
from workloads.cost.rounds import Device, RunPricer
from workloads.cost.system import SystemModel
from workloads.fl.comm import client_round_bytes, closed_form_sizes
from workloads.fl.hparams import Hparams
from workloads.fl.loop import clients_per_round
from workloads.fl.methods import MethodConfig
from workloads.numerics import NumberFormat


@dataclass(frozen=True)
class FleetRun:
    """What a fleet run's plan is drawn from: the fleet, each client's class, device, link and
    labels, and the run's rounds, participation, seed and formats."""

    fleet: Fleet
    classes: tuple[int, ...]
    devices: tuple[Device, ...]
    system: SystemModel
    client_labels: tuple[np.ndarray, ...]
    rounds: int
    participation: float
    seed: int
    comm_format: NumberFormat | None = None
    number_format: str = "fp32"
    master_weights: bool = True


def buffer_rule(run: FleetRun, hp: Hparams) -> BufferRule:
    """FedBuff's buffer size K (``fedbuff_buffer``; 0: half the run's clients per round m, rounded
    up, so that a step does not wait for the slower half) and concurrency (``fedbuff_concurrency``;
    0: the clients a synchronous round of the fleet samples, ``ceil(overcommit x m)``), so that the
    two servers keep as many devices busy. Our choices, for federations of 5 to 20 clients (the
    paper's experiments run far more clients at once than a buffer holds)."""
    m = clients_per_round(len(run.client_labels), run.participation)
    buffer = int(hp.fedbuff_buffer) or -(-m // 2)
    concurrency = int(hp.fedbuff_concurrency) or sampled_count(m, run.fleet.overcommit, len(run.client_labels))
    return BufferRule(concurrency, buffer)


def plan_buffered(run: FleetRun, method: MethodConfig, hp: Hparams, pricer: RunPricer) -> ParticipationPlan:
    """FedBuff's ``ParticipationPlan`` on ``run``'s fleet: each client's time to download, train
    (its class's accelerator, the method's captured step) and upload, the fleet's availability per
    server step and memory, FedBuff's server rule; round t is server step t (its updates in client
    order, their staleness in ``staleness``). A step's ``collect_s`` runs from the previous step's
    last arrival to its own; its device time, energy and bytes are its updates'."""
    hp_k = hp.with_knobs(method.knobs)
    rule = buffer_rule(run, hp_k)
    sizes = closed_form_sizes(pricer.prepared(method), method, run.comm_format)
    down, up = client_round_bytes(method, hp_k, 1, sizes)
    work = {}
    for k, labels in enumerate(run.client_labels):
        compute_s, energy_j = pricer.local_training(method, hp, len(labels), 1, run.devices[k])
        fits = pricer.peak_memory_bytes(method, hp, len(labels), 1, run.devices[k].hw) \
            <= run.fleet.classes[run.classes[k]].memory_bytes
        link = run.system.link(k)
        work[k] = (compute_s, energy_j, fits, link.download_s(down) + compute_s + link.upload_s(up))

    @functools.cache
    def online_in(step: int) -> tuple[bool, ...]:
        return tuple(bool(v) for v in online(run.fleet, run.classes, step, seed=run.seed))

    steps = buffered_steps(rule, [work[k][3] for k in range(len(work))],
                           lambda k, step: work[k][2] and online_in(step)[k], steps=run.rounds, seed=run.seed)
    plans, previous = [], 0.0
    for step in steps:
        last = max(step.updates, key=lambda u: (u.arrive_s, u.client))
        plans.append(_round_of(step, last.arrive_s - previous, work, down, up, last.client))
        previous = last.arrive_s
    plans += [RoundPlan(t, (), (), {}, 0.0, 0.0, 0.0, 0, 0, None) for t in range(len(plans) + 1, run.rounds + 1)]
    staleness = tuple(tuple(u.staleness for u in step.updates) for step in steps) + ((),) * (run.rounds - len(steps))
    return ParticipationPlan(tuple(plans), class_peaks(run, method, hp, pricer), None, (), staleness)


def _round_of(step: ServerStep, collect_s: float, work: dict, down: int, up: int, slowest: int) -> RoundPlan:
    clients = tuple(u.client for u in step.updates)
    return RoundPlan(step.step, clients, clients, {}, collect_s, sum(work[k][0] for k in clients),
                     sum(work[k][1] for k in clients), down * len(clients), up * len(clients), slowest)


def class_peaks(run: FleetRun, method: MethodConfig, hp: Hparams, pricer: RunPricer) -> tuple[int, ...]:
    """Per device class, the method's peak training memory at the run's batch size on its
    accelerator in its format (``ParticipationPlan.class_peak_memory_bytes``)."""
    return tuple(pricer.step(method, hp, hp.batch_size, 1,
                             hardware_in_format(c.hw, c.format_in(run.number_format), master_weights=run.master_weights)
                             ).peak_memory_bytes for c in run.fleet.classes)

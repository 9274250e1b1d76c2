"""Who of a fleet's clients takes part in a round, when the round closes and what it cost; torch-free
and pure (a fleet: ``workloads.cost.fleet``).

The round (Bonawitz et al., "Towards Federated Learning at Scale: System Design", MLSys 2019,
Sec. 2-3: the server selects more devices than it needs, about 130 %, and a round that has not
heard from enough of them by its reporting deadline is closed or abandoned; FedScale's deadline and
over-commitment, Lai et al., "FedScale", ICML 2022; Oort, Lai et al., OSDI 2021): the server wants
``m`` updates (the preset's participation); it samples ``min(K, ceil(overcommit x m))`` clients;
a sampled client that is offline this round never answers (``unavailable``); one whose device
cannot hold the method's training state (the peak memory of its captured step) declines the task
(``memory``); every other client downloads, trains and uploads (``client_round_s``, the synchronous
model's time). The round closes at the ``m``-th arrival if it comes by the deadline (later ones are
``surplus``), else at the deadline if some client is still working (``deadline``), else at the last
arrival. Only the arrivals are aggregated: ``RoundPlan.arrived`` is what the federated loop trains
(``workloads.fl.setup.RunPlan(arrivals=...)``).

A calibrated method's calibration round R + 1 (CCVR, FFC) follows the same rule
(``workloads.cost.rounds.calibration_plan``): every client is asked and wanted (both papers gather
every client's statistics: no over-commitment, no surplus); offline at R + 1, unable to hold its
statistics' peak memory, or finishing (extractor down, statistics, statistics up) past the deadline,
it is dropped, and the loop calibrates with the arrivals' statistics only (none: uncalibrated).

What a dropped client costs: ``unavailable`` and ``memory``: nothing (it never took the task).
``surplus`` and ``deadline``: its download (the server sent it) and its device's work until the
round closed (compute time cut at the close, energy in proportion: an assumption, the device's
power taken as constant over its local training); its upload never counts.

With no deadline, unlimited memory, every device always available and no over-commitment, every
sampled client arrives and the round is ``workloads.cost.system.round_cost`` exactly (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from workloads.cost.system import DROP_REASONS, RoundCost

if TYPE_CHECKING:
    from workloads.cost.fleet import Fleet


ONLINE_STREAM = 0x0A1E  # per-round availability draws: (seed, ONLINE_STREAM, round); phases: (seed, ONLINE_STREAM)


def online(fleet: Fleet, classes: Sequence[int], round: int, *, seed: int) -> np.ndarray:
    """Which clients are online in ``round`` (1-based), as a boolean array over all clients: a
    probability class draws ``u < p`` from ``default_rng([seed, ONLINE_STREAM, round])`` (one draw
    per client every round, whatever its class, so a class's change moves no other client's draw);
    a day/night class is online when ``(round - 1 + phase_k) mod period < online_rounds``, the phase
    drawn once per client from ``default_rng([seed, ONLINE_STREAM])``."""
    k = len(classes)
    avail = [c.availability for c in fleet.classes]
    cls = np.asarray(classes, dtype=np.int64)
    probability = np.array([a.probability for a in avail])[cls]
    result = np.ones(k, dtype=bool)
    if (probability < 1.0).any():
        result &= np.random.default_rng([seed, ONLINE_STREAM, round]).random(k) < probability
    period = np.array([a.period_rounds for a in avail])[cls]
    if period.any():
        phase = np.random.default_rng([seed, ONLINE_STREAM]).integers(0, np.iinfo(np.int64).max, k)
        on = np.array([a.online_rounds for a in avail])[cls]
        patterned = period > 0
        result[patterned] &= ((round - 1 + phase[patterned] % period[patterned]) % period[patterned]
                              < on[patterned])
    return result


def sampled_count(target: int, overcommit: float, num_clients: int) -> int:
    """Clients sampled for ``target`` updates: ``min(K, ceil(overcommit x target))`` (the product
    rounded to 12 digits first, so that 1.1 x 10 samples 11, not 12)."""
    return min(num_clients, math.ceil(round(overcommit * target, 12)))


@dataclass(frozen=True)
class ClientOffer:
    """A sampled client's round, as priced before the round runs."""

    client: int
    available: bool
    fits: bool  # its device memory holds the method's peak training memory
    download_s: float
    compute_s: float
    upload_s: float
    energy_j: float
    down_bytes: int
    up_bytes: int

    @property
    def finish_s(self) -> float:
        """Download, compute, upload, one after another (``workloads.cost.system.client_round_s``)."""
        return self.download_s + self.compute_s + self.upload_s


@dataclass(frozen=True)
class RoundPlan:
    """Who of a round's sampled clients arrived, who was dropped and why, and what it cost."""

    round: int
    sampled: tuple[int, ...]
    arrived: tuple[int, ...]  # in client order
    dropped: Mapping[int, str]  # client -> a DROP_REASONS entry
    collect_s: float  # from the round's start until the server stops waiting
    device_s: float
    energy_j: float
    down_bytes: int
    up_bytes: int
    slowest_client: int | None  # the last arrival the server waited for

    def dropped_counts(self) -> dict[str, int]:
        reasons = list(self.dropped.values())
        return {r: reasons.count(r) for r in DROP_REASONS}

    def cost(self, server_s: float) -> RoundCost:
        """The round's ``RoundCost``: the collection, then the server's ``server_s``."""
        return RoundCost(round_wall_s=self.collect_s + server_s, server_s=server_s, device_s=self.device_s,
                         energy_j=self.energy_j, down_bytes=self.down_bytes, up_bytes=self.up_bytes,
                         slowest_client=self.slowest_client, sampled=len(self.sampled),
                         dropped=self.dropped_counts(), collect_s=self.collect_s)


def plan_round(round: int, offers: Sequence[ClientOffer], *, target: int, deadline_s: float) -> RoundPlan:
    """The round of the module docstring over the sampled clients' ``offers``."""
    dropped: dict[int, str] = {}
    working = []
    for o in offers:
        if not o.available:
            dropped[o.client] = "unavailable"
        elif not o.fits:
            dropped[o.client] = "memory"
        else:
            working.append(o)
    working.sort(key=lambda o: (o.finish_s, o.client))
    in_time = [o for o in working if o.finish_s <= deadline_s]
    if len(in_time) >= target:
        arrived, late_reason = in_time[:target], "surplus"
        collect_s = arrived[-1].finish_s
    else:
        arrived, late_reason = in_time, "deadline"
        late = len(in_time) < len(working)
        collect_s = deadline_s if late else (in_time[-1].finish_s if in_time else 0.0)
    arrived_set = {o.client for o in arrived}
    device, energy, down = [], [], 0
    for o in working:
        down += o.down_bytes
        if o.client in arrived_set:
            device.append(o.compute_s)
            energy.append(o.energy_j)
            continue
        dropped[o.client] = late_reason
        spent = min(max(collect_s - o.download_s, 0.0), o.compute_s)
        device.append(spent)
        energy.append(o.energy_j * spent / o.compute_s if o.compute_s else 0.0)
    return RoundPlan(round, tuple(o.client for o in offers), tuple(sorted(arrived_set)),
                     dict(sorted(dropped.items())), collect_s, math.fsum(device), math.fsum(energy), down,
                     sum(o.up_bytes for o in arrived), arrived[-1].client if arrived else None)


@dataclass(frozen=True)
class ParticipationPlan:
    """One method's run on a fleet, planned before it trains: every training round's ``RoundPlan``,
    a calibrated method's calibration round R + 1 (``calibration``: every client asked, the same
    rule), and per device class the method's peak training memory at the run's batch size on that
    class's accelerator (which classes can run the method at all)."""

    rounds: tuple[RoundPlan, ...]
    class_peak_memory_bytes: tuple[int, ...]
    calibration: RoundPlan | None = None
    widths: tuple[float, ...] = ()  # a width-scaled method's: client k's submodel width (workloads.cost.widths)
    staleness: tuple[tuple[int, ...], ...] = ()  # FedBuff's: per round, each arrival's staleness (workloads.cost.buffered)

    @property
    def arrivals(self) -> tuple[tuple[int, ...], ...]:
        """What the federated loop trains: per round, the clients that arrive; a calibrated method's
        last entry the clients whose statistics arrive (``RunPlan(arrivals=...)``)."""
        planned = self.rounds if self.calibration is None else (*self.rounds, self.calibration)
        return tuple(r.arrived for r in planned)

    def closed_form_counts(self) -> dict:
        """The clients that exchanged with the server, as ``workloads.fl.comm.closed_form_bytes``
        takes them: the arrivals per training round, and the calibration's (None: no calibration)."""
        return {"clients_per_round": [len(r.arrived) for r in self.rounds],
                "calibration_clients": None if self.calibration is None else len(self.calibration.arrived)}

    def summary(self, fleet: Fleet) -> dict:
        """Totals over the run's training rounds, as ``results.json`` records them; the calibration
        round apart (``calibration``: its clients asked, arrived and dropped by reason), so that a
        calibrated method's training figures read as its base method's."""
        dropped = {reason: sum(r.dropped_counts()[reason] for r in self.rounds) for reason in DROP_REASONS}
        calibration = self.calibration
        return {"sampled": sum(len(r.sampled) for r in self.rounds),
                "arrived": sum(len(r.arrived) for r in self.rounds), "dropped": dropped,
                "arrived_per_round": [len(r.arrived) for r in self.rounds],
                "classes": {c.name: {"peak_memory_bytes": peak, "memory_bytes": "inf" if math.isinf(c.memory_bytes)
                                     else c.memory_bytes, "fits": peak <= c.memory_bytes}
                            for c, peak in zip(fleet.classes, self.class_peak_memory_bytes)},
                **({"client_widths": list(self.widths)} if self.widths else {}),
                **({"max_staleness": max((s for r in self.staleness for s in r), default=0),
                    "mean_staleness": float(np.mean([s for r in self.staleness for s in r] or [0]))}
                   if self.staleness else {}),
                **({} if calibration is None else
                   {"calibration": {"sampled": len(calibration.sampled), "arrived": len(calibration.arrived),
                                    "dropped": calibration.dropped_counts()}})}


def _dropped_text(dropped: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in dropped.items() if n) or "none dropped"


def summary_line(summary: Mapping[str, Any]) -> str:
    """One line of a participation plan's totals (``ParticipationPlan.summary``); a calibration
    round no statistics arrived in says that the model is left uncalibrated."""
    cannot = [name for name, c in summary["classes"].items() if not c["fits"]]
    line = (f"fleet: {summary['arrived']} of {summary['sampled']} sampled updates arrived "
            f"({_dropped_text(summary['dropped'])})"
            + (f"; memory too small to train in class(es) {', '.join(cannot)}" if cannot else ""))
    calibration = summary.get("calibration")
    if calibration is None:
        return line
    return (line + f"; calibration: {calibration['arrived']} of {calibration['sampled']} clients' statistics "
            f"arrived ({_dropped_text(calibration['dropped'])})"
            + (", so the model is left uncalibrated" if not calibration["arrived"] else ""))

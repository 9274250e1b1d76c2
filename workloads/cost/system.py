"""The round model: what one synchronous federated round costs in wall time, device time, energy
and bytes, from per-client facts. Torch-free and pure: numbers in, numbers out.

A synchronous FedAvg-style round (McMahan et al., "Communication-Efficient Learning of Deep
Networks from Decentralized Data", AISTATS 2017, Alg. 1): the server sends the global state to the
sampled clients, each trains locally and sends its update back, and the server aggregates once the
last update has arrived. So the round lasts as long as its slowest client, plus the server's work:

    client_s(k)  = link_k.latency_s + down_k / link_k.downlink_bytes_per_s        (download)
                 + compute_s(k)                                                   (training + calibration)
                 + link_k.latency_s + up_k / link_k.uplink_bytes_per_s            (upload)
    round_wall_s = max_k client_s(k) + server_s
    device_s     = sum_k compute_s(k)          (accelerator-seconds spent by the clients)
    energy_j     = sum_k energy_j(k)           (the clients' devices; the server's is not included)

FedScale (Lai et al., "FedScale: Benchmarking Model and Algorithm Performance of Federated
Learning at Scale", ICML 2022) made time-to-accuracy the headline of FL systems benchmarks with
the same structure (download, compute, upload per client; the round waits for the slowest
participant). Here ``compute_s`` and ``energy_j`` come from the accelerator model's price of the
client's real training steps (``docs/rounds.md``).

A client's device may run slower or faster than the modeled accelerator by a *speed factor*
``s_k`` (``SystemModel.speed``): its compute time is the modeled latency divided by ``s_k``; its
dynamic energy (MACs, buffer and DRAM accesses, special unit) is that of the same work, and its
static energy grows with the time it is powered (``device_energy_j``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from iokit import checks
from iokit.toml import read_toml

DEFAULT_SYSTEM_PATH = Path(__file__).resolve().parents[2] / "configs" / "system" / "default.toml"
"""The default system model: the clients' links and devices (docs/rounds.md)."""
SPEED_DISTRIBUTIONS = ("none", "lognormal", "uniform")

# Allowed ranges (inclusive; our choice): any real link or device by orders of magnitude, and
# round times that stay finite (a bandwidth of 1e-300 B/s would make every round "inf s").
LINK_BANDWIDTH_BOUNDS = (1.0, 1e15)
"""Bytes per second of a link (``inf`` also allowed: no transfer time)."""
LINK_LATENCY_BOUNDS = (0.0, 1e6)
"""Seconds per transfer."""
SPEED_BOUNDS = {"speed_sigma": (0.0, 5.0), "speed_low": (1e-3, 1e3), "speed_high": (1e-3, 1e3)}
"""The speed distributions' parameters (``speed_sigma``: of ``log s_k``; a factor ``s_k``
within ``exp(+-5 sigma)`` stays finite)."""


class SystemModelError(ValueError):
    """A system-model TOML with an unknown key or an impossible value; the message names it."""


@dataclass(frozen=True)
class Link:
    """One client's network link. Bandwidths may be ``inf`` (no transfer time)."""

    downlink_bytes_per_s: float
    uplink_bytes_per_s: float
    latency_s: float

    def __post_init__(self) -> None:
        for name in ("downlink_bytes_per_s", "uplink_bytes_per_s"):
            value = getattr(self, name)
            if value != math.inf or isinstance(value, bool):  # inf: no transfer time
                try:
                    checks.number_in(value, *LINK_BANDWIDTH_BOUNDS, name=f"link {name}", error=SystemModelError)
                except SystemModelError as e:
                    raise SystemModelError(f"{e} or inf") from None
        checks.number_in(self.latency_s, *LINK_LATENCY_BOUNDS, name="link latency_s", error=SystemModelError)

    def download_s(self, nbytes: int) -> float:
        """``latency + bytes / downlink bandwidth`` (0 for nothing to send)."""
        return self.latency_s + nbytes / self.downlink_bytes_per_s if nbytes else 0.0

    def upload_s(self, nbytes: int) -> float:
        """``latency + bytes / uplink bandwidth`` (0 for nothing to send)."""
        return self.latency_s + nbytes / self.uplink_bytes_per_s if nbytes else 0.0


INFINITE_LINK = Link(math.inf, math.inf, 0.0)


@dataclass(frozen=True)
class ClientRound:
    """What one sampled client did in one round."""

    client: int
    compute_s: float  # local training (+ client-side calibration) on its device
    energy_j: float  # its device's energy for that work
    down_bytes: int
    up_bytes: int
    link: Link


def client_round_s(c: ClientRound) -> float:
    """Download, compute, upload, one after another (module docstring)."""
    return c.link.download_s(c.down_bytes) + c.compute_s + c.link.upload_s(c.up_bytes)


@dataclass(frozen=True)
class RoundCost:
    round_wall_s: float
    server_s: float
    device_s: float
    energy_j: float
    down_bytes: int
    up_bytes: int
    slowest_client: int | None  # None: no client took part (a server-only step)
    sampled: int  # clients sampled; more than took part where a fleet dropped some (workloads.cost.fleet)
    collect_s: float  # from the round's start until the server stops waiting for clients
    dropped: Mapping[str, int] = field(default_factory=dict)  # clients dropped, by reason (fleet.DROP_REASONS)

    @property
    def bytes(self) -> int:
        return self.down_bytes + self.up_bytes


def round_cost(clients: Sequence[ClientRound], *, server_s: float = 0.0) -> RoundCost:
    """The synchronous round of the module docstring."""
    times = [client_round_s(c) for c in clients]
    slowest = max(range(len(clients)), key=times.__getitem__) if clients else None
    return RoundCost(
        round_wall_s=(times[slowest] if clients else 0.0) + server_s,
        server_s=server_s,
        device_s=math.fsum(c.compute_s for c in clients),
        energy_j=math.fsum(c.energy_j for c in clients),
        down_bytes=sum(c.down_bytes for c in clients),
        up_bytes=sum(c.up_bytes for c in clients),
        slowest_client=None if slowest is None else clients[slowest].client,
        sampled=len(clients),
        collect_s=times[slowest] if clients else 0.0,
    )


def device_energy_j(dynamic_energy_j: float, static_w: float, compute_s: float) -> float:
    """Energy of work whose dynamic part is ``dynamic_energy_j`` on a device powered for
    ``compute_s`` seconds at ``static_w`` watts of static power."""
    return dynamic_energy_j + static_w * compute_s


def on_device(modeled_s: float, energy_j: float, *, static_w: float, speed: float) -> tuple[float, float]:
    """(seconds, joules) on a device with speed factor ``speed`` of work the accelerator model
    prices at ``modeled_s`` and ``energy_j`` (whose static part is ``static_w`` x ``modeled_s``):
    the time divided by the speed factor, the dynamic energy unchanged, the static energy for the
    device's own time."""
    compute_s = modeled_s / speed
    return compute_s, device_energy_j(energy_j - static_w * modeled_s, static_w, compute_s)


# ---- the ledger: one row per method and round ------------------------------------------------------

DROP_REASONS = ("unavailable", "memory", "deadline", "surplus")
"""Why a sampled client's update is not aggregated (``workloads.cost.fleet``), in column order."""
DROPPED_COLUMNS = tuple(f"dropped_{reason}" for reason in DROP_REASONS)
"""The sampled clients not aggregated in a round, one column per reason (``rounds.csv``, a study's
participation, the fleet figure)."""
CUMULATIVE_COLUMNS = ("cum_wall_s", "cum_device_s", "cum_energy_j", "cum_bytes")
"""The modeled cost of a run up to and including a round: wall time, device time, energy, bytes
(``rounds.csv``, a study's ``curve.csv``, ``results.json``'s ``modeled``, time-to-accuracy)."""
ROUNDS_COLUMNS = (
    "method", "round", "stage", "clients", "accuracy",
    "round_wall_s", "server_s", "round_device_s", "round_energy_j", "round_bytes",
    *CUMULATIVE_COLUMNS,
    "sampled", *DROPPED_COLUMNS, "collect_s",
)
"""Columns of ``rounds.csv`` (docs/results.md). ``stage`` is ``train`` for rounds 1..R and
``calibration`` for the one-shot calibration after round R (round R + 1); ``accuracy`` is the
global model's test accuracy in [0, 1] after that round, empty where it was not evaluated;
``clients`` took part (were aggregated) of ``sampled``, the others dropped by reason
(``dropped_<reason>``); ``collect_s``: the round's wall time to its last awaited arrival or its
deadline, before the server's ``server_s``."""


def ledger_rows(method: str, rounds: Iterable[tuple[int, str, int, float | None, RoundCost]]) -> list[dict]:
    """Rows of ``rounds.csv`` for one method from ``(round, stage, clients, accuracy, cost)`` in
    round order, with running totals."""
    rows, wall, device, energy, nbytes = [], 0.0, 0.0, 0.0, 0
    for round_, stage, clients, accuracy, cost in rounds:
        wall += cost.round_wall_s
        device += cost.device_s
        energy += cost.energy_j
        nbytes += cost.bytes
        rows.append({"method": method, "round": round_, "stage": stage, "clients": clients, "accuracy": accuracy,
                     "round_wall_s": cost.round_wall_s, "server_s": cost.server_s,
                     "round_device_s": cost.device_s, "round_energy_j": cost.energy_j, "round_bytes": cost.bytes,
                     "cum_wall_s": wall, "cum_device_s": device, "cum_energy_j": energy, "cum_bytes": nbytes,
                     "sampled": cost.sampled,
                     **{column: cost.dropped.get(r, 0) for r, column in zip(DROP_REASONS, DROPPED_COLUMNS)},
                     "collect_s": cost.collect_s})
    return rows


# ---- time-to-accuracy --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TimeToAccuracy:
    """What a method needed to first reach the target accuracy (None fields: not reached)."""

    method: str
    target: float
    reached: bool
    round: int | None
    wall_s: float | None
    device_s: float | None
    energy_j: float | None
    bytes: int | None


def time_to_accuracy(rows: Sequence[Mapping[str, Any]], target: float) -> dict[str, TimeToAccuracy]:
    """Per method, the first round whose accuracy is at or above ``target``, with the cumulative
    wall time, device time, energy and bytes up to and including that round."""
    out: dict[str, TimeToAccuracy] = {}
    for row in rows:
        method = row["method"]
        if method in out and out[method].reached:
            continue
        if row["accuracy"] is not None and row["accuracy"] >= target:
            out[method] = TimeToAccuracy(method, target, True, row["round"], row["cum_wall_s"],
                                         row["cum_device_s"], row["cum_energy_j"], row["cum_bytes"])
        else:
            out.setdefault(method, TimeToAccuracy(method, target, False, None, None, None, None, None))
    return out


# ---- the system model: links and devices ----------------------------------------------------------

@dataclass(frozen=True)
class SystemModel:
    """Clients' links and devices (TOML: ``configs/system/*.toml``; docs/rounds.md).

    Link values are scalars (every client alike) or lists cycled over the clients (client k gets
    entry ``k % len``). The defaults are an assumption, not a measurement: a mobile broadband link
    of 20 Mbit/s down, 5 Mbit/s up and 50 ms latency per transfer.
    """

    downlink_bytes_per_s: float | tuple[float, ...] = 2.5e6
    uplink_bytes_per_s: float | tuple[float, ...] = 0.625e6
    latency_s: float | tuple[float, ...] = 0.05
    speed: str = "none"
    """Per-client speed factor ``s_k`` (compute time = modeled latency / s_k), drawn once per run
    with the run's seed: ``none`` (all 1), ``lognormal`` (``exp(N(0, speed_sigma))``, median 1) or
    ``uniform`` (``U(speed_low, speed_high)``)."""
    speed_sigma: float = 0.5
    speed_low: float = 0.5
    speed_high: float = 1.5
    client_hw: tuple[str, ...] = ()
    """Hardware TOMLs assigned to clients round-robin (client k gets ``client_hw[k % len]``);
    empty: every client has the run's ``--hw``."""

    def __post_init__(self) -> None:
        for name in ("downlink_bytes_per_s", "uplink_bytes_per_s", "latency_s"):
            values = getattr(self, name)
            if isinstance(values, tuple) and not values:
                raise SystemModelError(f"system field '{name}' is an empty list")
        for k in range(self._link_count()):
            self.link(k)  # validates every link
        if self.speed not in SPEED_DISTRIBUTIONS:
            raise SystemModelError(f"system field 'speed' is {self.speed!r}; expected one of "
                                   f"{', '.join(SPEED_DISTRIBUTIONS)}")
        for name, (low, high) in SPEED_BOUNDS.items():
            checks.number_in(getattr(self, name), low, high, name=f"system field '{name}'", error=SystemModelError)
        if self.speed_low > self.speed_high:
            raise SystemModelError(f"system field 'speed_low' ({self.speed_low}) exceeds 'speed_high' "
                                   f"({self.speed_high})")
        if not isinstance(self.client_hw, tuple) or not all(isinstance(p, str) and p for p in self.client_hw):
            raise SystemModelError(f"system field 'client_hw' must be a list of hardware TOML paths, "
                                   f"got {self.client_hw!r} (write client_hw = [{self.client_hw!r}] for one file)"
                                   if isinstance(self.client_hw, str) else
                                   f"system field 'client_hw' must be a list of hardware TOML paths, "
                                   f"got {self.client_hw!r}")

    def describe(self) -> dict:
        """The fields as results files record them: JSON has no infinity, so an infinite bandwidth
        is the string ``"inf"``, as the TOML spells it."""
        def finite(value):
            if isinstance(value, tuple):
                return [finite(v) for v in value]
            return "inf" if isinstance(value, float) and math.isinf(value) else value

        return {name: finite(value) for name, value in asdict(self).items()}

    def _link_count(self) -> int:
        lengths = [len(v) for v in (self.downlink_bytes_per_s, self.uplink_bytes_per_s, self.latency_s)
                   if isinstance(v, tuple)]
        return max(lengths, default=1)

    def link(self, client: int) -> Link:
        def pick(values):
            return values[client % len(values)] if isinstance(values, tuple) else values

        try:
            return Link(pick(self.downlink_bytes_per_s), pick(self.uplink_bytes_per_s), pick(self.latency_s))
        except SystemModelError as e:
            raise SystemModelError(f"client {client}: {e}") from None

    def speed_factors(self, num_clients: int, *, seed: int) -> tuple[float, ...]:
        """``s_k`` for clients 0..K-1, drawn from ``numpy.random.default_rng([seed, 0x5EED])``."""
        if self.speed == "none":
            return (1.0,) * num_clients
        rng = np.random.default_rng([seed, 0x5EED])
        if self.speed == "lognormal":
            draws = np.exp(rng.normal(0.0, self.speed_sigma, num_clients))
        else:
            draws = rng.uniform(self.speed_low, self.speed_high, num_clients)
        return tuple(float(s) for s in draws)

    def hw_path(self, client: int) -> str | None:
        return self.client_hw[client % len(self.client_hw)] if self.client_hw else None


def system_model_from_dict(data: Mapping[str, Any], source: str = "<system>") -> SystemModel:
    """A ``SystemModel`` from a TOML-shaped dict with tables ``[links]`` and ``[devices]``."""
    tables = {"links": ("downlink_bytes_per_s", "uplink_bytes_per_s", "latency_s"),
              "devices": ("speed", "speed_sigma", "speed_low", "speed_high", "client_hw")}
    unknown = sorted(set(data) - set(tables))
    if unknown:
        raise SystemModelError(f"{source}: unknown table(s) {unknown}; expected [links] and [devices]")
    values: dict[str, Any] = {}
    for table, keys in tables.items():
        section = data.get(table, {})
        if not isinstance(section, Mapping):
            raise SystemModelError(f"{source}: '{table}' must be a table")
        bad = sorted(set(section) - set(keys))
        if bad:
            raise SystemModelError(f"{source}: unknown key(s) {', '.join(f'{table}.{b}' for b in bad)}; "
                                   f"known: {', '.join(keys)}")
        for key, value in section.items():
            values[key] = tuple(value) if isinstance(value, list) else value
    try:
        return SystemModel(**values)
    except SystemModelError as e:
        raise SystemModelError(f"{source}: {e}") from None


def load_system_model(path: str | Path) -> SystemModel:
    """Read a system-model TOML; errors name the file and the key."""
    return system_model_from_dict(read_toml(path, SystemModelError, "system-model"), source=str(path))

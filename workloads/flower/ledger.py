"""Server side, without Flower: per-client accelerator metrics -> a round's cost -> ``rounds.csv``.

Each sampled client's train reply carries the metrics of ``client_metrics`` (put there by the
accelerator mod, ``workloads.flower.mod``). A round is the synchronous round of
``workloads.cost.system`` (the FedScale structure: Lai et al., "FedScale: Benchmarking Model and
Algorithm Performance of Federated Learning at Scale", ICML 2022): each client downloads, trains
and uploads over its link from the system model (``configs/system/*.toml``); its compute time is
its modeled training latency divided by its speed factor; the round lasts as long as its slowest
client plus the server's time; device-seconds, energy and bytes add up over the clients.
``round_metrics`` flattens that ``RoundCost`` (and each client's share, as lists) into plain
numbers a Flower ``MetricRecord`` can carry; ``ledger_rows_of`` reads them back into the rows of
``rounds.csv`` (``workloads.cost.system.ROUNDS_COLUMNS``, the columns our own loop writes) and
``client_rows_of`` into ``clients.csv`` (``CLIENT_COLUMNS``).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from workloads.cost.system import (ROUNDS_COLUMNS, ClientRound, RoundCost, SystemModel, client_round_s, ledger_rows,
                              on_device, round_cost)
from iokit.files import atomic_write_text
from workloads.flower.meter import TrainCost

CLIENT_KEYS = ("accel_client", "accel_steps", "accel_train_s", "accel_step_s", "accel_energy_j", "accel_static_w",
               "accel_peak_memory_bytes", "accel_down_bytes", "accel_up_bytes")
"""Metrics one client adds to its train reply (units in the names)."""

METERED_COLUMNS = ("client", "steps", "step_s", "train_s", "compute_s", "client_round_s", "energy_j",
                   "peak_memory_bytes", "down_bytes", "up_bytes")
"""What the mod metered of one client's round. ``train_s``: modeled local training at the
accelerator's speed; ``compute_s``: that divided by the client's speed factor; ``client_round_s``:
download + compute + upload over its link; ``energy_j``: at its speed."""

CLIENT_COLUMNS = ("method", "round", *METERED_COLUMNS, "device_class", "dropped")
"""Columns of ``clients.csv``: one row per sampled client and round. On a fleet
(``workloads.flower.fleet``), ``device_class`` is the client's class and ``dropped`` why a sampled
client was not trained (a ``DROP_REASONS`` entry; its metered columns empty); without one both are
empty."""

ROUND_KEYS = ("accel_clients", "accel_round_wall_s", "accel_server_s", "accel_round_device_s", "accel_round_energy_j",
              "accel_round_down_bytes", "accel_round_up_bytes", "accel_slowest_client", "accel_round_collect_s",
              *(f"accel_clients_{c}" for c in METERED_COLUMNS))
"""Metrics of one round, in the strategy's aggregated train ``MetricRecord``: the round's cost and,
as lists in reply order, each client's ``clients.csv`` values (``accel_clients_<column>``)."""


@dataclass(frozen=True)
class CalibrationRound:
    """A calibrated method's round R + 1 as the server ran it (``workloads.flower.app.calibrate_method``):
    ``metrics``, the round's ``ROUND_KEYS`` (``round_metrics`` over the clients' calibrate replies,
    ``server_s`` the server's calibration), and ``accuracy``, the global model's after it."""

    round: int
    metrics: Mapping[str, Any]
    accuracy: float

    def clients(self) -> tuple[int, ...]:
        """The clients whose statistics the server calibrated with."""
        return tuple(sorted(int(k) for k in self.metrics["accel_clients_client"]))


def client_metrics(client: int, cost: TrainCost, *, down_bytes: int, up_bytes: int) -> dict[str, int | float]:
    """The ``CLIENT_KEYS`` of one client's train reply."""
    return {"accel_client": client, "accel_steps": cost.steps, "accel_train_s": cost.train_s,
            "accel_step_s": cost.step_s, "accel_energy_j": cost.energy_j, "accel_static_w": cost.static_w,
            "accel_peak_memory_bytes": cost.peak_memory_bytes, "accel_down_bytes": down_bytes, "accel_up_bytes": up_bytes}


def client_round(metrics: Mapping[str, float], system: SystemModel, speed: float) -> ClientRound:
    """One client's ``ClientRound``: compute time = modeled latency / speed factor; its static
    energy scales with that time, its dynamic energy does not (``workloads.cost.system.on_device``)."""
    compute_s, energy_j = on_device(float(metrics["accel_train_s"]), float(metrics["accel_energy_j"]),
                                    static_w=float(metrics["accel_static_w"]), speed=speed)
    client = int(metrics["accel_client"])
    return ClientRound(client, compute_s, energy_j, int(metrics["accel_down_bytes"]), int(metrics["accel_up_bytes"]),
                       system.link(client))


def round_metrics(clients: Sequence[Mapping[str, float]], system: SystemModel, speeds: Sequence[float], *,
                  server_s: float = 0.0) -> dict[str, int | float]:
    """The ``ROUND_KEYS`` of one round from its clients' ``CLIENT_KEYS`` metrics; client k has
    speed factor ``speeds[k]`` (``SystemModel.speed_factors``)."""
    outside = sorted({int(m["accel_client"]) for m in clients} - set(range(len(speeds))))
    if outside:
        raise ValueError(f"client(s) {outside} outside the {len(speeds)} clients the speed factors were drawn for "
                         f"(num_clients)")
    work = [client_round(m, system, speeds[int(m["accel_client"])]) for m in clients]
    cost = round_cost(work, server_s=server_s)
    per_client = {
        "client": [w.client for w in work], "steps": [int(m["accel_steps"]) for m in clients],
        "step_s": [float(m["accel_step_s"]) for m in clients], "train_s": [float(m["accel_train_s"]) for m in clients],
        "compute_s": [w.compute_s for w in work], "client_round_s": [client_round_s(w) for w in work],
        "energy_j": [w.energy_j for w in work], "peak_memory_bytes": [int(m["accel_peak_memory_bytes"]) for m in clients],
        "down_bytes": [w.down_bytes for w in work], "up_bytes": [w.up_bytes for w in work]}
    return {"accel_clients": len(clients), "accel_round_wall_s": cost.round_wall_s, "accel_server_s": cost.server_s,
            "accel_round_device_s": cost.device_s, "accel_round_energy_j": cost.energy_j,
            "accel_round_down_bytes": cost.down_bytes, "accel_round_up_bytes": cost.up_bytes,
            "accel_slowest_client": -1 if cost.slowest_client is None else cost.slowest_client,
            "accel_round_collect_s": cost.collect_s,
            **{f"accel_clients_{c}": v for c, v in per_client.items()}}


def round_cost_of(metrics: Mapping[str, float]) -> RoundCost:
    """The ``RoundCost`` that ``round_metrics`` flattened."""
    slowest = int(metrics["accel_slowest_client"])
    return RoundCost(round_wall_s=float(metrics["accel_round_wall_s"]), server_s=float(metrics["accel_server_s"]),
                     device_s=float(metrics["accel_round_device_s"]), energy_j=float(metrics["accel_round_energy_j"]),
                     down_bytes=int(metrics["accel_round_down_bytes"]), up_bytes=int(metrics["accel_round_up_bytes"]),
                     slowest_client=None if slowest < 0 else slowest, sampled=int(metrics["accel_clients"]),
                     collect_s=float(metrics["accel_round_collect_s"]))


def ledger_rows_of(method: str, train_metrics: Mapping[int, Mapping[str, float]], accuracy: Mapping[int, float],
                   calibration: CalibrationRound | None = None) -> list[dict]:
    """``rounds.csv`` rows of one method from each round's aggregated train metrics (round ->
    ``ROUND_KEYS``) and the accuracy after each evaluated round (round -> [0, 1]), then its
    ``calibration`` round (stage ``calibration``), if any."""
    rounds = [(r, "train", int(m["accel_clients"]), accuracy.get(r), round_cost_of(m))
              for r, m in sorted(train_metrics.items())]
    if calibration is not None:
        rounds.append((calibration.round, "calibration", int(calibration.metrics["accel_clients"]),
                       calibration.accuracy, round_cost_of(calibration.metrics)))
    return ledger_rows(method, rounds)


def client_rows_of(method: str, train_metrics: Mapping[int, Mapping[str, object]],
                   calibration: CalibrationRound | None = None) -> list[dict]:
    """``clients.csv`` rows of one method (``CLIENT_COLUMNS``), by round and client: the clients
    that trained (no device class, nothing dropped), and those that sent calibration statistics."""
    by_round = dict(train_metrics) if calibration is None else {**train_metrics, calibration.round: calibration.metrics}
    rows = []
    for r, m in sorted(by_round.items()):
        lists = {c: list(m[f"accel_clients_{c}"]) for c in METERED_COLUMNS}
        rows += sorted(({"method": method, "round": r, **{c: lists[c][i] for c in lists}, "device_class": "",
                         "dropped": ""} for i in range(len(lists["client"]))), key=lambda row: row["client"])
    return rows


def to_csv(rows: Sequence[Mapping], columns: Sequence[str]) -> str:
    """``rows`` as CSV with a ``columns`` header; None (an unevaluated accuracy) is empty."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_rounds_csv(path: str | Path, rows: Sequence[Mapping]) -> Path:
    """``rounds.csv``: ``ROUNDS_COLUMNS``, as our own loop writes it."""
    return atomic_write_text(path, to_csv(rows, ROUNDS_COLUMNS))


def write_clients_csv(path: str | Path, rows: Sequence[Mapping]) -> Path:
    """``clients.csv``: ``CLIENT_COLUMNS``."""
    return atomic_write_text(path, to_csv(rows, CLIENT_COLUMNS))

"""The accelerator's cost inside a Flower app: a client-side mod and a server-side metrics aggregation.

Flower (Beutel et al., "Flower: A Friendly Federated Learning Research Framework", arXiv
2007.14390) routes every message a ``ClientApp`` receives through its *mods*, functions
``(message, context, call_next) -> reply`` that wrap the app's train / evaluate functions; that is
the form Flower's Message API (``flwr.clientapp``, ``flwr.serverapp``; 1.41) gives cross-cutting
client behaviour (its own ``message_size_mod`` and ``LocalDpMod`` are mods). A user adds::

    from workloads.flower.meter import metered_step
    from workloads.flower.mod import AccelMod, accel_train_metrics

    app = ClientApp(mods=[AccelMod("configs/hw/paper_default.toml")])          # client
    step = metered_step(make_step, model)              # in the train function, instead of make_step(model)
    strategy = FedAvg(train_metrics_aggr_fn=accel_train_metrics(system, num_clients=K))   # server
    result = strategy.start(...)
    write_rounds_csv(out / "rounds.csv", flower_ledger_rows("fedavg", result))

``AccelMod`` activates a ``StepMeter`` around each train message, and adds to the reply's metrics
the client's modeled local-training latency, energy, peak memory, steps and bytes
(``workloads.flower.ledger.CLIENT_KEYS``); evaluate and query messages pass through untouched.
``accel_train_metrics`` is a ``train_metrics_aggr_fn`` for Flower's strategies: it aggregates the
app's own metrics as the strategy would (weighted average by default) and adds the round's cost
and each client's share (``ROUND_KEYS``); ``flower_ledger_rows`` turns the strategy's ``Result``
into ``rounds.csv`` rows, ``flower_client_rows`` into ``clients.csv`` rows.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from flwr.app import Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp.typing import ClientAppCallable
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords  # the strategies' default

from accel_sim.hardware import HardwareConfig, load_hardware_config
from workloads.cost.system import SystemModel
from workloads.flower.ledger import (CLIENT_KEYS, CalibrationRound, client_metrics, client_rows_of, ledger_rows_of,
                                    round_metrics)
from workloads.flower.meter import StepMeter, metering

MetricsAggregation = Callable[[list[RecordDict], str], MetricRecord]


def payload_bytes(content: RecordDict) -> int:
    """Bytes of the arrays a message carries: numel x itemsize of each array, as our own loop's
    ledger counts tensors (Flower's serialization header and the record keys are left out)."""
    return sum(int(np.prod(a.shape, dtype=np.int64)) * np.dtype(a.dtype).itemsize
               for record in content.array_records.values() for a in record.values())


@functools.cache
def _hardware(path: str) -> HardwareConfig:
    return load_hardware_config(path)


def client_index(context: Context) -> int:
    """The client's index in the system model: Flower simulation's ``partition-id``, else the
    node id (a deployed SuperNode sets ``partition-id`` in its ``--node-config``)."""
    return int(context.node_config.get("partition-id", context.node_id))


@dataclass(frozen=True)
class AccelMod:
    """Client-side Flower mod: prices the train function's metered steps on an accelerator.

    ``hw``: the accelerator's TOML (``configs/hw/*.toml``; None: ``HardwareConfig()``, the
    paper's). ``system``: where a system model assigns clients their own hardware
    (``client_hw``), client k is priced on ``system.hw_path(k)``. ``devices``: client k's
    accelerator is ``devices[k]`` (a fleet's, ``workloads.flower.fleet.FleetRun.devices``).
    """

    hw: str | Path | None = None
    system: SystemModel | None = None
    devices: tuple[HardwareConfig, ...] = ()

    def hardware(self, client: int) -> HardwareConfig:
        if self.devices:
            return self.devices[client]
        path = self.system.hw_path(client) if self.system is not None else None
        path = path or self.hw
        return _hardware(str(path)) if path is not None else HardwareConfig()

    def __call__(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type.split(".")[0] != MessageType.TRAIN:
            return call_next(msg, context)
        client = client_index(context)
        with metering(StepMeter(self.hardware(client))) as meter:
            reply = call_next(msg, context)
        if reply.has_error():
            return reply
        if not meter.counts and not meter.work:
            logging.getLogger("flwr").warning("AccelMod: the train function ran no metered step; build its training "
                                              "step with workloads.flower.meter.metered_step")
        metrics = client_metrics(client, meter.cost(), down_bytes=payload_bytes(msg.content),
                                 up_bytes=payload_bytes(reply.content))
        records = reply.content.metric_records
        target = next(iter(records.values())) if len(records) == 1 else reply.content.setdefault("accel", MetricRecord())
        target.update(metrics)
        return reply


def _without_accel(content: RecordDict) -> RecordDict:
    return RecordDict({**content.array_records, **content.config_records,
                       **{name: MetricRecord({k: v for k, v in rec.items() if k not in CLIENT_KEYS})
                          for name, rec in content.metric_records.items()}})


def _accel_metrics(content: RecordDict) -> dict:
    for rec in content.metric_records.values():
        if "accel_client" in rec:
            return {k: rec[k] for k in CLIENT_KEYS}
    raise ValueError("a train reply has no accelerator metrics: add AccelMod to the ClientApp's mods and build "
                     "the training step with metered_step")


def accel_train_metrics(system: SystemModel, *, num_clients: int, seed: int = 0, server_s: float = 0.0,
                        base: MetricsAggregation = aggregate_metricrecords) -> MetricsAggregation:
    """A ``train_metrics_aggr_fn`` for Flower strategies: ``base`` aggregates the app's own metrics
    (Flower's default: the weighted average), and the round's cost is added (``ROUND_KEYS``).

    ``num_clients``: the federation's size (speed factors are drawn for clients 0..K-1 with
    ``seed``, ``SystemModel.speed_factors``); ``server_s``: the server's time per round (0: the
    aggregation in Flower's strategy is not priced)."""

    def aggregate(replies: list[RecordDict], weighted_by_key: str) -> MetricRecord:
        out = base([_without_accel(c) for c in replies], weighted_by_key)
        out.update(accel_round_metrics(replies, system, num_clients=num_clients, seed=seed, server_s=server_s))
        return out

    return aggregate


def accel_round_metrics(replies: list[RecordDict], system: SystemModel, *, num_clients: int, seed: int = 0,
                        server_s: float = 0.0) -> dict[str, int | float]:
    """The ``ROUND_KEYS`` of one round from its replies' accelerator metrics (``AccelMod``'s): a
    training round's (``accel_train_metrics``) or a calibration round's."""
    speeds = system.speed_factors(num_clients, seed=seed)
    return round_metrics([_accel_metrics(c) for c in replies], system, speeds, server_s=server_s)


def round_accuracy(result: Result, accuracy_key: str = "accuracy") -> dict[int, float]:
    """Round -> accuracy from a strategy's ``Result``: the server-side (centralized) evaluation's
    ``accuracy_key`` where the strategy ran one, else the clients' aggregated evaluation."""
    accuracy = {}
    for source in (result.evaluate_metrics_clientapp, result.evaluate_metrics_serverapp):
        accuracy.update({r: float(m[accuracy_key]) for r, m in source.items() if accuracy_key in m})
    return accuracy


def flower_ledger_rows(method: str, result: Result, *, accuracy_key: str = "accuracy",
                       calibration: CalibrationRound | None = None) -> list[dict]:
    """``rounds.csv`` rows from a strategy's ``Result``, and a calibrated method's ``calibration``
    round after them. Accuracy per round: ``round_accuracy``, empty where neither evaluation ran."""
    return ledger_rows_of(method, result.train_metrics_clientapp, round_accuracy(result, accuracy_key), calibration)


def flower_client_rows(method: str, result: Result, calibration: CalibrationRound | None = None) -> list[dict]:
    """``clients.csv`` rows (``ledger.CLIENT_COLUMNS``) from a strategy's ``Result`` (and a
    ``calibration`` round): each sampled client's steps, modeled latency, energy, peak memory and
    bytes in each round."""
    return client_rows_of(method, result.train_metrics_clientapp, calibration)

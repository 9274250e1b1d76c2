"""A Flower run on a fleet (docs/fleets.md, docs/flower.md): each round trains and aggregates exactly
the clients the participation plan says arrive.

The plan is ``workloads.cost.rounds.plan_run``'s ``ParticipationPlan``, computed before the run from
deterministic prices as ``bench.fl`` computes it (the server samples ``ceil(overcommit x m)``
clients and closes the round at the ``m``-th arrival or at its reporting deadline: Bonawitz et al.,
"Towards Federated Learning at Scale: System Design", MLSys 2019, Sec. 2-3). Flower's strategies
sample their clients themselves in ``configure_train``; ``PlannedStrategy`` wraps the method's
strategy and keeps, of the train messages it would send, those to the round's arrivals, so the
wrapped strategy aggregates the arrivals' replies and nothing else. A round nobody arrives in sends
no message and aggregates nothing: the global model stays as it was, as in our loop.

Flower addresses nodes by node id, the plan clients by index (simulation's ``partition-id``); before
the first round the server asks every node its index in one query round (``client_nodes``; the
``ClientApp`` answers with ``client_index_reply``).

What a fleet run reports: ``rounds.csv`` rows whose cost is each round's plan
(``RoundPlan.cost``: its collection until the deadline or the ``m``-th arrival, the dropped clients'
downloads and cut work; ``server_s`` 0, as Flower's aggregation is not priced) with Flower's
accuracy, as ``bench.fl`` writes them; ``clients.csv`` rows of what the mod metered for each
arrival, on its class's accelerator and link, and a row per dropped client naming why
(``planned_client_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy
from flwr.serverapp.strategy.strategy_utils import sample_nodes

from accel_sim.hardware import HardwareConfig
from workloads.cost.fleet import Fleet
from workloads.cost.participation import ParticipationPlan
from workloads.cost.rounds import fleet_devices, fleet_system
from workloads.cost.system import SystemModel, ledger_rows
from workloads.fl.methods import parse_method
from workloads.flower.ledger import CalibrationRound, client_rows_of
from workloads.flower.mod import client_index, round_accuracy

CLIENT_INDEX_KEY = "client-index"  # the query reply's metric: the node's client index
QUERY_TIMEOUT_S = 3600.0  # as long as Flower's strategies wait for a round's replies by default


@dataclass(frozen=True)
class FleetRun:
    """A Flower run's fleet: the fleet (its round rule as the run uses it), client k's class
    (``assign_classes``) and each method's participation plan, by method name."""

    fleet: Fleet
    classes: tuple[int, ...]
    plans: Mapping[str, ParticipationPlan]

    def system(self) -> SystemModel:
        """Client k's link is its class's (``fleet_system``); every speed factor 1."""
        return fleet_system(self.fleet, self.classes)

    def devices(self) -> tuple[HardwareConfig, ...]:
        """Client k's accelerator: its class's (``fleet_devices``)."""
        return tuple(d.hw for d in fleet_devices(self.fleet, self.classes))

    def plan(self, method: str) -> ParticipationPlan:
        """The plan of ``method`` as the run names it (``plans`` are keyed by canonical names:
        ``ccvr`` is ``fedavg+ccvr``'s)."""
        return self.plans[parse_method(method).name]

    def class_name(self, client: int) -> str:
        return self.fleet.classes[self.classes[client]].name


class PlannedStrategy(Strategy):
    """A Flower strategy that trains, in round t, exactly ``arrivals[t - 1]`` (client indices; ``nodes``
    maps each to its node id) and otherwise is ``base``. ``base`` must address every node in its
    ``configure_train`` (``fraction_train = 1``); the arrivals are kept from its messages."""

    def __init__(self, base: Strategy, arrivals: Sequence[Sequence[int]], nodes: Mapping[int, int]) -> None:
        self.base = base
        self.arrivals = tuple(tuple(a) for a in arrivals)
        self.nodes = dict(nodes)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        wanted = {self.nodes[k] for k in self.arrivals[server_round - 1]}
        if not wanted:  # nobody arrives: no message, nothing to aggregate
            return []
        messages = [m for m in self.base.configure_train(server_round, arrays, config, grid)
                    if m.metadata.dst_node_id in wanted]
        missing = sorted(k for k in self.arrivals[server_round - 1]
                         if self.nodes[k] not in {m.metadata.dst_node_id for m in messages})
        if missing:
            raise ValueError(f"round {server_round}: the wrapped strategy sent no train message to client(s) "
                             f"{missing} of the participation plan's arrivals; give it fraction_train = 1")
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        return self.base.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return self.base.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]):
        return self.base.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.base.summary()


def client_index_reply(msg: Message, context: Context) -> Message:
    """A ``ClientApp``'s query function: the node's client index (``mod.client_index``)."""
    return Message(RecordDict({"metrics": MetricRecord({CLIENT_INDEX_KEY: client_index(context)})}), reply_to=msg)


def client_nodes(grid: Grid, num_clients: int) -> dict[int, int]:
    """Client index -> node id, from one query round to every node (waits until ``num_clients``
    nodes are connected); ``RuntimeError`` unless every index 0..K-1 answered once."""
    _, nodes = sample_nodes(grid, num_clients, num_clients)
    replies = list(grid.send_and_receive([Message(RecordDict(), message_type=MessageType.QUERY, dst_node_id=n)
                                          for n in nodes], timeout=QUERY_TIMEOUT_S))
    failed = [r.error.reason for r in replies if r.has_error()]
    indices = sorted(int(r.content["metrics"][CLIENT_INDEX_KEY]) for r in replies if not r.has_error())
    if failed or indices != list(range(num_clients)):
        raise RuntimeError(f"asked {len(nodes)} node(s) their client index: got {indices}"
                           + (f", errors {failed}" if failed else "") + f"; expected 0..{num_clients - 1} once each")
    return {int(r.content["metrics"][CLIENT_INDEX_KEY]): r.metadata.src_node_id for r in replies}


def trained_clients(result: Result) -> dict[int, tuple[int, ...]]:
    """Round -> the clients whose train replies the strategy aggregated (the mod's metrics)."""
    return {r: tuple(sorted(int(k) for k in m["accel_clients_client"]))
            for r, m in result.train_metrics_clientapp.items()}


def planned_ledger_rows(method: str, plan: ParticipationPlan, result: Result,
                        calibration: CalibrationRound | None = None) -> list[dict]:
    """``rounds.csv`` rows of a fleet run: each round's plan (``server_s`` 0), Flower's accuracy;
    a calibrated method's calibration round is its plan's (``ParticipationPlan.calibration``) with
    the server's calibration seconds and the accuracy after it. ``RuntimeError`` where Flower
    aggregated (or calibrated with) other clients than the plan's arrivals (a client failed)."""
    trained = trained_clients(result)
    planned = [(r, trained.get(r.round, ())) for r in plan.rounds]
    if calibration is not None:
        planned.append((plan.calibration, calibration.clients()))
    for r, got in planned:
        if got != r.arrived:
            raise RuntimeError(f"{method}, round {r.round}: Flower aggregated client(s) {list(got)}, the participation "
                               f"plan's arrivals are {list(r.arrived)} (a client failed)")
    accuracy = round_accuracy(result)
    rows = [(r.round, "train", len(r.arrived), accuracy.get(r.round), r.cost(server_s=0.0)) for r in plan.rounds]
    if calibration is not None:
        rows.append((calibration.round, "calibration", len(plan.calibration.arrived), calibration.accuracy,
                     plan.calibration.cost(server_s=float(calibration.metrics["accel_server_s"]))))
    return ledger_rows(method, rows)


def planned_client_rows(method: str, fleet: FleetRun, result: Result,
                        calibration: CalibrationRound | None = None) -> list[dict]:
    """``clients.csv`` rows of a fleet run, by round and client: each arrival's metered round with
    its class, and each dropped client's class and reason (nothing metered: it did not train); the
    calibration round's alike."""
    trained = [{**row, "device_class": fleet.class_name(row["client"])}
               for row in client_rows_of(method, result.train_metrics_clientapp, calibration)]
    plan = fleet.plan(method)
    rounds = (*plan.rounds, plan.calibration) if calibration is not None else plan.rounds
    dropped = [{"method": method, "round": r.round, "client": k, "device_class": fleet.class_name(k),
                "dropped": reason} for r in rounds for k, reason in r.dropped.items()]
    return sorted(trained + dropped, key=lambda row: (row["round"], row["client"]))

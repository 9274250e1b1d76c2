"""One Flower strategy for every method: the method's own server rule, what it sends beside the
model, and what its clients keep between rounds.

Flower's strategies each write one server rule (``FedAvg``, ``FedProx``, ``FedOpt``, ...). Our
methods already write theirs (``workloads.fl.methods.base``): ``aggregate`` and the server state
it keeps (``ServerState``: SCAFFOLD's c, FedDyn's h, FedOpt's momentum, FedCos's w_{t-1}), what
the server sends each client beside the model (``server_extras`` / ``extra_downloads``: SCAFFOLD's
c, FedCos's d_t), what a client sends back beside it (``after_training``'s ``extra_uploads``:
SCAFFOLD's Delta c_i) and what a client keeps (``initial_client_state`` / ``after_training``:
SCAFFOLD's c_i, FedDyn's gradient term, MOON's previous model; a double head's local head). So
``MethodStrategy`` is Flower's ``FedAvg`` (its sampling of nodes, its metrics aggregation, its
``start``) whose messages carry what the method sends, and whose ``aggregate_train`` is the
method's ``aggregate``, the same call our loop makes (``workloads.fl.loop``):

* the train message to client k in round t: ``arrays``, the method's ``shared_keys`` of round t
  from the server's weights as client k starts from them (``server_view``: FedBuff's stale
  versions on a fleet's clock); one ``ArrayRecord`` per ``extra_downloads(t)`` group, named
  ``extra_record(group)``; ``config``: the run's, with ``server-round``;
* the reply (``workloads.flower.app``'s client): ``arrays`` (the trained shared state),
  ``extra_record(group)`` per ``extra_uploads(t)`` group, the metrics ``num-examples``,
  ``train_loss`` and ``local-steps``; the client keeps its method state and local parts in its
  node's ``Context.state``, which Flower keeps per node across the rounds of a run;
* ``aggregate_train`` orders the replies by client index (under Ray they arrive in completion
  order; the loop aggregates in client order, and a float sum depends on its order), builds the
  ``ClientUpdate`` of each and calls the method's ``aggregate`` on the server state it keeps. It
  returns the whole global state (what ``evaluate_fn`` loads); the next round's messages are
  built from the kept server state, not from the ``arrays`` Flower passes back in.

Tensors travel as Flower's ``ArrayRecord`` (NumPy arrays of the tensors' dtype and bytes), which
round-trips float32 exactly: a method run here equals our loop's run of it bit for bit
(``tests/test_flower_methods.py``).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch
from torch import nn
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from workloads.fl.hparams import Hparams
from workloads.fl.methods import MethodConfig
from workloads.fl.methods.base import ClientUpdate, ServerState, trainable_keys

EXTRA = "extra."  # an ArrayRecord named EXTRA + group carries one extra_downloads / extra_uploads group
STEPS_KEY = "local-steps"  # the reply's metric: the client's local steps (FedNova's a_i, SCAFFOLD's c_i+)


def extra_record(group: str) -> str:
    """The name of the ``ArrayRecord`` that carries the extras group ``group`` in a message."""
    return EXTRA + group


def extras_of(content: RecordDict, groups: Sequence[str]) -> dict[str, dict[str, torch.Tensor]]:
    """The extras ``groups`` a message carries, by group, as tensors; ``ValueError`` naming a missing one."""
    missing = [g for g in groups if extra_record(g) not in content.array_records]
    if missing:
        raise ValueError(f"a message lacks the extras {missing} its method declares (records: "
                         f"{sorted(content.array_records)})")
    return {g: content.array_records[extra_record(g)].to_torch_state_dict() for g in groups}


class MethodStrategy(FedAvg):
    """Flower's ``FedAvg`` with ``method``'s server rule, extras and server state.

    ``model``: the method's prepared model (its shared keys and trainable parameters are asked of
    it; its state is the initial global state); ``hp``: the method's hyper-parameters, its knobs
    declared; ``nodes``: client index -> node id (``fleet.client_nodes``); ``staleness``: per
    round, client -> server steps since it started (FedBuff on a fleet's clock; () none). The other
    keyword arguments are ``FedAvg``'s (sampling, ``train_metrics_aggr_fn``)."""

    def __init__(self, method: MethodConfig, hp: Hparams, model: nn.Module, nodes: Mapping[int, int], *,
                 staleness: Sequence[Mapping[int, int]] = (), **fedavg) -> None:
        super().__init__(**fedavg)
        self.method, self.hp, self.model = method, hp, model
        self.client_of = {node: k for k, node in nodes.items()}
        self.staleness = tuple(staleness)
        self.trainable = set(trainable_keys(model))
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.server = ServerState(weights=weights, num_clients=len(nodes))

    def initial_arrays(self) -> ArrayRecord:
        return ArrayRecord(self.server.weights)

    def _stale(self, t: int, k: int) -> int:
        return self.staleness[t - 1].get(k, 0) if self.staleness else 0

    def _shared(self, t: int) -> tuple[list[str], list[str]]:
        """(the shared keys of round t, the trainable ones among them: ``aggregate``'s ``keys``)."""
        shared = self.method.algo.shared_keys(self.model, t, self.hp)
        return shared, [k for k in shared if k in self.trainable]

    def train_content(self, t: int, k: int, config: ConfigRecord) -> RecordDict:
        """Client k's train message in round t: the shared state it starts from, the method's
        extras, and ``config`` with ``server-round``."""
        algo = self.method.algo
        server = algo.server_view(self.server, t, self._stale(t, k))
        shared, keys = self._shared(t)
        extras = algo.server_extras(server, keys, t, self.hp)
        if sorted(extras) != sorted(algo.extra_downloads(t)):
            raise ValueError(f"method {self.method.name!r}: server_extras in round {t} gave groups {sorted(extras)}, "
                             f"but it declares {sorted(algo.extra_downloads(t))} (extra_downloads)")
        return RecordDict({self.arrayrecord_key: ArrayRecord({key: server.weights[key] for key in shared}),
                           **{extra_record(g): ArrayRecord(tensors) for g, tensors in sorted(extras.items())},
                           self.configrecord_key: ConfigRecord({**config, "server-round": t})})

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """``FedAvg``'s sampling; each sampled client's message as ``train_content`` builds it."""
        sampled = super().configure_train(server_round, arrays, config, grid)
        return [Message(self.train_content(server_round, self.client_of[m.metadata.dst_node_id], config),
                        message_type=MessageType.TRAIN, dst_node_id=m.metadata.dst_node_id) for m in sampled]

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The method's ``aggregate`` over the replies in client order; (the global state, the metrics)."""
        valid, _ = self._check_and_log_replies(replies, is_train=True, validate=False)
        if not valid:  # nobody replied: the global model stays as it was, as in the loop
            return None, None
        valid = sorted(valid, key=lambda m: self.client_of[m.metadata.src_node_id])
        _, keys = self._shared(server_round)
        groups = self.method.algo.extra_uploads(server_round)
        updates = []
        for msg in valid:
            k, metrics = self.client_of[msg.metadata.src_node_id], _metrics(msg.content)
            updates.append(ClientUpdate(k, msg.content[self.arrayrecord_key].to_torch_state_dict(),
                                        int(metrics[self.weighted_by_key]), int(metrics[STEPS_KEY]),
                                        extras_of(msg.content, groups), self._stale(server_round, k)))
        self.server = self.method.algo.aggregate(self.server, updates, self.hp, keys)
        metrics = self.train_metrics_aggr_fn([m.content for m in valid], self.weighted_by_key)
        return ArrayRecord(self.server.weights), metrics


def _metrics(content: RecordDict) -> MetricRecord:
    """A reply's one metrics record (the accelerator mod adds its metrics to it)."""
    records = list(content.metric_records.values())
    if not records:
        raise ValueError("a train reply carries no metrics (num-examples, local-steps)")
    return records[0]

"""FedBuff (Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek and Huba, "Federated Learning with
Buffered Asynchronous Aggregation", AISTATS 2022, Alg. 1).

The server does not wait for a round: clients train concurrently, each from the model as it was
when it started, and the server applies a step whenever ``fedbuff_buffer`` updates have arrived,
each weighted down by its staleness s (the server steps taken since its client started):
``1 / sqrt(1 + s)`` (``staleness_weight``). Which updates each step takes,
and how stale each is, comes from the fleet's virtual clock (``workloads.cost.buffered``: each
client's priced download, training and upload, a concurrency limit), computed before the run and
handed to the loop as data, as a fleet's arrivals are: round t of the loop is server step t.

The server step, for updates y_i from clients that started from version v_i = t - 1 - s_i:

    y~_i = y_i                                   (s_i = 0: w_t + (y_i - w_t) is y_i itself)
    y~_i = w_t + (y_i - w_{v_i}) / sqrt(1 + s_i)  (s_i > 0)
    w_{t+1} = sum_i (n_i / N) y~_i               (FedAvg's weighted average, ``weighted_average``)

i.e. w_t plus the staleness-weighted average of the client deltas, over the trainable
parameters; running statistics (batch norm's) are averaged as FedAvg averages them (a weighted
delta of a running variance can turn it negative: seen on the quick preset's ConvNet, accuracy to
chance after one stale step). Differences from Alg. 1,
documented: the deltas are averaged with sample weights n_i / N (FedAvg's; Alg. 1 divides their sum
by K), and the server learning rate is 1 (Alg. 1's eta_g). With every staleness 0 a step is
FedAvg's round over the same clients, bit for bit (tested). The server keeps every version a
client may still start from (``ServerState.extras``, one group per version: as much memory as
the model per server step; our simplification, a real server would keep the versions in flight).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

import torch

from workloads.fl.aggregate import weighted_average
from workloads.fl.knob import non_negative
from workloads.fl.methods.base import ClientUpdate, FedAvg, ServerState, TensorDict

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams

VERSION = "fedbuff_version_"  # ServerState.extras group of model version j: VERSION + str(j)


def staleness_weight(staleness: int) -> float:
    """``1 / sqrt(1 + staleness)``: FedBuff's down-weighting of stale updates (Nguyen et al.,
    AISTATS 2022, the staleness scaling of its experiments, 1/sqrt(1 + staleness)); 1 for a fresh one."""
    return 1.0 / math.sqrt(1.0 + staleness)


def versions(server: ServerState) -> int:
    """How many earlier versions the server keeps: the current weights are version ``versions``."""
    return sum(key.startswith(VERSION) for key in server.extras)


class FedBuff(FedAvg):
    knobs = (non_negative("fedbuff_buffer", 0, "K, Alg. 1; 0: half the run's clients per round, rounded up (ours)"),
             non_negative("fedbuff_concurrency", 0,
                          "clients training at once, Alg. 1; 0: the fleet's sampled clients per round (ours)"))
    clients_together = False  # clients of one step start from different versions
    buffered = True
    calibratable = False  # a calibration round on the asynchronous clock: not modeled

    def server_view(self, server: ServerState, round: int, staleness: int) -> ServerState:
        """The server as the client saw it when it started, ``staleness`` steps before round
        ``round``'s: version ``round - 1 - staleness``."""
        if staleness == 0:
            return server
        return replace(server, weights={**server.weights, **server.extras[VERSION + str(round - 1 - staleness)]})

    def aggregate(self, server: ServerState, updates: Sequence[ClientUpdate], hp: Hparams,
                  keys: Sequence[str]) -> ServerState:
        current = versions(server)
        corrected = [(u.state if u.staleness == 0 else
                      stale_corrected(server.weights, server.extras[VERSION + str(current - u.staleness)], u.state,
                                      staleness_weight(u.staleness), keys), u.num_examples) for u in updates]
        averaged = weighted_average(corrected)
        kept = {key: value for key, value in server.weights.items()}
        return self._advance(server, averaged, extras={**server.extras, VERSION + str(current): kept})


def stale_corrected(now: TensorDict, start: TensorDict, trained: TensorDict, weight: float,
                    trainable: Sequence[str]) -> TensorDict:
    """``now + weight (trained - start)`` per ``trainable`` key of ``trained``, in float64, cast
    back: a stale client's delta applied to today's model at its staleness weight. Its other keys
    (batch norm's running statistics) are its own, as FedAvg averages them: a weighted delta of a
    running variance can turn it negative."""
    out = dict(trained)
    for key in trainable:
        value = trained[key]
        moved = now[key].to(torch.float64) + weight * (value.to(torch.float64) - start[key].to(torch.float64))
        out[key] = moved.to(value.dtype) if value.dtype.is_floating_point else moved.round().to(value.dtype)
    return out

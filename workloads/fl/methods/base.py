"""FedAvg, the base every other algorithm derives from by overriding only what differs.

An ``Algorithm`` answers four questions for the federated loop (``workloads/fl/loop.py``) and the
trace hooks (``workloads/fl/local.py``):

* ``prepare_model(model, seed)``: changes to the freshly built model (FedBABU freezes its head,
  double head adds a local head). Frozen parameters use ``requires_grad=False``.
* ``penalty(model, ctx, hp)``: extra terms of the local loss (FedProx, FedCos); ``None`` for none.
  Must run on the ``meta`` device: tensor ops only, no ``.item()``, no data-dependent branches.
* ``head_outputs(model, x)``: the logits the loss is taken on (double head: two heads).
* ``shared_keys(model, round, hp)``: the state_dict keys the server sends and the clients send back
  this round (default: every key except frozen parameters, which clients rebuild from the seed).
* ``aggregate(server, updates, hp, keys)``: the new global state from the client updates.

FedAvg (McMahan et al. 2017): weighted average of the client states by sample count.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import torch
from torch import nn

from workloads.fl.aggregate import weighted_average
from workloads.fl.hparams import Hparams

TensorDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class RoundContext:
    """What a client knows at the start of its local training."""

    round: int  # 1-based
    global_params: Mapping[str, torch.Tensor]  # trainable parameters as downloaded (w_t)
    direction: Mapping[str, torch.Tensor] | None = None  # FedCos d_t (None: zero, round 1)


@dataclass(frozen=True)
class ClientUpdate:
    """What one client sends back after local training."""

    client: int
    state: TensorDict  # the shared keys after training
    num_examples: int
    local_steps: int


@dataclass(frozen=True)
class ServerState:
    """The server's memory between rounds (a new object every round)."""

    weights: TensorDict  # the full global state_dict
    prev_weights: TensorDict | None = None  # w_{t-1} (FedCos's direction)
    momentum: TensorDict | None = None  # server momentum buffer (FedOpt, FedAvgM)


def trainable_keys(model: nn.Module) -> list[str]:
    """Names of parameters with ``requires_grad`` (state_dict spelling)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def frozen_keys(model: nn.Module) -> set[str]:
    return {name for name, p in model.named_parameters() if not p.requires_grad}


class FedAvg:
    name = "fedavg"
    needs_direction = False  # FedCos: the server sends d_t each round
    anchored = False  # the penalty reads w_t (FedProx, FedCos): clients keep a copy of it
    upload_extras: tuple[str, ...] = ()  # scalars sent beside num_examples (FedNova: a_i)

    def shared_layer_count(self, round: int, hp: Hparams, num_layers: int) -> int:
        """How many of the model's sharing layers (shallow to deep) round ``round`` sends: all."""
        return num_layers

    def prepare_model(self, model: nn.Module, *, seed: int) -> nn.Module:
        return model

    def penalty(self, model: nn.Module, ctx: RoundContext, hp: Hparams) -> torch.Tensor | None:
        return None

    def head_outputs(self, model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
        """The logits the local loss is computed on (one per head; double head has two)."""
        return [model(x)]

    def shared_keys(self, model: nn.Module, round: int, hp: Hparams) -> list[str]:
        frozen = frozen_keys(model)
        return [k for k in model.state_dict() if k not in frozen]

    def aggregate(self, server: ServerState, updates: Sequence[ClientUpdate], hp: Hparams,
                  keys: Sequence[str]) -> ServerState:
        averaged = weighted_average([(u.state, u.num_examples) for u in updates])
        return self._advance(server, averaged)

    @staticmethod
    def _advance(server: ServerState, new_values: Mapping[str, torch.Tensor], **changes) -> ServerState:
        weights = {**server.weights, **new_values}
        return replace(server, weights=weights, prev_weights=server.weights, **changes)

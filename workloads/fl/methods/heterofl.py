"""HeteroFL (Diao, Ding and Tarokh, "HeteroFL: Computation and Communication Efficient Federated
Learning for Heterogeneous Clients", ICLR 2021).

Each client trains the submodel of its width r (its device class's, ``RoundContext.width``): the
first ``ceil(r C)`` channels of every hidden layer (Sec. 3, ``workloads.fl.width``); it receives
and sends only those entries (``payload``); the server averages each entry over the clients that
hold it, entries no client held keeping their global value (Sec. 3, ``average_by_holders``).

As the paper (and Flower's HeteroFL baseline, ``baselines/heterofl``, which follows the authors'
code):

* the scaler (Sec. 3, "Scaler"): each scaled layer's output divided by r in training;
* static batch normalization (sBN, Sec. 3, "Static Batch Normalization"): batch norm tracks no running statistics, so the
  clients send none (``static_norm``). Evaluation then normalizes by the statistics of the
  evaluated batch (the suite evaluates in batches of 1,024): the paper's server instead queries the
  clients' statistics once after training (the authors' ``stats`` pass over the training data),
  which we do not do. A subclass with ``static_norm = False`` keeps the model's batch norm as it is.

Differences, documented: the average weights each holder by its sample count n_k (FedAvg's
weights restricted to the holders), where the authors' code and Flower's baseline count each
holder once; with equal sample counts the two agree (``tests/test_heterofl.py`` checks a
transcription of the baseline's rule). Their masked cross entropy over each client's own labels
("label split") is not used: every client's loss is the run's. With every width 1 a run is
FedAvg's on the same model (static batch norm) bit for bit, and FedAvg's itself without sBN.

Which width a client trains comes from its fleet class (``width = 0.5``) or, with ``width =
"auto"``, the widest of ``rates`` whose priced step fits the class's memory and meets the round's
deadline (``workloads.cost.widths``); without a fleet every client trains the full model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
from torch import nn

from workloads.fl.methods.base import ClientUpdate, FedAvg, RoundContext, ServerState, TensorDict
from workloads.fl.width import average_by_holders, held, held_shapes, masked, static_batch_norm

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams

HETEROFL_RATES = (1.0, 0.5, 0.25, 0.125, 0.0625)
"""The paper's computation complexity levels a-e: rates 1/2^i (its experiments' five levels, each half the last's width)."""


class HeteroFL(FedAvg):
    clients_together = False  # clients of different widths run different submodels
    sized_to_device = True
    calibratable = False  # a calibration's statistics of a submodel: not defined here
    scaled = True  # HeteroFL's scaler (Sec. 3)
    static_norm = True  # static batch normalization (sBN, Sec. 3)

    def prepare_model(self, model: nn.Module, *, seed: int) -> nn.Module:
        return static_batch_norm(model) if self.static_norm else model

    def rates(self, hp: Hparams) -> tuple[float, ...]:
        return HETEROFL_RATES

    def width_mix(self, width: float, hp: Hparams) -> tuple[tuple[float, float], ...]:
        """A HeteroFL client trains its own width in every step."""
        return ((width, 1.0),)

    def step_width(self, ctx: RoundContext, hp: Hparams) -> float:
        """The width of this step's submodel: the client's own."""
        return ctx.width

    def batch_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, outputs: Sequence[torch.Tensor],
                   loss_fn, ctx: RoundContext, hp: Hparams) -> torch.Tensor:
        """The loss of the submodel of this step's width (its forward runs here, where the
        client's width is known; ``head_outputs`` runs none)."""
        with masked(model, self.step_width(ctx, hp), scale=self.scaled):
            return loss_fn(model(x), y)

    def head_outputs(self, model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
        return []

    def payload(self, model: nn.Module, tensors: TensorDict, ctx: RoundContext) -> TensorDict:
        """The client's held prefix of each tensor (``workloads.fl.width.held``)."""
        return held(tensors, held_shapes(model, ctx.width)) if ctx.width < 1.0 else tensors

    def aggregate(self, server: ServerState, updates: Sequence[ClientUpdate], hp: Hparams,
                  keys: Sequence[str]) -> ServerState:
        averaged = average_by_holders(server.weights, [(u.state, u.num_examples) for u in updates])
        return self._advance(server, averaged)

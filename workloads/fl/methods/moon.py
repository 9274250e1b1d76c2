"""MOON (Li, He and Song, "Model-Contrastive Federated Learning", CVPR 2021, Eq. 3-4, Alg. 1).

Client i's local loss on a batch (Eq. 4) is the task loss plus mu times the model-contrastive
loss (Eq. 3)

    l_con = -log( exp(sim(z, z_glob) / tau) / (exp(sim(z, z_glob) / tau) + exp(sim(z, z_prev) / tau)) )

with z the representation of the model being trained, z_glob that of the global model w^t it
downloaded, z_prev that of its own model after its previous round, and sim the cosine similarity.
So three models are resident in the client's device memory during training: the trained one, the
global one and the previous one (Alg. 1), the last the client's state between rounds. The priced
step holds all three whole (``ClientTrainer.held``: the global and previous state dicts, classifier
and buffers included, though only their feature extractors run).

Choices, documented:
* the representation is the model's ``features(x)``, the input of its classifier (MOON's networks
  add a projection head there; the suite's models are compared on one architecture, so none is
  added);
* the global and the previous model run in eval mode without gradients, as in the authors' code
  (their BatchNorm layers use their running statistics and are not updated);
* a client's previous model, before its first round, is the global model it downloads (the term
  is then the constant log 2, with no gradient);
* tau = 0.5 and mu = 5 (Sec. 4.1: tau 0.5 throughout; mu tuned in {0.1, 1, 5, 10}, 5 best on the
  10-class CIFAR-10, 1 on CIFAR-100 and Tiny-ImageNet). mu = 0 gives FedAvg's step bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from workloads.fl.knob import non_negative, positive
from workloads.fl.methods.base import FedAvg, RoundContext, TensorDict

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams


class _Features(nn.Module):
    """``net.features`` as a module's forward, so that ``torch.func.functional_call`` can run it with other weights."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.features(x)


@torch.no_grad()
def features_with(model: nn.Module, weights: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``model.features(x)`` with ``weights`` (state_dict entries) in place of the model's own, in
    eval mode, without gradients; the model and its mode are left as they were."""
    was_training = model.training
    model.eval()
    try:
        return torch.func.functional_call(_Features(model), {f"net.{k}": v for k, v in weights.items()}, (x,))
    finally:
        model.train(was_training)


def contrastive_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 3, batch mean: cross entropy of the logits [sim(z, z_glob), sim(z, z_prev)] / tau
    against the first (the positive pair), as the authors' code computes it."""
    logits = torch.stack([F.cosine_similarity(z, z_glob, dim=-1), F.cosine_similarity(z, z_prev, dim=-1)], dim=1) / tau
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


class MOON(FedAvg):
    knobs = (non_negative("moon_mu", 5.0, "MOON mu, Sec. 4.1 (best of 0.1, 1, 5, 10 on CIFAR-10)"),
             positive("moon_tau", 0.5, "MOON temperature tau, Sec. 4.1"))
    anchored = True  # the global model w^t runs beside the trained one
    clients_together = True  # its step hooks batch over clients (tests/test_clients_together.py)

    def initial_client_state(self, model: nn.Module, hp: Hparams) -> TensorDict:
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    def head_outputs(self, model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
        """The logits and the representation z they are computed from."""
        z = model.features(x)
        return [model.classifier(z), z]

    def batch_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, outputs, loss_fn, ctx: RoundContext,
                   hp: Hparams) -> torch.Tensor:
        logits, z = outputs
        z_glob = features_with(model, ctx.global_params, x)
        z_prev = features_with(model, ctx.state, x)
        return loss_fn(logits, y) + hp.moon_mu * contrastive_loss(z, z_glob, z_prev, hp.moon_tau)

    def after_training(self, model: nn.Module, ctx: RoundContext, steps: int, hp: Hparams
                       ) -> tuple[TensorDict, dict[str, TensorDict]]:
        return {k: v.detach().clone() for k, v in model.state_dict().items()}, {}

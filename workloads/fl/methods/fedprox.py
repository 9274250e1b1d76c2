"""FedProx (Li et al., MLSys 2020, Eq. 2): local loss + (mu/2) ||w - w_t||^2 over the trainable
parameters, w_t being the global model the client downloaded. mu = 0 gives FedAvg exactly."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from workloads.fl.knob import non_negative
from workloads.fl.methods.base import FedAvg, RoundContext

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams


def proximal_term(model: nn.Module, global_params, mu: float) -> torch.Tensor:
    """(mu / 2) * sum_p ||p - p_t||^2 over parameters with requires_grad."""
    terms = [((p - global_params[name]) ** 2).sum()
             for name, p in model.named_parameters() if p.requires_grad]
    return 0.5 * mu * torch.stack(terms).sum()


class FedProx(FedAvg):
    knobs = (non_negative("prox_mu", 0.001, "FedProx mu, Tab. 16 (FedProx / ResNet18 row)"),)
    anchored = True
    clients_together = True  # its penalty batches over clients (tests/test_clients_together.py)

    def penalty(self, model: nn.Module, ctx: RoundContext, hp: Hparams) -> torch.Tensor:
        return proximal_term(model, ctx.global_params, hp.prox_mu)

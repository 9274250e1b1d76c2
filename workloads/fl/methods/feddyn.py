"""FedDyn (Acar et al., "Federated Learning Based on Dynamic Regularization", ICLR 2021, Alg. 1).

Client k keeps the gradient term grad L_k(theta_k^{t-1}) (zero before its first round, Alg. 1's
initialisation) and minimises its dynamically regularised loss

    L_k(theta) - <grad L_k(theta_k^{t-1}), theta> + (alpha / 2) ||theta - theta^{t-1}||^2

over the trainable parameters (theta^{t-1}: the model it downloaded), then updates its state

    grad L_k(theta_k^t) = grad L_k(theta_k^{t-1}) - alpha (theta_k^t - theta^{t-1}).

It sends theta_k^t only. The server keeps h (zero at first) and, over the round's clients P_t out
of m:

    h^t = h^{t-1} - alpha (1 / m) sum_{k in P_t} (theta_k^t - theta^{t-1}),
    theta^t = (1 / |P_t|) sum_{k in P_t} theta_k^t - (1 / alpha) h^t.

Buffers (BatchNorm statistics) are averaged as the parameters are (1 / |P_t|). alpha's default,
0.01, is ``alpha_coef = 1e-2`` of the authors' code (github.com/alpemreacar/FedDyn,
``example_cifar_10.py``, also its CIFAR-100 setting). Their code divides alpha per client by its
share of the data (``alpha_coef / weight_list[clnt]``, 1 for equal clients); Alg. 1 and this file
use one alpha for every client. alpha -> 0 does not give FedAvg: the server's correction
h^t / alpha stays finite (it is minus the mean client drift summed over the rounds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
from torch import nn

from workloads.fl.aggregate import weighted_average
from workloads.fl.knob import positive
from workloads.fl.methods.base import ClientUpdate, FedAvg, RoundContext, ServerState, TensorDict

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams

H = "feddyn_h"  # the server's h (ServerState.extras)


def dynamic_regularizer(model: nn.Module, gradient: TensorDict, anchor: TensorDict, alpha: float) -> torch.Tensor:
    """-<g, theta> + (alpha / 2) ||theta - theta^{t-1}||^2 over the trainable parameters."""
    return torch.stack([0.5 * alpha * ((p - anchor[name]) ** 2).sum() - (gradient[name] * p).sum()
                        for name, p in model.named_parameters() if p.requires_grad]).sum()


class FedDyn(FedAvg):
    knobs = (positive("feddyn_alpha", 0.01, "FedDyn alpha (Alg. 1): alpha_coef of the authors' code for "
                                            "CIFAR-10/100"),)
    anchored = True  # the regularizer reads theta^{t-1}
    clients_together = True  # its step hooks batch over clients (tests/test_clients_together.py)

    def initial_client_state(self, model: nn.Module, hp: Hparams) -> TensorDict:
        return {name: torch.zeros_like(p).detach() for name, p in model.named_parameters() if p.requires_grad}

    def penalty(self, model: nn.Module, ctx: RoundContext, hp: Hparams) -> torch.Tensor:
        return dynamic_regularizer(model, ctx.state, ctx.global_params, hp.feddyn_alpha)

    def after_training(self, model: nn.Module, ctx: RoundContext, steps: int, hp: Hparams
                       ) -> tuple[TensorDict, dict[str, TensorDict]]:
        return {name: ctx.state[name] - hp.feddyn_alpha * (p.detach() - ctx.global_params[name])
                for name, p in model.named_parameters() if name in ctx.state}, {}

    def aggregate(self, server: ServerState, updates: Sequence[ClientUpdate], hp: Hparams,
                  keys: Sequence[str]) -> ServerState:
        alpha = hp.feddyn_alpha
        mean = weighted_average([(u.state, 1) for u in updates])  # 1 / |P_t|
        h = server.extras.get(H) or {k: torch.zeros_like(server.weights[k]) for k in keys}
        h = {k: h[k] - alpha / server.num_clients * sum(u.state[k] - server.weights[k] for u in updates) for k in keys}
        new = {**mean, **{k: mean[k] - h[k] / alpha for k in keys}}
        return self._advance(server, new, extras={**server.extras, H: h})

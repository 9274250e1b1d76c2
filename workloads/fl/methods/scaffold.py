"""SCAFFOLD (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
Learning", ICML 2020, Alg. 1 with the option II control-variate update, Eq. 4).

The server keeps a control variate c, each client i its own c_i (zero before its first round),
both the size of the trainable parameters. In round t the server sends x (the model) and c; the
client runs its local steps on the corrected gradient g_i(y) - c_i + c (Alg. 1 line 10), then

    c_i+ = c_i - c + (x - y_i) / (K eta_l)        (option II, line 12; Eq. 4)

keeps c_i+ and sends y_i and Delta c_i = c_i+ - c_i back (line 13): twice the trainable
parameters in each direction. The server averages (line 16) and updates

    x <- sum_i (n_i / n) y_i,        c <- c + (1 / N) sum_{i in S} Delta c_i     (line 17)

Choices, documented:
* the correction is the loss term <c - c_i, y>, whose gradient is c - c_i: backward adds it to
  g_i(y), and SGD's momentum and weight decay (the suite's local optimizer) act on the corrected
  gradient as on any gradient. With c = c_i = 0 the step is FedAvg's, bit for bit.
* K eta_l, the step count times the learning rate, is ``eta_l * a_i`` with FedNova's normalizer
  a_i = sum_{t=1..K} (1 - rho^t) / (1 - rho) (Wang et al., NeurIPS 2020) for SGD momentum rho:
  the distance momentum SGD moves on a constant gradient; a_i = K when rho = 0 (Alg. 1 exactly).
* the server's x is FedAvg's sample-weighted average (global step size eta_g = 1, Alg. 1's
  uniform 1/|S| when clients hold equal samples), so that zero control variates give FedAvg's
  model; c is Alg. 1's uniform sum over the N clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
from torch import nn

from workloads.fl.aggregate import fednova_normalizer, weighted_average
from workloads.fl.methods.base import ClientUpdate, FedAvg, RoundContext, ServerState, TensorDict

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams

CONTROL = "scaffold_control"  # the ledger group of c (down) and Delta c_i (up); c_i in the client's state


def correction_term(model: nn.Module, c: TensorDict, c_i: TensorDict) -> torch.Tensor:
    """<c, w> - <c_i, w> over the trainable parameters: its gradient is the correction c - c_i.
    Written as two products so that backward keeps c and c_i (resident anyway) and no difference."""
    return torch.stack([(c[name] * p).sum() - (c_i[name] * p).sum() for name, p in model.named_parameters()
                        if p.requires_grad]).sum()


def option_two(c: TensorDict, c_i: TensorDict, x: TensorDict, y: TensorDict, step_size: float) -> TensorDict:
    """c_i+ = c_i - c + (x - y) / step_size (Alg. 1 line 12, option II; step_size = K eta_l)."""
    return {k: c_i[k] - c[k] + (x[k] - y[k]) / step_size for k in c_i}


class Scaffold(FedAvg):
    anchored = True  # option II reads x after training
    clients_together = True  # its step hooks batch over clients (tests/test_clients_together.py)

    def extra_downloads(self, round: int) -> tuple[str, ...]:
        return (CONTROL,)

    def extra_uploads(self, round: int) -> tuple[str, ...]:
        return (CONTROL,)

    def server_extras(self, server: ServerState, keys: Sequence[str], round: int, hp: Hparams) -> dict:
        control = server.extras.get(CONTROL) or {k: torch.zeros_like(server.weights[k]) for k in keys}
        return {CONTROL: control}

    def initial_client_state(self, model: nn.Module, hp: Hparams) -> TensorDict:
        return {name: torch.zeros_like(p).detach() for name, p in model.named_parameters() if p.requires_grad}

    def penalty(self, model: nn.Module, ctx: RoundContext, hp: Hparams) -> torch.Tensor:
        return correction_term(model, ctx.received[CONTROL], ctx.state)

    def after_training(self, model: nn.Module, ctx: RoundContext, steps: int, hp: Hparams
                       ) -> tuple[TensorDict, dict[str, TensorDict]]:
        c, c_i = ctx.received[CONTROL], ctx.state
        y = {name: p.detach() for name, p in model.named_parameters() if name in c_i}
        new = option_two(c, c_i, ctx.global_params, y, ctx.lr * fednova_normalizer(steps, hp.momentum))
        return new, {CONTROL: {k: new[k] - c_i[k] for k in new}}

    def aggregate(self, server: ServerState, updates: Sequence[ClientUpdate], hp: Hparams,
                  keys: Sequence[str]) -> ServerState:
        averaged = weighted_average([(u.state, u.num_examples) for u in updates])
        control = server.extras.get(CONTROL) or {k: torch.zeros_like(server.weights[k]) for k in keys}
        control = {k: c + sum(u.extras[CONTROL][k] for u in updates) / server.num_clients for k, c in control.items()}
        return self._advance(server, averaged, extras={**server.extras, CONTROL: control})

"""FedCos (Zhang et al., FedCos paper Sec. IV-A, Eq. 5-7): local loss plus a cosine penalty

    mu * (1 - cos(w - w_t, d_t)),    d_t = w_t - w_{t-1}  (Eq. 7),

over the trainable parameters flattened into one vector. The penalty is 0 in round 1 (d_t = 0)
and whenever either vector is zero (Eq. 6: the angle is defined as 0 then); in particular it is 0
at the first local step, where w = w_t. The zero case is a ``torch.where`` on tensors, not a Python
branch, so the step runs on the ``meta`` device, and the division uses a safe denominator so no
NaN gradient leaks through the unused branch. The server sends d_t to every sampled client from
round 2 on: one extra download of the trainable parameters' size per round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
from torch import nn

from workloads.fl.knob import non_negative
from workloads.fl.methods.base import FedAvg, RoundContext, ServerState

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams


def cosine_penalty(model: nn.Module, global_params, direction, mu: float) -> torch.Tensor:
    """mu * (1 - <a, d> / (|a| |d|)) with a = w - w_t, and 0 where |a| |d| = 0."""
    dots, a_sq, d_sq = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        a = p - global_params[name]
        d = direction[name]
        dots.append((a * d).sum())
        a_sq.append((a * a).sum())
        d_sq.append((d * d).sum())
    dot, norm_prod_sq = torch.stack(dots).sum(), torch.stack(a_sq).sum() * torch.stack(d_sq).sum()
    nonzero = norm_prod_sq > 0
    safe = torch.where(nonzero, norm_prod_sq, torch.ones_like(norm_prod_sq))
    cos = dot / torch.sqrt(safe)
    return torch.where(nonzero, mu * (1.0 - cos), torch.zeros_like(cos))


DIRECTION = "fedcos_direction"  # the ledger group of d_t


class FedCos(FedAvg):
    knobs = (non_negative("fedcos_mu", 0.02, "FedCos mu: the FedCos paper's best setting, its Tab. (FedCos(0.02))"),)
    anchored = True
    clients_together = True  # its step hooks batch over clients (tests/test_clients_together.py)

    def extra_downloads(self, round: int) -> tuple[str, ...]:
        return (DIRECTION,) if round > 1 else ()  # round 1: d_1 = 0 is not sent

    def server_extras(self, server: ServerState, keys: Sequence[str], round: int, hp: Hparams) -> dict:
        if round == 1:
            return {}
        previous = server.prev_weights or server.weights  # no aggregation yet (nobody arrived): d_t = 0
        return {DIRECTION: {k: server.weights[k] - previous[k] for k in keys}}

    def penalty(self, model: nn.Module, ctx: RoundContext, hp: Hparams) -> torch.Tensor | None:
        if DIRECTION not in ctx.received:  # round 1: d_1 = 0, the penalty is identically 0
            return None
        return cosine_penalty(model, ctx.global_params, ctx.received[DIRECTION], hp.fedcos_mu)

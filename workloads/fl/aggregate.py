"""Server-side aggregation as short pure functions over ``(state, num_examples)`` pairs.

In the style of Flower's ``flwr/server/strategy/aggregate.py``: each function takes what clients
sent (dicts of tensors keyed by state_dict names) and returns new tensors; nothing is mutated.
Arithmetic runs in float64 and is cast back to each tensor's dtype (integer buffers such as
BatchNorm's ``num_batches_tracked`` are rounded), so aggregating identical states returns them.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

State = Mapping[str, torch.Tensor]


def _cast_like(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if like.dtype.is_floating_point:
        return value.to(like.dtype)
    return value.round().to(like.dtype)


def weighted_average(results: Sequence[tuple[State, int]]) -> dict[str, torch.Tensor]:
    """FedAvg (McMahan et al. 2017): sum_k (n_k / n) w_k for every key, n = sum_k n_k."""
    if not results:
        raise ValueError("weighted_average needs at least one client result")
    total = sum(n for _, n in results)
    if total <= 0:
        raise ValueError("weighted_average: clients reported no training examples")
    keys = results[0][0].keys()
    out = {}
    for key in keys:
        acc = sum(state[key].to(torch.float64) * (n / total) for state, n in results)
        out[key] = _cast_like(acc, results[0][0][key])
    return out


def pseudo_gradient(global_state: State, averaged: State, keys) -> dict[str, torch.Tensor]:
    """Delta = w_t - avg_k(w_k) for ``keys`` (Reddi et al. 2021, FedOpt: the server's gradient)."""
    return {k: global_state[k].to(torch.float64) - averaged[k].to(torch.float64) for k in keys}


def moving_average(average: State, aggregated: State, keys, *, decay: float) -> dict[str, torch.Tensor]:
    """The server's exponential moving average of the aggregated models over rounds (Li et al.,
    "Low Precision Local Training is Enough for Federated Learning", NeurIPS 2024, Sec. 3; their
    code's ``moving_average(server, model, moving_weight)``):

        a_t = decay * a_{t-1} + (1 - decay) * w_t      for every key of ``keys``

    ``w_t`` the round's aggregate, ``a_{t-1}`` the average so far; the other keys are the aggregate's.
    Computed in float64 and cast back, as every aggregation here."""
    return {**aggregated, **{k: _cast_like(decay * average[k].to(torch.float64)
                                           + (1.0 - decay) * aggregated[k].to(torch.float64), aggregated[k])
                             for k in keys}}


def server_sgd_momentum(global_state: State, delta: State, momentum_buf: State | None, *,
                        lr: float, momentum: float) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Server SGD with heavy-ball momentum on the pseudo-gradient (FedOpt with SGD server optimizer,
    Reddi et al. 2021, Alg. 2; FedAvgM, Hsu et al. 2019):

        m_{t+1} = momentum * m_t + Delta_t      (m_0 = 0)
        w_{t+1} = w_t - lr * m_{t+1}

    With lr = 1 and momentum = 0 this is exactly FedAvg. Returns (new weights, new momentum).
    """
    new_buf = {k: (momentum * momentum_buf[k] if momentum_buf is not None else 0.0) + d
               for k, d in delta.items()}
    new_w = {k: _cast_like(global_state[k].to(torch.float64) - lr * m, global_state[k])
             for k, m in new_buf.items()}
    return new_w, new_buf


def fednova_normalizer(local_steps: int, momentum: float) -> float:
    """FedNova's a_i for SGD with momentum rho over tau local steps (Wang et al. 2020, Sec. 4 and
    appendix):  a_i = sum_{t=1..tau} (1 - rho^t) / (1 - rho);  a_i = tau when rho = 0."""
    if momentum == 0.0:
        return float(local_steps)
    return sum((1.0 - momentum ** t) / (1.0 - momentum) for t in range(1, local_steps + 1))


def fednova_average(global_state: State, results: Sequence[tuple[State, int, float]], keys
                    ) -> dict[str, torch.Tensor]:
    """FedNova aggregation (Wang et al. 2020, Eq. 6-7) over (state, n_k, a_k) triples:

        d_k = (w_t - w_k) / a_k,   tau_eff = sum_k p_k a_k,   w_{t+1} = w_t - tau_eff * sum_k p_k d_k

    with p_k = n_k / sum_j n_j. When every a_k is equal this is FedAvg.
    """
    total = sum(n for _, n, _ in results)
    tau_eff = sum(n / total * a for _, n, a in results)
    out = {}
    for k in keys:
        g = global_state[k].to(torch.float64)
        d = sum((g - s[k].to(torch.float64)) / a * (n / total) for s, n, a in results)
        out[k] = _cast_like(g - tau_eff * d, global_state[k])
    return out

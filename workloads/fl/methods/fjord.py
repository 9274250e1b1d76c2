"""FjORD (Horvath, Laskaridis, Almeida, Leontiadis, Venieris and Lane, "FjORD: Fair and Accurate
Federated Learning under heterogeneous targets with Ordered Dropout", NeurIPS 2021).

Ordered dropout (Sec. 3): a client whose device allows widths up to p_max samples, at every local
step, a width p uniformly from the declared levels no larger than p_max (the paper's uniform
sampling; Flower's FjORD baseline, ``baselines/fjord``, ``ODSampler``: ``np.random.choice`` over
``p_s <= max_p``, one p per batch for every layer) and trains the first ``ceil(p C)`` channels of
every hidden layer (``workloads.fl.width``, the prefix HeteroFL keeps). It sends the entries of its
p_max submodel, and the server averages each entry over the clients that hold it, as HeteroFL's
(``average_by_holders``: each sub-network's entries over the clients that trained them).

Levels: ``fjord_levels`` = k declares p in {1/k, 2/k, ..., 1}; the default 5 is the baseline's
``p_s = [0.2, 0.4, 0.6, 0.8, 1.0]`` (``conf/common.yaml``). With k = 1 every step trains the full
model: a run is FedAvg's bit for bit (on the same model).

The draws come from the client's own generator of the round (``RoundContext.draws``, seeded by the
loop from the run's seed, round and client): the same seed, the same widths. Differences,
documented: no scaler (the paper has none); batch norm is static, as HeteroFL's (the baseline keeps
one batch norm's running statistics per width p, ``ODBatchNorm2d``, sharing the affine parameters);
no knowledge distillation (the paper's optional self-distillation). The pricing takes a
step of each width p with probability 1 / (levels allowed) (``width_mix``): the expected local
training; its peak memory is the p_max step's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from workloads.fl.knob import positive
from workloads.fl.methods.base import RoundContext
from workloads.fl.methods.heterofl import HeteroFL

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams


def fjord_rates(levels: int) -> tuple[float, ...]:
    """The widths k / levels for k = levels .. 1, widest first."""
    return tuple(k / levels for k in range(levels, 0, -1))


def allowed(rates: tuple[float, ...], p_max: float) -> tuple[float, ...]:
    """The declared widths a client of largest width ``p_max`` may sample (its ``p_max`` alone where
    none is that small)."""
    return tuple(p for p in rates if p <= p_max + 1e-12) or (p_max,)


class FjORD(HeteroFL):
    knobs = (positive("fjord_levels", 5, "Flower's FjORD baseline, p_s = 0.2, 0.4, 0.6, 0.8, 1.0"),)
    scaled = False  # ordered dropout has no scaler
    recordable = False  # a width drawn per step: a recorded CUDA graph would fix the first (--capture-step trains eagerly)

    def rates(self, hp: Hparams) -> tuple[float, ...]:
        return fjord_rates(int(hp.with_knobs(self.knobs).fjord_levels))

    def width_mix(self, width: float, hp: Hparams) -> tuple[tuple[float, float], ...]:
        """Each allowed level with equal probability (the paper's uniform sampling)."""
        levels = allowed(self.rates(hp), width)
        return tuple((p, 1.0 / len(levels)) for p in levels)

    def step_width(self, ctx: RoundContext, hp: Hparams) -> float:
        """A width drawn uniformly from the allowed levels with the client's generator; without one
        (a priced step) the client's own width."""
        if ctx.draws is None:
            return ctx.width
        levels = allowed(self.rates(hp), ctx.width)
        return levels[int(torch.randint(len(levels), (1,), generator=ctx.draws))]

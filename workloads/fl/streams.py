"""Every generator a run draws from, each seeded from the run's seed and where it is drawn
(``derived_seed(seed, t, k, stream)``), so that the same run draws the same numbers on every device
and in every way of training: a client's augmentation, its stochastic rounding, its own draws of
the round (FjORD's widths), and what is sent in a communication format. A client's shuffling
order is drawn on the CPU from ``derived_seed(seed, t, k)`` (``local.shuffling_generator``), the
calibration's server step from ``derived_seed(seed, R + 1)``.
"""

from __future__ import annotations

import numpy as np
import torch

from workloads.fl.execution import Execution
from workloads.numerics.emulate import Arithmetic
from workloads.numerics.quantize import round_tensors

AUGMENT_STREAM = 1  # last part of the augmentation generator's seed (seed, t, k, 1)
ROUNDING_STREAM = 2  # last part of the stochastic-rounding generator's seed (seed, t, k, 2)
SEND_DOWN_STREAM = 3  # the server's download in a communication format (seed, t, 3): every client gets the same
SEND_UP_STREAM = 4  # a client's upload in a communication format (seed, t, k, 4)
SEND_EXTRAS_STREAM = 5  # a method's extra downloads (FedCos's d_t) in a communication format (seed, t, 5[, i])
SEND_EXTRAS_UP_STREAM = 6  # a client's extra uploads (SCAFFOLD's Delta c_i) in a communication format (seed, t, k, 6[, i])
DRAWS_STREAM = 7  # a client's own generator of the round, RoundContext.draws (FjORD's widths): (seed, t, k, 7)


def derived_seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])



def arithmetic_of(execution: Execution, seed: int, round: int, client: int) -> Arithmetic | None:
    """Client ``client``'s arithmetic in round ``round`` (``Execution.arithmetic_of_client``: the
    run's number format, its precision schedule's for the round, or its device class's in a fleet
    that declares one; None for FP32, which rounds nothing), its
    stochastic rounding drawn from a generator seeded by ``derived_seed(seed, round, client,
    ROUNDING_STREAM)``: the same run rounds the same way every time."""
    fmt = execution.arithmetic_of_client(client, round)
    if fmt.is_identity:
        return None
    generator = None
    if fmt.rounding == "stochastic":
        generator = torch.Generator(device=execution.torch_device).manual_seed(derived_seed(seed, round, client, ROUNDING_STREAM))
    return Arithmetic(fmt, generator=generator)


def sent(execution: Execution, tensors, *parts: int) -> dict:
    """``tensors`` as sent in the run's communication format (``Execution.comm_format``; FP32: as
    they are), stochastic rounding drawn from ``derived_seed(*parts)``."""
    fmt = execution.communication
    generator = None
    if fmt.rounding == "stochastic":
        generator = torch.Generator(device=execution.torch_device).manual_seed(derived_seed(*parts))
    return round_tensors(tensors, fmt, generator=generator)



def augment_generator(execution: Execution, seed: int, round: int, client: int) -> torch.Generator | None:
    """Client ``client``'s augmentation generator of round ``round``, on the run's device (None: no augmentation)."""
    if not execution.augment:
        return None
    return torch.Generator(device=execution.torch_device).manual_seed(derived_seed(seed, round, client, AUGMENT_STREAM))


def draws_generator(seed: int, round: int, client: int) -> torch.Generator:
    """Client ``client``'s own generator of round ``round`` (``RoundContext.draws``: FjORD's widths), on the CPU."""
    return torch.Generator().manual_seed(derived_seed(seed, round, client, DRAWS_STREAM))

"""What a run's rounds are, from its configuration alone: the learning rate of each round, the
clients each round samples (or a participation plan gives), the mini-batches of a local epoch, and
the local training samples of the whole run (``planned_samples``).

The learning rate follows cosine annealing per round (SphereFed Sec. 5.1; torch's
CosineAnnealingLR stepped once per round); round(participation x K) clients (at least one) are
drawn without replacement from ``numpy.random.default_rng([seed, t])``; a trailing mini-batch of a
single sample is skipped (BatchNorm cannot train on one sample), every other partial batch is used.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from workloads.fl.hparams import FLConfig, Hparams


def cosine_lr(lr: float, lr_min: float, round: int, rounds: int) -> float:
    """Cosine annealing per round (SGDR / torch CosineAnnealingLR with T_max = R), round 1-based."""
    return lr_min + (lr - lr_min) * (1.0 + math.cos(math.pi * (round - 1) / rounds)) / 2.0


def sample_clients(num_clients: int, participation: float, *, seed: int, round: int) -> list[int]:
    """The clients of round ``round``: ``clients_per_round`` of them (``draw_clients``)."""
    return draw_clients(num_clients, clients_per_round(num_clients, participation), seed=seed, round=round)


def clients_per_round(num_clients: int, participation: float) -> int:
    """``round(participation x K)`` clients (half up), at least one."""
    return max(1, round_half_up(participation * num_clients))


def draw_clients(num_clients: int, count: int, *, seed: int, round: int) -> list[int]:
    """``count`` of the clients, drawn without replacement from ``default_rng([seed, round])``
    (all of them, in order, when ``count`` >= K), sorted."""
    if count >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng([seed, round])
    return sorted(int(k) for k in rng.choice(num_clients, size=count, replace=False))


def check_arrivals(arrivals: Sequence[Sequence[int]], num_clients: int, rounds: int,
                   calibrates: bool = False) -> tuple[tuple[int, ...], ...]:
    """A participation plan's arrivals as the loop takes them: one sorted list of distinct clients
    per round, and where the method ``calibrates`` one more for the calibration round R + 1 (the
    clients whose statistics arrive); an empty one: nobody arrived, the global model stays as it
    was (uncalibrated, for the calibration round)."""
    if len(arrivals) != rounds + calibrates:
        raise ValueError(f"the participation plan covers {len(arrivals)} round(s); the run has {rounds}"
                         + (" and a calibration round" if calibrates else ""))
    out = []
    for t, clients in enumerate(arrivals, start=1):
        clients = tuple(int(k) for k in clients)
        if list(clients) != sorted(set(clients)) or any(not 0 <= k < num_clients for k in clients):
            raise ValueError(f"round {t} of the participation plan: {list(clients)} is not a sorted list of "
                             f"distinct clients in 0..{num_clients - 1}")
        out.append(clients)
    return tuple(out)


def check_staleness(arrivals: Sequence[Sequence[int]] | None, staleness: Sequence[Sequence[int]]
                    ) -> tuple[dict[int, int], ...]:
    """Per round, client -> its staleness: one non-negative count per arrival of that round."""
    if arrivals is None or len(staleness) != len(arrivals) or any(
            len(ages) != len(clients) or min(ages, default=0) < 0 for clients, ages in zip(arrivals, staleness)):
        raise ValueError("staleness: one non-negative count per arriving client of every round of the plan")
    return tuple(dict(zip(clients, (int(a) for a in ages))) for clients, ages in zip(arrivals, staleness))


def round_half_up(value: float) -> int:
    return int(math.floor(value + 0.5))


def batch_starts(n: int, batch_size: int) -> list[int]:
    """Start indices of the mini-batches of one epoch (a trailing batch of 1 is skipped)."""
    starts = list(range(0, n, batch_size))
    if n > 1 and n - starts[-1] == 1:
        starts.pop()
    return starts


def epoch_samples(n: int, batch_size: int) -> int:
    """Samples one local epoch over ``n`` samples trains on (all but a skipped trailing single)."""
    return sum(min(batch_size, n - s) for s in batch_starts(n, batch_size))


def planned_samples(parts: Sequence[np.ndarray], cfg: FLConfig, hp: Hparams,
                    arrivals: Sequence[Sequence[int]] | None = None) -> int:
    """Local training samples of a whole run (what ``RunResult.samples_trained`` will be);
    ``arrivals``: the clients each round trains where a participation plan gives them."""
    return sum(hp.local_epochs * epoch_samples(len(parts[k]), hp.batch_size)
               for t in range(1, cfg.rounds + 1)
               for k in (sample_clients(len(parts), cfg.participation, seed=cfg.seed, round=t) if arrivals is None
                         else arrivals[t - 1]))


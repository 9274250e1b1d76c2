"""FedBuff's server on a fleet's virtual clock: which updates each buffered aggregation takes, and
how stale each one is. Torch-free and pure.

FedBuff (Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek and Huba, "Federated Learning with
Buffered Asynchronous Aggregation", AISTATS 2022, Alg. 1): the server keeps ``concurrency``
clients training at once; each downloads the model as it is when it starts, trains, and uploads its
update; the server adds each arriving update to a buffer and, when ``buffer_size`` updates are in
it, applies them (one server step: the model's version advances by one) and empties the buffer.
An update's staleness is the number of server steps taken between its client's start and its
arrival (its weight, ``1 / sqrt(1 + staleness)``, is the method's: ``workloads.fl.methods.fedbuff``).

The clock (our model of it, from the fleet's deterministic prices): a client started at time s
arrives at ``s + finish_s`` (its ``ClientOffer``: download, local training on its own class's
accelerator, upload); arrivals are taken in time order (ties: lower client first). Whenever fewer
than ``concurrency`` clients are training, the server starts another, drawn uniformly from the
clients that are idle, online in the server step being built (the fleet's availability of that
round), fit their device (memory) and have no update in the current buffer (so one aggregation
takes distinct clients: our simplification; with many more clients than the buffer it rarely
binds), from ``numpy.random.default_rng([seed, DISPATCH_STREAM])``. A server step closes at its
last update's arrival plus the server's aggregation; where no client is training and none could
start (the others offline or unfit), the server applies the updates it has rather than wait for
ever (our rule: a smaller step). FedBuff has no round deadline: the fleet's
``deadline_s`` is not used.

What each server step costs: the device time and energy of the updates it applied, their bytes
down and up, and its wall time from the previous step's close; clients still training when the
run ends are not counted (their work never reaches the model).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

DISPATCH_STREAM = 0xB0FF  # numpy seed part of the server's draws of whom to start: (seed, DISPATCH_STREAM)


@dataclass(frozen=True)
class Update:
    """One client's update as the buffer receives it."""

    client: int
    start_s: float
    arrive_s: float
    version: int  # the server step the client started from (0: the initial model)
    staleness: int  # server steps taken between its start and its arrival


@dataclass(frozen=True)
class ServerStep:
    """One buffered aggregation: the updates it applied, in client order, and when it closed."""

    step: int  # 1-based: the model version it makes
    updates: tuple[Update, ...]
    close_s: float


@dataclass(frozen=True)
class BufferRule:
    """The server's rule: how many clients train at once and how many updates make a step."""

    concurrency: int
    buffer_size: int

    def __post_init__(self) -> None:
        if self.buffer_size < 1 or self.concurrency < self.buffer_size:
            raise ValueError(f"FedBuff: concurrency {self.concurrency} and buffer size {self.buffer_size}: the "
                             "buffer takes at least 1 update and no more than the clients training at once")


def buffered_steps(rule: BufferRule, finish_s: Sequence[float], eligible: Callable[[int, int], bool], *,
                   steps: int, seed: int, server_s: float = 0.0) -> tuple[ServerStep, ...]:
    """The first ``steps`` server steps of FedBuff's clock (module doc). ``finish_s[k]``: client k's
    download, training and upload time; ``eligible(k, step)``: whether client k may start while
    server step ``step`` is being built (online then, its device holds the training); ``server_s``:
    the server's aggregation time per step. Fewer steps come back where the clients run out."""
    rng = np.random.default_rng([seed, DISPATCH_STREAM])
    training: list[tuple[float, int, float, int]] = []  # heap of (arrive_s, client, start_s, version)
    busy: set[int] = set()
    buffer: list[Update] = []
    out: list[ServerStep] = []
    now, version = 0.0, 0

    def dispatch() -> None:
        waiting = {u.client for u in buffer}
        idle = [k for k in range(len(finish_s)) if k not in busy and k not in waiting and eligible(k, version + 1)]
        while len(busy) < rule.concurrency and idle:
            k = idle.pop(int(rng.integers(len(idle))))
            busy.add(k)
            heapq.heappush(training, (now + finish_s[k], k, now, version))

    dispatch()
    while len(out) < steps and (training or buffer):
        if training:
            arrive_s, k, start_s, started = heapq.heappop(training)
            busy.discard(k)
            now = arrive_s
            buffer.append(Update(k, start_s, arrive_s, started, version - started))
        if len(buffer) == rule.buffer_size or not training and not _startable(buffer, busy, eligible, version, len(finish_s)):
            version += 1  # a full buffer; or one nobody left could fill (every other client offline or unfit)
            now += server_s
            out.append(ServerStep(version, tuple(sorted(buffer, key=lambda u: u.client)), now))
            buffer = []
        dispatch()
    return tuple(out)


def _startable(buffer: Sequence[Update], busy: set[int], eligible: Callable[[int, int], bool], version: int,
               clients: int) -> bool:
    """Whether some client could still start and fill the buffer being built."""
    waiting = {u.client for u in buffer}
    return any(k not in busy and k not in waiting and eligible(k, version + 1) for k in range(clients))

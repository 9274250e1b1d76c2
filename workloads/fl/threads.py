"""A round's clients trained at once, each on its own thread (issue 44, ``Execution.client_threads``,
``--client-threads N``).

Every client still runs the sequential loop's own code (``clients.client_update``: the download, its
``ClientTrainer`` steps, its upload), only N of them at a time, each on a copy of the client model
(a ``Slot``) and, on a GPU, its own CUDA stream. PyTorch releases Python's global interpreter lock
inside its operators, so on a CPU N clients' kernels run on N cores at once, and on a GPU N
threads launch kernels into N streams at once (CUDA's streams: "CUDA C++ Programming Guide",
Sec. "Asynchronous Concurrent Execution"; ``torch.cuda.Stream``).

What keeps its meaning: each client's generators (shuffling, augmentation, stochastic rounding) are
its own and seeded as sequentially; its model, optimizer and BatchNorm statistics are its slot's
for the time it trains; what it downloads is read, never written, by the threads; its ledger
entries are collected per client and appended in the round's client order; a client's error is
raised in that order too. So the results equal the sequential loop's bit for bit where the same
kernels run (the CPU; tested in ``tests/test_client_threads.py``), the one exception being a model
that draws from torch's global generator during training (dropout, stochastic depth), whose draws
the threads would interleave: ``draws_global_generator`` finds that before the run, which then
trains its clients one after another and says so.

On a GPU a slot's stream first waits for everything the main thread queued (the global model, the
data), and the thread waits for its stream before it hands the client's results back, so the
main thread and the next client on that slot see finished tensors (``on_stream``).
"""

from __future__ import annotations

import contextlib
import copy
import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeVar

import torch
from torch import nn

T = TypeVar("T")
R = TypeVar("R")


def fallback_line(method_name: str, reason: str) -> str:
    """The one line a run that cannot train its clients on threads prints."""
    return f"--client-threads: {method_name} trains its clients one after another ({reason})"


@dataclass(frozen=True)
class Slot:
    """What one client trains on while it holds the slot: a copy of the client model and, on a
    GPU, a CUDA stream (None on the CPU)."""

    model: nn.Module
    stream: torch.cuda.Stream | None


def slots(model: nn.Module, count: int, device: torch.device) -> tuple[Slot, ...]:
    """``count`` slots: ``model`` itself and ``count - 1`` copies of it, each with its own stream on a GPU."""
    return tuple(Slot(model if i == 0 else copy.deepcopy(model),
                      torch.cuda.Stream(device) if device.type == "cuda" else None) for i in range(count))


@contextlib.contextmanager
def on_stream(stream: torch.cuda.Stream | None) -> Iterator[None]:
    """Run the block on ``stream`` (None: as it is, the CPU), after the work the calling threads
    queued on the device's default stream, and return once the block's work is done."""
    if stream is None:
        yield
        return
    stream.wait_stream(torch.cuda.default_stream(stream.device))
    with torch.cuda.stream(stream):
        yield
    stream.synchronize()


def run_on_slots(work: Callable[[nn.Module, T], R], items: Sequence[T], free: Sequence[Slot]) -> list[R]:
    """``work(model, item)`` for every item, as many at once as there are slots, each on a free
    slot's model and stream; the results in the order of ``items`` (an item's exception is raised
    when its turn comes, after the items before it finished, as one after another would)."""
    waiting: queue.SimpleQueue[Slot] = queue.SimpleQueue()
    for slot in free:
        waiting.put(slot)

    def one(item: T) -> R:
        slot = waiting.get()
        try:
            with on_stream(slot.stream):
                return work(slot.model, item)
        finally:
            waiting.put(slot)

    with ThreadPoolExecutor(max_workers=len(free), thread_name_prefix="client") as pool:
        return list(pool.map(one, items))


def draws_global_generator(step: Callable[[], object], device: torch.device) -> bool:
    """Whether ``step()`` draws from torch's global generator (the CPU's, and the GPU's on a GPU):
    its state is compared before and after, and restored."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        before = _global_states(device)
        step()
        after = _global_states(device)
    return any(not torch.equal(a, b) for a, b in zip(before, after))


def _global_states(device: torch.device) -> list[torch.Tensor]:
    return [torch.get_rng_state(), *([torch.cuda.get_rng_state(device)] if device.type == "cuda" else [])]

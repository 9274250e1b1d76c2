"""Timed local steps: the samples per second of a few steps of a fresh model, in each way of
training (``workloads.fl.ways``: one client after another, on threads, together, recorded), behind
a run's forecast (``workloads.fl.forecast``); and the probe of whether a step draws from torch's
global generator (which the threads and the recorded step cannot keep apart).
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, replace

import torch
from torch import nn

from workloads.fl.capture import StepRecorder
from workloads.fl.evaluation import memory_format
from workloads.fl.execution import DeviceData, Execution, synchronize
from workloads.fl.hparams import Hparams
from workloads.fl.local import ClientTrainer, client_trainer, example_received, shuffling_generator
from workloads.fl.methods import MethodConfig
from workloads.fl.streams import arithmetic_of
from workloads.fl.threads import draws_global_generator, run_on_slots, slots
from workloads.fl.together import ClientRun, train_together

FORECAST_STEPS = 5  # timed local steps behind the projected wall time (after one warm-up step; one client: their median)


@dataclass(frozen=True)
class Timed:
    """What timed steps train: ``model`` (changed by them) with ``method`` and ``hp`` (with the
    method's knobs), on the first batch of a client's samples ``idx`` of ``data``, under ``execution``."""

    model: nn.Module
    method: MethodConfig
    hp: Hparams
    data: DeviceData
    idx: torch.Tensor
    execution: Execution


def timed_trainer(timed: Timed) -> tuple[ClientTrainer, torch.Tensor, torch.Tensor]:
    """A round-2 trainer of ``timed.model`` on the first batch of ``timed.idx`` (its ``x``, ``y``),
    after one step (a warm-up, where ``compile`` compiles)."""
    model, method, hp, execution = timed.model, timed.method, timed.hp, timed.execution
    batch = timed.idx[:hp.batch_size]
    x = memory_format(timed.data.take(batch), execution.channels_last)
    y = timed.data.y[batch]
    anchor = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trainer = client_trainer(model, anchor, hp, method, round=2, lr=hp.lr, received=example_received(model, method, hp, 2),
                             autocast_dtype=execution.autocast_dtype,
                             arithmetic=arithmetic_of(execution, 0, 1, 0),  # the forecast times round 1's emulation too
                             low_precision_weights=execution.low_precision_weights)
    trainer.step(x, y)
    return trainer, x, y


def step_draws_global(timed: Timed) -> bool:
    """Whether a local step of ``timed.model`` draws from torch's global generator: one step of a
    copy on the first batch (``threads.draws_global_generator``; the model is not changed)."""
    probe = replace(timed, model=copy.deepcopy(timed.model))
    return draws_global_generator(lambda: timed_trainer(probe), timed.execution.torch_device)


def step_rate(timed: Timed, steps: int = FORECAST_STEPS, clients: int = 1, recorded: bool = False) -> float:
    """Training samples/s of ``steps`` local steps of each of ``clients`` clients after one warm-up
    step each (one client: from the median step, ``median_step_s``), ``timed.model`` (changed by them) and ``clients - 1`` copies of it trained at once on
    as many threads (``workloads.fl.threads``; 1: this thread); ``recorded``: through the round's
    static step (``workloads.fl.capture``), after its eager first step and, on a GPU, its recording."""
    device, hp = timed.execution.torch_device, timed.hp
    pool = slots(timed.model, clients, device)

    def prepared(model: nn.Module):
        trainer, x, y = timed_trainer(replace(timed, model=model))
        if recorded:
            trainer = StepRecorder(timed.method.name, hp.batch_size, device).trainer(trainer)
            trainer.step(x, y)  # the client's first step: eager
            trainer.step(x, y)  # recorded, on a GPU
        return trainer, x, y

    trainers = {id(slot.model): prepared(slot.model) for slot in pool}

    def train(model: nn.Module, _: int) -> None:
        trainer, x, y = trainers[id(model)]
        for _ in range(steps):
            trainer.step(x, y)

    batch = len(timed.idx[:hp.batch_size])
    if clients == 1:
        return batch / median_step_s(trainers[id(timed.model)], steps, device)
    synchronize(device)
    start = time.perf_counter()
    run_on_slots(train, range(clients), pool)
    synchronize(device)
    return clients * steps * batch / (time.perf_counter() - start)


def median_step_s(prepared: tuple[ClientTrainer, torch.Tensor, torch.Tensor], steps: int, device: torch.device) -> float:
    """The median of ``steps`` local steps' times, each timed alone: a step slowed by another
    process taking the core (a preemption on a shared machine) moves the median little where it
    would move a sum of the steps as much as it lasted."""
    trainer, x, y = prepared
    times = []
    for _ in range(steps):
        synchronize(device)
        start = time.perf_counter()
        trainer.step(x, y)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def together_rate(timed: Timed, clients: int, steps: int = FORECAST_STEPS) -> float:
    """Training samples/s of ``clients`` clients trained together (``workloads.fl.together``),
    each ``steps`` steps on the first batch of ``timed.idx``, after one warm-up step; the model is not changed."""
    model, device = timed.model, timed.execution.torch_device
    trainer, _, _ = timed_trainer(replace(timed, model=copy.deepcopy(model)))
    batch = timed.idx[:timed.hp.batch_size]
    start_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def train(epochs: int) -> None:
        runs = [ClientRun(start_state, trainer.ctx, batch, (0,), shuffling_generator(k), None, f"timed client {k}")
                for k in range(clients)]
        train_together(model, timed.method, trainer.hp.replace(local_epochs=epochs), runs, timed.data)

    train(1)
    synchronize(device)
    begin = time.perf_counter()
    train(steps)
    synchronize(device)
    return clients * steps * len(batch) / (time.perf_counter() - begin)

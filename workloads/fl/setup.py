"""A federated run as the trainer takes it: one frozen plan (``RunPlan``: the method, the data and
its partition, the configuration, the hyper-parameters, the execution options, and what the run
does around the rounds), and what stays fixed while it runs (``Setup``: the models built, the data
held on the device, the way its clients train).

Same seed, same results: the model is built and prepared on the CPU under
``torch.manual_seed(seed)`` (the same initial weights whatever the run's device) and then moved to
the run's device (``build_on_device``); the data are held there once (``execution.DeviceData``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from workloads.fl.capture import StepRecorder
from workloads.fl.dataset import Dataset
from workloads.fl.execution import DeviceData, Execution
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import prepare_model
from workloads.fl.methods import MethodConfig
from workloads.fl.threads import Slot

ONE_AFTER_ANOTHER = "one after another"  # the way every run can train its clients (``workloads.fl.ways``)


@dataclass(frozen=True)
class RunPlan:
    """Everything one run of one method needs, as ``loop.train`` takes it: ``train(RunPlan(method,
    model_fn=..., train=..., test=..., parts=..., cfg=..., hp=..., ...))``; a misspelt field is
    Python's own ``TypeError``.

    ``model_fn()`` builds the (unprepared) model; it is called on the CPU under
    ``torch.manual_seed(seed)`` so every method starts from the same initial weights on any device.
    ``parts``: one index array into ``train`` per client.

    ``execution`` chooses how a round's clients train (``workloads.fl.ways``: together, on threads,
    recorded, one after another); where the method or the options cannot, one line on stderr says
    so and they train one after another.

    ``checkpoint``: the file the loop's state is written to after every round; ``resume``: start
    from the last completed round found there. ``after_round(t)`` is called after round t's
    checkpoint is written (a test interrupts a run there). ``progress``: a progress bar.

    ``val`` (a ``Dataset`` held out of ``train`` before partitioning, or None) is scored wherever
    the test set is: every evaluated round's ``val_accuracy`` and the final model's, so that
    hyper-parameters can be chosen on validation and never on test.

    ``arrivals`` (a participation plan, ``workloads.cost.participation``: per round, the sampled
    clients whose updates arrive in time; None: every sampled client) are the clients each round
    trains and aggregates, instead of ``sample_clients``; the loop never learns why the others were
    left out. A calibrated method's plan has one more entry, round R + 1: the clients whose
    statistics the calibration uses (instead of all K; none: the model is left uncalibrated).

    ``staleness`` (FedBuff's clock, ``workloads.cost.buffered``: per round, beside ``arrivals``, how
    many server steps ago each arriving client started) makes each client start from the server as
    it was then (the method's ``server_view``) and tells the aggregation (``ClientUpdate.staleness``).
    """

    method: MethodConfig
    model_fn: Callable[[], nn.Module]  # builds the unprepared model
    train: Dataset
    test: Dataset
    parts: Sequence[np.ndarray]  # one index array into ``train`` per client
    cfg: FLConfig
    hp: Hparams
    execution: Execution = Execution()
    progress: bool = False
    checkpoint: str | Path | None = None
    resume: bool = False
    after_round: Callable[[int], None] | None = None
    val: Dataset | None = None  # a hold-out of ``train``, made before partitioning
    arrivals: Sequence[Sequence[int]] | None = None
    staleness: Sequence[Sequence[int]] = ()


@dataclass(frozen=True)
class Setup:
    """What stays fixed for a whole run of one method."""

    method: MethodConfig
    cfg: FLConfig
    hp: Hparams  # with the method's knobs
    execution: Execution
    global_model: nn.Module
    client_model: nn.Module
    frozen: set
    params: set
    train: DeviceData
    test: DeviceData
    client_idx: tuple[torch.Tensor, ...]  # per client: indices into train, on the device
    val: DeviceData | None = None  # the validation hold-out (scored whenever the test set is)
    arrivals: tuple[tuple[int, ...], ...] | None = None  # per round (and calibration), the clients (None: sampled, all)
    way: str = ONE_AFTER_ANOTHER  # how a round's clients train (``workloads.fl.ways.WAYS``)
    slots: tuple[Slot, ...] = ()  # the "threads" way's: one per client trained at once (``workloads.fl.threads``)
    recorder: StepRecorder | None = None  # the "recorded" way's: the step recorded once a round (``workloads.fl.capture``)
    staleness: tuple[dict[int, int], ...] = ()  # per round, client -> server steps since it started (FedBuff's clock)


def build_on_device(method: MethodConfig, model_fn: Callable[[], nn.Module], seed: int,
                    execution: Execution) -> nn.Module:
    """The prepared model, built on the CPU under ``torch.manual_seed(seed)`` (the same weights
    whatever the device), then moved to the run's device (NHWC with ``channels_last``)."""
    with torch.device("cpu"):
        torch.manual_seed(seed)
        model = prepare_model(model_fn(), method, seed=seed)
    model = model.to(execution.torch_device)
    return model.to(memory_format=torch.channels_last) if execution.channels_last else model

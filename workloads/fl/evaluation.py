"""Scoring a model: top-1 accuracy on a split held on the device, the global model's test and
validation accuracy (every ``eval_every`` rounds, after the last one and after the calibration), and
the local test mode (each client's model with its never-sent parts, on its own classes).
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from iokit.bits import packed_hex
from workloads.fl.execution import DeviceData
from workloads.fl.setup import Setup


@torch.no_grad()
def top1(model: nn.Module, batches) -> float:
    """Top-1 accuracy of ``model`` (eval mode) over ``batches`` of (x, y)."""
    was_training = model.training
    model.eval()
    correct = total = 0
    for x, y in batches:
        correct += int((model(x).argmax(1) == y).sum())
        total += len(y)
    model.train(was_training)
    return correct / total


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> float:
    """Top-1 accuracy of ``model`` (eval mode) on (x, y)."""
    return top1(model, ((x[s:s + batch_size], y[s:s + batch_size]) for s in range(0, len(y), batch_size)))


def evaluate_on(model: nn.Module, data: DeviceData, *, channels_last: bool = False, batch_size: int = 1024) -> float:
    """``evaluate`` over a split held on the device (decoded batch by batch): the share of ``correct_on``."""
    hits = correct_on(model, data, channels_last=channels_last, batch_size=batch_size)
    return int(hits.sum()) / len(hits)


@torch.no_grad()
def correct_on(model: nn.Module, data: DeviceData, *, channels_last: bool = False, batch_size: int = 1024) -> torch.Tensor:
    """Whether ``model`` (eval mode) classifies each sample of ``data`` right (bool, one per sample,
    in the split's order): what ``evaluate_on`` counts, kept per sample for a bootstrap over images."""
    was_training = model.training
    model.eval()
    order = torch.arange(len(data), device=data.y.device)
    hits = [model(memory_format(data.take(order[s:s + batch_size]), channels_last)).argmax(1) == data.y[s:s + batch_size]
            for s in range(0, len(data), batch_size)]
    model.train(was_training)
    return torch.cat(hits).cpu()


def correct_per_sample(setup: Setup) -> str:
    """The global model as it is now, right or wrong on each test sample (``iokit.bits.packed_hex``):
    what a study's run records so its verdicts can be bootstrapped over test images as well as seeds."""
    return packed_hex(correct_on(setup.global_model, setup.test, channels_last=setup.execution.channels_last).numpy())


def memory_format(x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """A batch in the run's memory format (NHWC with ``channels_last``, for 4-d inputs)."""
    return x.contiguous(memory_format=torch.channels_last) if channels_last and x.dim() == 4 else x


def global_state(setup: Setup) -> dict[str, torch.Tensor]:
    """A copy of the global model's state as it is now."""
    return {k: v.detach().clone() for k, v in setup.global_model.state_dict().items()}


def scores(setup: Setup) -> tuple[float, float | None]:
    """(test accuracy, validation accuracy or None) of the global model as it is now."""
    ex = setup.execution
    test = evaluate_on(setup.global_model, setup.test, channels_last=ex.channels_last)
    val = None if setup.val is None else evaluate_on(setup.global_model, setup.val, channels_last=ex.channels_last)
    return test, val


def local_accuracy(setup: Setup, memory: Mapping[int, dict[str, torch.Tensor]]) -> float | None:
    """The local test mode of the global model as it is now (``local_test_accuracy``): each
    client's model, with its never-sent parts (``memory``), on the test samples of its own classes."""
    ex = setup.execution
    return setup.method.algo.local_test_accuracy(
        setup.client_model, global_state(setup), memory, [setup.train.y[idx].tolist() for idx in setup.client_idx],
        lambda idx: memory_format(setup.test.take(idx), ex.channels_last), setup.test.y)

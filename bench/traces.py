"""Traces bench prices: one local training step of a method, captured on the ``meta`` device.

The step is the method's own (``workloads.trace.method_setup``: model, loss and frozen parts),
with the paper's optimizer (SphereFed Sec. 5.1 / appendix Table 16: SGD, momentum 0.9, weight
decay 1e-5, lr 0.1 for MobileNetV2) and a batch at the paper's shapes (CIFAR-100: 3x32x32,
100 classes, B = 64). Capturing on ``meta`` runs the same aten ops with no arithmetic
(docs/trace.md), so the values of the batch do not matter.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from accel_sim.lifetimes import PeakMemory, peak_memory
from accel_sim.trace_schema import Trace
from workloads.trace import capture_training_step, method_setup

TRAINING_METHODS = ("fedavg", "spherefed")
LR = 0.1
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-5
TRACE_WORD_BYTES = 4  # traces are captured in float32


def local_training_trace(model_name: str, method: str, *, batch_size: int = 64, num_classes: int = 100,
                         image_size: int = 32, norm: str = "bn") -> Trace:
    """One steady-state local SGD step of ``method`` on ``model_name`` (after a warm-up step)."""
    model, loss_fn = method_setup(method, model_name, num_classes=num_classes, image_size=image_size, norm=norm)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY,
                                foreach=False)
    inputs = torch.zeros(batch_size, 3, image_size, image_size)
    targets = torch.arange(batch_size) % num_classes
    meta = {"classes": num_classes, "image_size": image_size, "norm": norm, "lr": LR}
    return capture_training_step(model, inputs, targets, loss_fn=loss_fn, optimizer=optimizer,
                                 model_name=model_name, method=method, meta=meta)


def peak_memory_at_word_bytes(trace: Trace, word_bytes: int) -> PeakMemory:
    """Peak memory if every floating-point storage held ``word_bytes``-byte words instead of 4.

    Integer storages (the labels) keep their size. Used by the word-size sweep; at 4 it is the
    trace's own peak.
    """
    float_storages = {t.storage for t in trace.header.tensors if t.dtype.startswith("float")}
    storages = [
        replace(s, bytes=s.bytes * word_bytes // TRACE_WORD_BYTES) if s.id in float_storages else s
        for s in trace.header.storages
    ]
    return peak_memory(storages, trace.ops)

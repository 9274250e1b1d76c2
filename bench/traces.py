"""Traces bench prices: one local training step of an FL method, captured on the ``meta`` device.

The step is the federated loop's own (``workloads.fl.local.client_trainer(...).step``: the
method's model preparation, loss, penalty and SGD over the trainable parameters), with the
method's hyper-parameters (``workloads.fl.hparams.Hparams``: SphereFed appendix Table 16) and a
batch at the paper's shapes (CIFAR-100: 3x32x32, 100 classes, B = 64). One warm-up step runs
first, uncaptured, so the SGD momentum buffers exist as in every later step. Capturing on
``meta`` runs the same aten ops with no arithmetic (docs/trace.md), so batch values do not matter.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from accel_sim.hardware import HardwareConfig
from accel_sim.lifetimes import PeakMemory, peak_memory
from accel_sim.report import CostReport
from accel_sim.simulate import simulate
from accel_sim.trace_schema import Trace
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.methods import MethodConfig, parse_method
from workloads.model_spec import ModelSpec, as_spec, build, example_batch
from workloads.trace import capture

TRACE_WORD_BYTES = 4  # traces are captured in float32


def simulate_complete(trace: Trace, hw: HardwareConfig, what: str) -> CostReport:
    """``simulate(trace, hw)``, refusing a trace with ops that have no lowering: accel_sim would
    count them as 0 cycles, and bench must not report a figure that silently leaves work out."""
    report = simulate(trace, hw)
    missing = report.unsupported_ops()
    if missing:
        raise ValueError(f"{what}: {sum(missing.values())} op(s) have no lowering and would be priced at 0 cycles "
                         f"({missing}); add them to LOWERINGS in workloads/lowering.py")
    return report


def local_training_trace(model_name: str | ModelSpec, method_name: str, *, batch_size: int = 64,
                         num_classes: int = 100, image_size: int = 32, norm: str = "bn", hp: Hparams | None = None,
                         seed: int = 0) -> Trace:
    """One steady-state local SGD step of ``method_name`` (e.g. "fedavg", "spherefed", "fedprox").

    ``model_name``: a name (3 x image_size x image_size inputs) or a ``ModelSpec`` (its own shape)."""
    method = parse_method(method_name)
    if method.calibration:
        raise ValueError(f"{method_name!r}: a training step has no calibration; drop '+{method.calibration}'")
    hp = replace(hp or Hparams(), batch_size=batch_size)
    spec = as_spec(model_name, image_size)
    torch.manual_seed(seed)
    model = build(spec, num_classes=num_classes, norm=norm, spherefed=method.spherefed)
    meta = {"classes": num_classes, "image_size": spec.input_shape[-1], "norm": norm, "lr": hp.lr, "device": "meta"}
    return training_step_trace(model, method, example_batch(spec, batch_size),
                               torch.zeros(batch_size, dtype=torch.long, device="meta"),
                               hp=hp, seed=seed, model_name=spec.name, meta=meta)


def training_step_trace(model: nn.Module, method: MethodConfig, x: torch.Tensor, y: torch.Tensor, *, hp: Hparams,
                        seed: int, model_name: str, meta: dict) -> Trace:
    """The FL client trainer's steady-state step on a ``meta`` copy of an FLNet ``model`` (prepared
    here for ``method``: SphereFed's fixed head, FedBABU's frozen head, ...), for batch ``(x, y)``."""
    model = prepare_model(model, method, seed=seed).to("meta").train()
    trainer = client_trainer(model, model.state_dict(), hp, method)
    x, y = x.to("meta"), y.to("meta")
    trainer.step(x, y)  # warm-up: creates the momentum buffers
    return capture(trainer.step, x, y, model=model, model_name=model_name, method=method.name,
                   batch_size=len(x), meta=meta).trace


def peak_memory_at_word_bytes(trace: Trace, word_bytes: int) -> PeakMemory:
    """Peak memory if every floating-point storage held ``word_bytes``-byte words instead of 4.

    Integer storages (labels, max-pool indices) keep their size. Used by the word-size sweep; at
    4 it is the trace's own peak.
    """
    float_storages = {t.storage for t in trace.header.tensors if t.dtype.startswith("float")}
    storages = [
        replace(s, bytes=s.bytes * word_bytes // TRACE_WORD_BYTES) if s.id in float_storages else s
        for s in trace.header.storages
    ]
    return peak_memory(storages, trace.ops)

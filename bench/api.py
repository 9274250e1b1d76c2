"""``price(model, example_input, target)``: what one local training step of an FL method costs on a
modeled accelerator, for any ``nn.Module`` (docs/byom.md).

    >>> from bench import price
    >>> cost = price(net, torch.zeros(8, 3, 32, 32), torch.zeros(8, dtype=torch.long),
    ...              method="fedavg+spherefed", hw="configs/hw/gemmini_like.toml")
    >>> cost.latency_s, cost.energy_j, cost.peak_memory_bytes
    >>> cost.layers                          # pandas DataFrame: one row per layer and phase

The model is wrapped exactly as the CLIs wrap a ``package.module:factory`` model
(``workloads.model_spec.wrap_module``: its last ``nn.Linear``, or ``classifier=``, becomes the
FL methods' bias-free classifier), on a copy: the caller's model is not modified. The step is the
federated loop's own client step (``workloads.cost.step.local_step_trace``), captured on the
``meta`` device and priced by ``accel_sim.simulate``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from accel_sim.hardware import HardwareConfig, load_hardware_config
from accel_sim.report import CostReport
from accel_sim.trace_schema import Trace
from iokit import checks
from workloads.fl.hparams import Hparams
from workloads.fl.methods import parse_method
from workloads.cost.step import local_step_trace, simulate_complete
from workloads.model_spec import ModelSpecError, find_classifier, wrap_module

LAYER_COLUMNS = ("layer", "phase", "macs", "total_cycles", "latency_s", "energy_j")


@dataclass(frozen=True, eq=False)
class PriceReport:
    """The cost of one local training step (units in the names; ``report`` has every op)."""

    method: str
    batch_size: int
    latency_s: float
    total_cycles: int
    energy_j: float
    peak_memory_bytes: int
    macs: int
    layers: pd.DataFrame  # LAYER_COLUMNS, one row per layer and phase, in order of first appearance
    report: CostReport
    trace: Trace


def layer_table(report: CostReport) -> pd.DataFrame:
    """Per layer and phase: MACs, cycles, latency and energy of ``report`` (``CostReport.by_layer_phase``)."""
    table = pd.DataFrame([{"layer": layer, "phase": phase, "macs": t.macs, "total_cycles": t.total_cycles,
                           "energy_j": t.energy_j} for (layer, phase), t in report.by_layer_phase().items()],
                         columns=["layer", "phase", "macs", "total_cycles", "energy_j"])
    table["latency_s"] = table["total_cycles"] / report.hw.clock_hz
    return table[list(LAYER_COLUMNS)]


def price(model: nn.Module, example_input: torch.Tensor, target: torch.Tensor | None = None, *,
          method: str = "fedavg", hw: str | Path | HardwareConfig | None = None, classifier: str | None = None,
          hp: Hparams | None = None, seed: int = 0) -> PriceReport:
    """Price one local SGD step of ``method`` on ``model`` for the batch ``example_input`` (its
    first dimension is the batch) with labels ``target`` (class indices; only the shape matters:
    the step runs on ``meta``). ``hw``: a hardware TOML path, a ``HardwareConfig`` or None (the
    paper's accelerator). ``hp``: the FL hyper-parameters (default ``Hparams()``, Table 16).

    The class count is the classifier's ``out_features``. Raises ``ModelSpecError`` (a
    ``ValueError``) with the fix when the model cannot be wrapped, ``ValueError`` for a method with
    a calibration (price those with ``python -m bench.run``).
    """
    if not isinstance(method, str):
        raise ValueError(f"method = {method!r}: give a method name such as \"fedavg\" or \"fedprox+spherefed\"")
    checks.integer_in(seed, 0, checks.SEED_MAX, name="seed")
    cfg = parse_method(method)
    hardware = hw if isinstance(hw, HardwareConfig) else (load_hardware_config(hw) if hw else HardwareConfig())
    if not isinstance(example_input, torch.Tensor) or example_input.dim() < 2:
        raise ModelSpecError("example_input must be a batch tensor [B, ...] (e.g. torch.zeros(8, 3, 32, 32))")
    batch, shape = example_input.shape[0], tuple(example_input.shape[1:])
    if target is not None and tuple(target.shape) != (batch,):
        raise ModelSpecError(f"target must hold one class index per sample, shape ({batch},); got {tuple(target.shape)}")
    if not isinstance(model, nn.Module):
        raise ModelSpecError(f"model is a {type(model).__name__}, not an nn.Module")
    name = type(model).__name__
    num_classes = find_classifier(model, classifier, name)[1].out_features
    wrapped = wrap_module(copy.deepcopy(model), num_classes=num_classes, head=cfg.head,
                          input_shape=shape, classifier=classifier, model_name=name)
    trace = local_step_trace(lambda: wrapped, cfg, hp or Hparams(), batch_size=batch, input_shape=shape, seed=seed,
                             model_name=name, meta={"classes": num_classes})
    report = simulate_complete(trace, hardware, f"{name} {cfg.name} training step")
    return PriceReport(method=cfg.name, batch_size=batch, latency_s=report.latency_s, total_cycles=report.total_cycles,
                       energy_j=report.energy_j, peak_memory_bytes=report.peak_memory_bytes, macs=report.macs,
                       layers=layer_table(report), report=report, trace=trace)

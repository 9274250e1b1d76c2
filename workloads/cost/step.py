"""One local training step of an FL method, captured and priced.

The step is the federated loop's own (``workloads.fl.local.client_trainer(...).step``: the
method's model preparation, loss, penalty and SGD over the trainable parameters, with what its
method receives each round and keeps between rounds) on the model the
run builds (``model_fn``), with the run's hyper-parameters (learning rate, momentum, weight decay,
penalty) and a batch of the run's shapes, captured in its steady state by
``workloads.capture.capture_step`` on the ``meta`` device (docs/trace.md): the same program
whatever device the run itself uses.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn

from accel_sim.hardware import HardwareConfig
from accel_sim.report import CostReport
from accel_sim.simulate import simulate
from accel_sim.trace_schema import Trace
from workloads import model_spec
from workloads.capture import HeldStep, capture, capture_step
from workloads.fl.hparams import Hparams
from workloads.fl.local import (ClientContext, ClientTrainer, client_trainer, example_received, loss_function,
                                prepare_model)
from workloads.fl.methods import MethodConfig, parse_method
from workloads.fl.methods.base import FedAvg
from workloads.fl.width import submodel
from workloads.model_spec import ModelSpec


def simulate_complete(trace: Trace, hw: HardwareConfig, what: str) -> CostReport:
    """``simulate(trace, hw)``, refusing a trace with ops that have no lowering: accel_sim would
    count them as 0 cycles, and no figure may silently leave work out."""
    report = simulate(trace, hw)
    missing = report.unsupported_ops()
    if missing:
        raise ValueError(f"{what}: {sum(missing.values())} op(s) have no lowering and would be priced at 0 cycles "
                         f"({missing}); add them to LOWERINGS in workloads/capture/lowering.py")
    return report


def local_step_trace(model_fn: Callable[[], nn.Module], method: MethodConfig, hp: Hparams, *, batch_size: int,
                     input_shape: Sequence[int], round: int = 1, seed: int = 0, model_name: str = "",
                     meta: dict | None = None, label: str | None = None, width: float = 1.0) -> Trace:
    """One steady-state local SGD step of ``method`` with ``hp`` at ``batch_size`` on inputs of
    ``input_shape`` (C, H, W). The step receives the method's ``extra_downloads`` of ``round``
    (FedCos's d_t from round 2, SCAFFOLD's c; zeros of their shapes), the client's state
    (``initial_client_state``: SCAFFOLD's c_i, MOON's previous model) and an anchored method's copy
    of the downloaded model (``ClientTrainer.held``): all three are resident from the step's start
    to its end, in its peak memory whether or not the step reads them (SCAFFOLD's copy is read
    only after training), and what the step reads is in its compute. ``label``: the method's name
    in the trace (default its canonical name). ``width``: the submodel a width-scaled method's
    client of that width trains (``workloads.fl.width.submodel``: its narrower tensors, so its MACs
    and memory)."""
    if method.calibration:
        raise ValueError(f"{method.name!r}: a training step has no calibration; price the calibration on its own")
    hp = hp.with_knobs(method.knobs).replace(batch_size=batch_size)  # the method's knobs' defaults where ``hp`` lacks them
    torch.manual_seed(seed)
    model = prepare_model(model_fn(), method, seed=seed).train()
    if width < 1.0:
        model = submodel(model, width).train()

    def make_step(step_model: nn.Module) -> HeldStep:
        received = example_received(step_model, method, hp, round)
        return held_step(client_trainer(step_model, step_model.state_dict(), hp, method,
                                        ClientContext(round=round, received=received, width=width)))

    x = torch.zeros(batch_size, *input_shape)
    y = torch.zeros(batch_size, dtype=torch.long)
    return capture_step(make_step, model, x, y, model_name=model_name, method=label or method.name,
                        batch_size=batch_size,
                        meta={"input_shape": list(input_shape), "lr": hp.lr, "momentum": hp.momentum,
                              "weight_decay": hp.weight_decay, **({"width": width} if width < 1 else {}),
                              **(meta or {})})


def held_step(trainer: ClientTrainer) -> HeldStep:
    """A client trainer's step as a priced step factory returns it: with what the client holds
    through it (``ClientTrainer.held``), resident in the captured trace."""
    return HeldStep(trainer.step, trainer.held())


def method_step_trace(model: str | ModelSpec, method: str | MethodConfig, *, hp: Hparams | None = None,
                      batch_size: int = 64, num_classes: int = 100, image_size: int = 32, norm: str = "bn",
                      seed: int = 0) -> Trace:
    """One steady-state local step of ``method`` (e.g. "fedavg", "spherefed", "fedprox") on
    ``model`` (a name at 3 x image_size x image_size, or a ``ModelSpec`` at its own input shape:
    docs/byom.md) with ``hp`` (default: SphereFed appendix Tab. 16, ``Hparams()``)."""
    label = method if isinstance(method, str) else method.name
    method = parse_method(method) if isinstance(method, str) else method
    spec = model_spec.as_spec(model, image_size)
    return local_step_trace(
        lambda: model_spec.build(spec, num_classes=num_classes, norm=norm, head=method.head),
        method, hp or Hparams(), batch_size=batch_size, input_shape=spec.input_shape, seed=seed,
        model_name=spec.name, meta={"classes": num_classes, "image_size": spec.input_shape[-1], "norm": norm},
        label=label)


def method_setup(method: str, model: str | ModelSpec, *, num_classes: int, image_size: int, norm: str = "bn"):
    """(model, loss_fn) of one FL method's local training as the accuracy runs build them
    (``parse_method``, ``prepare_model`` with seed 0, ``loss_function``): FedAvg's trainable
    classifier and cross-entropy; SphereFed's FeatureNorm before a frozen orthonormal classifier
    and MSE against one-hot targets (Dong et al., ECCV 2022, Eq. 4-5)."""
    cfg = parse_method(method)
    if cfg.calibration:
        raise ValueError(f"{method!r}: a calibration has no training step of its own")
    built = model_spec.build(model_spec.as_spec(model, image_size), num_classes=num_classes, norm=norm,
                             head=cfg.head)
    return prepare_model(built, cfg, seed=0), loss_function(cfg)


@dataclass(frozen=True)
class StepPrice:
    """What one captured step costs on one accelerator."""

    latency_s: float
    energy_j: float  # all of it: dynamic + static power x latency
    peak_memory_bytes: int

    @staticmethod
    def of(report: CostReport) -> "StepPrice":
        return StepPrice(report.latency_s, report.energy_j, report.peak_memory_bytes)


def after_training_price(method: MethodConfig, hp: Hparams, round: int, model: nn.Module,
                         hw: HardwareConfig) -> StepPrice:
    """The method's ``after_training`` hook of round ``round`` (SCAFFOLD's c_i+ and Delta c_i,
    FedDyn's gradient term, MOON's copy of its model) on ``hw``: captured on a ``meta`` copy of
    ``model`` (the method's prepared model) with what the client receives that round
    (``example_received``) and the state it keeps; FedAvg's (nothing) costs nothing. The one price
    of the hook, for ``bench.fl``'s ledger (``RunPricer.after_training``) and the Flower app's meter."""
    if type(method.algo).after_training is FedAvg.after_training:
        return StepPrice(0.0, 0.0, 0)
    hp = hp.with_knobs(method.knobs)  # the method's knobs: their defaults where ``hp`` lacks them
    model = copy.deepcopy(model).to("meta").train()
    received = example_received(model, method.training, hp, round)
    trainer = client_trainer(model, model.state_dict(), hp, method.training, ClientContext(round, received))
    captured = capture(method.algo.after_training, model, trainer.ctx, 1, hp, model=model, default_phase="update")
    return StepPrice.of(simulate_complete(captured.trace, hw, f"{method.name} after training"))

"""One local training step of an FL method, captured on the ``meta`` device, and its price.

The step is the federated loop's own (``workloads.fl.local.client_trainer(...).step``: the
method's model preparation, loss, penalty and SGD over the trainable parameters) on the model the
run builds (``model_fn``), with the run's hyper-parameters and a batch of the run's shapes. It is
the steady-state step: the SGD momentum buffers exist, as after a first step (they are created
directly, which gives the same trace as an uncaptured warm-up step at half the capture time;
``tests/test_round_cost.py`` checks the two agree op for op). Capturing on ``meta`` runs the same
aten ops with no arithmetic (docs/trace.md), so batch values do not matter, and the trace is the
same program whatever device the run itself uses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch
from torch import nn

from accel_sim.hardware import HardwareConfig
from accel_sim.report import CostReport
from accel_sim.simulate import simulate
from accel_sim.trace_schema import Trace
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.methods import MethodConfig
from workloads.trace import capture


def simulate_complete(trace: Trace, hw: HardwareConfig, what: str) -> CostReport:
    """``simulate(trace, hw)``, refusing a trace with ops that have no lowering: accel_sim would
    count them as 0 cycles, and no figure may silently leave work out."""
    report = simulate(trace, hw)
    missing = report.unsupported_ops()
    if missing:
        raise ValueError(f"{what}: {sum(missing.values())} op(s) have no lowering and would be priced at 0 cycles "
                         f"({missing}); add them to LOWERINGS in workloads/lowering.py")
    return report


def local_step_trace(model_fn: Callable[[], nn.Module], method: MethodConfig, hp: Hparams, *, batch_size: int,
                     input_shape: Sequence[int], round: int = 1, seed: int = 0, model_name: str = "",
                     meta: dict | None = None) -> Trace:
    """One steady-state local SGD step of ``method`` at ``batch_size`` on inputs of ``input_shape``
    (C, H, W). ``round`` > 1 gives FedCos its direction d_t (zero in round 1, as in the loop)."""
    if method.calibration:
        raise ValueError(f"{method.name!r}: a training step has no calibration; price the calibration on its own")
    hp = replace(hp, batch_size=batch_size)
    torch.manual_seed(seed)
    model = prepare_model(model_fn(), method, seed=seed).to("meta").train()
    state = model.state_dict()
    direction = None
    if method.algo.needs_direction and round > 1:
        direction = {name: torch.zeros_like(p) for name, p in model.named_parameters() if p.requires_grad}
    trainer = client_trainer(model, state, hp, method, round=round, direction=direction)
    create_momentum_buffers(trainer.optimizer)
    x = torch.zeros(batch_size, *input_shape, device="meta")
    y = torch.zeros(batch_size, dtype=torch.long, device="meta")
    return capture(trainer.step, x, y, model=model, model_name=model_name, method=method.name,
                   batch_size=batch_size, meta={"input_shape": list(input_shape), "lr": hp.lr, "device": "meta",
                                                **(meta or {})}).trace


def create_momentum_buffers(optimizer: torch.optim.SGD) -> None:
    """Give every parameter the momentum buffer SGD creates in its first step (none without momentum)."""
    for group in optimizer.param_groups:
        if group["momentum"]:
            for p in group["params"]:
                optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)


@dataclass(frozen=True)
class StepPrice:
    """What one captured step costs on one accelerator."""

    latency_s: float
    energy_j: float  # all of it: dynamic + static power x latency
    peak_memory_bytes: int

    @staticmethod
    def of(report: CostReport) -> "StepPrice":
        return StepPrice(report.latency_s, report.energy_j, report.peak_memory_bytes)

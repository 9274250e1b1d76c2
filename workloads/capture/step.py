"""One steady-state training step, captured: the one path by which every priced step is taken.

Every figure of a training step (bench's paper-shape steps, each round of a federated run, the
Flower mod's steps, ``bench.price`` and ``python -m bench.capture``) comes from ``capture_step``:

1. the model is copied to ``device`` (``meta`` by default: the same aten ops and shapes as the CPU,
   no arithmetic, so a MobileNetV2 step at batch 64 costs no memory), under
   ``torch.random.fork_rng`` so that the caller's model, optimizer and CPU random stream are left
   exactly as they were;
2. ``make_step(copy)`` builds the step (the caller's optimizer and loss, with the run's own
   hyper-parameters: learning rate, momentum, weight decay, penalty), optionally as a ``HeldStep``
   naming the tensors it holds through the step (resident in the trace whether or not it reads them);
3. one uncaptured warm-up step creates the optimizer's state (SGD's momentum buffers appear in its
   first step), so the captured step is the steady state every later step repeats;
4. one step is captured (``workloads.capture.engine.capture``).

``capture_training_step`` is the same for a plain ``zero_grad / forward / loss / backward /
optimizer.step`` with a given optimizer (its class and settings copied, ``foreach=False`` so that
each parameter's update is its own op).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from accel_sim.trace_schema import Trace
from workloads.capture.engine import capture, layer_scope

StepFactory = Callable[[nn.Module], Callable[..., Any]]


@dataclass(frozen=True)
class HeldStep:
    """A step, with the tensors it holds through itself whether or not it reads them (an FL
    method's copy of the global model, its state, what it received): a ``StepFactory`` may return
    one, and ``capture_step`` prices them as resident (``capture``'s ``held``)."""

    step: Callable[..., Any]
    held: tuple[torch.Tensor, ...] = ()

    def __call__(self, *args: torch.Tensor) -> Any:
        return self.step(*args)


def capture_step(make_step: StepFactory, model: nn.Module, *args: torch.Tensor, device: str = "meta",
                 model_name: str = "", method: str = "", batch_size: int | None = None,
                 meta: dict | None = None) -> Trace:
    """The trace of one steady-state step ``make_step(copy_of_model)(*args)`` (module doc).
    ``batch_size`` defaults to the first dimension of the first argument."""
    if device not in ("meta", "cpu"):
        raise ValueError(f"device {device!r} is not supported; expected 'meta' or 'cpu'")
    with torch.random.fork_rng(devices=[]):
        step_model = copy.deepcopy(model).to(device)
        step = make_step(step_model)
        step_args = [a.to(device) for a in args]
        step(*step_args)  # warm-up, not captured: the optimizer's state exists from here on
        if batch_size is None:
            batch_size = int(args[0].shape[0]) if args and args[0].dim() else 0
        return capture(step, *step_args, model=step_model, model_name=model_name, method=method,
                       batch_size=batch_size, meta={"device": device, **(meta or {})},
                       held=step.held if isinstance(step, HeldStep) else ()).trace


def training_step(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                  loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """One local training step: zero_grad, forward, loss, backward, optimizer step."""
    optimizer.zero_grad(set_to_none=True)
    outputs = model(inputs)
    with layer_scope("loss"):
        loss = loss_fn(outputs, targets)
    loss.backward()
    optimizer.step()
    return loss.detach()


def optimizer_like(optimizer: torch.optim.Optimizer, model: nn.Module, copy_model: nn.Module) -> torch.optim.Optimizer:
    """An optimizer of ``optimizer``'s class and hyper-parameters over ``copy_model``'s parameters
    (``model``'s, position for position), with the per-parameter (``foreach=False``) implementation
    whose ops name each parameter."""
    index = {id(p): i for i, p in enumerate(model.parameters())}
    params = list(copy_model.parameters())
    groups = []
    for group in optimizer.param_groups:
        if any(id(p) not in index for p in group["params"]):
            raise ValueError("the optimizer holds parameters that are not the model's; build it from model.parameters()")
        settings = {k: v for k, v in group.items() if k != "params"}
        if "foreach" in settings:
            settings["foreach"] = False
        groups.append({**settings, "params": [params[index[id(p)]] for p in group["params"]]})
    defaults = {**optimizer.defaults, **({"foreach": False} if "foreach" in optimizer.defaults else {})}
    return type(optimizer)(groups, **defaults)


def capture_training_step(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *,
                          loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                          optimizer: torch.optim.Optimizer, device: str = "meta", model_name: str = "",
                          method: str = "", meta: dict | None = None) -> Trace:
    """``capture_step`` of a plain ``training_step`` with a copy of ``optimizer``; ``model`` and
    ``optimizer`` are left untouched."""

    def make_step(step_model: nn.Module):
        step_optimizer = optimizer_like(optimizer, model, step_model)
        return lambda x, y: training_step(step_model, x, y, loss_fn, step_optimizer)

    facts = {"input_shape": list(inputs.shape), "optimizer": type(optimizer).__name__,
             "loss": getattr(loss_fn, "__name__", type(loss_fn).__name__), **(meta or {})}
    return capture_step(make_step, model, inputs, targets, device=device, model_name=model_name, method=method,
                        meta=facts)

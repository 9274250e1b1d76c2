"""Traces bench prices: one local training step of an FL method by model name at the paper's shapes.

``local_training_trace`` builds the model by name and captures the federated loop's own step with
``workloads.fl.step_cost.local_step_trace`` (the steady-state step, momentum buffers in place,
captured on the ``meta`` device), with the method's hyper-parameters (``workloads.fl.hparams.Hparams``: SphereFed appendix
Table 16) and a batch at CIFAR-100's shapes (3x32x32, 100 classes, B = 64) unless told otherwise.
"""

from __future__ import annotations

from accel_sim.trace_schema import Trace
from workloads.fl.hparams import Hparams
from workloads.fl.methods import parse_method
from workloads.fl.step_cost import local_step_trace
from workloads.model_spec import ModelSpec, as_spec, build


def local_training_trace(model_name: str | ModelSpec, method_name: str, *, batch_size: int = 64,
                         num_classes: int = 100, image_size: int = 32, norm: str = "bn", hp: Hparams | None = None,
                         seed: int = 0) -> Trace:
    """One steady-state local SGD step of ``method_name`` (e.g. "fedavg", "spherefed", "fedprox") on
    model ``model_name`` at CIFAR-like shapes (3 x image_size x image_size), or on a
    ``workloads.model_spec.ModelSpec`` at its own input shape (docs/byom.md)."""
    method = parse_method(method_name)
    spec = as_spec(model_name, image_size)
    return local_step_trace(
        lambda: build(spec, num_classes=num_classes, norm=norm, spherefed=method.spherefed),
        method, hp or Hparams(), batch_size=batch_size, input_shape=spec.input_shape, seed=seed,
        model_name=spec.name, meta={"classes": num_classes, "image_size": spec.input_shape[-1], "norm": norm})

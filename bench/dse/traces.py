"""The traces a design-space exploration prices, each captured once (on the ``meta`` device).

* a training method (``fedavg``, ``spherefed``, ``fedprox``, ...): one steady-state local step,
  ``workloads.cost.step.method_step_trace``, the trace ``bench.run`` prices for Fig. 5 (b, c);
* a calibration (``ccvr``, ``ffc``): one client-statistics batch of it on the model of the method
  it calibrates (its ``trained_with``: CCVR on FedAvg's, FFC on SphereFed's),
  the unit ``workloads.cost.calibration`` extrapolates a client's whole calibration from. A
  client's full calibration (all its batches) and the server's part are not re-priced per point.
"""

from __future__ import annotations

from accel_sim.trace_schema import Trace
from workloads.cost.step import method_setup, method_step_trace
from workloads.fl.hparams import Hparams
from workloads.fl.methods import is_calibration
from workloads.model_spec import as_spec, example_batch


def calibration_batch_trace(calibration: str, model: str, *, batch_size: int, num_classes: int,
                            image_size: int) -> Trace:
    """One client-statistics batch of ``calibration`` (module doc)."""
    import torch

    from workloads.capture import capture
    from workloads.fl.methods import calibration_named

    calib = calibration_named(calibration)
    net, _ = method_setup(calib.trained_with, model, num_classes=num_classes, image_size=image_size)
    net = net.to("meta").eval()
    x = example_batch(as_spec(model, image_size), batch_size)
    y = torch.zeros(batch_size, dtype=torch.long, device="meta")

    def statistics(batches):
        return calib.client_statistics(net, batches, num_classes=num_classes, hp=Hparams(declared=calib.knobs))

    return capture(statistics, [(x, y)], model=net, default_phase="calibration").trace


def method_trace(model: str, method: str, *, batch_size: int, num_classes: int, image_size: int) -> Trace:
    """The trace of ``method`` on ``model`` (module doc)."""
    if is_calibration(method):
        return calibration_batch_trace(method, model, batch_size=batch_size, num_classes=num_classes,
                                       image_size=image_size)
    return method_step_trace(model, method, batch_size=batch_size, num_classes=num_classes, image_size=image_size)

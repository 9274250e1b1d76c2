"""PyTorch -> op trace: the capture engine (``engine``), the lowering of aten ops to work
(``lowering``, the ``LOWERINGS`` registry) and the one steady-state step capture (``step``).
Imports nothing of ``workloads.fl``."""

from workloads.capture.engine import Captured, capture, layer_scope, macs, summary, vector_elements
from workloads.capture.step import HeldStep, capture_step, capture_training_step, training_step

__all__ = ["Captured", "HeldStep", "capture", "capture_step", "capture_training_step", "layer_scope", "macs", "summary",
           "training_step", "vector_elements"]

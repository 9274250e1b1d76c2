"""PyTorch -> op trace: the capture engine (``engine``), the lowering of aten ops to work
(``lowering``, the ``LOWERINGS`` registry), the one steady-state step capture (``step``) and what a
trace holds, counted (``queries``).
Imports nothing of ``workloads.fl``."""

from workloads.capture.engine import Captured, capture, layer_scope
from workloads.capture.queries import macs, summary, vector_elements
from workloads.capture.step import HeldStep, capture_step, capture_training_step, training_step

__all__ = ["Captured", "HeldStep", "capture", "capture_step", "capture_training_step", "layer_scope", "macs", "summary",
           "training_step", "vector_elements"]

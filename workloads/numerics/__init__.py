"""Training in the accelerator's number formats: rounding (``quantize``) and its application to
every GEMM of a training step (``emulate``). Formats are named as in ``accel_sim.formats`` (the one
vocabulary of the hardware model and the training runs; this package is the federated code's only
door to it)."""

from accel_sim.formats import NumberFormat, NumberFormatError

__all__ = ["NumberFormat", "NumberFormatError"]

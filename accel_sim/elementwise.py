"""The few operations the cost formulas need, on Python numbers or numpy arrays alike.

A formula of ``accel_sim.effects`` is evaluated on one hardware point (``simulate``: Python
numbers, or arrays over the folds of one GEMM) and on many at once (``accel_sim.batch``: arrays
over GEMMs x points). On numbers these are Python's own ``max`` / ``min`` / conditional /
``math.ceil``, so the scalar path keeps Python's exact integers and its speed; on arrays numpy's.
Both give the same value for the same inputs.
"""

from __future__ import annotations

import math

import numpy as np


def _any_array(*values) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def maximum(a, b):
    """Elementwise ``max(a, b)``."""
    return np.maximum(a, b) if _any_array(a, b) else max(a, b)


def minimum(a, b):
    """Elementwise ``min(a, b)``."""
    return np.minimum(a, b) if _any_array(a, b) else min(a, b)


def where(condition, a, b):
    """Elementwise ``a if condition else b``."""
    return np.where(condition, a, b) if _any_array(condition, a, b) else (a if condition else b)


def logical_not(condition):
    """Elementwise ``not condition`` (``~`` would turn a Python ``True`` into ``-2``)."""
    return np.logical_not(condition) if _any_array(condition) else not condition


def ceil_cycles(cycles):
    """Whole cycles: ``ceil(cycles - 1e-9)`` (the 1e-9 absorbs a division's rounding), as Python
    integers for a number or an object array, int64 for a float array."""
    if not isinstance(cycles, np.ndarray):
        return math.ceil(cycles - 1e-9)
    if cycles.dtype == object:  # past int64 (accel_sim.memory.INT64_SAFE)
        return np.array([math.ceil(x - 1e-9) for x in cycles.reshape(-1)], dtype=object).reshape(cycles.shape)
    return np.ceil(cycles - 1e-9).astype(np.int64)


def ceil_int(x):
    """``ceil(x)`` as an integer: Python's for a number, int64 for an array."""
    return np.ceil(x).astype(np.int64) if isinstance(x, np.ndarray) else math.ceil(x)

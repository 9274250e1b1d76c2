"""The few operations the cost formulas need, on Python numbers or numpy arrays alike.

A formula of ``accel_sim.effects`` is evaluated on one hardware point (``simulate``: Python
numbers, or arrays over the folds of one GEMM) and on many at once (``accel_sim.batch``: arrays
over GEMMs x points). On numbers these are Python's own comparisons, conditional and
``math.ceil``, so the scalar path keeps Python's exact integers and its speed; on arrays numpy's.
Both give the same value for the same inputs.
"""

from __future__ import annotations

import math

import numpy as np


def maximum(a, b):
    """Elementwise ``max(a, b)`` (on numbers: ``a`` unless ``b > a``, as Python's ``max``)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return b if b > a else a


def minimum(a, b):
    """Elementwise ``min(a, b)`` (on numbers: ``a`` unless ``b < a``, as Python's ``min``)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return b if b < a else a


def where(condition, a, b):
    """Elementwise ``a if condition else b``; a single condition (a number) picks ``a`` or ``b``
    whole."""
    return np.where(condition, a, b) if isinstance(condition, np.ndarray) else (a if condition else b)


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

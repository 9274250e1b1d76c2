"""Non-dominated points: the Pareto front of any set of minimized objectives.

A point ``a`` dominates ``b`` when ``a`` is no worse in every objective and better in at least one
(the concept of domination: K. Deb, "Multi-Objective Optimization Using Evolutionary Algorithms",
Wiley 2001, ch. 2). The front is the set of points no point dominates; identical points dominate each other
nowhere, so all copies of a front point are on it. ``tests/test_pareto.py`` checks the defining
properties (no front point is dominated, every other point is dominated by a front point, the
front does not depend on the order of the points) against a brute-force check.
"""

from __future__ import annotations

import numpy as np


def pareto_front(objectives) -> np.ndarray:
    """The non-dominated rows of ``objectives`` (``N x K``, every column minimized; negate a column
    to maximize it), as a boolean mask of length ``N``.

    Rows are visited in lexicographic order; a row can only be dominated by one before it (a
    dominating row is lexicographically smaller), so each row is compared with the front found so
    far: O(N x front size)."""
    values = np.asarray(objectives, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"objectives must be a 2-d array (points x objectives), got shape {values.shape}")
    if np.isnan(values).any():
        raise ValueError("objectives hold NaN: a point without a figure cannot be compared")
    on_front = np.zeros(len(values), dtype=bool)
    front = np.empty((0, values.shape[1]))
    for i in np.lexsort(values.T[::-1]):
        row = values[i]
        no_worse = np.all(front <= row, axis=1)
        if np.any(no_worse & np.any(front < row, axis=1)):
            continue
        on_front[i] = True
        front = np.vstack([front, row])
    return on_front

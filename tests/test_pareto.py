"""``accel_sim.pareto.pareto_front``: the defining properties against a brute-force dominance check,
and a hand-worked case."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_sim.pareto import pareto_front


def dominates(a, b) -> bool:
    return bool(np.all(a <= b) and np.any(a < b))


def test_hand_worked():
    # (latency, energy): (1, 5) and (3, 1) trade off; (2, 2) beats (3, 3) and (2, 4); (1, 5) twice
    points = np.array([[3, 3], [1, 5], [2, 2], [3, 1], [2, 4], [1, 5]])
    assert pareto_front(points).tolist() == [False, True, True, True, False, True]
    assert pareto_front(np.empty((0, 3))).tolist() == []
    with pytest.raises(ValueError, match="NaN"):
        pareto_front([[1.0, np.nan]])


# small integer grids make ties and duplicates common, where the definition is easiest to get wrong
points = st.integers(1, 3).flatmap(lambda k: st.lists(st.lists(st.integers(0, 4), min_size=k, max_size=k),
                                                      min_size=1, max_size=40)).map(np.array)


@settings(max_examples=120, deadline=None)
@given(points, st.randoms(use_true_random=False))
def test_front_properties(values, rng):
    front = pareto_front(values)
    on, off = values[front], values[~front]
    assert front.any()
    # no point on the front is dominated by any point
    assert not any(dominates(q, p) for p in on for q in values)
    # every point off the front is dominated by a point on it
    assert all(any(dominates(q, p) for q in on) for p in off)
    # invariant to the order of the points
    order = list(range(len(values)))
    rng.shuffle(order)
    assert pareto_front(values[order]).tolist() == front[order].tolist()

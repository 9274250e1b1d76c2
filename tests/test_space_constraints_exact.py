"""accel_sim.space constraints use Python's arithmetic exactly (issue 33, item 4).

The property: for random expressions over three integer columns (``+ - * // %``, unary minus,
a comparison, ``not``; constants up to 2**70, beyond int64) and random column values (negative and
beyond 2**53 too), ``Constraint.evaluate`` keeps exactly the points where Python's own integer
arithmetic says the condition holds; where Python divides by zero at some point, it is a
``SpaceError`` naming the constraint. Python's ``eval`` of the generated text (ours, not a user's)
is the independent implementation. Then the issue's own cases, by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_sim.space import SpaceError, space_from_dict
from accel_sim.space_constraints import compile_constraint

NAMES = ("rows", "cols", "a_buffer_bytes")
INT64 = 2**63 - 1

constants = st.one_of(st.integers(-20, 20), st.integers(-(2**70), 2**70))


def expressions(depth: int) -> st.SearchStrategy[str]:
    leaf = st.one_of(st.sampled_from(NAMES), constants.map(lambda c: f"({c})"))
    if depth == 0:
        return leaf
    inner = expressions(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(inner, st.sampled_from(["+", "-", "*", "//", "%"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda e: f"(-{e})"),
    )


conditions = st.tuples(expressions(3), st.sampled_from(["<", "<=", "==", "!=", ">", ">="]), expressions(3),
                       st.booleans()).map(lambda t: f"{'not ' if t[3] else ''}{t[0]} {t[1]} {t[2]}")
columns = st.integers(1, 12).flatmap(lambda n: st.fixed_dictionaries(
    {name: st.lists(st.one_of(st.integers(-50, 50), st.integers(-(2**62), 2**62)), min_size=n, max_size=n)
     for name in NAMES}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditions, columns)
def test_constraints_keep_exactly_what_python_integer_arithmetic_keeps(text, values):
    n = len(values["rows"])
    expected, zero_division = [], False
    for i in range(n):
        try:
            expected.append(bool(eval(text, {"__builtins__": {}}, {k: v[i] for k, v in values.items()})))  # noqa: S307
        except ZeroDivisionError:
            zero_division = True
    constraint = compile_constraint(text)
    arrays = {k: np.asarray(v, dtype=np.int64) for k, v in values.items()}
    if zero_division:
        with pytest.raises(SpaceError, match="divides by zero"):
            constraint.evaluate(arrays, n)
    else:
        assert constraint.evaluate(arrays, n).tolist() == expected


G = 2**32  # 4 GiB


@pytest.mark.parametrize("text, kept", [
    # 4 GiB x 4 GiB = 2**64 = 1.8e19 > 2e12: no pair fits (int64 wrapped 2**64 to 0 and kept them all);
    # 4 GiB x 1 KiB = 4.4e12 > 2e12 too; 1 KiB x 1 KiB = 1,048,576 <= 2e12: the one pair kept
    ("a_buffer_bytes * b_buffer_bytes <= 2e12", [(1024, 1024)]),
    # 2**64 // 2**32 == 2**32 exactly only for the 4 GiB pair (and 1 KiB * 1 KiB // 1 KiB == 1 KiB for the other)
    ("a_buffer_bytes * b_buffer_bytes // b_buffer_bytes == a_buffer_bytes",
     [(1024, 1024), (1024, G), (G, 1024), (G, G)]),
    ("a_buffer_bytes * b_buffer_bytes == 18446744073709551616", [(G, G)]),  # 2**64, beyond int64
])
def test_buffers_beyond_int64_are_exact(text, kept):
    space = space_from_dict({"axes": {"a_buffer_bytes": [1024, G], "b_buffer_bytes": [1024, G]},
                             "constraints": [text]})
    found = [(hw.a_buffer_bytes, hw.b_buffer_bytes) for chunk in space.chunks() for hw in
             (chunk.points.config(i) for i in range(len(chunk)))]
    assert found == kept


@pytest.mark.parametrize("text, message", [
    ("rows // 0 >= 1", "divides by zero"),
    ("rows % (cols - cols) == 0", "divides by zero"),
    ("dataflow_dw + 1 > rows", "combines a name with a number"),
    ("dataflow_dw < 3", "combines a name with a number"),
    ("-dataflow_dw == 'os'", "combines a name with a number"),
    ("rows", "is not a condition"),
    (" + ".join(["rows"] * 20_000) + " > 0", "nested too deeply"),
    ("(" * 5_000 + "rows" + ")" * 5_000 + " > 0", "10,008 characters"),
], ids=lambda v: v if len(v) < 40 else f"{v[:30]}...({len(v)} characters)")
def test_a_constraint_that_cannot_be_evaluated_is_one_line_naming_it(text, message):
    with pytest.raises(SpaceError, match=message) as err:
        space_from_dict({"axes": {"rows": [8, 16], "cols": [8, 16], "dataflow_dw": ["os", "ws"]}, "constraints": [text]})
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_not_and_unary_minus_on_names_and_huge_constants_work():
    space = space_from_dict({"axes": {"rows": [8, 16], "dataflow_dw": ["os", "ws"]},
                             "constraints": ["-rows < -8", "not dataflow_dw == 'os'", f"rows < {2**80}"]})
    assert space.size == 1  # rows 16 (-16 < -8) and dataflow ws


def test_the_size_is_bounded_before_any_point_is_enumerated():
    """9.6e8 points (1,000 x 1,000 x 31 x 31) with a constraint: refused from the axes' lengths alone
    (issue 33, item 9: 4e19 points were walked point by point for 90 s before the size was checked)."""
    axes = {"rows": {"start": 1, "stop": 1000, "step": 1}, "cols": {"start": 1, "stop": 1000, "step": 1},
            "a_buffer_bytes": {"start": 1024, "stop": 2**40, "factor": 2},
            "b_buffer_bytes": {"start": 1024, "stop": 2**40, "factor": 2}}
    for stream in (False, True):
        with pytest.raises(SpaceError, match="961,000,000 points .1,000 x 1,000 x 31 x 31. before the"):
            space_from_dict({"axes": axes, "constraints": ["rows > 1"]}, stream=stream)


@pytest.mark.parametrize("axis, message", [
    ({"start": 1e8, "stop": 2e8, "step": 1e-300}, "more than 100,000 values"),  # (stop - start) / step overflows
    ([1, 1.0], "lists 1.0 more than once .by value."),
])
def test_axis_values_are_bounded_and_distinct_by_value(axis, message):
    with pytest.raises(SpaceError, match=message):
        space_from_dict({"axes": {"clock_hz" if isinstance(axis, dict) else "rows": axis}})

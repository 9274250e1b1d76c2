"""The dataflow registry (``accel_sim.dataflows``): each object's facts follow from its mapping and
agree with the per-name rules the modules used to branch on (SCALE-Sim's table, ``accel_sim.systolic``)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accel_sim.dataflows import DATAFLOWS, Dataflow, dataflow_named


def test_registry_is_scalesims_table():
    # (S_R, S_C, T) of out[2 x 3] = A[2 x 5] . B[5 x 3]: OS (M, N, K), WS (K, N, M), IS (K, M, N)
    assert {name: d.map_gemm(2, 3, 5) for name, d in DATAFLOWS.items()} == {
        "os": (2, 3, 5), "ws": (5, 3, 2), "is": (5, 2, 3)}
    assert {name: d.stationary for name, d in DATAFLOWS.items()} == {"os": "out", "ws": "b", "is": "a"}
    assert [name for name, d in DATAFLOWS.items() if d.preloads] == ["ws", "is"]
    assert [name for name, d in DATAFLOWS.items() if d.partial_sums_span_row_folds] == ["ws", "is"]


def test_operand_layouts():
    # OS streams A along the rows (A^T's K x R blocks) and B along the columns; WS streams A along
    # the rows and holds B; IS holds A and streams B along the rows (SCALE-Sim's prefetch images)
    layouts = {name: (d.operand_layout("a"), d.operand_layout("b")) for name, d in DATAFLOWS.items()}
    assert layouts == {"os": ("rows", "cols"), "ws": ("rows", "stationary"), "is": ("stationary", "rows")}


def test_an_inconsistent_dataflow_is_refused():
    with pytest.raises(ValueError, match="does not hold 'b' stationary"):
        Dataflow("xs", "broken", ("m", "n", "k"), "b")
    with pytest.raises(ValueError, match="unknown dataflow 'rs'; expected one of os, ws, is"):
        dataflow_named("rs")


@given(n=st.integers(1, 40), k=st.integers(1, 40), groups=st.integers(1, 50), rows=st.integers(1, 64),
       cols=st.integers(1, 64))
def test_packing_factor_is_the_rule_per_dataflow(n, k, groups, rows, cols):
    """WS packs while pk <= rows and pn <= cols, IS while pk <= rows, OS while pn <= cols (K streams
    under OS, N under IS); at least one group, at most all of them."""
    expected = {"ws": min(rows // k, cols // n), "is": rows // k, "os": cols // n}
    for name, d in DATAFLOWS.items():
        assert d.packing_factor(n, k, groups, rows=rows, cols=cols) == max(1, min(expected[name], groups))

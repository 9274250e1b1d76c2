"""Compute cycles of the systolic array: hand-computed cases, a register-level cycle-stepping
reference of the array, and properties of the closed form."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_sim.systolic import fold_counts, fold_cycles, gemm_cycles, gemm_summary, map_gemm

# ----------------------------------------------------------------------------- hand-computed, 4 x 4


@pytest.mark.parametrize(
    "m, n, k, dataflow, expected",
    [
        # OS: (S_R, S_C, T) = (10, 6, 5); folds ceil(10/4) * ceil(6/4) = 3 * 2 = 6;
        # fold = R + C + T - 2 = 4 + 4 + 5 - 2 = 11; 6 * 11 = 66
        (10, 6, 5, "os", 66),
        # WS: (S_R, S_C, T) = (5, 6, 10); folds ceil(5/4) * ceil(6/4) = 2 * 2 = 4;
        # fold = 2R + C + T - 2 = 8 + 4 + 10 - 2 = 20; 4 * 20 = 80
        (10, 6, 5, "ws", 80),
        # IS: (S_R, S_C, T) = (5, 10, 6); folds ceil(5/4) * ceil(10/4) = 2 * 3 = 6;
        # fold = 8 + 4 + 6 - 2 = 16; 6 * 16 = 96
        (10, 6, 5, "is", 96),
        # exact fit, OS: one fold of 4 + 4 + 4 - 2 = 10
        (4, 4, 4, "os", 10),
        # a single MAC still pays the whole fill, drain and preload: WS 8 + 4 + 1 - 2 = 11
        (1, 1, 1, "ws", 11),
        # no work, no cycles
        (0, 7, 3, "os", 0),
    ],
)
def test_hand_computed_4x4(m, n, k, dataflow, expected):
    assert gemm_cycles(m, n, k, rows=4, cols=4, dataflow=dataflow) == expected


def test_mapping_and_summary():
    assert map_gemm(2, 3, 5, "os") == (2, 3, 5)
    assert map_gemm(2, 3, 5, "ws") == (5, 3, 2)
    assert map_gemm(2, 3, 5, "is") == (5, 2, 3)
    # paper's array, WS, 64 x 100 x 1280 (the MobileNetV2 classifier at batch 64):
    # (S_R, S_C, T) = (1280, 100, 64): folds 40 * 2 = 80; fold = 64 + 64 + 64 - 2 = 190; 15,200 cycles
    s = gemm_summary(64, 100, 1280, rows=32, cols=64, dataflow="ws")
    assert (s["folds"], s["fold_cycles"], s["compute_cycles"]) == (80, 190, 15_200)
    assert s["utilization"] == pytest.approx(64 * 100 * 1280 / (15_200 * 2048))


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown dataflow 'rs'"):
        gemm_cycles(1, 1, 1, rows=4, cols=4, dataflow="rs")
    with pytest.raises(ValueError, match="at least one row"):
        gemm_cycles(1, 1, 1, rows=0, cols=4, dataflow="os")
    with pytest.raises(ValueError, match=">= 0"):
        gemm_cycles(-1, 1, 1, rows=4, cols=4, dataflow="os")


# ----------------------------------------------------------------------------- cycle-stepping reference
#
# A register-level model of an R x C array, independent of the closed form. Every cycle each
# operand register takes its neighbour's value (left -> right for the streamed operands,
# top -> bottom for B in OS and for partial sums in WS/IS) and each cell does one multiply-add on
# what it holds. The array runs a fixed, data-independent schedule per fold: unused rows/columns
# of an edge fold carry zeros that move like real data. A fold ends at the last cycle that any
# value is still in the array (OS: the last operand pair met in the bottom-right cell; WS/IS: the
# last partial sum left the bottom row). The reference also computes the product, so the schedule
# is checked for correctness, not only counted.


def _step_os_fold(a_blk, b_blk, R, C):
    """a_blk: R x T rows of A (zero padded), b_blk: T x C columns of B. Returns (cycles, R x C out)."""
    T = a_blk.shape[1]
    a_reg = [[None] * C for _ in range(R)]
    b_reg = [[None] * C for _ in range(R)]
    acc = np.zeros((R, C), dtype=np.int64)
    cycle = last_busy = 0
    while True:
        a_new = [[None] * C for _ in range(R)]
        b_new = [[None] * C for _ in range(R)]
        for i in range(R):
            t = cycle - i  # row i of A is skewed by i cycles
            a_new[i][0] = a_blk[i, t] if 0 <= t < T else None
            for j in range(1, C):
                a_new[i][j] = a_reg[i][j - 1]
        for j in range(C):
            t = cycle - j  # column j of B is skewed by j cycles
            b_new[0][j] = b_blk[t, j] if 0 <= t < T else None
            for i in range(1, R):
                b_new[i][j] = b_reg[i - 1][j]
        busy = False
        for i in range(R):
            for j in range(C):
                if a_new[i][j] is not None or b_new[i][j] is not None:
                    busy = True
                if a_new[i][j] is not None and b_new[i][j] is not None:
                    acc[i, j] += a_new[i][j] * b_new[i][j]
        a_reg, b_reg = a_new, b_new
        if busy:
            last_busy = cycle
        elif cycle > T + R + C:  # everything injected has left
            return last_busy + 1, acc
        cycle += 1


def _step_stationary_fold(w_blk, x_blk, R, C):
    """WS / IS: w_blk R x C is held in the cells, x_blk R x T is streamed from the left, partial
    sums flow down. Returns (cycles, T x C out) with out[t, c] = sum_r x[r, t] * w[r, c]."""
    T = x_blk.shape[1]
    # preload: one row of weights enters the top per cycle and everything shifts down
    w_reg = [[None] * C for _ in range(R)]
    cycles = 0
    for p in range(R):
        w_reg = [list(w_blk[R - 1 - p])] + w_reg[:-1]
        cycles += 1
    assert all(list(w_reg[r]) == list(w_blk[r]) for r in range(R))
    x_reg = [[None] * C for _ in range(R)]
    p_reg = [[None] * C for _ in range(R)]  # partial sum leaving each cell (None = no value)
    out = np.zeros((T, C), dtype=np.int64)
    cycle = last_busy = 0
    while True:
        x_new = [[None] * C for _ in range(R)]
        p_new = [[None] * C for _ in range(R)]
        for r in range(R):
            t = cycle - r  # row r of the streamed operand is skewed by r cycles
            x_new[r][0] = x_blk[r, t] if 0 <= t < T else None
            for c in range(1, C):
                x_new[r][c] = x_reg[r][c - 1]
        busy = False
        for r in range(R):
            for c in range(C):
                above = 0 if r == 0 else p_reg[r - 1][c]
                if x_new[r][c] is not None:
                    assert above is not None, "partial sum and input out of step"
                    p_new[r][c] = above + w_reg[r][c] * x_new[r][c]
                    busy = True
        for c in range(C):
            if p_new[R - 1][c] is not None:  # leaves the bottom edge: written
                t = cycle - (R - 1) - c
                out[t, c] = p_new[R - 1][c]
        x_reg, p_reg = x_new, p_new
        if busy:
            last_busy = cycle
        elif cycle > T + R + C:
            return cycles + last_busy + 1, out
        cycle += 1


def _pad(block, shape):
    out = np.zeros(shape, dtype=np.int64)
    out[: block.shape[0], : block.shape[1]] = block
    return out


def stepped_gemm(A, B, R, C, dataflow):
    """Run out = A . B fold by fold (SCALE-Sim's order) on the stepping model: (cycles, out)."""
    m, k = A.shape
    n = B.shape[1]
    s_r, s_c, _ = map_gemm(m, n, k, dataflow)
    out = np.zeros((m, n), dtype=np.int64)
    total = 0
    for fc in range(math.ceil(s_c / C)):
        cs = slice(fc * C, min((fc + 1) * C, s_c))
        for fr in range(math.ceil(s_r / R)):
            rs = slice(fr * R, min((fr + 1) * R, s_r))
            if dataflow == "os":  # rows of out = rows of A, columns of out = columns of B
                cyc, acc = _step_os_fold(_pad(A[rs, :], (R, k)), _pad(B[:, cs], (k, C)), R, C)
                out[rs, cs] += acc[: rs.stop - rs.start, : cs.stop - cs.start]
            elif dataflow == "ws":  # B[K-block, N-block] stationary, A^T[K-block, :] streamed
                cyc, part = _step_stationary_fold(_pad(B[rs, cs], (R, C)), _pad(A[:, rs].T, (R, m)), R, C)
                out[:, cs] += part[:, : cs.stop - cs.start]
            else:  # IS: A^T[K-block, M-block] stationary, B[K-block, :] streamed
                cyc, part = _step_stationary_fold(_pad(A[cs, rs].T, (R, C)), _pad(B[rs, :], (R, n)), R, C)
                out[cs, :] += part[:, : cs.stop - cs.start].T
            total += cyc
    return total, out


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 7),
    n=st.integers(1, 7),
    k=st.integers(1, 7),
    rows=st.integers(1, 4),
    cols=st.integers(1, 4),
    dataflow=st.sampled_from(["os", "ws", "is"]),
    seed=st.integers(0, 2**16),
)
def test_closed_form_equals_cycle_stepping(m, n, k, rows, cols, dataflow, seed):
    rng = np.random.default_rng(seed)
    A = rng.integers(-5, 6, size=(m, k))
    B = rng.integers(-5, 6, size=(k, n))
    cycles, out = stepped_gemm(A, B, rows, cols, dataflow)
    np.testing.assert_array_equal(out, A @ B)  # the schedule really computes the product
    assert cycles == gemm_cycles(m, n, k, rows=rows, cols=cols, dataflow=dataflow)


def test_stepping_on_a_4x4_edge_case():
    # 6 x 5 x 3 on 4 x 4 under each dataflow, partial folds in both directions
    rng = np.random.default_rng(0)
    A, B = rng.integers(-3, 4, size=(6, 3)), rng.integers(-3, 4, size=(3, 5))
    for dataflow in ("os", "ws", "is"):
        cycles, out = stepped_gemm(A, B, 4, 4, dataflow)
        np.testing.assert_array_equal(out, A @ B)
        assert cycles == gemm_cycles(6, 5, 3, rows=4, cols=4, dataflow=dataflow)


# ----------------------------------------------------------------------------- properties

dims = st.integers(1, 3000)
arrays = st.sampled_from([(4, 4), (8, 16), (32, 64), (128, 128), (3, 5)])
dataflows = st.sampled_from(["os", "ws", "is"])


@settings(max_examples=200, deadline=None)
@given(m=dims, n=dims, k=dims, array=arrays, dataflow=dataflows)
def test_work_conserved_across_folds(m, n, k, array, dataflow):
    # enumerate the folds independently (index ranges, not the closed form) and add their MACs
    rows, cols = array
    s_r, s_c, t = map_gemm(m, n, k, dataflow)
    row_blocks = [len(range(s_r)[i : i + rows]) for i in range(0, s_r, rows)]
    col_blocks = [len(range(s_c)[j : j + cols]) for j in range(0, s_c, cols)]
    assert sum(r * c * t for r in row_blocks for c in col_blocks) == m * n * k
    assert (len(row_blocks), len(col_blocks)) == fold_counts(s_r, s_c, rows=rows, cols=cols)
    assert gemm_cycles(m, n, k, rows=rows, cols=cols, dataflow=dataflow) == (
        len(row_blocks) * len(col_blocks) * fold_cycles(t, rows=rows, cols=cols, dataflow=dataflow)
    )


@settings(max_examples=300, deadline=None)
@given(m=dims, n=dims, k=dims, array=arrays, dataflow=dataflows)
def test_cycles_at_least_the_roofline(m, n, k, array, dataflow):
    rows, cols = array
    assert gemm_cycles(m, n, k, rows=rows, cols=cols, dataflow=dataflow) >= math.ceil(m * n * k / (rows * cols))


@settings(max_examples=300, deadline=None)
@given(m=dims, n=dims, k=dims, grow=st.integers(1, 100), which=st.integers(0, 2), array=arrays, dataflow=dataflows)
def test_cycles_never_decrease_as_a_dimension_grows(m, n, k, grow, which, array, dataflow):
    rows, cols = array
    before = gemm_cycles(m, n, k, rows=rows, cols=cols, dataflow=dataflow)
    bigger = [m, n, k]
    bigger[which] += grow
    assert gemm_cycles(*bigger, rows=rows, cols=cols, dataflow=dataflow) >= before

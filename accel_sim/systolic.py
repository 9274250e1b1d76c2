"""Compute cycles of a GEMM on a rows x cols systolic array, in SCALE-Sim 3.0's schedule.

A GEMM is ``out[M x N] = A[M x K] . B[K x N]`` (M x N x K multiply-adds). SCALE-Sim
(``scalesim/compute/systolic_compute_{os,ws,is}.py``) maps it onto the array as three numbers
``(S_R, S_C, T)``: ``S_R`` is spread over the array's rows, ``S_C`` over its columns and ``T`` is
streamed through in time:

=========  ===================  ==========================  ===========================
dataflow   (S_R, S_C, T)        held in the cells            streamed in
=========  ===================  ==========================  ===========================
``os``     (M, N, K)            the outputs out[M x N]       A from the left, B from the top
``ws``     (K, N, M)            a K x N block of B           A from the left; partial sums flow down
``is``     (K, M, N)            a K x M block of A^T         B from the left; partial sums flow down
=========  ===================  ==========================  ===========================

The array works on one ``rows x cols`` block of the ``S_R x S_C`` plane at a time: a *fold*. There
are ``ceil(S_R / rows) * ceil(S_C / cols)`` folds, visited column-fold-major (for each column fold,
every row fold), and the folds do not overlap: each pays the whole pipeline fill and drain, and an
edge fold that uses only part of the array takes as long as a full one (SCALE-Sim pads it with
null requests).

Per-fold timeline (cycles counted from 0; ``R = rows``, ``C = cols``):

* OS (``fold_cycles = R + C + T - 2``): row ``i`` of A enters the left edge skewed by ``i`` cycles
  and moves one cell right per cycle; column ``j`` of B enters the top skewed by ``j`` and moves
  one cell down per cycle; so cell ``(i, j)`` sees ``A[i, t]`` and ``B[t, j]`` together at cycle
  ``t + i + j``. The last pair reaches cell ``(R-1, C-1)`` at ``(T-1) + (R-1) + (C-1)``: the fold
  takes ``T + R + C - 2`` cycles. The finished outputs are read out while the next fold runs
  (SCALE-Sim adds no drain cycles for OS).
* WS (``fold_cycles = 2R + C + T - 2``): first ``R`` cycles shift the stationary ``R x C`` block of
  B down into the cells. Then row ``r`` of the streamed operand (A^T, ``T = M`` long) enters the
  left edge skewed by ``r``; partial sums start at the top row and move one cell down per cycle,
  meeting input ``t`` at cell ``(r, c)`` at stream cycle ``t + r + c``. The last partial sum
  (``t = T-1``, column ``C-1``) leaves the bottom row at stream cycle ``(T-1) + (R-1) + (C-1)``:
  ``R + (T + R + C - 2)`` cycles per fold.
* IS (``fold_cycles = 2R + C + T - 2``): the same as WS with A^T's ``R x C`` block stationary and
  B streamed (``T = N``).

``gemm_cycles = folds * fold_cycles``: the cycles the array is busy with the GEMM. SCALE-Sim 3.0
reports exactly one less as the GEMM's "Total Cycles" (with zero memory stalls): it prints
``max(ofmap_serviced_cycles)``, the 0-based *index* of the cycle in which the last output is
written (``scalesim/memory/double_buffered_scratchpad_mem.py``), not a count. So
``gemm_cycles == SCALE-Sim "Total Cycles" + 1`` for every GEMM (one per GEMM, not per fold; a
depthwise layer that SCALE-Sim splits into ``C`` single-channel layers differs by ``C``).
``tests/test_scalesim_agreement.py`` checks this exactly on SCALE-Sim's recorded outputs, and
``tests/test_systolic.py`` proves the closed form against a register-level cycle-stepping
simulation of the array. A GEMM with a zero dimension does no work and takes 0 cycles.
"""

from __future__ import annotations

from accel_sim.dataflows import dataflow_named


def _check(rows: int, cols: int, dataflow: str) -> None:
    dataflow_named(dataflow)
    if rows < 1 or cols < 1:
        raise ValueError(f"array must have at least one row and one column, got {rows} x {cols}")


def map_gemm(m: int, n: int, k: int, dataflow: str) -> tuple[int, int, int]:
    """SCALE-Sim's mapping of ``out[m x n] = A[m x k] . B[k x n]`` to ``(S_R, S_C, T)``:
    OS ``(m, n, k)``, WS ``(k, n, m)``, IS ``(k, m, n)`` (``accel_sim.dataflows``)."""
    return dataflow_named(dataflow).map_gemm(m, n, k)


def fold_counts(s_r, s_c, *, rows, cols) -> tuple:
    """``(row_folds, col_folds) = (ceil(S_R / rows), ceil(S_C / cols))``, in integer arithmetic,
    on numbers or numpy arrays alike."""
    return -(-s_r // rows), -(-s_c // cols)


def fold_cycles(t: int, *, rows: int, cols: int, dataflow: str) -> int:
    """Cycles of one fold streaming ``T`` operands (see the module docstring for the timeline):
    OS ``rows + cols + T - 2``; WS and IS ``2 rows + cols + T - 2`` (the extra ``rows`` cycles
    preload the stationary block)."""
    _check(rows, cols, dataflow)
    return fold_cycles_of(t, rows, cols, preloads=dataflow_named(dataflow).preloads)


def fold_cycles_of(t, rows, cols, *, preloads: bool):
    """``fold_cycles`` as a formula, on numbers or numpy arrays alike (no checks):
    ``(rows if preloads else 0) + rows + cols - 2 + t``."""
    return (rows if preloads else 0) + rows + cols - 2 + t


def gemm_cycles(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str) -> int:
    """Compute cycles of ``out[m x n] = A[m x k] . B[k x n]`` on a ``rows x cols`` array:
    ``ceil(S_R / rows) * ceil(S_C / cols) * fold_cycles(T)`` with ``(S_R, S_C, T) =
    map_gemm(m, n, k, dataflow)``; SCALE-Sim 3.0 reports this minus one (its last cycle's index,
    module docstring). 0 if any dimension is 0.

    Example (4 x 4 array, OS, m=10, n=6, k=5): folds = ceil(10/4) * ceil(6/4) = 3 * 2 = 6,
    fold = 4 + 4 + 5 - 2 = 11 cycles, total 66 (SCALE-Sim 3.0 prints "Total Cycles" 65).
    """
    _check(rows, cols, dataflow)
    if min(m, n, k) < 0:
        raise ValueError(f"GEMM dimensions must be >= 0, got m={m}, n={n}, k={k}")
    if m == 0 or n == 0 or k == 0:
        return 0
    s_r, s_c, t = map_gemm(m, n, k, dataflow)
    row_folds, col_folds = fold_counts(s_r, s_c, rows=rows, cols=cols)
    return row_folds * col_folds * fold_cycles(t, rows=rows, cols=cols, dataflow=dataflow)


def gemm_summary(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str) -> dict:
    """Everything the ``gemm`` CLI prints: mapping, folds, cycles, MACs and utilization
    (MACs / (cycles x rows x cols))."""
    s_r, s_c, t = map_gemm(m, n, k, dataflow)
    cycles = gemm_cycles(m, n, k, rows=rows, cols=cols, dataflow=dataflow)
    row_folds, col_folds = fold_counts(s_r, s_c, rows=rows, cols=cols) if cycles else (0, 0)
    macs = m * n * k
    return {
        "m": m,
        "n": n,
        "k": k,
        "dataflow": dataflow,
        "rows": rows,
        "cols": cols,
        "s_r": s_r,
        "s_c": s_c,
        "t": t,
        "row_folds": row_folds,
        "col_folds": col_folds,
        "folds": row_folds * col_folds,
        "fold_cycles": fold_cycles(t, rows=rows, cols=cols, dataflow=dataflow) if cycles else 0,
        "compute_cycles": cycles,
        "macs": macs,
        "utilization": macs / (cycles * rows * cols) if cycles else 0.0,
    }

"""``accel_sim.memory``'s fold model for many GEMMs at once, by counting folds instead of listing them.

An *instance* is one (possibly grouped) GEMM on one hardware point. ``gemm_costs_batch`` prices a
numpy vector of instances that share a dataflow and returns, per instance, exactly what
``accel_sim.pricing.price_gemm`` gives under ``memory_model = "on_chip_accumulation"``: compute,
stall and total cycles, DRAM and on-chip buffer bytes. Nothing here is a new model: it is the fold
model of ``accel_sim.memory`` (per-fold traffic by the reuse rules, the pipelined time in its
order-free exact form) with the sums over folds taken in closed form.

Why it can be counted. A fold's traffic depends only on whether it is the first / last row fold
(``fr = 0``, ``fr = Rf - 1``: the latter uses ``S_R - (Rf-1) rows`` rows) and the first / last
column fold: four *row classes* F, M (middle), L, FL (the only one, ``Rf = 1``) times four column
classes. The pipelined time sums, over folds ``i``, a term of ``o_i = load_{i+1} + store_{i-1}``
and the fold's compute, so it needs the multiset of (previous fold's class, next fold's class)
pairs. In SCALE-Sim's fold order (every row fold of a column fold, then the next column fold) a
fold's place in its column is one of nine *situations* (own class, previous in the column, next
in the column, and how many folds are in it, as a function of ``Rf``), and likewise along the
columns; the 81 pairs of situations give every fold of a grid with its neighbours' classes and a
count (``Rf``- and ``Cf``-dependent, zero when impossible). A grouped GEMM runs ``times`` copies
of its grid back to back, then possibly a smaller remainder grid (``accel_sim.pricing.gemm_parts``);
only a grid's first and last folds see a neighbour outside it, and they are counted per copy.

``tests/test_batch.py`` checks every figure against ``accel_sim.pricing`` on random GEMMs and
hardware, cycle for cycle and byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from accel_sim.dataflows import Dataflow
from accel_sim.memory import INT64_SAFE, MAX_FOLDS_PER_OP, per_fold_units_bound, units_to_bytes
from accel_sim.systolic import fold_cycles_of

CLASSES = {"F": (True, False), "M": (False, False), "L": (False, True), "FL": (True, True)}
"""Row (or column) fold classes: (is the first fold, is the last fold)."""

SITUATIONS = (
    # (own class, previous fold's class in the same column / row of folds, next one's; None: the
    # neighbour is across the wrap (or outside the grid)), and the number of such folds for n folds
    ("FL", None, None, lambda n: n == 1),
    ("F", None, "L", lambda n: n == 2),
    ("L", "F", None, lambda n: n == 2),
    ("F", None, "M", lambda n: n >= 3),
    ("M", "F", "L", lambda n: n == 3),
    ("M", "F", "M", lambda n: n >= 4),
    ("M", "M", "M", lambda n: np.maximum(n - 4, 0)),
    ("M", "M", "L", lambda n: n >= 4),
    ("L", "M", None, lambda n: n >= 3),
)
"""Every fold of a line of ``n`` folds is in exactly one situation (their counts sum to ``n``)."""

OUTSIDE = "outside"


def _neighbours(row: tuple, col: tuple) -> tuple:
    """(previous fold's class, next fold's class) of a fold in row situation ``row`` and column
    situation ``col``; a class is (row class, column class), or ``OUTSIDE`` the grid. Folds run
    down a column of folds first: a first row fold's predecessor is the previous column's last
    row fold, a last row fold's successor the next column's first row fold."""
    own_r, prev_r, next_r, _ = row
    own_c, prev_c, next_c, _ = col
    if prev_r is not None:
        prev = (prev_r, own_c)
    elif prev_c is not None:
        prev = ("FL" if own_r == "FL" else "L", prev_c)
    else:
        prev = OUTSIDE
    if next_r is not None:
        nxt = (next_r, own_c)
    elif next_c is not None:
        nxt = ("FL" if own_r == "FL" else "F", next_c)
    else:
        nxt = OUTSIDE
    return prev, nxt


COMBINATIONS = tuple((row, col, *_neighbours(row, col)) for row in SITUATIONS for col in SITUATIONS)
"""(row situation, column situation, previous class, next class) for the 81 pairs."""


class FoldTraffic(NamedTuple):
    """DRAM units a fold loads and stores (arrays over instances)."""

    load: np.ndarray
    store: np.ndarray


@dataclass(frozen=True)
class _Grid:
    """One part of a grouped GEMM (``m x n x k``, ``packed`` groups block-diagonal) on each
    instance's array, with the instance's buffers; traffic in units of ``1 / scale`` bytes."""

    flow: Dataflow
    m: np.ndarray
    k: np.ndarray
    s_r: np.ndarray
    s_c: np.ndarray
    t: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    row_folds: np.ndarray
    col_folds: np.ndarray
    fold_cycles: np.ndarray
    dense: np.ndarray  # units per dense word (A, outputs, partial sums)
    b: np.ndarray  # units per B word (a block-diagonal B moves 1 / packed of each)
    word_bytes: np.ndarray
    packed: np.ndarray
    a_half: np.ndarray
    b_half: np.ndarray
    out_half: np.ndarray

    @staticmethod
    def of(flow: Dataflow, m, n, k, packed, scale, *, rows, cols, word_bytes, a_half, b_half, out_half) -> "_Grid":
        s_r, s_c, t = flow.map_gemm(m, n, k)
        row_folds, col_folds = -(-s_r // rows), -(-s_c // cols)
        return _Grid(flow, m, k, s_r, s_c, t, rows, cols, row_folds, col_folds,
                     fold_cycles_of(t, rows, cols, preloads=flow.preloads),
                     word_bytes * scale, word_bytes * scale // packed, word_bytes, packed, a_half, b_half, out_half)

    def fold_traffic(self, first_r, last_r, first_c, last_c) -> FoldTraffic:
        """(DRAM load, DRAM store) units of a fold of this class (``accel_sim.memory``'s
        ``output_stationary_traffic`` / ``stationary_operand_traffic``, fold by fold)."""
        r = np.where(last_r, self.s_r - (self.row_folds - 1) * self.rows, self.rows)
        c = np.where(last_c, self.s_c - (self.col_folds - 1) * self.cols, self.cols)
        t, wb = self.t, self.word_bytes
        if not self.flow.partial_sums_span_row_folds:  # OS
            a_fits = self.m * self.k * wb <= self.a_half
            b_fits = np.minimum(self.cols, self.s_c) * t * wb <= self.b_half * self.packed
            a_words = np.where(a_fits, r * t * first_c, r * t)
            b_words = np.where(b_fits, c * t * first_r, c * t)
            return FoldTraffic(a_words * self.dense + b_words * self.b, r * c * self.dense)
        if self.flow.stationary == "b":  # WS: A (dense) streamed, its fit in bytes
            stationary, streamed = self.b, self.dense
            streamed_fits = self.s_r * t * wb <= self.a_half
        else:  # IS: B (1 / packed of each word) streamed
            stationary, streamed = self.dense, self.b
            streamed_fits = self.s_r * t * wb <= self.b_half * self.packed
        streamed_words = np.where(streamed_fits, r * t * first_c, r * t)
        psum = c * t
        psum_fits = np.minimum(self.cols, self.s_c) * t * wb <= self.out_half
        stores = np.where(psum_fits, psum * last_r, psum)
        reads = np.where(psum_fits, 0, psum * np.logical_not(first_r))
        return FoldTraffic(r * c * stationary + streamed_words * streamed + reads * self.dense, stores * self.dense)

    def traffic_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """(DRAM load, DRAM store) units of the whole grid: every class times its number of folds."""
        loads = stores = 0
        for row_class, (first_r, last_r) in CLASSES.items():
            n_r = _class_count(row_class, self.row_folds)
            for col_class, (first_c, last_c) in CLASSES.items():
                n = n_r * _class_count(col_class, self.col_folds)
                load, store = self.fold_traffic(first_r, last_r, first_c, last_c)
                loads, stores = loads + n * load, stores + n * store
        return loads, stores

    def sram_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """(read, written) on-chip buffer units of the whole grid, in closed form (the per-fold
        rules of ``accel_sim.memory`` summed: ``sum r = S_R`` per column fold, ``sum c = S_C`` per
        row fold)."""
        s_r, s_c, t = self.s_r, self.s_c, self.t
        if not self.flow.partial_sums_span_row_folds:  # OS: A r x T, B T x c, outputs r x c
            reads = t * self.dense * self.col_folds * s_r + t * self.b * self.row_folds * s_c
            return reads, s_r * s_c * self.dense
        stationary, streamed = (self.b, self.dense) if self.flow.stationary == "b" else (self.dense, self.b)
        reads = (s_r * s_c * stationary + self.col_folds * s_r * t * streamed
                 + (self.row_folds - 1) * s_c * t * self.dense)
        return reads, self.row_folds * s_c * t * self.dense

    def first_fold(self):
        return self.fold_traffic(True, self.row_folds == 1, True, self.col_folds == 1)

    def last_fold(self):
        return self.fold_traffic(self.row_folds == 1, True, self.col_folds == 1, True)


def _class_count(cls: str, folds: np.ndarray) -> np.ndarray:
    """Folds of a row (or column) class among ``folds``: F and L one each when there are two or
    more, M the rest, FL the only one."""
    if cls == "FL":
        return folds == 1
    if cls == "M":
        return np.maximum(folds - 2, 0)
    return folds >= 2


@dataclass(frozen=True)
class GemmCosts:
    """Per instance: what ``accel_sim.pricing.price_gemm`` gives (cycles and bytes, integers)."""

    compute_cycles: np.ndarray
    total_cycles: np.ndarray
    dram_read_bytes: np.ndarray
    dram_write_bytes: np.ndarray
    sram_read_bytes: np.ndarray
    sram_write_bytes: np.ndarray
    folds: np.ndarray


def gemm_parts_batch(flow: Dataflow, n, k, groups, *, rows, cols, block_diagonal):
    """``accel_sim.pricing.gemm_parts`` per instance: the packed groups ``p`` (1 unless the mapping
    is ``block_diagonal`` and there are groups: ``Dataflow.packing_factor``), the copies of the
    ``m x pn x pk`` grid (``groups // p``) and the remainder's groups (``groups % p``, 0: none)."""
    limits = flow.packing_limits(n, k, rows=rows, cols=cols)
    p = np.clip(np.minimum.reduce(limits), 1, groups) if limits else groups
    p = np.where(block_diagonal & (groups > 1), p, 1)
    full, rest = np.divmod(groups, p)
    return p, full, rest


def gemm_folds_batch(flow: Dataflow, m, n, k, groups, *, rows, cols, block_diagonal) -> np.ndarray:
    """Folds the array runs for each instance's GEMM (``accel_sim.pricing.gemm_folds``): the grid's
    ``ceil(S_R / rows) x ceil(S_C / cols)`` per copy, plus the remainder's; 0 for an empty GEMM."""
    m, n, k, groups, rows, cols = (np.asarray(x, dtype=np.int64) for x in (m, n, k, groups, rows, cols))
    empty = (m == 0) | (n == 0) | (k == 0)
    n1, k1 = np.where(empty, 1, n), np.where(empty, 1, k)
    p, full, rest = gemm_parts_batch(flow, n1, k1, groups, rows=rows, cols=cols, block_diagonal=block_diagonal)

    def grid_folds(packed):
        s_r, s_c, _ = flow.map_gemm(m, packed * n1, packed * k1)
        return -(-s_r // rows) * -(-s_c // cols)

    return np.where(empty, 0, full * grid_folds(p) + np.where(rest > 0, grid_folds(np.maximum(rest, 1)), 0))


def gemm_costs_batch(flow: Dataflow, m, n, k, groups, *, rows, cols, word_bytes, a_buffer_bytes, b_buffer_bytes,
                     out_buffer_bytes, block_diagonal, bytes_per_cycle, latency_cycles) -> GemmCosts:
    """The GEMMs ``m x n x k`` (``groups`` of them) on each instance's hardware under ``flow``
    (one dataflow for all; every other argument an array of one entry per instance, or a scalar)
    and the ``on_chip_accumulation`` memory model: ``price_gemm``'s figures (module docstring)."""
    m, n, k, groups, rows, cols, word_bytes = (np.asarray(x, dtype=np.int64) for x in
                                                (m, n, k, groups, rows, cols, word_bytes))
    a_half, b_half, out_half = (np.asarray(x, dtype=np.int64) // 2 for x in (a_buffer_bytes, b_buffer_bytes,
                                                                              out_buffer_bytes))
    empty = (m == 0) | (n == 0) | (k == 0)
    m, n, k = (np.where(empty, 1, x) for x in (m, n, k))  # priced as 1 x 1 x 1, then zeroed
    p, full, rest = gemm_parts_batch(flow, n, k, groups, rows=rows, cols=cols, block_diagonal=block_diagonal)
    has_rest = rest > 0
    rest_groups = np.where(has_rest, rest, 1)
    scale = np.lcm(p, rest_groups)
    longest = np.maximum.reduce([m, n * p, k * p]).astype(np.float64)  # the streamed length is one of them
    if np.any(per_fold_units_bound(rows, cols, longest, word_bytes, scale) * float(MAX_FOLDS_PER_OP) >= INT64_SAFE):
        # beyond int64 (far outside real hardware): the same sums in Python integers
        m, n, k, p, full, rest_groups, scale, rows, cols, word_bytes, a_half, b_half, out_half = (
            np.asarray(x).astype(object) for x in (m, n, k, p, full, rest_groups, scale, rows, cols, word_bytes,
                                                   a_half, b_half, out_half))
    buffers = dict(rows=rows, cols=cols, word_bytes=word_bytes, a_half=a_half, b_half=b_half, out_half=out_half)
    grid = _Grid.of(flow, m, p * n, p * k, p, scale, **buffers)
    rest_grid = _Grid.of(flow, m, rest_groups * n, rest_groups * k, rest_groups, scale, **buffers)
    units_per_cycle = scale * np.asarray(bytes_per_cycle, dtype=np.float64)

    first, last = grid.first_fold(), grid.last_fold()
    rest_first, rest_last = rest_grid.first_fold(), rest_grid.last_fold()
    zero = np.zeros_like(first.load)
    nothing = FoldTraffic(zero, zero)  # before the first fold, after the last
    after_grid = FoldTraffic(np.where(has_rest, rest_first.load, zero), zero)  # after the grid's last copy
    transfer = compute_bound = 0
    for part, times, before, after, part_first, part_last in (
            (grid, full, nothing, after_grid, first, last),
            (rest_grid, has_rest.astype(np.int64), last, nothing, rest_first, rest_last)):
        classes: dict[tuple[str, str], FoldTraffic] = {}

        def traffic(fold) -> FoldTraffic:  # a (row class, column class) of this part, or a fold's traffic
            if isinstance(fold, FoldTraffic):
                return fold
            if fold not in classes:
                classes[fold] = part.fold_traffic(*CLASSES[fold[0]], *CLASSES[fold[1]])
            return classes[fold]

        for row, col, prev, nxt in COMBINATIONS:
            count = row[3](part.row_folds) * col[3](part.col_folds)
            if not np.any(count):
                continue
            for prev_fold, next_fold, copies in _copies(prev, nxt, times, before, after, part_first, part_last):
                folds = copies * count
                if not np.any(folds):
                    continue
                overlapped = traffic(next_fold).load + traffic(prev_fold).store
                bound = np.asarray(overlapped / units_per_cycle > part.fold_cycles, dtype=bool)
                transfer = transfer + np.where(bound, overlapped * folds, 0)
                compute_bound = compute_bound + np.where(bound, 0, part.fold_cycles * folds)

    loads, stores = grid.traffic_sums()
    rest_loads, rest_stores = rest_grid.traffic_sums()
    sram_reads, sram_writes = grid.sram_sums()
    rest_sram_reads, rest_sram_writes = rest_grid.sram_sums()
    grid_folds, rest_folds = grid.row_folds * grid.col_folds, rest_grid.row_folds * rest_grid.col_folds
    compute = full * grid_folds * grid.fold_cycles + has_rest * rest_folds * rest_grid.fold_cycles
    transfer = transfer + first.load + np.where(has_rest, rest_last.store, last.store)
    total = (latency_cycles + compute_bound) + transfer / units_per_cycle
    total_cycles = np.maximum(compute, np.ceil(total - 1e-9).astype(np.int64) if compute.dtype != object
                              else np.array([int(np.ceil(x - 1e-9)) for x in total], dtype=object))

    figures = (compute, total_cycles, units_to_bytes(full * loads + has_rest * rest_loads, scale),
               units_to_bytes(full * stores + has_rest * rest_stores, scale),
               units_to_bytes(full * sram_reads + has_rest * rest_sram_reads, scale),
               units_to_bytes(full * sram_writes + has_rest * rest_sram_writes, scale),
               full * grid_folds + has_rest * rest_folds)
    return GemmCosts(*(np.where(empty, 0, x) for x in figures))


def _copies(prev, nxt, times, before, after, first, last):
    """(previous fold, next fold, copies) of a fold of a grid run ``times`` times back to back:
    a class inside the grid stays; ``OUTSIDE`` is ``before`` / ``after`` for the first / last
    copy and the grid's own last / first fold for the others."""
    if prev != OUTSIDE and nxt != OUTSIDE:
        return [(prev, nxt, times)]
    if nxt != OUTSIDE:  # the grid's first fold
        return [(before, nxt, np.minimum(times, 1)), (last, nxt, np.maximum(times - 1, 0))]
    if prev != OUTSIDE:  # the grid's last fold
        return [(prev, first, np.maximum(times - 1, 0)), (prev, after, np.minimum(times, 1))]
    return [(before, after, times == 1), (before, first, times >= 2), (last, first, np.maximum(times - 2, 0)),
            (last, after, times >= 2)]  # a one-fold grid

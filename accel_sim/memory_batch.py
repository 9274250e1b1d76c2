"""``accel_sim.memory``'s fold model for many GEMMs at once, by counting folds instead of listing them.

An *instance* is one (possibly grouped) GEMM on one hardware point. ``gemm_costs_batch`` prices a
numpy vector of instances that share a dataflow and returns, per instance, exactly what
``accel_sim.pricing.price_gemm`` gives under ``memory_model = "on_chip_accumulation"``: compute,
stall and total cycles, DRAM and on-chip buffer bytes. Nothing here is a new model, nor a second
statement of it: a fold's traffic, whether it waits on DRAM and the pipelined time are the formulas
of ``accel_sim.effects`` that ``accel_sim.memory`` applies fold by fold; here they are applied once
per class of folds and multiplied by the number of folds of the class.

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

import numpy as np

from accel_sim.dataflows import Dataflow
from accel_sim.effects import (FoldGrid, FoldTraffic, Residency, fold_traffic, packed_groups, pipelined_total_cycles,
                               traffic_scale, transfer_bound)
from accel_sim.hardware import dram_bytes_per_cycle, word_bits
from accel_sim.memory import INT64_SAFE, MAX_FOLDS_PER_OP, per_fold_units_bound, units_to_bytes
from accel_sim.systolic import fold_counts

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


def class_counts(grid: FoldGrid) -> dict[tuple[str, str], np.ndarray]:
    """The folds of each (row class, column class) of ``grid`` that some instance has."""
    counts = {(row, col): _class_count(row, grid.row_folds) * _class_count(col, grid.col_folds)
              for row in CLASSES for col in CLASSES}
    return {key: n for key, n in counts.items() if np.any(n)}


def class_traffic(grid: FoldGrid, resident: Residency, counts) -> dict[tuple[str, str], FoldTraffic]:
    """The traffic of a fold of each (row class, column class) in ``counts``
    (``accel_sim.effects.fold_traffic``); a fold's neighbours are of classes its instance has."""
    return {(row, col): fold_traffic(grid, resident, *CLASSES[row], *CLASSES[col]) for row, col in counts}


def traffic_sums(classes: dict[tuple[str, str], FoldTraffic], counts):
    """(DRAM load, DRAM store, on-chip read, on-chip write) units of the whole grid: every class
    times its number of folds."""
    sums = None
    for key, f in classes.items():
        n = counts[key]
        terms = (f.load, f.store, f.sram_a_read + f.sram_b_read + f.sram_psum_read, f.sram_out_write)
        if sums is None:
            sums = [n * x for x in terms]
        else:
            for total, x in zip(sums, terms):
                total += n * x  # in place: the sums are arrays of the instances' shape
    return tuple(sums)


def first_fold(grid: FoldGrid, resident: Residency) -> FoldTraffic:
    return fold_traffic(grid, resident, True, grid.row_folds == 1, True, grid.col_folds == 1)


def last_fold(grid: FoldGrid, resident: Residency) -> FoldTraffic:
    return fold_traffic(grid, resident, grid.row_folds == 1, True, grid.col_folds == 1, True)


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


def gemm_parts_batch(flow: Dataflow, n, k, groups, hw):
    """``accel_sim.pricing.gemm_parts`` per instance: the packed groups ``p``
    (``accel_sim.effects.packed_groups``), the copies of the ``m x pn x pk`` grid (``groups // p``)
    and the remainder's groups (``groups % p``, 0: none)."""
    p = packed_groups(flow, n, k, groups, hw)
    full, rest = np.divmod(groups, p)
    return p, full, rest


def gemm_folds_batch(flow: Dataflow, m, n, k, groups, hw) -> np.ndarray:
    """Folds the array runs for each instance's GEMM (``accel_sim.pricing.gemm_folds``): the grid's
    ``ceil(S_R / rows) x ceil(S_C / cols)`` per copy, plus the remainder's; 0 for an empty GEMM.
    ``hw``: the instances' hardware (``accel_sim.points.PointColumns``)."""
    m, n, k, groups = (np.asarray(x, dtype=np.int64) for x in (m, n, k, groups))
    empty = (m == 0) | (n == 0) | (k == 0)
    n1, k1 = np.where(empty, 1, n), np.where(empty, 1, k)
    p, full, rest = gemm_parts_batch(flow, n1, k1, groups, hw)

    def grid_folds(packed):
        s_r, s_c, _ = flow.map_gemm(m, packed * n1, packed * k1)
        row_folds, col_folds = fold_counts(s_r, s_c, rows=hw.rows, cols=hw.cols)
        return row_folds * col_folds

    return np.where(empty, 0, full * grid_folds(p) + np.where(rest > 0, grid_folds(np.maximum(rest, 1)), 0))


def _overlapped(part, classes, ends: tuple, units_per_cycle, sums: tuple) -> tuple:
    """``sums`` (transfer units, compute-bound cycles) with every fold transition of ``part`` added:
    each (row class, column class, previous, next) combination's folds, the next fold's load and the
    previous fold's store overlapped with a fold's compute, counted where the transfer bounds it.
    ``ends``: the part's copies and the folds before its first and after its last (``_copies``)."""
    transfer, compute_bound = sums

    def traffic(fold) -> FoldTraffic:  # a (row class, column class) of this part, or a fold's traffic
        return fold if isinstance(fold, FoldTraffic) else classes[fold]

    for row, col, prev, nxt in COMBINATIONS:
        count = row[3](part.row_folds) * col[3](part.col_folds)
        if not np.any(count):
            continue
        for prev_fold, next_fold, copies in _copies(prev, nxt, *ends):
            folds = copies * count
            if not np.any(folds):
                continue
            overlapped = traffic(next_fold).load + traffic(prev_fold).store
            bound = transfer_bound(overlapped, units_per_cycle, part.fold_cycles)
            transfer = transfer + np.where(bound, overlapped * folds, 0)
            compute_bound = compute_bound + np.where(bound, 0, part.fold_cycles * folds)
    return transfer, compute_bound


def _beyond_int64(m, n, k, p, scale, hw) -> bool:
    """Whether a GEMM's traffic sums could pass int64 on some instance (``per_fold_units_bound`` times
    the most folds an op may have): then they are summed in Python integers."""
    longest = np.maximum(np.maximum(m, n * p), k * p).astype(np.float64)  # the streamed length is one of them
    bits = word_bits(hw.word_bytes, hw.element_bits)
    return bool(np.any(per_fold_units_bound(hw.rows, hw.cols, longest, bits, scale)
                       * float(MAX_FOLDS_PER_OP) >= INT64_SAFE))


def _part_ends(grid, resident, rest_grid, rest_resident, full, has_rest) -> tuple[tuple, tuple]:
    """Per part (the packed grid's ``full`` copies, then the rest's one copy where there is a rest):
    (copies, the fold before its first, the fold after its last, its first fold, its last fold)."""
    first, last = first_fold(grid, resident), last_fold(grid, resident)
    rest_first, rest_last = first_fold(rest_grid, rest_resident), last_fold(rest_grid, rest_resident)
    zero = np.zeros_like(first.load)
    nothing = FoldTraffic(zero, zero)  # before the first fold, after the last
    after_grid = FoldTraffic(np.where(has_rest, rest_first.load, zero), zero)  # after the grid's last copy
    return ((full, nothing, after_grid, first, last),
            (has_rest.astype(np.int64), last, nothing, rest_first, rest_last))


def gemm_costs_batch(flow: Dataflow, m, n, k, groups, hw) -> GemmCosts:
    """The GEMMs ``m x n x k`` (``groups`` of them) of each instance under ``flow`` (one dataflow
    for all) and the ``on_chip_accumulation`` memory model, on the instance's hardware ``hw``
    (``accel_sim.points.PointColumns``): ``price_gemm``'s figures (module docstring). The shapes
    and the hardware columns broadcast: one entry each per instance, or shapes as a column
    (``S x 1``) against ``P`` points, every shape on every point (``S x P``)."""
    m, n, k, groups = (np.asarray(x, dtype=np.int64) for x in (m, n, k, groups))
    empty = (m == 0) | (n == 0) | (k == 0)
    m, n, k = (np.where(empty, 1, x) for x in (m, n, k))  # priced as 1 x 1 x 1, then zeroed
    p, full, rest = gemm_parts_batch(flow, n, k, groups, hw)
    has_rest = rest > 0
    rest_groups = np.where(has_rest, rest, 1)
    scale = traffic_scale(np.lcm(p, rest_groups), hw)
    python_ints = _beyond_int64(m, n, k, p, scale, hw)
    if python_ints:  # beyond int64 (far outside real hardware): the same sums in Python integers
        m, n, k, p, full, rest_groups, scale = (np.asarray(x).astype(object)
                                                for x in (m, n, k, p, full, rest_groups, scale))
        hw = hw.in_python_ints()
    grid = FoldGrid.of(flow, m, p * n, p * k, packed=p, scale=scale, hw=hw, python_ints=python_ints)
    rest_grid = FoldGrid.of(flow, m, rest_groups * n, rest_groups * k, packed=rest_groups, scale=scale, hw=hw,
                            python_ints=python_ints)
    resident, rest_resident = Residency.of(grid, hw), Residency.of(rest_grid, hw)
    units_per_cycle = scale * dram_bytes_per_cycle(hw.dram_peak_bytes_per_s, hw.clock_hz, hw.dram_efficiency)

    ends = _part_ends(grid, resident, rest_grid, rest_resident, full, has_rest)
    (_, _, _, first, last), (_, _, _, _, rest_last) = ends
    transfer = compute_bound = 0
    sums = []
    for part, part_resident, part_ends in zip((grid, rest_grid), (resident, rest_resident), ends):
        counts = class_counts(part)
        classes = class_traffic(part, part_resident, counts)
        sums.append(traffic_sums(classes, counts))
        transfer, compute_bound = _overlapped(part, classes, part_ends, units_per_cycle, (transfer, compute_bound))

    grid_folds, rest_folds = grid.row_folds * grid.col_folds, rest_grid.row_folds * rest_grid.col_folds
    compute = full * grid_folds * grid.fold_cycles + has_rest * rest_folds * rest_grid.fold_cycles
    transfer = transfer + first.load + np.where(has_rest, rest_last.store, last.store)
    total_cycles = pipelined_total_cycles(compute_cycles=compute, latency_cycles=hw.dram_latency_cycles,
                                          compute_bound_cycles=compute_bound, transfer_units=transfer,
                                          units_per_cycle=units_per_cycle)

    figures = (compute, total_cycles,
               *(units_to_bytes(full * grid_sum + has_rest * rest_sum, scale) for grid_sum, rest_sum in zip(*sums)),
               full * grid_folds + has_rest * rest_folds)
    shape = np.broadcast_shapes(*(np.shape(x) for x in figures))
    return GemmCosts(*(np.broadcast_to(np.where(empty, 0, x), shape) for x in figures))


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

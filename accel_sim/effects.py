"""What each hardware field does to a price, each effect written once, on numbers or numpy arrays.

Two evaluations price the same model and call these formulas, so they cannot disagree:

* the scalar one (``accel_sim.pricing``, behind ``simulate``): one hardware point, a
  ``HardwareConfig``; a GEMM's folds listed one by one (``accel_sim.memory``, arrays over the
  folds of one GEMM);
* the vectorized one (``accel_sim.batch``, behind ``bench.dse``): many (GEMM, point) instances
  at once, the hardware a ``accel_sim.points.PointColumns`` (the same field names, a numpy
  column each); a GEMM's folds counted by class (``accel_sim.memory_batch``).

The effects, each named after what it prices (the rules: ``accel_sim.memory``'s docstring):

* fold counts and cycles: ``accel_sim.systolic.fold_counts`` / ``fold_cycles_of`` (``rows``,
  ``cols``, the dataflow), grouped GEMMs' packing: ``packed_groups`` (``grouped_mapping``);
* buffer residency: ``row_operand_fits``, ``b_column_block_fits``, ``partial_sums_fit`` (the
  buffer fields, the packed word's bits), gathered per GEMM in ``Residency``;
* DRAM and on-chip traffic of a fold: ``fold_traffic``;
* stalls: ``transfer_bound`` and ``pipelined_total_cycles`` (double-buffered folds, DRAM
  bandwidth and latency), ``streaming_total_cycles`` (vector and linear-algebra work);
* compute of vector and linear-algebra work: ``special_unit_cycles``, ``linalg_cycles``;
* energy: ``accel_sim.energy.energy_of`` (already on numbers or arrays); resources (DSP, BRAM,
  area): ``accel_sim.resources`` (already on columns of points).

Adding a buffer-like field: declare it (``accel_sim.hardware.HardwareConfig``, its bound in
``FIELD_BOUNDS``), read it in the formula it changes here (``hw.<field>``), charge it in
``accel_sim.resources.BUFFER_LANES``; both evaluations follow (docs/architecture.md, "Adding a
hardware field"). The SCALE-Sim memory model (``accel_sim.memory_scalesim``) is not built from
these formulas: it is the independent reference the fold model is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from accel_sim.dataflows import Dataflow
from accel_sim.elementwise import ceil_cycles, ceil_int, maximum, minimum, where
from accel_sim.hardware import word_bits, word_units
from accel_sim.systolic import fold_counts, fold_cycles_of

# ----------------------------------------------------------------------------- fold counts


def packed_groups(flow: Dataflow, n, k, groups, hw):
    """Groups per packed GEMM of a grouped GEMM: ``Dataflow.packing_factor`` under the
    ``block_diagonal`` mapping when there are groups, else 1 (``accel_sim.hardware.GROUPED_MAPPINGS``)."""
    packing = flow.packing_factor(n, k, groups, rows=hw.rows, cols=hw.cols)
    return where((hw.grouped_mapping == "block_diagonal") & (groups > 1), packing, 1)


def traffic_scale(packed, hw):
    """Units per byte a GEMM's traffic is counted in (``accel_sim.memory``, "Exact arithmetic"):
    ``packed`` (a block-diagonal B moves a ``packed``-th of each word) x the units per byte of the
    word (``accel_sim.hardware.word_units``: 1 for whole-byte words, 2 for 4-bit packed elements)."""
    return packed * word_units(word_bits(hw.word_bytes, hw.element_bits))[1]


@dataclass(frozen=True)
class FoldGrid:
    """One GEMM ``m x n x k`` (``n``, ``k`` already packed: ``packed`` groups block-diagonal) laid
    on the array in folds; traffic in units of ``1 / scale`` bytes (a multiple of ``packed`` and of
    the word's units per byte, ``traffic_scale``: ``accel_sim.memory``, "Exact arithmetic"); a word
    is ``word_bits`` (packed elements: ``accel_sim.hardware.word_bits``). Numbers, or arrays over
    instances."""

    flow: Dataflow
    s_r: Any
    s_c: Any
    t: Any
    rows: Any
    cols: Any
    row_folds: Any
    col_folds: Any
    fold_cycles: Any
    word_bits: Any
    packed: Any
    dense: Any  # units per dense word (A, outputs, partial sums)
    b: Any  # units per word of B (a block-diagonal B moves 1 / packed of each)
    python_ints: bool  # fold traffic counted in Python integers (past accel_sim.memory.INT64_SAFE)

    @staticmethod
    def of(flow: Dataflow, m, n, k, *, packed, scale, hw, python_ints: bool = False) -> "FoldGrid":
        s_r, s_c, t = flow.map_gemm(m, n, k)
        rows, cols, bits = hw.rows, hw.cols, word_bits(hw.word_bytes, hw.element_bits)
        row_folds, col_folds = fold_counts(s_r, s_c, rows=rows, cols=cols)
        dense = bits * scale // 8  # units per word: exact, scale holding the word's units per byte
        return FoldGrid(flow, s_r, s_c, t, rows, cols, row_folds, col_folds,
                        fold_cycles_of(t, rows, cols, preloads=flow.preloads), bits, packed,
                        dense, dense // packed, python_ints)


# ----------------------------------------------------------------------------- buffer residency


def active_half_bytes(buffer_bytes):
    """The half of a double-buffered buffer the array reads while the other half is filled /
    drained (SCALE-Sim's ``active_buf_frac = 0.5``), whole bytes."""
    return buffer_bytes // 2


def row_operand_fits(g: FoldGrid, hw):
    """Whether the whole operand streamed along the array's rows (the ``r x T`` blocks: A under
    OS, A^T under WS, B under IS) fits its buffer's active half, so that only the first column
    fold loads it and the later ones reuse it. A block-diagonal B keeps only its non-zero
    ``1 / packed``."""
    if g.flow.operand_layout("a") == "rows":  # OS, WS: A
        return g.s_r * g.t * g.word_bits <= 8 * active_half_bytes(hw.a_buffer_bytes)
    return g.s_r * g.t * g.word_bits <= 8 * active_half_bytes(hw.b_buffer_bytes) * g.packed  # IS: B


def b_column_block_fits(g: FoldGrid, hw):
    """OS: whether one column fold's block of B (``T x cols`` words, ``1 / packed`` of it
    non-zero) fits the B buffer's active half, so that only the column fold's first row fold
    loads it."""
    return minimum(g.cols, g.s_c) * g.t * g.word_bits <= 8 * active_half_bytes(hw.b_buffer_bytes) * g.packed


def partial_sums_fit(g: FoldGrid, hw):
    """WS / IS: whether a column fold's partial sums (``cols x T`` words) fit the output buffer's
    active half, so that they stay on chip across the row folds (else every fold spills them and
    every fold after the first reads them back)."""
    return minimum(g.cols, g.s_c) * g.t * g.word_bits <= 8 * active_half_bytes(hw.out_buffer_bytes)


@dataclass(frozen=True)
class Residency:
    """What a GEMM keeps on chip, from the buffers (booleans, or arrays over instances)."""

    row_operand: Any  # row_operand_fits
    b_column_block: Any  # b_column_block_fits (OS; False otherwise)
    partial_sums: Any  # partial_sums_fit (WS / IS; False otherwise)

    @staticmethod
    def of(g: FoldGrid, hw) -> "Residency":
        if g.flow.partial_sums_span_row_folds:
            return Residency(row_operand_fits(g, hw), False, partial_sums_fit(g, hw))
        return Residency(row_operand_fits(g, hw), b_column_block_fits(g, hw), False)


# ----------------------------------------------------------------------------- traffic of a fold


class FoldTraffic(NamedTuple):
    """Units a fold moves: DRAM loads and stores, and what the array reads from / writes to its
    on-chip buffers (``accel_sim.memory``'s docstring)."""

    load: Any
    store: Any
    sram_a_read: Any = 0
    sram_b_read: Any = 0
    sram_psum_read: Any = 0
    sram_out_write: Any = 0


def fold_traffic(g: FoldGrid, resident: Residency, first_r, last_r, first_c, last_c) -> FoldTraffic:
    """The traffic of a fold that is (or is not) the first / last row fold and the first / last
    column fold: flags per fold of one GEMM (``accel_sim.memory``) or per fold class
    (``accel_sim.memory_batch``). A last fold uses the rows / columns left over."""
    r = where(last_r, g.s_r - (g.row_folds - 1) * g.rows, g.rows)
    c = where(last_c, g.s_c - (g.col_folds - 1) * g.cols, g.cols)
    if g.python_ints:
        r, c = r.astype(object), c.astype(object)
    rt, ct, rc = r * g.t, c * g.t, r * c  # words: an r x T block, a c x T (or T x c) block, an r x c block
    row_operand_words = where(resident.row_operand, where(first_c, rt, 0), rt)
    if not g.flow.partial_sums_span_row_folds:  # OS: outputs complete inside the fold
        b_words = where(resident.b_column_block, where(first_r, ct, 0), ct)
        outputs = rc * g.dense
        return FoldTraffic(row_operand_words * g.dense + b_words * g.b, outputs, rt * g.dense, ct * g.b, 0, outputs)
    # WS (B stationary, A^T streamed) / IS (A^T stationary, B streamed): partial sums over the row folds
    stationary, streamed = (g.b, g.dense) if g.flow.stationary == "b" else (g.dense, g.b)
    stationary_units, streamed_units = rc * stationary, rt * streamed
    psum_units = ct * g.dense
    psum_read_back = where(first_r, 0, psum_units)  # every row fold after the first accumulates into them
    psum_stores = where(resident.partial_sums, where(last_r, psum_units, 0), psum_units)
    psum_loads = where(resident.partial_sums, 0, psum_read_back)
    a_sram, b_sram = (streamed_units, stationary_units) if g.flow.stationary == "b" else (stationary_units, streamed_units)
    return FoldTraffic(stationary_units + row_operand_words * streamed + psum_loads, psum_stores,
                       a_sram, b_sram, psum_read_back, psum_units)


# ----------------------------------------------------------------------------- stalls


def transfer_bound(overlapped_units, units_per_cycle, fold_cycles):
    """Whether a fold waits on DRAM: the loads prefetched and stores drained during it (units)
    take longer on the channel than its compute (booleans)."""
    return np.asarray(overlapped_units / units_per_cycle > fold_cycles, dtype=bool)


def pipelined_total_cycles(*, compute_cycles, latency_cycles, compute_bound_cycles, transfer_units,
                           units_per_cycle):
    """Whole cycles of a double-buffered fold sequence from its order-free parts (``accel_sim.memory``,
    "Exact arithmetic"): ``ceil(latency + compute-bound folds' cycles + transfer units / units per
    cycle)``, at least the compute cycles."""
    total = (latency_cycles + compute_bound_cycles) + transfer_units / units_per_cycle
    return maximum(compute_cycles, ceil_cycles(total))


def streaming_total_cycles(compute_cycles, moved_bytes, bytes_per_cycle, latency_cycles):
    """Whole cycles of an op that streams its operands from DRAM and its results back while it
    computes (vector work, linear algebra): ``latency + max(compute, moved / bandwidth)``, no
    latency for an op that moves nothing; at least the compute cycles."""
    total = where(moved_bytes > 0, latency_cycles, 0) + maximum(compute_cycles, moved_bytes / bytes_per_cycle)
    return maximum(compute_cycles, ceil_cycles(total))


# ----------------------------------------------------------------------------- compute off the array's GEMM path


def special_unit_cycles(elements, elements_per_cycle):
    """Vector work on the special unit: ``ceil(elements / throughput of its kind)``."""
    return ceil_int(elements / elements_per_cycle)


def linalg_cycles(macs, rows, cols, linalg_efficiency):
    """Dense linear algebra on the array: ``ceil(MACs / (rows x cols x linalg_efficiency))``."""
    return ceil_int(macs / (rows * cols * linalg_efficiency))


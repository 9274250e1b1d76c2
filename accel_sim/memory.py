"""DRAM <-> on-chip traffic of a GEMM, fold by fold, and its time with double buffering.

The tile is SCALE-Sim's fold (``accel_sim.systolic``), visited in SCALE-Sim's order (for each
column fold, every row fold). Operands live in DRAM; three on-chip buffers (A, B, outputs) are
double buffered: half of each is *active* (read by the array) while the other half is filled /
drained, as SCALE-Sim's ``active_buf_frac = 0.5``. What each fold moves (words; ``r``, ``c`` = the
rows / columns the fold uses, ``T`` the streamed length):

OS (S_R, S_C, T) = (M, N, K), outputs complete inside the fold:
    * A block ``r x T``: every fold, or only in the first column fold if the whole of A fits the
      active half of the A buffer (then it is reused by the later column folds);
    * B block ``T x c``: once per column fold if it fits the active half of the B buffer (reused
      by that column fold's row folds), else every fold;
    * outputs ``r x c``: stored every fold.
WS / IS (S_R, S_C, T) = (K, N, M) / (K, M, N), partial sums accumulate over the row folds:
    * stationary block ``r x c`` (B for WS, A^T for IS): every fold;
    * streamed block ``r x T`` (A^T for WS, B for IS): every fold, or only in the first column
      fold if the whole streamed operand fits its buffer's active half;
    * partial sums ``c x T``: kept on chip across the row folds and stored once, after the last
      row fold, if ``cols x T`` words fit the output buffer's active half; otherwise every fold
      stores them and every fold after the first reads them back (a spill).

These rules and the on-chip ones below are written once, in ``accel_sim.effects`` (``Residency``,
``fold_traffic``): applied
here fold by fold, and by ``accel_sim.memory_batch`` once per class of folds.

On-chip buffer traffic (what the array itself reads from the A / B buffers and writes to the
output buffer, per fold; the energy model prices it, ``accel_sim.energy``):

    * OS: reads the A block ``r x T`` and the B block ``T x c``, writes the ``r x c`` outputs;
    * WS / IS: reads the stationary block ``r x c`` once (it is preloaded into the cells) and the
      streamed block ``r x T``; writes the ``c x T`` partial sums; every row fold after the first
      also reads the previous partial sums back to accumulate into them (read-modify-write).

SCALE-Sim 3.0 counts the same reads and writes (its "SRAM reads / writes" per operand), except
the partial-sum read-backs, which it does not model (``docs/scalesim.md``). The transfers between
DRAM and the buffers' other halves are priced as DRAM traffic only.

Time (``pipelined_cycles``): a fold's loads are prefetched during the previous fold and its stores
drain during the next, on one shared DRAM channel. Fold ``i`` costs
``max(compute_i, (load_{i+1} + store_{i-1}) / bandwidth)``; what cannot overlap is added: the DRAM
latency and the first fold's loads before the first fold, the last fold's stores after the last.
A fold whose transfer exceeds its compute stalls the array; stall = total - compute.

Exact arithmetic. Every byte figure of a schedule is an integer: in bytes, or, for a GEMM whose B
is block-diagonal (``packed_groups`` = ``p`` > 1), in ``p``-ths of a byte (``byte_scale``), since
such a B moves a ``p``-th of each dense word; a word of packed sub-byte elements
(``HardwareConfig.element_bits``: 4 bits for MXFP4) is counted in the fraction of a byte that makes
it whole (``accel_sim.effects.traffic_scale``: half-bytes for 4 bits, bits for 5). So the sums over folds are exact, and the time is
evaluated in an order-free form: writing ``o_i = load_{i+1} + store_{i-1}``, each fold is either
bound by its transfer (``o_i / bandwidth > compute_i``) or by its compute, and

    total = (latency + sum of compute_i over compute-bound folds)
            + (load_0 + sum of o_i over transfer-bound folds + store_last) / bandwidth

with one division, then rounded up to whole cycles. It is the sum above, term for term; a
vectorized evaluation that counts the folds of each kind instead of listing them
(``accel_sim.batch``) gets the same integers and the same one division, so the same cycles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from accel_sim.dataflows import dataflow_named
from accel_sim.effects import (FoldGrid, Residency, fold_traffic, pipelined_total_cycles, streaming_total_cycles,
                               traffic_scale, transfer_bound)
from accel_sim.hardware import word_bits

INT64_SAFE = 2**62
"""Integer figures whose bound stays below this are kept in numpy's int64; above it (beyond any
real accelerator, but allowed by the field bounds) in Python integers (``dtype=object``), so that
no sum can wrap."""

MAX_FOLDS_PER_OP = 2**22
"""The most folds one op's GEMM may take on the array (all its groups together). The fold model
holds a few numbers per fold in memory, and this bound (with ``trace_schema.MAX_DIM`` on the
streamed length) keeps an op's cycle sum below 2^63 in numpy's int64. At the bound one GEMM takes
~5 s and ~0.6 GB to price (``python -m accel_sim gemm 131072 65536 2 --dataflow os``, 2^22 folds).
MobileNetV2 at batch 64 (CIFAR 32 x 32) on the paper's 32 x 64 array: at most 960 folds per op
with its dataflows, 294,912 with every role output stationary (a depthwise conv, 2,048 row folds x
144 groups); the fold count grows with the batch, so a bigger batch with that dataflow is rejected
from about batch 900 on (``accel_sim.pricing.check_gemm_fits``)."""


def per_fold_units_bound(rows, cols, t, word_bits, byte_scale):
    """An upper bound on the units one fold moves (DRAM or on-chip, read or written): every block
    a fold touches is at most ``(rows + cols) x (T + rows + cols)`` words of ``word_bits`` bits,
    four kinds of traffic at most. Times ``MAX_FOLDS_PER_OP``, it bounds an op's sums (numbers or
    arrays alike)."""
    return (rows + cols) * (t + rows + cols) * word_bits * byte_scale / 8 * 4


@dataclass(frozen=True)
class FoldSchedule:
    """One GEMM (or a sequence of GEMMs run back to back) as per-fold compute and traffic. Traffic
    is in *units* of ``1 / byte_scale`` bytes (module docstring, "Exact arithmetic"): integers."""

    byte_scale: int  # units per byte: 1, or the packed groups of a block-diagonal B
    compute_cycles: np.ndarray  # per fold
    dram_read_units: np.ndarray  # per fold, DRAM -> chip
    dram_write_units: np.ndarray  # per fold, chip -> DRAM
    sram_a_read_units: np.ndarray  # per fold, A read by the array from its buffer
    sram_b_read_units: np.ndarray  # per fold, B read by the array from its buffer
    sram_psum_read_units: np.ndarray  # per fold, partial sums read back from the output buffer (WS / IS)
    sram_out_write_units: np.ndarray  # per fold, outputs / partial sums written into the output buffer

    def _arrays(self) -> list[np.ndarray]:
        return [getattr(self, f.name) for f in fields(FoldSchedule)[1:]]

    def rescaled(self, byte_scale: int) -> "FoldSchedule":
        """The same schedule counted in ``1 / byte_scale`` bytes (a multiple of this one's scale)."""
        factor = byte_scale // self.byte_scale
        if factor == 1:
            return self
        return FoldSchedule(byte_scale, self.compute_cycles, *(a * factor for a in self._arrays()[1:]))

    @staticmethod
    def concat(parts: list["FoldSchedule"]) -> "FoldSchedule":
        scale = math.lcm(*(p.byte_scale for p in parts))
        parts = [p.rescaled(scale) for p in parts]
        return FoldSchedule(scale, *(np.concatenate([p._arrays()[i] for p in parts]) for i in range(7)))

    def repeat(self, times: int) -> "FoldSchedule":
        if times == 1:
            return self
        return FoldSchedule(self.byte_scale, *(np.tile(a, times) for a in self._arrays()))

    @property
    def dram_bytes(self) -> tuple[int, int]:
        """(read, written) DRAM bytes of the whole sequence, rounded to whole bytes."""
        return (units_to_bytes(_sum(self.dram_read_units), self.byte_scale),
                units_to_bytes(_sum(self.dram_write_units), self.byte_scale))

    @property
    def sram_bytes(self) -> tuple[int, int]:
        """(read, written) on-chip buffer bytes of the whole sequence, rounded to whole bytes."""
        reads = _sum(self.sram_a_read_units) + _sum(self.sram_b_read_units) + _sum(self.sram_psum_read_units)
        return units_to_bytes(reads, self.byte_scale), units_to_bytes(_sum(self.sram_out_write_units), self.byte_scale)


def _sum(a: np.ndarray) -> int:
    """An exact integer sum (int64 arrays are bounded by ``INT64_SAFE``; object arrays hold Python ints)."""
    return int(a.sum())


def units_to_bytes(units, byte_scale):
    """``units / byte_scale`` rounded to whole bytes, half to even (as Python's ``round``), exactly;
    on integers or integer arrays."""
    if isinstance(units, np.ndarray) or isinstance(byte_scale, np.ndarray):
        q, r = units // byte_scale, units % byte_scale  # (np.divmod has no loop for Python integers)
        return q + ((2 * r > byte_scale) | ((2 * r == byte_scale) & (q % 2 == 1)))
    q, r = divmod(units, byte_scale)
    return int(q + (2 * r > byte_scale or (2 * r == byte_scale and q % 2 == 1)))


def gemm_fold_schedule(m: int, n: int, k: int, *, hw, dataflow: str, packed_groups: int = 1) -> FoldSchedule:
    """Per-fold compute cycles, loaded and stored bytes of ``out[m x n] = A[m x k] . B[k x n]``
    on ``hw`` (a ``HardwareConfig``: the array, ``word_bytes`` and the buffers) under the reuse
    rules of the module docstring, fold by fold (``accel_sim.effects.fold_traffic``). An empty
    GEMM has no folds.

    ``packed_groups`` = ``p`` > 1 is for a block-diagonal B (groups packed by the
    ``block_diagonal`` mapping, ``accel_sim.pricing``): its zero blocks are not fetched nor stored
    on chip, so every B transfer and B's buffer footprint are scaled by the fraction of B that is
    non-zero, ``1/p`` (exact over the whole GEMM, an average per fold); so are the array's reads
    of B from its buffer (the zeros are fed to the cells, not read). The schedule then counts in
    ``p``-ths of a byte (``byte_scale = p``)."""
    scale = int(traffic_scale(packed_groups, hw))
    if m == 0 or n == 0 or k == 0:
        empty = np.zeros(0, dtype=np.int64)
        return FoldSchedule(scale, *[empty] * 7)
    flow = dataflow_named(dataflow)
    t = flow.map_gemm(m, n, k)[2]
    bits = word_bits(hw.word_bytes, hw.element_bits)
    python_ints = per_fold_units_bound(hw.rows, hw.cols, t, bits, scale) * MAX_FOLDS_PER_OP >= INT64_SAFE
    grid = FoldGrid.of(flow, m, n, k, packed=packed_groups, scale=scale, hw=hw, python_ints=python_ints)
    fr = np.tile(np.arange(grid.row_folds, dtype=np.int64), grid.col_folds)  # SCALE-Sim's order: column fold major
    fc = np.repeat(np.arange(grid.col_folds, dtype=np.int64), grid.row_folds)
    traffic = fold_traffic(grid, Residency.of(grid, hw), fr == 0, fr == grid.row_folds - 1, fc == 0,
                           fc == grid.col_folds - 1)
    compute = np.full(fr.shape, grid.fold_cycles, dtype=np.int64)
    dtype = object if python_ints else np.int64
    return FoldSchedule(scale, compute, *(np.broadcast_to(np.asarray(x, dtype=dtype), fr.shape).copy()
                                                  for x in traffic))


@dataclass(frozen=True)
class Timing:
    compute_cycles: int
    stall_cycles: int
    total_cycles: int
    dram_read_bytes: int
    dram_write_bytes: int


def pipelined_cycles(schedule: FoldSchedule, *, bytes_per_cycle: float, latency_cycles: int) -> Timing:
    """Time of a fold sequence with double-buffered prefetch and write-back (module docstring):
    ``latency + load_0/bw + sum_i max(compute_i, (load_{i+1} + store_{i-1})/bw) + store_last/bw``,
    rounded up to whole cycles, evaluated exactly as its order-free form."""
    compute = schedule.compute_cycles
    if compute.size == 0:
        return Timing(0, 0, 0, 0, 0)
    loads, stores = schedule.dram_read_units, schedule.dram_write_units
    overlapped = np.zeros_like(loads)
    overlapped[:-1] += loads[1:]
    overlapped[1:] += stores[:-1]
    units_per_cycle = schedule.byte_scale * bytes_per_cycle
    bound = transfer_bound(overlapped, units_per_cycle, compute)
    compute_total = _sum(compute)
    total_cycles = pipelined_total_cycles(
        compute_cycles=compute_total, latency_cycles=latency_cycles, compute_bound_cycles=_sum(compute[~bound]),
        transfer_units=int(loads[0]) + _sum(overlapped[bound]) + int(stores[-1]), units_per_cycle=units_per_cycle)
    read_bytes, write_bytes = schedule.dram_bytes
    return Timing(compute_total, total_cycles - compute_total, total_cycles, read_bytes, write_bytes)


def streaming_cycles(compute_cycles: int, dram_read_bytes: int, dram_write_bytes: int, *, bytes_per_cycle: float,
                     latency_cycles: int) -> Timing:
    """An op that streams its operands from DRAM and its results back while it computes (vector
    work on the special unit, linear algebra): ``latency + max(compute, (read + write)/bw)``;
    no latency for an op that moves nothing."""
    total_cycles = streaming_total_cycles(compute_cycles, dram_read_bytes + dram_write_bytes, bytes_per_cycle,
                                          latency_cycles)
    return Timing(compute_cycles, total_cycles - compute_cycles, total_cycles, dram_read_bytes, dram_write_bytes)

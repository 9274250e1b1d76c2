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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from accel_sim.dataflows import Dataflow, dataflow_named
from accel_sim.systolic import fold_counts, fold_cycles, map_gemm


@dataclass(frozen=True)
class FoldSchedule:
    """One GEMM (or a sequence of GEMMs run back to back) as per-fold compute and traffic."""

    compute_cycles: np.ndarray  # per fold
    dram_read_bytes: np.ndarray  # per fold, DRAM -> chip (float: a block-diagonal B moves fractions)
    dram_write_bytes: np.ndarray  # per fold, chip -> DRAM
    sram_a_read_bytes: np.ndarray  # per fold, A read by the array from its buffer
    sram_b_read_bytes: np.ndarray  # per fold, B read by the array from its buffer
    sram_psum_read_bytes: np.ndarray  # per fold, partial sums read back from the output buffer (WS / IS)
    sram_out_write_bytes: np.ndarray  # per fold, outputs / partial sums written into the output buffer

    @staticmethod
    def concat(parts: list["FoldSchedule"]) -> "FoldSchedule":
        return FoldSchedule(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(FoldSchedule)))

    def repeat(self, times: int) -> "FoldSchedule":
        if times == 1:
            return self
        return FoldSchedule(*(np.tile(getattr(self, f.name), times) for f in fields(FoldSchedule)))

    @property
    def sram_bytes(self) -> tuple[int, int]:
        """(read, written) on-chip buffer bytes of the whole sequence, rounded to whole bytes."""
        reads = self.sram_a_read_bytes.sum() + self.sram_b_read_bytes.sum() + self.sram_psum_read_bytes.sum()
        return round(float(reads)), round(float(self.sram_out_write_bytes.sum()))


def gemm_fold_schedule(
    m: int,
    n: int,
    k: int,
    *,
    rows: int,
    cols: int,
    dataflow: str,
    word_bytes: int,
    a_buffer_bytes: int,
    b_buffer_bytes: int,
    out_buffer_bytes: int,
    b_density: float = 1.0,
) -> FoldSchedule:
    """Per-fold compute cycles, loaded and stored bytes of ``out[m x n] = A[m x k] . B[k x n]``
    under the reuse rules of the module docstring. An empty GEMM has no folds.

    ``b_density`` < 1 is for a block-diagonal B (groups packed by the ``block_diagonal`` mapping,
    ``accel_sim.pricing``): its zero blocks are not fetched nor stored on chip, so every B
    transfer and B's buffer footprint are scaled by the fraction of B that is non-zero (``1/p``
    for ``p`` packed groups; exact over the whole GEMM, an average per fold); so are the array's
    reads of B from its buffer (the zeros are fed to the cells, not read)."""
    if m == 0 or n == 0 or k == 0:
        empty = np.zeros(0, dtype=np.int64)
        return FoldSchedule(*[empty] * len(fields(FoldSchedule)))
    flow = dataflow_named(dataflow)
    folds = _Folds.of(m, n, k, rows=rows, cols=cols, dataflow=dataflow)
    buffers = _Buffers(a_buffer_bytes // 2, b_buffer_bytes // 2, out_buffer_bytes // 2)
    family = stationary_operand_traffic if flow.partial_sums_span_row_folds else output_stationary_traffic
    loads, stores, sram = family(folds, buffers, m=m, k=k, flow=flow, word_bytes=word_bytes,
                                 b_bytes=word_bytes * b_density)
    compute = np.full(folds.fr.shape, fold_cycles(folds.t, rows=rows, cols=cols, dataflow=dataflow), dtype=np.int64)
    return FoldSchedule(compute, *(np.asarray(x, dtype=np.float64) for x in (loads, stores, *sram)))


@dataclass(frozen=True)
class _Folds:
    """The folds of one GEMM in SCALE-Sim's order: per fold its row / column fold index (``fr``,
    ``fc``) and the rows / columns of the array it uses (``r``, ``c``)."""

    s_r: int
    s_c: int
    t: int
    row_folds: int
    cols: int
    fr: np.ndarray
    fc: np.ndarray
    r: np.ndarray
    c: np.ndarray

    @staticmethod
    def of(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str) -> "_Folds":
        s_r, s_c, t = map_gemm(m, n, k, dataflow)
        row_folds, col_folds = fold_counts(s_r, s_c, rows=rows, cols=cols)
        fr = np.tile(np.arange(row_folds, dtype=np.int64), col_folds)
        fc = np.repeat(np.arange(col_folds, dtype=np.int64), row_folds)
        return _Folds(s_r, s_c, t, row_folds, cols, fr, fc,
                      np.minimum(rows, s_r - fr * rows), np.minimum(cols, s_c - fc * cols))


@dataclass(frozen=True)
class _Buffers:
    """Bytes of the active half of each double-buffered on-chip buffer."""

    a_half: int
    b_half: int
    out_half: int


def output_stationary_traffic(f: _Folds, buf: _Buffers, *, m: int, k: int, flow: Dataflow, word_bytes: int,
                              b_bytes: float):
    """OS: per-fold DRAM loads and stores and on-chip (A, B, partial-sum, output) bytes; outputs
    complete inside the fold (module docstring). ``b_bytes``: bytes per dense word of B."""
    r, c, t = f.r, f.c, f.t
    a_words = r * t if m * k * word_bytes > buf.a_half else r * t * (f.fc == 0)
    b_words = c * t * (f.fr == 0) if min(f.cols, f.s_c) * t * b_bytes <= buf.b_half else c * t
    loads = a_words * word_bytes + b_words * b_bytes
    stores = r * c * word_bytes
    return loads, stores, (r * t * word_bytes, c * t * b_bytes, 0 * r, stores)


def stationary_operand_traffic(f: _Folds, buf: _Buffers, *, m: int, k: int, flow: Dataflow, word_bytes: int,
                               b_bytes: float):
    """WS (B stationary, A^T streamed) and IS (A^T stationary, B streamed): per-fold DRAM loads and
    stores and on-chip bytes; partial sums accumulate over the row folds, kept on chip when
    ``cols x T`` words fit the output buffer's active half, else spilled (module docstring)."""
    r, c, t = f.r, f.c, f.t
    stationary_bytes, streamed_bytes, streamed_half = (
        (b_bytes, word_bytes, buf.a_half) if flow.stationary == "b" else (word_bytes, b_bytes, buf.b_half)
    )
    streamed = r * t if f.s_r * t * streamed_bytes > streamed_half else r * t * (f.fc == 0)
    psum = c * t
    if min(f.cols, f.s_c) * t * word_bytes <= buf.out_half:
        stores, reads = psum * (f.fr == f.row_folds - 1), 0
    else:
        stores, reads = psum, psum * (f.fr > 0)
    loads = r * c * stationary_bytes + streamed * streamed_bytes + reads * word_bytes
    stationary_sram, streamed_sram = r * c * stationary_bytes, r * t * streamed_bytes
    a_sram, b_sram = (streamed_sram, stationary_sram) if flow.stationary == "b" else (stationary_sram, streamed_sram)
    return loads, stores * word_bytes, (a_sram, b_sram, psum * (f.fr > 0) * word_bytes, psum * word_bytes)


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
    rounded up to whole cycles."""
    compute = schedule.compute_cycles
    if compute.size == 0:
        return Timing(0, 0, 0, 0, 0)
    loads, stores = schedule.dram_read_bytes, schedule.dram_write_bytes
    overlapped = np.zeros_like(loads)
    overlapped[:-1] += loads[1:]
    overlapped[1:] += stores[:-1]
    steps = np.maximum(compute, overlapped / bytes_per_cycle)
    total = latency_cycles + loads[0] / bytes_per_cycle + float(steps.sum()) + stores[-1] / bytes_per_cycle
    compute_total = int(compute.sum())
    total_cycles = max(compute_total, math.ceil(total - 1e-9))
    return Timing(
        compute_cycles=compute_total,
        stall_cycles=total_cycles - compute_total,
        total_cycles=total_cycles,
        dram_read_bytes=round(float(schedule.dram_read_bytes.sum())),
        dram_write_bytes=round(float(schedule.dram_write_bytes.sum())),
    )


def streaming_cycles(compute_cycles: int, dram_read_bytes: int, dram_write_bytes: int, *, bytes_per_cycle: float,
                     latency_cycles: int) -> Timing:
    """An op that streams its operands from DRAM and its results back while it computes (vector
    work on the special unit, linear algebra): ``latency + max(compute, (read + write)/bw)``;
    no latency for an op that moves nothing."""
    moved = dram_read_bytes + dram_write_bytes
    transfer = moved / bytes_per_cycle
    total = (latency_cycles if moved else 0) + max(compute_cycles, transfer)
    total_cycles = max(compute_cycles, math.ceil(total - 1e-9))
    return Timing(compute_cycles, total_cycles - compute_cycles, total_cycles, dram_read_bytes, dram_write_bytes)

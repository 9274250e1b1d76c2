"""SCALE-Sim 3.0's memory model in closed form: DRAM words per operand, stall and total cycles of
one GEMM in its USER bandwidth mode (``memory_model = "scalesim"`` in the hardware config).

Sources: Samajdar et al., "A Systematic Methodology for Characterizing Scalability of DNN
Accelerators using SCALE-Sim", ISPASS 2020; Raj et al., SCALE-Sim v3 (2025); read from the
installed package 3.0.0 (``memory/read_buffer.py``, ``memory/write_buffer.py``,
``memory/double_buffered_scratchpad_mem.py``, ``single_layer_sim.py``, ``compute/systolic_compute_*.py``)
and checked against ``tests/data/scalesim/gemm_memory_user.csv`` (``docs/scalesim.md``).

What SCALE-Sim does, and what the closed form takes from it (``docs/scalesim.md`` works small cases):

* **Prefetch images.** Each read SRAM (IFMAP = A, filter = B) is filled from a *prefetch image* of
  its operand, built fold by fold and padded with empty slots to whole folds; the empty slots
  travel like words (they are counted in the DRAM reads). Image sizes (``prefetch_image_words``):
  OS A ``Rf R x K``, B ``K x Cf C``; WS A ``M x Rf R``, B ``K x Cf C``; IS A ``K x Cf C``,
  B ``Rf R x N``, with ``Rf``, ``Cf`` the row / column folds of ``accel_sim.systolic``.
* **Buffers.** Each SRAM holds ``sram bytes / word bytes`` words, half active (``active_buf_frac
  = 0.5``), half prefetch. The first fill of the active half happens before cycle 0 and costs no
  stall; it moves ``ceil(min(image, active) / bw)`` lines of ``bw`` words.
* **Fit test.** The operand *fits* when its valid (un-padded) words, grouped in sets of
  ``ceil(buffer words / 100)`` words (SCALE-Sim's hashed lines), fit the active half's sets. Then
  nothing is fetched again: no more DRAM reads, no read stalls.
* **Writes.** Every word the array writes to the OFMAP SRAM goes to DRAM once: ``M N`` under OS,
  ``M N Rf`` under WS / IS (every row fold's partial sums are written out and never read back).
  SCALE-Sim also counts some empty slots of the partial ``bw``-word write lines it forces out at
  each drain (``write_buffer.py``); the closed form leaves them out (at most 7 words, 0.73 % of the
  writes and 0.4 % of the DRAM words of a recorded row). The final drain happens after the last compute cycle and is not in
  "Total Cycles".
* **Cycles.** "Total Cycles" = the compute lines (``accel_sim.systolic.gemm_cycles``) + stalls,
  reported as a zero-based index (one less); we count cycles, as ``accel_sim.systolic`` does.

Exact for the reads and the cycles when every read operand fits and the output words fit the
OFMAP SRAM (the *fits* regime: 132 of the 180 recorded rows; there SCALE-Sim's write buffer never
fills, so the writes never stall the array). Outputs that overflow the OFMAP SRAM while the reads
fit do not occur in the recording: that case is not validated (its stall is an estimate, the write
port's stream, ``write_stream_cycles``).

When an operand does not fit (*spill*), SCALE-Sim's window over the image moves only forward and
circularly, by whole prefetch halves, on every miss; a demand behind the window costs a lap of the
whole image, so its refetches depend on the order in which each fold's skewed demand walks the
diagonally rolled-out image. The closed form here counts the sweeps the fold loop needs
(``spill_sweep_words``) at SCALE-Sim's prefetch granularity and times them as a back-to-back
stream; it is *not* SCALE-Sim's count in that regime (docs/scalesim.md gives the measured gap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accel_sim.systolic import fold_counts, gemm_cycles, map_gemm

SCALESIM_ACTIVE_FRACTION = 0.5  # single_layer_sim.py: active_buf_frac = 0.5 for every SRAM
SCALESIM_SETS_PER_BUFFER = 100  # read_buffer.py prepare_hashed_buffer: ceil(total / 100) words per set


@dataclass(frozen=True)
class ScalesimMemory:
    """One GEMM under SCALE-Sim's memory model, in words and cycles."""

    ifmap_read_words: int
    filter_read_words: int
    ofmap_write_words: int
    compute_cycles: int
    stall_cycles: int
    total_cycles: int
    fits: bool  # reads fit their active halves, outputs the OFMAP SRAM: the regime where the closed form is exact


def prefetch_image_words(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str) -> tuple[int, int]:
    """Words (with the empty slots of padded folds) of the A and B prefetch images SCALE-Sim builds
    (``compute/systolic_compute_*.py``, ``create_*_prefetch_mat``)."""
    s_r, s_c, _ = map_gemm(m, n, k, dataflow)
    row_folds, col_folds = fold_counts(s_r, s_c, rows=rows, cols=cols)
    padded_r, padded_c = row_folds * rows, col_folds * cols
    if dataflow == "os":
        return padded_r * k, k * padded_c
    if dataflow == "ws":
        return m * padded_r, k * padded_c
    return k * padded_c, padded_r * n


def spill_sweep_words(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str,
                      a_image_words: int, b_image_words: int, b_active_words: int) -> tuple[int, int]:
    """Words of A and B the fold loop (for each column fold, every row fold) sweeps when an
    operand does not fit: the streamed operand (OS / WS: A; IS: B) once per column fold; OS's B
    once, or once per fold if one column fold's block ``K x cols`` exceeds B's active half
    (``b_active_words``); the stationary operand (WS: B; IS: A) once."""
    s_r, s_c, _ = map_gemm(m, n, k, dataflow)
    row_folds, col_folds = fold_counts(s_r, s_c, rows=rows, cols=cols)
    if dataflow == "os":
        b_sweeps = 1 if k * cols <= b_active_words else row_folds
        return col_folds * a_image_words, b_sweeps * b_image_words
    if dataflow == "ws":
        return col_folds * a_image_words, b_image_words
    return a_image_words, col_folds * b_image_words


def _halves(buffer_words: int) -> tuple[int, int]:
    """(active, prefetch) words of a double-buffered SRAM of ``buffer_words`` words."""
    active = math.ceil(buffer_words * SCALESIM_ACTIVE_FRACTION)
    return active, buffer_words - active


def prefetch_cycles(buffer_words: int, bandwidth_words_per_cycle: int) -> int:
    """Cycles of one prefetch after the first fill: one per ``bw``-word line of the prefetch half,
    plus the port's latency of 1 (``read_buffer.new_prefetch``, ``read_port``)."""
    return math.ceil(_halves(buffer_words)[1] / bandwidth_words_per_cycle) + 1


def write_stream_cycles(write_words: int, ofmap_buffer_words: int, bandwidth_words_per_cycle: int) -> int:
    """Cycles before the last output word can enter SCALE-Sim's OFMAP SRAM: all but the buffer's
    worth must have drained through its write port first (0 when every output fits)."""
    return math.ceil(max(0, write_words - ofmap_buffer_words) / bandwidth_words_per_cycle)


def read_buffer_words(*, image_words: int, valid_words: int, swept_words: int, buffer_words: int,
                      bandwidth_words_per_cycle: int) -> tuple[int, int]:
    """(DRAM words, prefetches after the first fill) of one double-buffered read SRAM
    (``memory/read_buffer.py``): the first fill, then, when the operand does not fit, one
    prefetch of the whole prefetch half (rounded up to ``bw``-word lines) per half swept."""
    bw = bandwidth_words_per_cycle
    active, prefetch = _halves(buffer_words)
    first_fill = math.ceil(min(image_words, active) / bw) * bw
    set_words = math.ceil(buffer_words / SCALESIM_SETS_PER_BUFFER)
    if math.ceil(valid_words / set_words) <= math.ceil(active / set_words) or prefetch == 0:
        return first_fill, 0
    prefetches = math.ceil((swept_words - active) / prefetch)
    return first_fill + prefetches * math.ceil(prefetch / bw) * bw, prefetches


def gemm_memory_scalesim(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str,
                         ifmap_buffer_words: int, filter_buffer_words: int, ofmap_buffer_words: int,
                         bandwidth_words_per_cycle: int) -> ScalesimMemory:
    """DRAM words and cycles of ``out[m x n] = A[m x k] . B[k x n]`` under SCALE-Sim's USER
    bandwidth mode (module docstring). Each read SRAM has its own port of
    ``bandwidth_words_per_cycle`` (SCALE-Sim gives IFMAP, filter and OFMAP a port each).

    Stalls: none when both operands fit and the outputs fit the OFMAP SRAM (every read is served
    from the first fill; the writes drain behind compute and the final drain is outside "Total
    Cycles"). Otherwise each spilling operand's prefetches run back to back on its port
    (``prefetch_cycles`` each), the overflowing writes drain through theirs
    (``write_stream_cycles``), and the run lasts at least as long as the slowest port's stream."""
    compute = gemm_cycles(m, n, k, rows=rows, cols=cols, dataflow=dataflow)
    if compute == 0:
        return ScalesimMemory(0, 0, 0, 0, 0, 0, True)
    s_r, s_c, _ = map_gemm(m, n, k, dataflow)
    row_folds, _ = fold_counts(s_r, s_c, rows=rows, cols=cols)
    a_image, b_image = prefetch_image_words(m, n, k, rows=rows, cols=cols, dataflow=dataflow)
    a_swept, b_swept = spill_sweep_words(
        m, n, k, rows=rows, cols=cols, dataflow=dataflow, a_image_words=a_image, b_image_words=b_image,
        b_active_words=_halves(filter_buffer_words)[0],
    )
    bw = bandwidth_words_per_cycle
    a_words, a_prefetches = read_buffer_words(image_words=a_image, valid_words=m * k, swept_words=a_swept,
                                              buffer_words=ifmap_buffer_words, bandwidth_words_per_cycle=bw)
    b_words, b_prefetches = read_buffer_words(image_words=b_image, valid_words=k * n, swept_words=b_swept,
                                              buffer_words=filter_buffer_words, bandwidth_words_per_cycle=bw)
    writes = m * n if dataflow == "os" else m * n * row_folds
    stream = max(a_prefetches * prefetch_cycles(ifmap_buffer_words, bw),
                 b_prefetches * prefetch_cycles(filter_buffer_words, bw),
                 write_stream_cycles(writes, ofmap_buffer_words, bw))
    total = max(compute, stream)
    return ScalesimMemory(a_words, b_words, writes, compute, total - compute, total,
                          fits=a_prefetches == 0 and b_prefetches == 0 and writes <= ofmap_buffer_words)

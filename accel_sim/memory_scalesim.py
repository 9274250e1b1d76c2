"""SCALE-Sim 3.0's memory model, derived from its source: DRAM words per operand, stall and total
cycles of one GEMM in its USER bandwidth mode (``memory_model = "scalesim_v3"`` in the hardware config).

Sources: Samajdar et al., "A Systematic Methodology for Characterizing Scalability of DNN
Accelerators using SCALE-Sim", ISPASS 2020; Raj et al., SCALE-Sim v3 (2025); read from the
installed package 3.0.0 (``memory/read_buffer.py``, ``memory/write_buffer.py``,
``memory/double_buffered_scratchpad_mem.py``, ``single_layer_sim.py``, ``compute/systolic_compute_*.py``)
and checked against ``tests/data/scalesim/gemm_memory_user.csv`` and the held-out
``gemm_memory_spill.csv`` (``docs/scalesim.md`` works small cases).

What SCALE-Sim does, and what is taken from it:

* **Prefetch images.** Each read SRAM (IFMAP = A, filter = B) is filled from a *prefetch image* of
  its operand, built fold by fold and padded with empty slots to whole folds; the empty slots
  travel like words (they are counted in the DRAM reads). Image sizes (``prefetch_image_words``):
  OS A ``Rf R x K``, B ``K x Cf C``; WS A ``M x Rf R``, B ``K x Cf C``; IS A ``K x Cf C``,
  B ``Rf R x N``, with ``Rf``, ``Cf`` the row / column folds of ``accel_sim.systolic``. Streamed
  operands' images are rolled out along anti-diagonals, the stationary ones' row by row
  (``OperandImage.rank``: a word's place among the image's valid words, in closed form).
* **Buffers.** Each SRAM holds ``sram bytes / word bytes`` words, half active (``active_buf_frac
  = 0.5``), half prefetch. The first fill of the active half happens before cycle 0 and costs no
  stall; it moves ``ceil(min(image, active) / bw)`` lines of ``bw`` words.
* **Set window (re-fetch).** The image's valid words are grouped in sets of ``ceil(buffer words /
  100)``; the active half is a window of consecutive sets over the image, circular. A demanded
  word outside it moves the window forward by the prefetch half's sets, as often as needed, and
  each move is one DRAM prefetch of the whole prefetch half (``ceil(prefetch / bw) bw`` words).
  The window never moves back: a fold whose demand starts behind it (the next row fold of a
  streamed operand re-walking its block, the stationary operand's rows demanded bottom row first,
  the skewed blocks' overlap at fold edges) costs a lap of the whole image (``read_misses``).
  An operand whose sets fit the window is never fetched again.
* **Prefetch chain and its doubled stall.** Each port's prefetches run back to back from cycle -1,
  ``ceil(prefetch / bw) + 1`` cycles each (``prefetch_cycles``), whenever they are asked for;
  a demand line that misses at cycle ``c`` while the chain ends at ``L`` waits ``L - c - 1``, and
  SCALE-Sim adds that wait to the line's offset twice (``read_buffer.service_reads``).
* **Writes.** Every word the array writes to the OFMAP SRAM goes to DRAM once: ``M N`` under OS,
  ``M N Rf`` under WS / IS (every row fold's partial sums are written out and never read back).
  The words form ``bw``-word lines; the OFMAP SRAM drains ``ceil(half / bw)`` lines (cycles) once
  it holds more than half and no drain runs, first forcing its partial line out as a line of its
  own, and credits the drained lines at once, ``bw`` words each but the last its own count; so a
  forced partial line drained before the last counts its empty slots as written words (up to 7
  of 568 in the recording). A word that finds the SRAM full during a drain waits for the drain's
  end (``stalls``). The final drains (``empty_all_buffers``) happen after the last compute cycle
  and are not in "Total Cycles".
* **Cycles.** "Total Cycles" = the compute lines (``accel_sim.systolic.gemm_cycles``) + stalls,
  reported as a zero-based index (one less); we count cycles, as ``accel_sim.systolic`` does.
  Demand line ``i`` is served at cycle ``i +`` the stalls so far, and stalls by the largest of
  its three buffers' waits.

Not a single closed form over the GEMM: which refetch costs a lap depends on where the window
stands when each fold begins, which depends on every earlier fold (the window's start modulo the
image's sets), so the model walks the folds (O(1) per fold of a streamed operand, O(1) per fold of
a stationary operand that lies inside the window, else O(rows)) and the drain / miss events (O(1)
each), each step in closed form. Measured agreement (tests/test_scalesim_memory.py, 234 rows, 102
of them spilling or overflowing the OFMAP SRAM): DRAM reads per operand, DRAM writes, stall
cycles and total cycles exact on every row.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from accel_sim.scalesim_reads import demand_runs, halves, images, prefetch_cycles, prefetch_image_words, read_misses
from accel_sim.scalesim_stalls import Outputs, stalls
from accel_sim.systolic import gemm_cycles


@dataclass(frozen=True)
class ScalesimMemory:
    """One GEMM under SCALE-Sim's memory model, in words and cycles."""

    ifmap_read_words: int
    filter_read_words: int
    ofmap_write_words: int
    compute_cycles: int
    stall_cycles: int
    total_cycles: int
    fits: bool  # no refetch and the outputs fit the OFMAP SRAM: nothing can stall the array


@functools.lru_cache(maxsize=4096)
def gemm_memory_scalesim(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str,
                         ifmap_buffer_words: int, filter_buffer_words: int, ofmap_buffer_words: int,
                         bandwidth_words_per_cycle: int) -> ScalesimMemory:
    """DRAM words and cycles of ``out[m x n] = A[m x k] . B[k x n]`` under SCALE-Sim's USER
    bandwidth mode (module docstring). Each SRAM has its own port of ``bandwidth_words_per_cycle``
    (SCALE-Sim gives IFMAP, filter and OFMAP a port each). Cached by its arguments: a training
    step prices the same GEMM shape several times. Its cost grows with the number of refetches
    (buffers far below the operands: docs/scalesim.md, Speed)."""
    compute = gemm_cycles(m, n, k, rows=rows, cols=cols, dataflow=dataflow)
    if compute == 0:
        return ScalesimMemory(0, 0, 0, 0, 0, 0, True)
    bw = bandwidth_words_per_cycle
    a_image, b_image = images(m, n, k, rows, cols, dataflow)
    a_image_words, b_image_words = prefetch_image_words(m, n, k, rows=rows, cols=cols, dataflow=dataflow)
    words, events = [], {}
    for op, (image, image_words, buffer_words) in enumerate(((a_image, a_image_words, ifmap_buffer_words),
                                                              (b_image, b_image_words, filter_buffer_words))):
        active, prefetch = halves(buffer_words)
        misses = read_misses(image, demand_runs(image, "ab"[op], m, n, k, rows, cols, dataflow), buffer_words)
        refetches = sum(count for _, count in misses)
        words.append(math.ceil(min(image_words, active) / bw) * bw + refetches * math.ceil(prefetch / bw) * bw)
        for line, count in misses:
            events.setdefault(line, [0, 0])[op] += count
    outputs = Outputs.of(m, n, k, rows, cols, dataflow)
    writes = outputs.total()
    read_events = [(line, a, b) for line, (a, b) in sorted(events.items())]
    fits = not read_events and writes <= ofmap_buffer_words
    chains = (prefetch_cycles(ifmap_buffer_words, bw), prefetch_cycles(filter_buffer_words, bw))
    stall, written = stalls(read_events, outputs, ofmap_buffer_words, chains, bw)
    return ScalesimMemory(words[0], words[1], written, compute, stall, compute + stall, fits)

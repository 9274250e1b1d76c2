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
  end (``_stalls``). The final drains (``empty_all_buffers``) happen after the last compute cycle
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

import collections
import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

from accel_sim.dataflows import dataflow_named
from accel_sim.systolic import fold_counts, fold_cycles, gemm_cycles, map_gemm

SCALESIM_ACTIVE_FRACTION = 0.5  # single_layer_sim.py: active_buf_frac = 0.5 for every SRAM
SCALESIM_SETS_PER_BUFFER = 100  # read_buffer.py prepare_hashed_buffer: ceil(total / 100) words per set
SCALESIM_READ_PORT_LATENCY_CYCLES = 1  # read_port.py: latency = 1
SCALESIM_WRITE_PORT_LATENCY_CYCLES = 0  # write_port.py: latency = 0
SCALESIM_HIT_LATENCY_CYCLES = 1  # read_buffer.py: hit_latency = 1 (double_buffered_scratchpad_mem.py)


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


def prefetch_image_words(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str) -> tuple[int, int]:
    """Words (with the empty slots of padded folds) of the A and B prefetch images SCALE-Sim builds
    (``compute/systolic_compute_*.py``, ``create_*_prefetch_mat``): every block of the image
    (``_images``), the last one padded to full width."""
    a_image, b_image = _images(m, n, k, rows, cols, dataflow)
    return a_image.padded_words, b_image.padded_words


def _halves(buffer_words: int) -> tuple[int, int]:
    """(active, prefetch) words of a double-buffered SRAM of ``buffer_words`` words."""
    active = math.ceil(buffer_words * SCALESIM_ACTIVE_FRACTION)
    return active, buffer_words - active


def prefetch_cycles(buffer_words: int, bandwidth_words_per_cycle: int) -> int:
    """Cycles one prefetch adds to a read port's chain: one per ``bw``-word line of the prefetch
    half, plus the port's latency (``read_buffer.new_prefetch``: requests at ``last + 1 + i``)."""
    return math.ceil(_halves(buffer_words)[1] / bandwidth_words_per_cycle) + SCALESIM_READ_PORT_LATENCY_CYCLES


def _ramp(x: int, width: int) -> int:
    """sum over c in [0, width) of max(0, x - c)."""
    if x <= 0:
        return 0
    t = width if width < x else x
    return t * x - t * (t - 1) // 2


def _staircase(x: int, width: int, height: int) -> int:
    """sum over c in [0, width) of clamp(x - c, 0, height): the elements (r, c) of a
    ``height x width`` matrix with ``r + c < x``."""
    if x <= 0:
        return 0
    return _ramp(x, width) - (_ramp(x - height, width) if x > height else 0)


@dataclass(frozen=True)
class OperandImage:
    """An operand's prefetch image (``create_*_prefetch_mat``): ``blocks`` fold blocks of
    ``block_rows x width`` stacked vertically, the last valid in its first ``last_width`` columns
    only (the padding of a partial fold); rolled out along anti-diagonals (``rolled``: IFMAP of OS /
    WS, filter of OS / IS, the "ISSUE #15, #16" roll-out) or row by row (WS filter, IS IFMAP)."""

    blocks: int
    block_rows: int
    width: int
    last_width: int
    rolled: bool

    @property
    def padded_words(self) -> int:
        return self.blocks * self.block_rows * self.width

    @property
    def valid_words(self) -> int:
        return (self.blocks - 1) * self.block_rows * self.width + self.block_rows * self.last_width

    def rank(self, r: int, c: int) -> int:
        """Position of element (r, c) among the image's valid words, in fetch order (the order
        ``prepare_hashed_buffer`` groups them into sets)."""
        height, last_row = self.blocks * self.block_rows, (self.blocks - 1) * self.block_rows
        pad = self.width - self.last_width
        if not self.rolled:
            return r * self.width + c - max(0, r - last_row) * pad
        d = r + c  # anti-diagonal d lists rows min(d, height - 1) down to max(0, d - width + 1)
        before = _staircase(d, self.width, height)
        within = min(d, height - 1) - r
        if pad:  # less the padding slots of the last block on the diagonals before d and on d
            before -= _staircase(d - last_row - self.last_width, pad, height - last_row)
            within -= max(0, min(d, height - 1, d - self.last_width) - max(r + 1, last_row) + 1)
        return before + within

    def skewed_line_reaching(self, top: int, width: int, threshold: int, first: int, last: int) -> int:
        """The first line ``t`` of the skewed walk over the block of rows ``top ..`` (``width``
        valid columns; ranks ``first`` .. ``last``) that asks for a word of rank >= ``threshold``:
        line ``t``'s last word (in rank order) is its lowest row's, ``(top + max(0, t - width + 1),
        min(t, width - 1))``. Searched from the line a steady walk would reach it at."""
        lines = self.block_rows + width - 1

        def reaches(t: int) -> bool:
            low_row = max(0, t - width + 1)
            return self.rank(top + low_row, t - low_row) >= threshold

        guess = min(lines - 1, max(0, (threshold - first) * lines // max(1, last - first + 1)))
        gap = 1  # gallop from the guess to a bracket (lo, hi]: lo does not reach (or is -1), hi does
        if reaches(guess):
            hi = guess
            while hi - gap >= 0 and reaches(hi - gap):
                hi, gap = hi - gap, gap * 2
            lo = max(-1, hi - gap)
        else:
            lo = guess
            while lo + gap < lines - 1 and not reaches(lo + gap):
                lo, gap = lo + gap, gap * 2
            hi = min(lines - 1, lo + gap)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if reaches(mid):
                hi = mid
            else:
                lo = mid
        return hi


def _images(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> tuple[OperandImage, OperandImage]:
    """The A (IFMAP) and B (filter) prefetch images, by how each operand is laid over the folds
    (``Dataflow.operand_layout``): a stationary operand (WS filter, IS IFMAP) per column fold, its
    ``S_R x C`` block row by row, not rolled; a streamed one per fold of the array side it spans,
    its ``T x R`` (rows: OS / WS IFMAP, IS filter) or ``T x C`` (columns: OS filter) block, rolled.
    So OS: A^T's K x R and B's K x C blocks; WS: A's M x R and B's K x C; IS: A^T's K x C and
    B^T's N x R."""
    flow = dataflow_named(dataflow)
    s_r, s_c, t = flow.map_gemm(m, n, k)
    row_folds, col_folds = fold_counts(s_r, s_c, rows=rows, cols=cols)

    def image(operand: str) -> OperandImage:
        layout = flow.operand_layout(operand)
        if layout == "stationary":
            return OperandImage(col_folds, s_r, cols, s_c - (col_folds - 1) * cols, False)
        if layout == "rows":
            return OperandImage(row_folds, t, rows, s_r - (row_folds - 1) * rows, True)
        return OperandImage(col_folds, t, cols, s_c - (col_folds - 1) * cols, True)

    return image("a"), image("b")


def fold_lines(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str) -> int:
    """Demand lines (cycles) of one fold: ``accel_sim.systolic.fold_cycles`` (tests/data/scalesim/README.md)."""
    _, _, t = map_gemm(m, n, k, dataflow)
    return fold_cycles(t, rows=rows, cols=cols, dataflow=dataflow)


class _SkewedFold(NamedTuple):
    """A streamed operand's fold: its block (rows ``top ..`` of the image, ``width`` valid
    columns), skewed: line ``first_line + t`` asks for the block's anti-diagonal ``t``, in rank
    order, from rank ``first`` to rank ``last``."""

    first: int
    last: int
    first_line: int
    top: int
    width: int


class _RowsFold(NamedTuple):
    """A stationary operand's fold: ``rows`` lines from ``first_line``, line ``j`` asking for the
    ``width`` words from rank ``top - j * stride`` on (the block's rows, bottom row first)."""

    top: int
    width: int
    stride: int
    rows: int
    first_line: int


def _demand_runs(image: OperandImage, operand: str, m: int, n: int, k: int, rows: int, cols: int, dataflow: str):
    """Per fold, in SCALE-Sim's fold order (each column fold, every row fold inside it), the
    operand's demand (``create_*_demand_mat``):

    * Streamed operands (OS both, WS IFMAP, IS filter): a ``_SkewedFold``, the fold's block skewed
      over the array (``skew_matrix``); line ``t`` asks for anti-diagonal ``t`` of the block, so
      the fold walks its block of the rolled image forward, from its first element (line
      ``wait``) to its last (line ``wait + rows - 1 + width - 1``).
    * Stationary operands (WS filter, IS IFMAP): a ``_RowsFold``, ``rows`` lines, one row of the
      block each, the block's rows in reverse (``np.flip``: the top row is pushed in last)."""
    s_r, s_c, _ = map_gemm(m, n, k, dataflow)
    row_folds, col_folds = fold_counts(s_r, s_c, rows=rows, cols=cols)
    lines = fold_lines(m, n, k, rows=rows, cols=cols, dataflow=dataflow)
    flow = dataflow_named(dataflow)
    streamed_by_row_fold = flow.operand_layout(operand) == "rows"
    wait = rows if flow.preloads else 0
    for fc in range(col_folds):
        for fr in range(row_folds):
            start = (fc * row_folds + fr) * lines
            if image.rolled:
                block = fr if streamed_by_row_fold else fc
                width = image.width if block < image.blocks - 1 else image.last_width
                top = block * image.block_rows
                yield _SkewedFold(image.rank(top, 0), image.rank(top + image.block_rows - 1, width - 1),
                                  start + wait, top, width)
            else:
                width = image.width if fc < image.blocks - 1 else image.last_width
                used = min(rows, image.block_rows - fr * rows)
                first_row = fc * image.block_rows + fr * rows + used - 1
                first_line = start + rows - used  # the flipped block's empty rows come first
                top = image.rank(first_row, 0)
                stride = top - image.rank(first_row - 1, 0) if used > 1 else 0
                yield _RowsFold(top, width, stride, used, first_line)


def read_misses(image: OperandImage, runs, buffer_words: int) -> list[tuple[int, int]]:
    """The prefetches SCALE-Sim's read buffer (``memory/read_buffer.py``) makes after its first
    fill, as ``(demand line, count)`` in line order.

    The image's valid words are grouped in sets of ``ceil(buffer / 100)`` (``prepare_hashed_buffer``);
    the active half holds a window of ``A`` consecutive sets (circularly), and a demand outside it
    moves the window forward by ``P`` sets (the prefetch half), as often as needed
    (``new_prefetch``), never back: a demand behind the window costs a lap of the image. A run
    walked forward from set ``a`` to set ``b`` needs the window first at ``a`` and then, moving on
    from there, at ``b`` (every set between is then passed in order). The line of a prefetch inside
    a streamed fold is the first line of its skewed walk that asks for a word of the set past the
    window (``OperandImage.skewed_line_reaching``)."""
    active, prefetch = _halves(buffer_words)
    set_words = math.ceil(buffer_words / SCALESIM_SETS_PER_BUFFER)
    sets = image.valid_words // set_words + 1
    window = min(math.ceil(active / set_words), sets)
    step = min(math.ceil(prefetch / set_words), sets - window) if prefetch else 0
    misses: list[tuple[int, int]] = []
    if step == 0 or sets <= window:
        return misses
    start = 0

    def walk(first: int, last: int, first_line: int, block: _SkewedFold | None = None) -> None:
        nonlocal start
        a, b = first // set_words, last // set_words
        ahead = (a - start) % sets
        if ahead >= window:
            moves = -(-(ahead - window + 1) // step)
            start = (start + moves * step) % sets
            misses.append((first_line, moves))
        offset = (a - start) % sets
        if offset + b - a >= window:
            moves = -(-(offset + b - a - window + 1) // step)
            if block is None:
                misses.append((first_line, moves))
            else:  # each move when the walk first asks for a word of the set past the window
                for i in range(moves):
                    threshold = (a + window + i * step - offset) * set_words
                    misses.append((first_line + image.skewed_line_reaching(block.top, block.width, threshold,
                                                                           block.first, block.last), 1))
            start = (start + moves * step) % sets

    for fold in runs:
        if isinstance(fold, _RowsFold):
            walk(fold.top, fold.top + fold.width - 1, fold.first_line)
            bottom = fold.top - (fold.rows - 1) * fold.stride
            top_offset = (fold.top // set_words - start) % sets
            if (bottom // set_words - start) % sets <= top_offset < window:
                continue  # every lower row lies in the window between its start and the top row
            for j in range(1, fold.rows):
                first = fold.top - j * fold.stride
                walk(first, first + fold.width - 1, fold.first_line + j)
        else:
            walk(fold.first, fold.last, fold.first_line, fold)
    return misses


def _skew_line_of(x: int, height: int, width: int) -> int:
    """The line of a ``height x width`` block skewed over its columns (line ``j`` holds the
    elements with ``r + c = j``) at which its ``x``-th element (1-based, in line order) is written:
    the smallest ``j`` with ``#{r + c <= j} >= x``. Rising triangle, ``short`` words a line, falling
    triangle (``short``, ``long``: the block's smaller and larger side)."""
    short, long = min(height, width), max(height, width)
    rise = short * (short + 1) // 2
    if x <= rise:  # (j + 1)(j + 2) / 2 >= x
        j = max(0, (math.isqrt(8 * x + 1) - 3) // 2)
        while (j + 1) * (j + 2) // 2 < x:
            j += 1
        return j
    if x <= rise + (long - short) * short:
        return short - 1 + -(-(x - rise) // short)
    after = height * width - x  # words after the x-th: the falling triangle's last q lines hold q(q + 1) / 2
    q = (math.isqrt(8 * after + 1) - 1) // 2
    while q * (q + 1) // 2 > after:
        q -= 1
    return height + width - 2 - q


@dataclass(frozen=True)
class _Outputs:
    """The OFMAP demand (``create_ofmap_demand_mat``): per fold, ``wait`` empty lines, then the
    fold's output block (``block_rows`` rows, a column fold's width) skewed over the array's
    columns. Under OS the block is a row fold of ``rows`` rows, flipped, so a partial row fold's
    valid rows come last; under WS / IS it is all ``T`` rows."""

    row_folds: int
    col_folds: int
    wait: int
    lines: int  # per fold
    rows: int
    cols: int
    spatial_rows: int  # S_R
    spatial_cols: int  # S_C
    block_rows: int  # OS: rows; WS / IS: T
    flipped: bool  # OS

    @classmethod
    def of(cls, m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> _Outputs:
        s_r, s_c, t = map_gemm(m, n, k, dataflow)
        row_folds, col_folds = fold_counts(s_r, s_c, rows=rows, cols=cols)
        complete_in_fold = not dataflow_named(dataflow).partial_sums_span_row_folds  # OS
        return cls(row_folds, col_folds, t - 1 if complete_in_fold else 2 * rows - 1,
                   fold_lines(m, n, k, rows=rows, cols=cols, dataflow=dataflow), rows, cols, s_r, s_c,
                   rows if complete_in_fold else t, complete_in_fold)

    def total(self) -> int:
        """Words written: every fold's valid block (``M N`` under OS, ``M N Rf`` under WS / IS)."""
        per_col = self.spatial_rows if self.flipped else self.block_rows * self.row_folds
        return per_col * self.spatial_cols

    def _fold(self, fr: int, fc: int) -> tuple[int, int, int]:
        """(first valid row, valid rows, valid columns) of fold (fr, fc)'s output block."""
        width = min(self.cols, self.spatial_cols - fc * self.cols)
        if self.flipped:
            height = min(self.rows, self.spatial_rows - fr * self.rows)
            return self.rows - height, height, width
        return 0, self.block_rows, width

    def line_of(self, x: int) -> int:
        """The demand line of the ``x``-th output word written (1-based)."""
        per_col = self.spatial_rows if self.flipped else self.block_rows * self.row_folds
        fc = min((x - 1) // (self.cols * per_col), self.col_folds - 1)  # every column fold but the last is full
        x -= fc * self.cols * per_col
        width = min(self.cols, self.spatial_cols - fc * self.cols)
        fr = min((x - 1) // (self.block_rows * width), self.row_folds - 1)  # so is every row fold
        x -= fr * self.block_rows * width
        row0, height, width = self._fold(fr, fc)
        return (fc * self.row_folds + fr) * self.lines + self.wait + row0 + _skew_line_of(x, height, width)

    def words_before(self, line: int) -> int:
        """Output words written on the demand lines before ``line``."""
        fold, j = divmod(line, self.lines)
        fc, fr = divmod(fold, self.row_folds)
        if fc >= self.col_folds:
            return self.total()
        per_col = self.spatial_rows if self.flipped else self.block_rows * self.row_folds
        row0, height, width = self._fold(fr, fc)
        return fc * self.cols * per_col + fr * self.block_rows * width + _staircase(j - self.wait - row0, width, height)

    def next_write_line(self, line: int) -> int | None:
        """The first line at or after ``line`` that writes an output word (None: none left)."""
        fold, j = divmod(line, self.lines)
        while fold < self.row_folds * self.col_folds:
            fc, fr = divmod(fold, self.row_folds)
            row0, height, width = self._fold(fr, fc)
            first, last = self.wait + row0, self.wait + row0 + height + width - 2
            if j <= last:
                return fold * self.lines + max(j, first)
            fold, j = fold + 1, 0
        return None


def _stalls(read_events: list[tuple[int, int, int]], outputs: _Outputs, ofmap_buffer_words: int,
            prefetch_cycles_per_operand: tuple[int, int], bandwidth_words_per_cycle: int) -> tuple[int, int]:
    """(Stall cycles, DRAM words written) of ``double_buffered_scratchpad_mem.service_memory_requests``: demand line ``i``
    is served at cycle ``i + stalls so far``, and the line stalls by the largest of its three
    buffers' delays.

    * Reads (``read_buffer.service_reads``): each port's prefetches form a chain, each
      ``prefetch_cycles`` after the previous one, from cycle -1 (the end of the first fill, before
      cycle 0), whenever it is asked for; a miss at cycle ``c`` with the chain at ``L`` moves the
      line's offset (from the hit latency 1) by ``L - c - offset``, and by that again when
      positive (the stall is added twice: ``read_buffer.py`` lines 361-364).
    * Writes (``write_buffer.service_writes``): the OFMAP SRAM of ``W`` words starts a drain of
      ``ceil(D / bw)`` lines (cycles; no write-port latency), ``D = W - ceil(W / 2)``, when a word
      arrives while it holds more than ``D`` and no drain runs; the words written come in
      ``bw``-word lines, and each drain start first forces the partial line out as a line of its
      own. The drain frees its lines at once, ``bw`` words each but its last line's words only
      (``empty_drain_buf``). A word that finds the buffer full during a drain waits for the
      drain's end. The last drain (``empty_all_buffers``) is after the last line and costs nothing."""
    drain_words = ofmap_buffer_words - math.ceil(ofmap_buffer_words * SCALESIM_ACTIVE_FRACTION)
    drain_lines = math.ceil(drain_words / bandwidth_words_per_cycle) if drain_words else 0
    total_writes = outputs.total()
    # prefetch_active_buffer requests the first fill's lines at cycles -n - 1 .. -2 (n lines, latency
    # 1: "-1 * (num_lines - start_cycle - (i - latency))"), so its last line is served at cycle -1
    chain = [-1, -1]
    stall = freed = drain_end = 0
    full_word = full_line = None  # the word that last found the buffer full, and its line
    i = 0
    bw = bandwidth_words_per_cycle
    forced = 0  # words already cut into lines (up to the last drain's start)
    queue: collections.deque[list[int]] = collections.deque()  # undrained lines: [full lines, partial words]

    def start_drain(word: int) -> int:
        """Words a drain starting at the ``word``-th write frees (``empty_drain_buf``)."""
        nonlocal forced
        if word > forced:
            queue.append([(word - forced) // bw, (word - forced) % bw])
            forced = word
        lines_left, credit = drain_lines, 0
        while lines_left and queue:
            segment = queue[0]
            take = min(lines_left, segment[0])
            segment[0] -= take
            lines_left -= take
            credit += take * bw
            last = bw if take else 0
            if lines_left and segment[0] == 0 and segment[1]:
                lines_left -= 1
                credit += bw
                last = segment[1]
                segment[1] = 0
            if segment == [0, 0]:
                queue.popleft()
            if not lines_left or not queue:
                credit -= bw - last  # the last line counts its words only
        return credit

    def final_drains() -> int:
        """Words ``empty_all_buffers`` writes after the last line: the partial line forced out,
        then every undrained line, ``drain_lines`` at a time, each drain crediting its lines as
        ``bw`` words but its last line's words only."""
        nonlocal forced
        if drain_lines == 0:  # a buffer of one word: no drain ever runs; count every word once
            return total_writes
        if total_writes > forced:
            queue.append([(total_writes - forced) // bw, (total_writes - forced) % bw])
            forced = total_writes
        written = 0
        while queue:
            written += start_drain(forced)  # a drain of what is left, nothing new forced out
        return written

    memo: dict[tuple, tuple[int | None, int | None]] = {}

    def lines_of_state() -> tuple[int | None, int | None]:
        """(line of the word that next takes the buffer past ``D``, line of the word that fills it)
        for the current drain state; they depend on ``freed`` only, not on the stalls."""
        key = (freed, full_word)
        if key not in memo:
            if full_word is not None:
                memo[key] = (outputs.line_of(full_word + 1) if full_word + 1 <= total_writes else None, None)
            else:
                trigger = freed + drain_words + 1
                full = freed + ofmap_buffer_words
                memo[key] = (outputs.line_of(trigger) if trigger <= total_writes else None,
                             outputs.line_of(full) if full <= total_writes else None)
        return memo[key]

    def next_write_event() -> tuple[int | None, str]:
        """(line, what happens there): "drain" (a drain starts at the line's cycle), "drain at
        end" (after a full-buffer wait in the same line: at the running drain's end) or "full"."""
        if drain_lines == 0:
            return None, ""
        trigger, full = lines_of_state()
        if trigger is None:
            return None, ""
        if full_word is not None:  # the next word to arrive starts the next drain
            return trigger, "drain at end" if trigger == full_line else "drain"
        if trigger >= next_line and trigger + stall >= drain_end:
            return trigger, "drain"
        # the buffer passes D while a drain runs (or passed it on a line already served): the next
        # drain starts with the first word after the running one ends, unless the buffer fills first
        if full is not None and full < drain_end - stall:
            return full, "full"
        free_line = outputs.next_write_line(max(trigger, next_line, drain_end - stall))
        if full is not None and (free_line is None or full < free_line):
            return full, "full"
        return free_line, "drain"

    next_line = 0  # every line before it is served
    while True:
        write_at, kind = next_write_event()
        read_at = read_events[i][0] if i < len(read_events) else None
        if write_at is None and read_at is None:
            return stall, freed + final_drains()
        line = read_at if write_at is None or (read_at is not None and read_at < write_at) else write_at
        cycle = line + stall
        delay = 0
        while i < len(read_events) and read_events[i][0] == line:
            _, a_misses, b_misses = read_events[i]
            for op, count in ((0, a_misses), (1, b_misses)):
                offset = SCALESIM_HIT_LATENCY_CYCLES
                for _ in range(count):
                    chain[op] += prefetch_cycles_per_operand[op]
                    potential = chain[op] - (cycle + offset)
                    offset += potential
                    if potential > 0:
                        offset += potential
                delay = max(delay, offset - SCALESIM_HIT_LATENCY_CYCLES)
            i += 1
        if write_at == line:
            if kind == "full":
                delay = max(delay, drain_end - cycle)
                full_word, full_line = freed + ofmap_buffer_words, line
            else:
                start = drain_end if kind == "drain at end" else max(cycle, drain_end)
                if full_word is not None:
                    word = full_word + 1
                elif line == lines_of_state()[0] and line >= next_line and cycle >= drain_end:
                    word = freed + drain_words + 1
                else:
                    word = outputs.words_before(line) + 1
                drain_end = start + drain_lines - 1 + SCALESIM_WRITE_PORT_LATENCY_CYCLES
                freed += start_drain(word)
                full_word = full_line = None
        stall += delay
        next_line = line + 1


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
    a_image, b_image = _images(m, n, k, rows, cols, dataflow)
    a_image_words, b_image_words = prefetch_image_words(m, n, k, rows=rows, cols=cols, dataflow=dataflow)
    words, events = [], {}
    for op, (image, image_words, buffer_words) in enumerate(((a_image, a_image_words, ifmap_buffer_words),
                                                              (b_image, b_image_words, filter_buffer_words))):
        active, prefetch = _halves(buffer_words)
        misses = read_misses(image, _demand_runs(image, "ab"[op], m, n, k, rows, cols, dataflow), buffer_words)
        refetches = sum(count for _, count in misses)
        words.append(math.ceil(min(image_words, active) / bw) * bw + refetches * math.ceil(prefetch / bw) * bw)
        for line, count in misses:
            events.setdefault(line, [0, 0])[op] += count
    outputs = _Outputs.of(m, n, k, rows, cols, dataflow)
    writes = outputs.total()
    read_events = [(line, a, b) for line, (a, b) in sorted(events.items())]
    fits = not read_events and writes <= ofmap_buffer_words
    chains = (prefetch_cycles(ifmap_buffer_words, bw), prefetch_cycles(filter_buffer_words, bw))
    stall, written = _stalls(read_events, outputs, ofmap_buffer_words, chains, bw)
    return ScalesimMemory(words[0], words[1], written, compute, stall, compute + stall, fits)

"""SCALE-Sim 3.0's read side (``accel_sim.memory_scalesim``'s module doc): its buffer constants, the
prefetch images of the A and B operands, the demand each fold makes on them, and the refetches its
set window costs (``read_misses``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from accel_sim.dataflows import dataflow_named
from accel_sim.systolic import fold_counts, fold_cycles, map_gemm


SCALESIM_ACTIVE_FRACTION = 0.5  # single_layer_sim.py: active_buf_frac = 0.5 for every SRAM


SCALESIM_SETS_PER_BUFFER = 100  # read_buffer.py prepare_hashed_buffer: ceil(total / 100) words per set


SCALESIM_READ_PORT_LATENCY_CYCLES = 1  # read_port.py: latency = 1


SCALESIM_WRITE_PORT_LATENCY_CYCLES = 0  # write_port.py: latency = 0


SCALESIM_HIT_LATENCY_CYCLES = 1  # read_buffer.py: hit_latency = 1 (double_buffered_scratchpad_mem.py)


def prefetch_image_words(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str) -> tuple[int, int]:
    """Words (with the empty slots of padded folds) of the A and B prefetch images SCALE-Sim builds
    (``compute/systolic_compute_*.py``, ``create_*_prefetch_mat``): every block of the image
    (``images``), the last one padded to full width."""
    a_image, b_image = images(m, n, k, rows, cols, dataflow)
    return a_image.padded_words, b_image.padded_words


def halves(buffer_words: int) -> tuple[int, int]:
    """(active, prefetch) words of a double-buffered SRAM of ``buffer_words`` words."""
    active = math.ceil(buffer_words * SCALESIM_ACTIVE_FRACTION)
    return active, buffer_words - active


def prefetch_cycles(buffer_words: int, bandwidth_words_per_cycle: int) -> int:
    """Cycles one prefetch adds to a read port's chain: one per ``bw``-word line of the prefetch
    half, plus the port's latency (``read_buffer.new_prefetch``: requests at ``last + 1 + i``)."""
    return math.ceil(halves(buffer_words)[1] / bandwidth_words_per_cycle) + SCALESIM_READ_PORT_LATENCY_CYCLES


def ramp(x: int, width: int) -> int:
    """sum over c in [0, width) of max(0, x - c)."""
    if x <= 0:
        return 0
    t = width if width < x else x
    return t * x - t * (t - 1) // 2


def staircase(x: int, width: int, height: int) -> int:
    """sum over c in [0, width) of clamp(x - c, 0, height): the elements (r, c) of a
    ``height x width`` matrix with ``r + c < x``."""
    if x <= 0:
        return 0
    return ramp(x, width) - (ramp(x - height, width) if x > height else 0)


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
        before = staircase(d, self.width, height)
        within = min(d, height - 1) - r
        if pad:  # less the padding slots of the last block on the diagonals before d and on d
            before -= staircase(d - last_row - self.last_width, pad, height - last_row)
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


def images(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> tuple[OperandImage, OperandImage]:
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


def demand_runs(image: OperandImage, operand: str, m: int, n: int, k: int, rows: int, cols: int, dataflow: str):
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


def set_window(image: OperandImage, buffer_words: int) -> tuple[int, int, int, int]:
    """(words per set, sets of the image, window ``A``, step ``P``): the image's valid words grouped
    in sets of ``ceil(buffer / 100)`` (``prepare_hashed_buffer``), the active half a window of ``A``
    sets, each prefetch moving it ``P`` sets (the prefetch half; 0: no prefetch half)."""
    active, prefetch = halves(buffer_words)
    set_words = math.ceil(buffer_words / SCALESIM_SETS_PER_BUFFER)
    sets = image.valid_words // set_words + 1
    window = min(math.ceil(active / set_words), sets)
    return set_words, sets, window, min(math.ceil(prefetch / set_words), sets - window) if prefetch else 0


def read_misses(image: OperandImage, runs, buffer_words: int) -> list[tuple[int, int]]:
    """The prefetches SCALE-Sim's read buffer (``memory/read_buffer.py``) makes after its first
    fill, as ``(demand line, count)`` in line order.

    The active half holds a window of ``A`` consecutive sets (circularly, ``set_window``), and a
    demand outside it moves the window forward by ``P`` sets (the prefetch half), as often as needed
    (``new_prefetch``), never back: a demand behind the window costs a lap of the image. A run
    walked forward from set ``a`` to set ``b`` needs the window first at ``a`` and then, moving on
    from there, at ``b`` (every set between is then passed in order). The line of a prefetch inside
    a streamed fold is the first line of its skewed walk that asks for a word of the set past the
    window (``OperandImage.skewed_line_reaching``)."""
    set_words, sets, window, step = set_window(image, buffer_words)
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

"""SCALE-Sim 3.0's write side and its stalls (``accel_sim.memory_scalesim``'s module doc): the OFMAP
demand (``Outputs``), and the walk over the demand lines that serves the read prefetches and the
OFMAP drains and counts the stall cycles and the DRAM words written (``stalls``).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

from accel_sim.scalesim_reads import (SCALESIM_ACTIVE_FRACTION, SCALESIM_HIT_LATENCY_CYCLES,
                                     SCALESIM_WRITE_PORT_LATENCY_CYCLES, fold_lines, staircase)
from accel_sim.dataflows import dataflow_named
from accel_sim.systolic import fold_counts, map_gemm


def skew_line_of(x: int, height: int, width: int) -> int:
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
class Outputs:
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
    def of(cls, m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> Outputs:
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
        return (fc * self.row_folds + fr) * self.lines + self.wait + row0 + skew_line_of(x, height, width)

    def words_before(self, line: int) -> int:
        """Output words written on the demand lines before ``line``."""
        fold, j = divmod(line, self.lines)
        fc, fr = divmod(fold, self.row_folds)
        if fc >= self.col_folds:
            return self.total()
        per_col = self.spatial_rows if self.flipped else self.block_rows * self.row_folds
        row0, height, width = self._fold(fr, fc)
        return fc * self.cols * per_col + fr * self.block_rows * width + staircase(j - self.wait - row0, width, height)

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


class _OfmapDrains:
    """The OFMAP SRAM's drain state (``write_buffer.service_writes``, ``stalls``'s second bullet): the
    words cut into ``bw``-word lines and not yet drained, the words freed, the running drain's end,
    and the word that last found the buffer full."""

    def __init__(self, outputs: Outputs, buffer_words: int, bandwidth_words_per_cycle: int):
        self.outputs = outputs
        self.buffer_words = buffer_words
        self.bw = bandwidth_words_per_cycle
        self.drain_words = buffer_words - math.ceil(buffer_words * SCALESIM_ACTIVE_FRACTION)
        self.drain_lines = math.ceil(self.drain_words / self.bw) if self.drain_words else 0
        self.total_writes = outputs.total()
        self.forced = 0  # words already cut into lines (up to the last drain's start)
        self.queue: collections.deque[list[int]] = collections.deque()  # undrained lines: [full lines, partial words]
        self.freed = self.drain_end = 0
        self.full_word = self.full_line = None  # the word that last found the buffer full, and its line
        self.memo: dict[tuple, tuple[int | None, int | None]] = {}

    def start_drain(self, word: int) -> int:
        """Words a drain starting at the ``word``-th write frees (``empty_drain_buf``)."""
        bw, queue = self.bw, self.queue
        if word > self.forced:
            queue.append([(word - self.forced) // bw, (word - self.forced) % bw])
            self.forced = word
        lines_left, credit = self.drain_lines, 0
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

    def final_drains(self) -> int:
        """Words ``empty_all_buffers`` writes after the last line: the partial line forced out,
        then every undrained line, ``drain_lines`` at a time, each drain crediting its lines as
        ``bw`` words but its last line's words only."""
        if self.drain_lines == 0:  # a buffer of one word: no drain ever runs; count every word once
            return self.total_writes
        if self.total_writes > self.forced:
            left = self.total_writes - self.forced
            self.queue.append([left // self.bw, left % self.bw])
            self.forced = self.total_writes
        written = 0
        while self.queue:
            written += self.start_drain(self.forced)  # a drain of what is left, nothing new forced out
        return written

    def lines_of_state(self) -> tuple[int | None, int | None]:
        """(line of the word that next takes the buffer past ``D``, line of the word that fills it)
        for the current drain state; they depend on ``freed`` only, not on the stalls."""
        key = (self.freed, self.full_word)
        if key not in self.memo:
            line_of, total = self.outputs.line_of, self.total_writes
            if self.full_word is not None:
                self.memo[key] = (line_of(self.full_word + 1) if self.full_word + 1 <= total else None, None)
            else:
                trigger = self.freed + self.drain_words + 1
                full = self.freed + self.buffer_words
                self.memo[key] = (line_of(trigger) if trigger <= total else None,
                                  line_of(full) if full <= total else None)
        return self.memo[key]

    def next_event(self, next_line: int, stall: int) -> tuple[int | None, str]:
        """(line, what happens there): "drain" (a drain starts at the line's cycle), "drain at
        end" (after a full-buffer wait in the same line: at the running drain's end) or "full"."""
        if self.drain_lines == 0:
            return None, ""
        trigger, full = self.lines_of_state()
        if trigger is None:
            return None, ""
        if self.full_word is not None:  # the next word to arrive starts the next drain
            return trigger, "drain at end" if trigger == self.full_line else "drain"
        if trigger >= next_line and trigger + stall >= self.drain_end:
            return trigger, "drain"
        # the buffer passes D while a drain runs (or passed it on a line already served): the next
        # drain starts with the first word after the running one ends, unless the buffer fills first
        if full is not None and full < self.drain_end - stall:
            return full, "full"
        free_line = self.outputs.next_write_line(max(trigger, next_line, self.drain_end - stall))
        if full is not None and (free_line is None or full < free_line):
            return full, "full"
        return free_line, "drain"

    def write(self, kind: str, line: int, cycle: int, next_line: int) -> int:
        """The write event ``kind`` at ``line`` (served at ``cycle``); returns the cycles it delays the line."""
        if kind == "full":
            self.full_word, self.full_line = self.freed + self.buffer_words, line
            return self.drain_end - cycle
        start = self.drain_end if kind == "drain at end" else max(cycle, self.drain_end)
        if self.full_word is not None:
            word = self.full_word + 1
        elif line == self.lines_of_state()[0] and line >= next_line and cycle >= self.drain_end:
            word = self.freed + self.drain_words + 1
        else:
            word = self.outputs.words_before(line) + 1
        self.drain_end = start + self.drain_lines - 1 + SCALESIM_WRITE_PORT_LATENCY_CYCLES
        self.freed += self.start_drain(word)
        self.full_word = self.full_line = None
        return 0


def _read_delay(chain: list[int], op: int, count: int, cycle: int, prefetch_cycles: int) -> int:
    """Cycles ``count`` prefetches of operand ``op`` asked for at ``cycle`` delay the line
    (``read_buffer.service_reads``: the wait is added to the line's offset twice), the port's chain moved on."""
    offset = SCALESIM_HIT_LATENCY_CYCLES
    for _ in range(count):
        chain[op] += prefetch_cycles
        potential = chain[op] - (cycle + offset)
        offset += potential
        if potential > 0:
            offset += potential
    return offset - SCALESIM_HIT_LATENCY_CYCLES


def stalls(read_events: list[tuple[int, int, int]], outputs: Outputs, ofmap_buffer_words: int,
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
    drains = _OfmapDrains(outputs, ofmap_buffer_words, bandwidth_words_per_cycle)
    # prefetch_active_buffer requests the first fill's lines at cycles -n - 1 .. -2 (n lines, latency
    # 1: "-1 * (num_lines - start_cycle - (i - latency))"), so its last line is served at cycle -1
    chain = [-1, -1]
    stall = i = 0
    next_line = 0  # every line before it is served
    while True:
        write_at, kind = drains.next_event(next_line, stall)
        read_at = read_events[i][0] if i < len(read_events) else None
        if write_at is None and read_at is None:
            return stall, drains.freed + drains.final_drains()
        line = read_at if write_at is None or (read_at is not None and read_at < write_at) else write_at
        cycle = line + stall
        delay = 0
        while i < len(read_events) and read_events[i][0] == line:
            for op, count in enumerate(read_events[i][1:]):
                delay = max(delay, _read_delay(chain, op, count, cycle, prefetch_cycles_per_operand[op]))
            i += 1
        if write_at == line:
            delay = max(delay, drains.write(kind, line, cycle, next_line))
        stall += delay
        next_line = line + 1

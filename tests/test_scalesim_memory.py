"""``memory_model = "scalesim_v3"`` against SCALE-Sim 3.0's USER bandwidth mode, and our default
memory model beside it with the named reason for each difference (docs/scalesim.md).

Two recordings (``scripts/record_scalesim.py memory`` / ``memory-spill``), counts in SCALE-Sim's
1-byte words: tests/data/scalesim/gemm_memory_user.csv (15 GEMMs, 13 on an 8x16 array and 2 on
32x64, x os / ws / is x SRAMs of 1 kB and 64 kB x 1 and 8 words per cycle: 180 rows) and
tests/data/scalesim/gemm_memory_spill.csv (a held-out set recorded after the spill model was
written: 6 batch-1 MobileNetV2-layer / edge GEMMs on 32x64 x 3 dataflows x (2 kB, 4 words/cycle),
(4 kB, 22), (16 kB, 2): 54 rows, all of them spilling).

Measured agreement of ``accel_sim.memory_scalesim`` on all 234 rows (asserted below; also on
the six larger GEMMs of issue 16's table):

* DRAM reads per operand: exact on every row (first fill + refetches x prefetch half).
* DRAM writes: exact on every row: ``M N`` (OS) / ``M N Rf`` (WS / IS) words and the empty slots
  of the partial write lines SCALE-Sim forces out at each drain (up to 7 of 568 words, 17x33x19
  os, 1 kB, 8 words/cycle).
* Stall and total cycles: exact on every row (132 rows where everything fits, stall 0; 102 that
  spill or overflow the OFMAP SRAM).
"""

import csv
import math
from pathlib import Path

import pytest

from accel_sim.hardware import HardwareConfig
from accel_sim.memory import gemm_fold_schedule, pipelined_cycles
from accel_sim.memory_scalesim import gemm_memory_scalesim
from accel_sim.scalesim_stalls import skew_line_of
from accel_sim.scalesim_reads import OperandImage, prefetch_image_words
from accel_sim.systolic import fold_counts, map_gemm

DATA = Path(__file__).parent / "data" / "scalesim"
ROWS = list(csv.DictReader(open(DATA / "gemm_memory_user.csv", newline="")))
HELD_OUT = list(csv.DictReader(open(DATA / "gemm_memory_spill.csv", newline="")))


def _ints(row: dict, *names: str) -> list[int]:
    return [int(row[name]) for name in names]


def _scalesim_mode(row: dict):
    m, n, k, rows, cols, sram_kb, bw = _ints(row, "m", "n", "k", "rows", "cols", "sram_kb", "bandwidth_words_per_cycle")
    return gemm_memory_scalesim(m, n, k, rows=rows, cols=cols, dataflow=row["dataflow"],
                                ifmap_buffer_words=sram_kb * 1024, filter_buffer_words=sram_kb * 1024,
                                ofmap_buffer_words=sram_kb * 1024, bandwidth_words_per_cycle=bw)


def _id(row: dict) -> str:
    return (f"{row['m']}x{row['n']}x{row['k']}-{row['rows']}x{row['cols']}-{row['dataflow']}-"
            f"{row['sram_kb']}kB-bw{row['bandwidth_words_per_cycle']}")


FITS = [r for r in ROWS if _scalesim_mode(r).fits]
SPILL = [r for r in ROWS if not _scalesim_mode(r).fits]


def test_recording_covers_the_promised_cases():
    assert len(ROWS) == 180 and len(HELD_OUT) == 54
    assert {r["dataflow"] for r in ROWS} == {r["dataflow"] for r in HELD_OUT} == {"os", "ws", "is"}
    assert {r["sram_kb"] for r in ROWS} == {"1", "64"} and {r["sram_kb"] for r in HELD_OUT} == {"2", "4", "16"}
    assert {r["bandwidth_words_per_cycle"] for r in ROWS + HELD_OUT} == {"1", "2", "4", "8", "22"}
    assert sum(r["kind"] == "mobilenetv2" for r in HELD_OUT) == 45
    assert sum(int(r["stall_cycles"]) > 0 for r in ROWS) >= 30  # USER mode: memory stalls the array
    assert (len(FITS), len(SPILL)) == (132, 48)
    assert not any(_scalesim_mode(r).fits for r in HELD_OUT)
    for dataflow in ("os", "ws", "is"):
        assert sum(r["dataflow"] == dataflow for r in SPILL) == 16


@pytest.mark.parametrize("row", FITS, ids=_id)
def test_fits_regime_matches_scalesim_exactly(row):
    """Everything fits: no stall (the first fill is before cycle 0, the drains never fill the
    OFMAP SRAM, the last one is after the last line): total cycles = compute cycles."""
    got = _scalesim_mode(row)
    total, stall = _ints(row, "total_cycles", "stall_cycles")
    assert (got.total_cycles, got.stall_cycles) == (total + 1, stall) == (got.compute_cycles, 0)  # "+ 1": zero-based


@pytest.mark.parametrize("row", ROWS + HELD_OUT, ids=_id)
def test_every_recorded_row_exactly(row):
    """DRAM words per operand, stall and total cycles: SCALE-Sim's, on every recorded row."""
    got = _scalesim_mode(row)
    ifmap, filt, ofmap, total, stall = _ints(row, "dram_ifmap_read_words", "dram_filter_read_words",
                                             "dram_ofmap_write_words", "total_cycles", "stall_cycles")
    assert (got.ifmap_read_words, got.filter_read_words, got.ofmap_write_words) == (ifmap, filt, ofmap)
    assert (got.total_cycles, got.stall_cycles) == (total + 1, stall)  # "+ 1": zero-based


def test_worst_relative_error_over_all_rows():
    """The worst relative errors over all 234 rows (issue 16 asks for them within 5 %), printed:
    every one is 0."""
    worst = {"DRAM reads": 0.0, "DRAM writes": 0.0, "total cycles": 0.0}
    for row in ROWS + HELD_OUT:
        got = _scalesim_mode(row)
        ifmap, filt, ofmap, total = _ints(row, "dram_ifmap_read_words", "dram_filter_read_words",
                                          "dram_ofmap_write_words", "total_cycles")
        reads = got.ifmap_read_words + got.filter_read_words
        worst["DRAM reads"] = max(worst["DRAM reads"], abs(reads - ifmap - filt) / (ifmap + filt))
        worst["DRAM writes"] = max(worst["DRAM writes"], abs(got.ofmap_write_words - ofmap) / ofmap)
        worst["total cycles"] = max(worst["total cycles"], abs(got.total_cycles - total - 1) / (total + 1))
    print("\nworst relative error over 234 rows: " + ", ".join(f"{k} {v:.2%}" for k, v in worst.items()))
    assert worst == {"DRAM reads": 0.0, "DRAM writes": 0.0, "total cycles": 0.0}


def test_hand_worked_lap_of_the_window():
    """OS, M = 70, N = 40, K = 90 on 32x64, SRAMs of 1,024 words, 1 word per cycle: B's image is
    one column fold, 90 x 64 rolled out along anti-diagonals, 3,600 valid words = 327 sets of 11
    and a partial one: 328 sets; window 47 sets (512 / 11 rounded up), step 47. Each of the
    Rf = ceil(70 / 32) = 3 row folds walks the whole image forward, set 0 to set 327.
    Row fold 0: from window [0, 47) to set 327: ceil((327 - 47 + 1) / 47) = 6 prefetches, window
    [282, 1) (circular: 282..327 and 0). Row fold 1: set 0 is in it (offset (0 - 282) mod 328 = 46),
    set 1 is not: the window must go round, ceil((46 + 327 - 47 + 1) / 47) = 7 prefetches, start
    282 + 329 = 611 mod 328 = 283. Row fold 2: offset 45, ceil((45 + 327 - 47 + 1) / 47) = 7.
    20 prefetches of 512 words + the first fill of 512: 10,752 words.
    Our model: B's 90 x 40 = 3,600 words do not fit its 512-word half, so every row fold fetches
    them again, 3 x 3,600 = 10,800, and A's 70 x 90 = 6,300 once: 17,100 words read (close to
    SCALE-Sim's B here by chance: its laps cost 7 prefetches where a refetch costs 3,600 words)."""
    row = next(r for r in ROWS if _id(r) == "70x40x90-32x64-os-1kB-bw1")
    assert int(row["dram_filter_read_words"]) == 512 + 20 * 512 == 10_752
    assert _scalesim_mode(row).filter_read_words == 10_752
    assert _ours(row).dram_read_bytes == 6_300 + 3 * 3_600


def _ours(row: dict, latency_cycles: int = 0):
    """Our default model on a recorded row: 1-byte words, every buffer ``sram_kb`` kB, one DRAM
    channel of ``bw`` bytes per cycle."""
    m, n, k, rows, cols, sram_kb, bw = _ints(row, "m", "n", "k", "rows", "cols", "sram_kb", "bandwidth_words_per_cycle")
    hw = HardwareConfig(rows=rows, cols=cols, word_bytes=1, a_buffer_bytes=sram_kb * 1024,
                        b_buffer_bytes=sram_kb * 1024, out_buffer_bytes=sram_kb * 1024)
    schedule = gemm_fold_schedule(m, n, k, hw=hw, dataflow=row["dataflow"])
    return pipelined_cycles(schedule, bytes_per_cycle=bw, latency_cycles=latency_cycles)


@pytest.mark.parametrize("row", [r for r in FITS if r["sram_kb"] == "64"], ids=_id)
def test_our_model_beside_scalesim_when_everything_fits(row):
    """With 64 kB every operand, and our partial sums, fit. The differences, by name:

    * padded prefetch images: SCALE-Sim fetches every fold padded to the array (its empty slots
      are counted), we fetch the operands' ``M K + K N`` words;
    * on-chip accumulation: we write ``M N`` outputs once; SCALE-Sim writes every row fold's
      partial sums, ``M N Rf`` under WS / IS;
    * free first fill and last drain: SCALE-Sim fills its buffers before cycle 0 and drains after
      "Total Cycles", so it reports the compute time; we add the first load and the last store."""
    m, n, k, rows, cols, bw = _ints(row, "m", "n", "k", "rows", "cols", "bandwidth_words_per_cycle")
    df = row["dataflow"]
    a_image, b_image = prefetch_image_words(m, n, k, rows=rows, cols=cols, dataflow=df)
    ours = _ours(row)
    assert ours.dram_read_bytes == m * k + k * n
    assert int(row["dram_ifmap_read_words"]) + int(row["dram_filter_read_words"]) == \
        math.ceil(a_image / bw) * bw + math.ceil(b_image / bw) * bw
    s_r, s_c, _ = map_gemm(m, n, k, df)
    row_folds, _ = fold_counts(s_r, s_c, rows=rows, cols=cols)
    assert ours.dram_write_bytes == m * n
    assert int(row["dram_ofmap_write_words"]) == m * n * (1 if df == "os" else row_folds)
    assert int(row["stall_cycles"]) == 0 and ours.total_cycles > int(row["total_cycles"]) + 1


def test_hand_worked_gemm_under_both_models():
    """M = 20, N = 16, K = 20 on 8x16, SRAMs of 1,024 words (SCALE-Sim 1 kB; active half 512),
    8 words per cycle. Every figure below is also in the recording (name "hand-worked")."""
    cases = {  # dataflow: (scalesim A, B, writes, cycles), (ours A + B, writes)
        # os (S_R, S_C, T) = (20, 16, 20): Rf = 3, Cf = 1, 3 folds x (8 + 16 + 20 - 2) = 126 cycles.
        # SCALE-Sim: A image 3*8 x 20 = 480, B image 20 x 16 = 320 (both <= 512: one fill);
        # writes M N = 320. Ours: A 20*20 = 400 (fits the half: fetched in column fold 0 only),
        # B 20*16 = 320 once, outputs 320.
        "os": ((480, 320, 320, 126), (720, 320)),
        # ws (S_R, S_C, T) = (K, N, M) = (20, 16, 20): Rf = 3, Cf = 1, 3 x (2*8 + 16 + 20 - 2) = 150.
        # SCALE-Sim: A image M x 3*8 = 480, B image K x 16 = 320; M N Rf = 960 words written
        # (partial sums of every row fold), in 8-word lines: the 513th word takes the OFMAP SRAM past
        # half (512), a drain starts and forces the 513 words out as 64 lines + a 1-word line; it
        # drains 64 full lines (512). After the last line the final drain takes the 1-word line
        # (counted as 8: not its last line), 55 full lines (440) and the last 7 words: 8 + 440 + 7
        # = 455; 512 + 455 = 967 written. Ours: 400 + 320 reads; partial sums 16 x 20 = 320 <= 512
        # stay on chip, written once: 320.
        "ws": ((480, 320, 967, 150), (720, 320)),
        # is (S_R, S_C, T) = (K, M, N) = (20, 20, 16): Rf = 3, Cf = 2, 6 x (16 + 16 + 16 - 2) = 276.
        # SCALE-Sim: A image K x 2*16 = 640 > 512: the first fill moves 512 and no more (the 400
        # valid words fit its 47 sets of 11 words); B image 3*8 x 16 = 384; writes 960 + 7 = 967
        # (the same drains as ws).
        # Ours: A 400 (stationary, once), B 20*16 = 320 (fits: column fold 0 only); partial sums
        # 16 x 16 = 256 <= 512 per column fold, written once: M N = 320.
        "is": ((512, 384, 967, 276), (720, 320)),
    }
    for df, ((a, b, w, cycles), (ours_reads, ours_writes)) in cases.items():
        got = gemm_memory_scalesim(20, 16, 20, rows=8, cols=16, dataflow=df, ifmap_buffer_words=1024,
                                   filter_buffer_words=1024, ofmap_buffer_words=1024, bandwidth_words_per_cycle=8)
        assert (got.ifmap_read_words, got.filter_read_words, got.ofmap_write_words) == (a, b, w)
        assert (got.total_cycles, got.stall_cycles) == (cycles, 0)
        row = next(r for r in ROWS if r["name"] == "hand-worked in docs/scalesim.md" and r["dataflow"] == df
                   and r["sram_kb"] == "1" and r["bandwidth_words_per_cycle"] == "8")
        assert _ints(row, "dram_ifmap_read_words", "dram_filter_read_words", "dram_ofmap_write_words",
                     "total_cycles") == [a, b, w, cycles - 1]
        ours = _ours(row)
        assert (ours.dram_read_bytes, ours.dram_write_bytes) == (ours_reads, ours_writes)
    # ours, os, time: loads per fold A 8x20 + B 320 = 480, then 160, 80 (A's last fold has 4 rows);
    # stores 128, 128, 64; bw 8: 480/8 = 60 before fold 0, then max(42, 160/8) + max(42, (80+128)/8)
    # + max(42, 128/8) = 126, then 64/8 = 8 after: 194 cycles (SCALE-Sim: 126, fill and drain free).
    os_row = next(r for r in ROWS if r["name"] == "hand-worked in docs/scalesim.md" and r["dataflow"] == "os"
                  and r["sram_kb"] == "1" and r["bandwidth_words_per_cycle"] == "8")
    assert _ours(os_row).total_cycles == 194


def test_closed_form_walks_agree_with_counting():
    """The closed forms the model steps with, against counting element by element on small
    blocks: an image's rank (the roll-out along anti-diagonals, padded last block), the first line
    of a skewed walk reaching a rank, and the line of the x-th output word of a skewed block."""
    for blocks, block_rows, width, last_width in ((1, 5, 4, 4), (3, 7, 4, 2), (2, 3, 6, 1), (4, 9, 3, 3)):
        image = OperandImage(blocks, block_rows, width, last_width, rolled=True)
        height = blocks * block_rows
        order = [(r, d - r) for d in range(height + width - 1) for r in range(min(d, height - 1), -1, -1)
                 if d - r < width and (r < (blocks - 1) * block_rows or d - r < last_width)]
        assert [image.rank(r, c) for r, c in order] == list(range(len(order))) == list(range(image.valid_words))
        for block in range(blocks):
            w = width if block < blocks - 1 else last_width
            top, lines = block * block_rows, block_rows + w - 1
            first, last = image.rank(top, 0), image.rank(top + block_rows - 1, w - 1)
            walk = [max(image.rank(top + t - c, c) for c in range(w) if 0 <= t - c < block_rows) for t in range(lines)]
            for threshold in range(first, last + 1):
                expected = next(t for t in range(lines) if walk[t] >= threshold)
                assert image.skewed_line_reaching(top, w, threshold, first, last) == expected
    for height in range(1, 9):
        for width in range(1, 9):
            line_of_word = sorted(r + c for r in range(height) for c in range(width))
            assert [skew_line_of(x, height, width) for x in range(1, height * width + 1)] == line_of_word


def test_the_issues_table_reproduced():
    """Issue 16's table of SCALE-Sim 3.0 figures (USER mode, 32x64 array, SRAMs of 64 / 64 / 32 kB
    at SCALE-Sim's 1-byte words, i.e. 65,536 / 65,536 / 32,768 words, 22 words per cycle),
    recorded independently of this file's data: DRAM words read (A + B) and written, and "Total
    Cycles" (zero-based: one less than our count), for GEMMs up to 128 x 512 x 2048."""
    issue = {  # (M, N, K, dataflow): (read words, written words, SCALE-Sim "Total Cycles")
        (256, 100, 300, "ws"): (295_020, 256_000, 13_294),
        (256, 100, 300, "os"): (196_680, 25_600, 7_039),
        (1024, 64, 576, "ws"): (9_506_200, 1_179_923, 434_861),
        (1024, 64, 576, "os"): (9_538_980, 65_536, 379_373),
        (128, 512, 2048, "ws"): (56_643_840, 4_196_210, 1_813_592),
        (64, 100, 1280, "ws"): (5_539_820, 256_000, 222_252),
    }
    for (m, n, k, dataflow), (reads, writes, total) in issue.items():
        got = gemm_memory_scalesim(m, n, k, rows=32, cols=64, dataflow=dataflow, ifmap_buffer_words=65_536,
                                   filter_buffer_words=65_536, ofmap_buffer_words=32_768, bandwidth_words_per_cycle=22)
        assert (got.ifmap_read_words + got.filter_read_words, got.ofmap_write_words, got.total_cycles) == \
            (reads, writes, total + 1), (m, n, k, dataflow)

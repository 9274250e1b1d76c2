"""``memory_model = "scalesim"`` against SCALE-Sim 3.0's USER bandwidth mode, and our default
memory model beside it with the named reason for each difference (docs/scalesim.md).

The recording (tests/data/scalesim/gemm_memory_user.csv, ``scripts/record_scalesim.py memory``)
holds SCALE-Sim's DRAM words per operand, stall and total cycles for 15 GEMMs (13 on an 8x16
array, 2 on 32x64) x os / ws / is x SRAMs of 1 kB and 64 kB x 1 and 8 words per cycle, in its
1-byte words; every count below is in those words.

Measured agreement of ``accel_sim.memory_scalesim`` (stated; asserted below):

* *fits* regime (every read operand fits its SRAM's active half, the outputs fit the OFMAP SRAM;
  132 rows): DRAM reads per
  operand and total cycles exact; DRAM writes short by SCALE-Sim's empty slots of partial write
  lines only (worst 7 words of 967, 0.73 % of the writes, 0.4 % of the row's DRAM words).
* *spill* regime (an operand does not fit; 48 rows): NOT matched. SCALE-Sim's window over the
  prefetch image moves only forward, so a demand behind it costs a lap of the whole image; the
  closed form counts the sweeps of the fold loop only and undercounts by up to 92 % of SCALE-Sim's
  DRAM words and 96 % of its cycles (docs/scalesim.md). What is asserted there: the regime is
  classified exactly (SCALE-Sim refetches in every spill row and in no fits row). Every recorded
  row whose outputs overflow the OFMAP SRAM also spills on reads: outputs overflowing alone is
  not in the recording (not validated).
"""

import csv
import math
from pathlib import Path

import pytest

from accel_sim.memory import gemm_fold_schedule, pipelined_cycles
from accel_sim.memory_scalesim import gemm_memory_scalesim, prefetch_image_words
from accel_sim.systolic import fold_counts, map_gemm

ROWS = list(csv.DictReader(open(Path(__file__).parent / "data" / "scalesim" / "gemm_memory_user.csv", newline="")))


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
    assert len(ROWS) == 180
    assert {r["dataflow"] for r in ROWS} == {"os", "ws", "is"}
    assert {r["sram_kb"] for r in ROWS} == {"1", "64"}
    assert {r["bandwidth_words_per_cycle"] for r in ROWS} == {"1", "8"}
    assert any(r["kind"] == "mobilenetv2" for r in ROWS)
    assert sum(int(r["stall_cycles"]) > 0 for r in ROWS) >= 30  # USER mode: memory stalls the array
    assert (len(FITS), len(SPILL)) == (132, 48)
    for dataflow in ("os", "ws", "is"):
        assert sum(r["dataflow"] == dataflow for r in SPILL) == 16


@pytest.mark.parametrize("row", FITS, ids=_id)
def test_fits_regime_matches_scalesim(row):
    """Reads and cycles exact; writes short of SCALE-Sim's by its partial-line slots only (worst
    7 words of 967, 0.73 %; 0.4 % of the row's DRAM words)."""
    got = _scalesim_mode(row)
    ifmap, filt, ofmap, total, stall = _ints(row, "dram_ifmap_read_words", "dram_filter_read_words",
                                             "dram_ofmap_write_words", "total_cycles", "stall_cycles")
    assert (got.ifmap_read_words, got.filter_read_words) == (ifmap, filt)
    assert got.ofmap_write_words <= ofmap <= got.ofmap_write_words * 1.01
    assert ofmap - got.ofmap_write_words <= 0.005 * (ifmap + filt + ofmap)
    assert (got.total_cycles, got.stall_cycles) == (total + 1, stall)  # "+ 1": zero-based index


def test_spill_regime_is_classified_exactly_and_its_gap_stated():
    """SCALE-Sim refetches (reads more than its first fill of both active halves) in exactly the
    rows the closed form calls spill; there the closed form is an undercount (module docstring)."""
    for row in ROWS:
        m, n, k, rows, cols, sram_kb = _ints(row, "m", "n", "k", "rows", "cols", "sram_kb")
        a_image, b_image = prefetch_image_words(m, n, k, rows=rows, cols=cols, dataflow=row["dataflow"])
        active = sram_kb * 1024 // 2
        refetched = (int(row["dram_ifmap_read_words"]) > min(a_image, active)
                     or int(row["dram_filter_read_words"]) > min(b_image, active))
        assert refetched == (not _scalesim_mode(row).fits), _id(row)
        if int(row["dram_ofmap_write_words"]) > sram_kb * 1024:
            assert refetched  # no recorded row overflows the OFMAP SRAM with reads that fit
    worst_words = worst_cycles = 0.0
    for row in SPILL:
        got = _scalesim_mode(row)
        ref = sum(_ints(row, "dram_ifmap_read_words", "dram_filter_read_words", "dram_ofmap_write_words"))
        ours = got.ifmap_read_words + got.filter_read_words + got.ofmap_write_words
        worst_words = max(worst_words, abs(ours - ref) / ref)
        worst_cycles = max(worst_cycles, abs(got.total_cycles - int(row["total_cycles"]) - 1) / (int(row["total_cycles"]) + 1))
    assert 0.9 < worst_words < 0.93 and 0.95 < worst_cycles < 0.97  # the gap docs/scalesim.md states


def _ours(row: dict, latency_cycles: int = 0):
    """Our default model on a recorded row: 1-byte words, every buffer ``sram_kb`` kB, one DRAM
    channel of ``bw`` bytes per cycle."""
    m, n, k, rows, cols, sram_kb, bw = _ints(row, "m", "n", "k", "rows", "cols", "sram_kb", "bandwidth_words_per_cycle")
    schedule = gemm_fold_schedule(m, n, k, rows=rows, cols=cols, dataflow=row["dataflow"], word_bytes=1,
                                  a_buffer_bytes=sram_kb * 1024, b_buffer_bytes=sram_kb * 1024,
                                  out_buffer_bytes=sram_kb * 1024)
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
    assert ours.read_bytes == m * k + k * n
    assert int(row["dram_ifmap_read_words"]) + int(row["dram_filter_read_words"]) == \
        math.ceil(a_image / bw) * bw + math.ceil(b_image / bw) * bw
    s_r, s_c, _ = map_gemm(m, n, k, df)
    row_folds, _ = fold_counts(s_r, s_c, rows=rows, cols=cols)
    assert ours.write_bytes == m * n
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
        # SCALE-Sim: A image M x 3*8 = 480, B image K x 16 = 320; writes M N Rf = 960 (partial sums
        # of every row fold). Ours: 400 + 320 reads; partial sums 16 x 20 = 320 <= 512 stay on
        # chip, written once: 320.
        "ws": ((480, 320, 960, 150), (720, 320)),
        # is (S_R, S_C, T) = (K, M, N) = (20, 20, 16): Rf = 3, Cf = 2, 6 x (16 + 16 + 16 - 2) = 276.
        # SCALE-Sim: A image K x 2*16 = 640 > 512: the first fill moves 512 and no more (the 400
        # valid words fit its 47 sets of 11 words); B image 3*8 x 16 = 384; writes 960.
        # Ours: A 400 (stationary, once), B 20*16 = 320 (fits: column fold 0 only); partial sums
        # 16 x 16 = 256 <= 512 per column fold, written once: M N = 320.
        "is": ((512, 384, 960, 276), (720, 320)),
    }
    for df, ((a, b, w, cycles), (ours_reads, ours_writes)) in cases.items():
        got = gemm_memory_scalesim(20, 16, 20, rows=8, cols=16, dataflow=df, ifmap_buffer_words=1024,
                                   filter_buffer_words=1024, ofmap_buffer_words=1024, bandwidth_words_per_cycle=8)
        assert (got.ifmap_read_words, got.filter_read_words, got.ofmap_write_words) == (a, b, w)
        assert (got.total_cycles, got.stall_cycles) == (cycles, 0)
        row = next(r for r in ROWS if r["name"] == "hand-worked in docs/scalesim.md" and r["dataflow"] == df
                   and r["sram_kb"] == "1" and r["bandwidth_words_per_cycle"] == "8")
        assert _ints(row, "dram_ifmap_read_words", "dram_filter_read_words", "total_cycles") == [a, b, cycles - 1]
        ours = _ours(row)
        assert (ours.read_bytes, ours.write_bytes) == (ours_reads, ours_writes)
    # ours, os, time: loads per fold A 8x20 + B 320 = 480, then 160, 80 (A's last fold has 4 rows);
    # stores 128, 128, 64; bw 8: 480/8 = 60 before fold 0, then max(42, 160/8) + max(42, (80+128)/8)
    # + max(42, 128/8) = 126, then 64/8 = 8 after: 194 cycles (SCALE-Sim: 126, fill and drain free).
    os_row = next(r for r in ROWS if r["name"] == "hand-worked in docs/scalesim.md" and r["dataflow"] == "os"
                  and r["sram_kb"] == "1" and r["bandwidth_words_per_cycle"] == "8")
    assert _ours(os_row).total_cycles == 194

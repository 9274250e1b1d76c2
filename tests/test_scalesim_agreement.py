"""accel_sim's systolic compute cycles agree exactly with SCALE-Sim 3.0 on recorded GEMMs.

The recordings (tests/data/scalesim/, produced by scripts/record_scalesim.py in a separate venv
with PyPI scalesim 3.0.0 and numpy 2.2.6; see the README there) hold SCALE-Sim's COMPUTE_REPORT
figures for 69 GEMM shapes (92 shape-array pairs) under os / ws / is on 32x64, 8x16 and 16x8
arrays, and for the forward GEMMs of the CIFAR MobileNetV2 on the 32x64 array (os); and every
figure of SCALE-Sim's reports (SRAM and DRAM accesses included) for 14 GEMM shapes under os / ws /
is with two SRAM sizes (gemm_accesses.csv), against which the fold model's on-chip buffer
traffic is checked at the end of this file.

Which column, and why "+ 1": SCALE-Sim's "Total Cycles" (our column `total_cycles`) is the array's
time including memory stalls; every recorded row has `stall_cycles == 0` (its SRAMs run in the
CALC bandwidth mode), so it is the compute time alone. SCALE-Sim computes it as
``max(ofmap_serviced_cycles)`` (scalesim/memory/double_buffered_scratchpad_mem.py, line 307),
where demand line i is serviced at cycle i: the zero-based index of the last cycle, one less
than the number of cycles the GEMM occupies the array (a 1x1x1 GEMM on a 1x1 array gets
"Total Cycles" 0 and SCALE-Sim then divides by zero). `gemm_cycles` counts cycles, so it must
equal `total_cycles + 1`, exactly.
"""

import csv
from pathlib import Path

import pytest

from accel_sim.hardware import HardwareConfig
from accel_sim.memory import gemm_fold_schedule
from accel_sim.systolic import fold_counts, gemm_cycles

DATA_DIR = Path(__file__).parent / "data" / "scalesim"


def _read(name: str) -> list[dict]:
    with open(DATA_DIR / name, newline="") as f:
        return list(csv.DictReader(f))


GEMM_ROWS = _read("gemm_cycles.csv")
MOBILENETV2_LAYERS = _read("mobilenetv2_fwd_layers.csv")


def _row_id(row: dict) -> str:
    return f"{row['m']}x{row['n']}x{row['k']}-{row['rows']}x{row['cols']}-{row['dataflow']}"


def test_recording_covers_the_promised_cases():
    shapes = {(int(r["m"]), int(r["n"]), int(r["k"])) for r in GEMM_ROWS}
    arrays = {(int(r["rows"]), int(r["cols"])) for r in GEMM_ROWS}
    assert len(shapes) >= 50
    assert arrays == {(32, 64), (8, 16), (16, 8)}
    for array in arrays:
        on_array = [r for r in GEMM_ROWS if (int(r["rows"]), int(r["cols"])) == array]
        assert {r["dataflow"] for r in on_array} == {"os", "ws", "is"}
    # partial edge folds on the 32x64 array in every GEMM dimension (m, n, k each not a multiple
    # of 32 somewhere), and unit dimensions
    paper_array_shapes = {(int(r["m"]), int(r["n"]), int(r["k"])) for r in GEMM_ROWS
                          if (int(r["rows"]), int(r["cols"])) == (32, 64)}
    for dim in range(3):
        assert any(s[dim] % 32 and s[dim] > 32 for s in paper_array_shapes)
        assert any(s[dim] == 1 for s in paper_array_shapes)
    # compute time alone: no row stalls on memory
    assert all(int(r["stall_cycles"]) == 0 for r in GEMM_ROWS)


@pytest.mark.parametrize("row", GEMM_ROWS, ids=_row_id)
def test_gemm_cycles_equal_scalesim(row):
    # Compare with "Total Cycles" + 1 (module docstring: SCALE-Sim reports the last cycle's index).
    m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
    cycles = gemm_cycles(m, n, k, rows=int(row["rows"]), cols=int(row["cols"]),
                         dataflow=row["dataflow"])
    assert cycles == int(row["total_cycles"]) + 1


@pytest.mark.parametrize("layer", MOBILENETV2_LAYERS, ids=lambda layer: layer["layer"])
def test_mobilenetv2_forward_layers_equal_scalesim(layer):
    # A depthwise layer is `count` single-channel GEMMs, each reported by SCALE-Sim as its own
    # layer with its own "Total Cycles" (one less than its cycle count), hence "+ count".
    m, n, k, count = (int(layer[key]) for key in ("m", "n", "k", "count"))
    assert int(layer["scalesim_stall_cycles"]) == 0
    cycles = count * gemm_cycles(m, n, k, rows=32, cols=64, dataflow="os")
    assert cycles == int(layer["scalesim_total_cycles"]) + count


# ---- on-chip buffer (SRAM) accesses: gemm_accesses.csv ---------------------------------------
# SCALE-Sim's DETAILED_ACCESS_REPORT counts, per GEMM, the words the array requests from the
# IFMAP (A) and filter (B) SRAMs and writes to the OFMAP SRAM (1-byte words by default). Our fold
# model (accel_sim.memory.gemm_fold_schedule) counts the same accesses in bytes; with 4-byte words
# each SCALE-Sim word is 4 bytes. They agree exactly on A and B reads under every dataflow and on
# output writes under WS / IS. Two documented differences (docs/scalesim.md):
#   * WS / IS: every row fold after the first reads back the partial sums it accumulates into
#     (read-modify-write of the output buffer); SCALE-Sim writes each fold's partial sums and never
#     reads them, so our extra reads are its OFMAP writes minus the M x N final outputs.
#   * OS: SCALE-Sim's OFMAP writes exceed the M x N outputs by rows + cols per fold: after padding
#     a fold's output block to rows x cols it adds that block's height + width once more
#     (compute/systolic_compute_os.py, `ofmap_writes += shape[0] + shape[1]`, line 403), a
#     counting slip; we count each output once.

ACCESS_ROWS = _read("gemm_accesses.csv")
WORD_BYTES = 4


def _access_id(row: dict) -> str:
    return f"{_row_id(row)}-sram{row['sram_kb']}kB"


def test_access_recording_covers_the_promised_cases():
    assert {r["dataflow"] for r in ACCESS_ROWS} == {"os", "ws", "is"}
    assert {int(r["word_bytes"]) for r in ACCESS_ROWS} == {1}
    assert len({(r["m"], r["n"], r["k"]) for r in ACCESS_ROWS}) >= 12
    # several row folds (partial sums accumulate under WS / IS) and several column folds
    assert any(int(r["k"]) > int(r["rows"]) and r["dataflow"] == "ws" for r in ACCESS_ROWS)
    assert any(int(r["n"]) > int(r["cols"]) for r in ACCESS_ROWS)
    # every figure of the report is recorded, DRAM included
    for column in ("sram_ifmap_read_words", "sram_filter_read_words", "sram_ofmap_write_words",
                   "dram_ifmap_read_words", "dram_filter_read_words", "dram_ofmap_write_words",
                   "total_cycles", "stall_cycles", "avg_ofmap_dram_words_per_cycle"):
        assert column in ACCESS_ROWS[0]


@pytest.mark.parametrize("row", ACCESS_ROWS, ids=_access_id)
def test_sram_accesses_equal_scalesim(row):
    m, n, k, rows, cols = (int(row[key]) for key in ("m", "n", "k", "rows", "cols"))
    dataflow = row["dataflow"]
    big = 1 << 40  # our SRAM counts do not depend on the buffer sizes (the DRAM traffic does)
    hw = HardwareConfig(rows=rows, cols=cols, word_bytes=WORD_BYTES, a_buffer_bytes=big, b_buffer_bytes=big,
                        out_buffer_bytes=big)
    s = gemm_fold_schedule(m, n, k, hw=hw, dataflow=dataflow)
    a_read, b_read = s.sram_a_read_units.sum(), s.sram_b_read_units.sum()
    psum_read, out_write = s.sram_psum_read_units.sum(), s.sram_out_write_units.sum()
    ifmap, filt, ofmap = (int(row[f"sram_{op}_{rw}_words"]) * WORD_BYTES
                          for op, rw in (("ifmap", "read"), ("filter", "read"), ("ofmap", "write")))
    assert a_read == ifmap
    assert b_read == filt
    if dataflow == "os":
        row_folds, col_folds = fold_counts(m, n, rows=rows, cols=cols)
        assert psum_read == 0
        assert out_write == m * n * WORD_BYTES
        assert ofmap == out_write + row_folds * col_folds * (rows + cols) * WORD_BYTES
    else:
        assert out_write == ofmap
        assert psum_read == ofmap - m * n * WORD_BYTES

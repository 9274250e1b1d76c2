"""accel_sim's systolic compute cycles agree exactly with SCALE-Sim 3.0 on recorded GEMMs.

The recordings (tests/data/scalesim/, produced by scripts/record_scalesim.py in a separate venv
with PyPI scalesim 3.0.0 and numpy 2.2.6; see the README there) hold SCALE-Sim's COMPUTE_REPORT
figures for 69 GEMM shapes (92 shape-array pairs) under os / ws / is on 32x64, 8x16 and 16x8
arrays, and for the forward GEMMs of the CIFAR MobileNetV2 on the 32x64 array (os).

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

from accel_sim.systolic import gemm_cycles

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

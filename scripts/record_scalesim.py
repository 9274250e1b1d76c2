"""Record SCALE-Sim 3.0's GEMM cycle counts as golden data for accel_sim's systolic model.

SCALE-Sim (PyPI ``scalesim`` 3.0.0, https://github.com/scalesim-project/scale-sim-v3) is the
reference cycle simulator of a systolic array. It crashes with numpy >= 2.3, so it lives in its own
virtual environment outside the repository (``$SCALESIM_VENV``: any folder you choose), and this
script runs only there (it imports nothing of the project)::

    python3 -m venv $SCALESIM_VENV
    $SCALESIM_VENV/bin/pip install scalesim==3.0.0 'numpy<2.3'    # numpy 2.2.6 was used
    $SCALESIM_VENV/bin/python scripts/record_scalesim.py gemm         # ~40 s
    $SCALESIM_VENV/bin/python scripts/record_scalesim.py mobilenetv2  # ~150 s, timed
    $SCALESIM_VENV/bin/python scripts/record_scalesim.py accesses     # ~5 s
    $SCALESIM_VENV/bin/python scripts/record_scalesim.py memory       # ~30 s
    $SCALESIM_VENV/bin/python scripts/record_scalesim.py memory-spill # ~95 s

``gemm`` writes ``tests/data/scalesim/gemm_cycles.csv``: every shape of ``GEMM_SHAPES`` under the
three dataflows on the 32x64 array, and every shape of ``SMALL_ARRAY_SHAPES`` on 8x16 and 16x8
arrays, with the cycle figures of SCALE-Sim's COMPUTE_REPORT.csv. It then checks the closed form
``scalesim_total_cycles`` (derived from SCALE-Sim's source, see tests/data/scalesim/README.md)
against every recorded row and exits 1 listing any row it does not reproduce.

``accesses`` writes ``tests/data/scalesim/gemm_accesses.csv``: every figure of SCALE-Sim's
COMPUTE_REPORT, BANDWIDTH_REPORT and DETAILED_ACCESS_REPORT (SRAM and DRAM reads / writes in
words, their start / stop cycles, stalls) for ``ACCESS_SHAPES`` on an 8x16 array and
``ACCESS_PAPER_ARRAY_SHAPES`` on 32x64, under the three dataflows, with every SRAM at 1024 kB and
at 1 kB; it checks the cycles with the same closed form.

``memory`` writes ``tests/data/scalesim/gemm_memory_user.csv``: SCALE-Sim in its USER bandwidth
mode (stalls on; every DRAM port at the given words per cycle) for ``MEMORY_SHAPES`` on 8x16 and
``MEMORY_PAPER_ARRAY_SHAPES`` on 32x64, every dataflow, SRAMs of ``MEMORY_SRAM_KB`` and DRAM
bandwidths of ``MEMORY_BANDWIDTHS``, one SCALE-Sim run per GEMM: DRAM read / write words per
operand, SRAM words, stall and total cycles (``docs/scalesim.md`` compares them with
``accel_sim.memory_scalesim`` and ``accel_sim.memory``).

``memory-spill`` writes ``tests/data/scalesim/gemm_memory_spill.csv``: the same figures for
``MEMORY_SPILL_SHAPES`` (batch-1 MobileNetV2 layers) on 32x64 under each of
``MEMORY_SPILL_CONFIGS`` (SRAM kB, words per cycle), a held-out check of the spill regime.

``mobilenetv2`` times SCALE-Sim (wall seconds, measured once) on the forward GEMMs of the CIFAR
MobileNetV2 (paper appendix 0.F.1, Tab. 14; 32x32 input, batch 1) on the 32x64 array under the
output-stationary dataflow, and writes ``mobilenetv2_fwd_layers.csv`` (the layer list as GEMMs
with SCALE-Sim's cycles per layer) and ``mobilenetv2_fwd_timing.json``.

Both commands drive SCALE-Sim exactly as its CLI does (``python -m scalesim.scale -c CFG -t TOPO
-l LAYOUT -i gemm -p OUT``: the ``scalesim`` class, then ``run_scale``) but with
``save_disk_space=True`` so that no per-cycle trace files are written (the CLI always writes them),
and read the figures back from the report CSVs it writes. Outputs are written to a
temporary file and renamed into place.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import io
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DATAFLOWS = ("os", "ws", "is")
DEFAULT_OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "scalesim"

# SCALE-Sim's memory model is run in its "CALC" (estimate bandwidth) mode: the SRAMs are fed as
# fast as the array asks, so no row of the recording stalls (checked: stall_cycles == 0 in every
# row) and "Total Cycles" is the array's compute time alone. The SRAM sizes and offsets only move
# the DRAM-side "Total Cycles (incl. prefetch)" figure, recorded for completeness.
CONFIG_TEMPLATE = """\
[general]
run_name = run

[architecture_presets]
ArrayHeight: {rows}
ArrayWidth: {cols}
IfmapSramSzkB: {sram_kb}
FilterSramSzkB: {sram_kb}
OfmapSramSzkB: {sram_kb}
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth: {bandwidth}
Dataflow: {dataflow}
ReadRequestBuffer: 512
WriteRequestBuffer: 512

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: {bank_bandwidth}
IfmapSRAMBankNum: {bank_num}
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: {bank_bandwidth}
FilterSRAMBankNum: {bank_num}
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport: false
SparseRep: ellpack_block
OptimizedMapping: false
BlockSize: 8
RandomNumberGeneratorSeed: 40

[run_presets]
InterfaceBandwidth: {bandwidth_mode}
UseRamulatorTrace: False
"""

# COMPUTE_REPORT.csv columns (scalesim/simulator.py, generate_reports) -> our CSV column names.
REPORT_COLUMNS = {
    "Total Cycles (incl. prefetch)": "total_cycles_incl_prefetch",
    "Total Cycles": "total_cycles",
    "Stall Cycles": "stall_cycles",
    "Overall Util %": "overall_util_pct",
    "Mapping Efficiency %": "mapping_efficiency_pct",
    "Compute Util %": "compute_util_pct",
}
# BANDWIDTH_REPORT.csv (words per cycle; SRAM figures over "Total Cycles", DRAM figures over each
# operand's DRAM start-to-stop span: single_layer_sim.py, calc_report_data).
BANDWIDTH_COLUMNS = {
    "Avg IFMAP SRAM BW": "avg_ifmap_sram_words_per_cycle",
    "Avg FILTER SRAM BW": "avg_filter_sram_words_per_cycle",
    "Avg OFMAP SRAM BW": "avg_ofmap_sram_words_per_cycle",
    "Avg IFMAP DRAM BW": "avg_ifmap_dram_words_per_cycle",
    "Avg FILTER DRAM BW": "avg_filter_dram_words_per_cycle",
    "Avg OFMAP DRAM BW": "avg_ofmap_dram_words_per_cycle",
}
# DETAILED_ACCESS_REPORT.csv: per operand, the first / last cycle it was accessed and the count of
# word accesses. SRAM counts are the array's requests (compute/systolic_compute_*.py,
# get_*_requests); DRAM counts are the words moved between DRAM and the double-buffered SRAMs
# (memory/double_buffered_scratchpad_mem.py, get_*_dram_details).
DETAIL_COLUMNS = {
    f"{memory} {operand} {what}": f"{memory.lower()}_{operand.lower()}_{column}"
    for memory in ("SRAM", "DRAM")
    for operand in ("IFMAP", "Filter", "OFMAP")
    for what, column in (("Start Cycle", "start_cycle"), ("Stop Cycle", "stop_cycle"),
                         ("Writes" if operand == "OFMAP" else "Reads",
                          "write_words" if operand == "OFMAP" else "read_words"))
}


@dataclass(frozen=True)
class Gemm:
    """One GEMM out[m x n] = A[m x k] . B[k x n], with a label saying why it is in the set."""

    m: int
    n: int
    k: int
    kind: str
    name: str = ""


# Shapes for the 32x64 array. Under os / ws / is SCALE-Sim maps (S_R, S_C, T) = (m, n, k) /
# (k, n, m) / (k, m, n), so edge folds in every dimension need m, n and k that are exact and
# partial multiples of both 32 and 64.
GEMM_SHAPES = (
    # exact folds
    Gemm(32, 64, 32, "exact"), Gemm(64, 64, 64, "exact"), Gemm(64, 128, 96, "exact"),
    Gemm(128, 64, 64, "exact"), Gemm(96, 192, 128, "exact"),
    # one more or one less than a fold, each dimension alone and together
    Gemm(33, 64, 32, "edge"), Gemm(32, 65, 32, "edge"), Gemm(32, 64, 33, "edge"),
    Gemm(31, 64, 32, "edge"), Gemm(32, 63, 32, "edge"), Gemm(32, 64, 31, "edge"),
    Gemm(65, 65, 65, "edge"), Gemm(31, 63, 31, "edge"), Gemm(65, 129, 97, "edge"),
    Gemm(100, 100, 100, "edge"), Gemm(70, 40, 90, "edge"), Gemm(17, 5, 3, "edge"),
    Gemm(7, 200, 13, "edge"), Gemm(200, 7, 13, "edge"), Gemm(13, 7, 200, "edge"),
    # m, n or k of 1
    Gemm(1, 1, 1, "unit"), Gemm(1, 64, 32, "unit"), Gemm(32, 1, 32, "unit"),
    Gemm(32, 64, 1, "unit"), Gemm(1, 1, 100, "unit"), Gemm(1, 100, 1, "unit"),
    Gemm(100, 1, 1, "unit"),
    # tall (large m), wide (large n), deep (large k)
    Gemm(1000, 8, 16, "tall"), Gemm(2048, 4, 4, "tall"),
    Gemm(8, 1000, 16, "wide"), Gemm(4, 2048, 4, "wide"),
    Gemm(8, 16, 1000, "deep"), Gemm(4, 4, 2048, "deep"),
    # real forward layers at batch 1 (CIFAR, 32x32 input): conv as im2col GEMM m = P*Q,
    # n = C_out, k = C_in*R*S; depthwise as one single-channel GEMM per channel (as SCALE-Sim
    # splits "DP" layers); linear m = batch, n = out, k = in
    Gemm(1024, 32, 27, "mobilenetv2", "conv1 3->32 k3"),
    Gemm(1024, 96, 16, "mobilenetv2", "B2 expand 16->96 k1 @32x32"),
    Gemm(1024, 24, 96, "mobilenetv2", "B2 project 96->24 k1 @32x32"),
    Gemm(1024, 1, 9, "mobilenetv2", "B2 depthwise, one channel @32x32"),
    Gemm(64, 384, 64, "mobilenetv2", "B4 expand 64->384 k1 @8x8"),
    Gemm(64, 64, 384, "mobilenetv2", "B4 project 384->64 k1 @8x8"),
    Gemm(16, 1, 9, "mobilenetv2", "B7 depthwise, one channel @4x4"),
    Gemm(16, 1280, 320, "mobilenetv2", "conv 320->1280 k1 @4x4"),
    Gemm(1, 100, 1280, "mobilenetv2", "classifier 1280->100"),
    Gemm(1024, 64, 27, "resnet18", "conv1 3->64 k3"),
    Gemm(1024, 64, 576, "resnet18", "layer1 conv 64->64 k3 @32x32"),
    Gemm(256, 128, 1152, "resnet18", "layer2 conv 128->128 k3 @16x16"),
    Gemm(64, 256, 256, "resnet18", "layer3 conv 128->256 k3 s2 @8x8"),
    Gemm(16, 512, 256, "resnet18", "layer4 shortcut 256->512 k1 s2 @4x4"),
    Gemm(1, 100, 512, "resnet18", "classifier 512->100"),
)

# Shapes for the second and third array sizes (8x16 and 16x8: rows < cols and rows > cols).
SMALL_ARRAY_SHAPES = (
    Gemm(8, 16, 8, "exact"), Gemm(16, 16, 16, "exact"), Gemm(24, 32, 40, "exact"),
    Gemm(9, 16, 8, "edge"), Gemm(8, 17, 8, "edge"), Gemm(8, 16, 9, "edge"),
    Gemm(7, 15, 7, "edge"), Gemm(9, 17, 9, "edge"), Gemm(33, 17, 9, "edge"),
    Gemm(5, 100, 7, "edge"), Gemm(70, 3, 20, "edge"), Gemm(3, 5, 70, "edge"),
    Gemm(1, 1, 1, "unit"), Gemm(1, 40, 1, "unit"), Gemm(40, 1, 1, "unit"),
    Gemm(1, 1, 40, "unit"),
    Gemm(300, 4, 8, "tall"), Gemm(4, 300, 8, "wide"), Gemm(4, 8, 300, "deep"),
    Gemm(64, 1, 9, "mobilenetv2", "B4 depthwise, one channel @8x8"),
    Gemm(16, 100, 24, "mobilenetv2", "B6 project-like 24 in @4x4"),
    Gemm(64, 48, 27, "convnet", "conv 3->48 k3 @8x8"),
)


def scalesim_total_cycles(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str) -> int:
    """SCALE-Sim 3.0's reported "Total Cycles" for a stall-free GEMM, derived from its source.

    (S_R, S_C, T) = (m, n, k) for os, (k, n, m) for ws, (k, m, n) for is; folds =
    ceil(S_R / rows) * ceil(S_C / cols); each fold's demand matrices have
    T + rows + cols - 2 lines under os and 2*rows + cols + T - 2 under ws / is (the stationary
    operand is first loaded over `rows` cycles); one line is one cycle. SCALE-Sim reports the
    zero-based index of the last line, max(serviced cycle) (double_buffered_scratchpad_mem.py
    line 307), i.e. one less than the number of cycles. See tests/data/scalesim/README.md.
    """
    s_r, s_c, t = {"os": (m, n, k), "ws": (k, n, m), "is": (k, m, n)}[dataflow]
    folds = math.ceil(s_r / rows) * math.ceil(s_c / cols)
    preload = 0 if dataflow == "os" else rows
    return folds * (preload + rows + cols + t - 2) - 1


def _read_report(path: Path) -> list[dict]:
    """One of SCALE-Sim's report CSVs as dicts (header and rows end with a comma: the empty last
    column is dropped)."""
    with open(path, newline="") as f:
        return [{key.strip(): value.strip() for key, value in row.items() if key.strip()}
                for row in csv.DictReader(f, skipinitialspace=True)]


def run_scalesim(gemms: list[Gemm], *, rows: int, cols: int, dataflow: str,
                 sram_kb: int = 1024, bandwidth_words_per_cycle: int | None = None) -> tuple[list[dict], float]:
    """Run SCALE-Sim once on `gemms` (one topology layer each, every SRAM `sram_kb` kB): per GEMM
    every figure of its COMPUTE, BANDWIDTH and DETAILED_ACCESS reports; wall seconds.

    ``bandwidth_words_per_cycle`` None: CALC mode (SCALE-Sim estimates the bandwidth, no stalls;
    the config the ``gemm`` / ``accesses`` recordings used). An integer: USER mode (stalls on)
    with that DRAM bandwidth for every operand. SCALE-Sim 3.0 takes a USER-mode read bandwidth
    from ``IfmapSRAMBankBandwidth`` / ``FilterSRAMBankBandwidth`` (single_layer_sim.py lines
    250-254) and only the write bandwidth from ``Bandwidth``, so all three are set to it, with one
    bank (the bank bandwidth must divide by the bank count, read_buffer.py ``set_params``)."""
    from scalesim.scale_sim import scalesim  # only importable inside the SCALE-Sim venv

    with tempfile.TemporaryDirectory(prefix="scalesim_") as tmp:
        tmp_path = Path(tmp)
        if bandwidth_words_per_cycle is None:
            memory = dict(bandwidth=10, bank_bandwidth=10, bank_num=10, bandwidth_mode="CALC")
        else:
            memory = dict(bandwidth=bandwidth_words_per_cycle, bank_bandwidth=bandwidth_words_per_cycle,
                          bank_num=1, bandwidth_mode="USER")
        config = CONFIG_TEMPLATE.format(rows=rows, cols=cols, dataflow=dataflow, sram_kb=sram_kb, **memory)
        (tmp_path / "scale.cfg").write_text(config)
        # GEMM topology: "Layer, M, N, K," (the parser drops the text after the last comma).
        lines = ["Layer, M, N, K,"] + [f"g{i}, {g.m}, {g.n}, {g.k}," for i, g in enumerate(gemms)]
        (tmp_path / "topology.csv").write_text("\n".join(lines) + "\n")
        (tmp_path / "layout.csv").write_text("Layer,\n")  # custom layouts are off; header only
        start = time.perf_counter()
        sim = scalesim(save_disk_space=True, verbose=False, config=str(tmp_path / "scale.cfg"),
                       topology=str(tmp_path / "topology.csv"), layout=str(tmp_path / "layout.csv"),
                       input_type_gemm=True)
        sim.run_scale(top_path=str(tmp_path / "out"))
        wall_s = time.perf_counter() - start
        reports = [(_read_report(tmp_path / "out" / "run" / name), columns) for name, columns in (
            ("COMPUTE_REPORT.csv", REPORT_COLUMNS), ("BANDWIDTH_REPORT.csv", BANDWIDTH_COLUMNS),
            ("DETAILED_ACCESS_REPORT.csv", DETAIL_COLUMNS))]
    for report, _ in reports:
        if [int(r["LayerID"]) for r in report] != list(range(len(gemms))):
            raise RuntimeError("a SCALE-Sim report does not list one row per GEMM in order")
    rows_out = []
    for i, gemm in enumerate(gemms):
        row = {"m": gemm.m, "n": gemm.n, "k": gemm.k, "rows": rows, "cols": cols,
               "dataflow": dataflow}
        for report, columns in reports:
            for src, dst in columns.items():
                value = float(report[i][src])
                integral = dst.endswith(("cycles", "prefetch", "cycle", "words"))
                row[dst] = int(value) if integral else value
        row["kind"], row["name"] = gemm.kind, gemm.name
        rows_out.append(row)
    return rows_out, wall_s


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


def to_csv(rows: list[dict]) -> str:
    """CSV text of `rows` (dicts with the same keys)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def versions() -> dict:
    """The versions that produced a recording."""
    import numpy

    return {"scalesim": importlib.metadata.version("scalesim"), "numpy": numpy.__version__,
            "python": platform.python_version()}


def check_closed_form(rows: list[dict]) -> list[str]:
    """Rows whose recorded cycles the closed form does not reproduce, as messages."""
    bad = []
    for r in rows:
        expected = scalesim_total_cycles(r["m"], r["n"], r["k"], rows=r["rows"], cols=r["cols"],
                                         dataflow=r["dataflow"])
        if r["stall_cycles"] != 0 or r["total_cycles"] != expected:
            bad.append(f"{r['m']}x{r['n']}x{r['k']} on {r['rows']}x{r['cols']} {r['dataflow']}: "
                       f"SCALE-Sim total {r['total_cycles']} stall {r['stall_cycles']}, "
                       f"closed form {expected}")
    return bad


def cmd_gemm(out_dir: Path) -> int:
    """Record GEMM_SHAPES on 32x64 and SMALL_ARRAY_SHAPES on 8x16 and 16x8, all dataflows."""
    plan = [((32, 64), GEMM_SHAPES), ((8, 16), SMALL_ARRAY_SHAPES), ((16, 8), SMALL_ARRAY_SHAPES)]
    recorded = []
    for (rows, cols), shapes in plan:
        for dataflow in DATAFLOWS:
            result, wall_s = run_scalesim(list(shapes), rows=rows, cols=cols, dataflow=dataflow)
            recorded += result
            print(f"{rows}x{cols} {dataflow}: {len(shapes)} GEMMs, {wall_s:.1f} s", flush=True)
    keep = ["m", "n", "k", "rows", "cols", "dataflow", *REPORT_COLUMNS.values(), "kind", "name"]
    write_atomically(out_dir / "gemm_cycles.csv", to_csv([{key: r[key] for key in keep} for r in recorded]))
    print(f"wrote {len(recorded)} rows to {out_dir / 'gemm_cycles.csv'} ({versions()})")
    bad = check_closed_form(recorded)
    for message in bad:
        print("closed form disagrees:", message, file=sys.stderr)
    if bad:
        return 1
    print(f"closed form reproduces all {len(recorded)} rows (stall_cycles == 0 in all)")
    return 0


# Shapes whose SRAM / DRAM accesses are recorded (``accesses``): one fold, edge folds in each
# dimension, several row folds (WS / IS partial sums over K) and several column folds, on the
# 8x16 array so that a few hundred cycles give many folds; the paper's 32x64 array for two.
ACCESS_SHAPES = (
    Gemm(8, 16, 8, "exact"), Gemm(5, 7, 3, "edge"), Gemm(20, 16, 8, "edge"),
    Gemm(8, 40, 8, "edge"), Gemm(8, 16, 20, "edge"), Gemm(17, 33, 19, "edge"),
    Gemm(24, 8, 64, "deep"), Gemm(64, 8, 4, "tall"), Gemm(4, 64, 8, "wide"),
    Gemm(1, 1, 1, "unit"), Gemm(1, 20, 9, "unit"), Gemm(64, 1, 9, "mobilenetv2", "depthwise, one channel @8x8"),
)
ACCESS_PAPER_ARRAY_SHAPES = (
    Gemm(70, 40, 90, "edge"), Gemm(16, 100, 320, "mobilenetv2", "conv 320->100-like k1 @4x4"),
)
# SRAM sizes (kB, each of the three): large enough to hold every operand (each word crosses from
# DRAM once), and small enough (1 kB) that SCALE-Sim refetches from DRAM.
ACCESS_SRAM_KB = (1024, 1)


def cmd_accesses(out_dir: Path) -> int:
    """Record every figure SCALE-Sim reports (compute, bandwidth, SRAM and DRAM accesses) for
    ACCESS_SHAPES on 8x16 and ACCESS_PAPER_ARRAY_SHAPES on 32x64, all dataflows, both SRAM sizes."""
    plan = [((8, 16), ACCESS_SHAPES), ((32, 64), ACCESS_PAPER_ARRAY_SHAPES)]
    recorded, total_s = [], 0.0
    for sram_kb in ACCESS_SRAM_KB:
        for (rows, cols), shapes in plan:
            for dataflow in DATAFLOWS:
                result, wall_s = run_scalesim(list(shapes), rows=rows, cols=cols, dataflow=dataflow,
                                              sram_kb=sram_kb)
                recorded += [{**{key: r[key] for key in ("m", "n", "k", "rows", "cols", "dataflow")},
                              "sram_kb": sram_kb, "word_bytes": 1,
                              **{key: v for key, v in r.items() if key not in ("m", "n", "k", "rows", "cols",
                                                                              "dataflow")}}
                             for r in result]
                total_s += wall_s
                print(f"{rows}x{cols} {dataflow} SRAM {sram_kb} kB: {len(shapes)} GEMMs, {wall_s:.1f} s",
                      flush=True)
    write_atomically(out_dir / "gemm_accesses.csv", to_csv(recorded))
    print(f"wrote {len(recorded)} rows to {out_dir / 'gemm_accesses.csv'} in {total_s:.1f} s ({versions()})")
    bad = check_closed_form(recorded)
    for message in bad:
        print("closed form disagrees:", message, file=sys.stderr)
    return 1 if bad else 0


# USER bandwidth mode (``memory``): small GEMMs whose folds stall, on the 8x16 array (one fold,
# edge folds, several row folds, several column folds, operands larger and smaller than the
# buffers) and a few small MobileNetV2-like layers (1x1 expand / project, one depthwise channel)
# at 4x4 / 8x8 spatial size, plus two on the paper's 32x64 array. SRAMs of 1 kB (operands spill:
# SCALE-Sim refetches) and 64 kB (every operand fits); DRAM bandwidth 1 and 8 words per cycle.
MEMORY_SHAPES = (
    Gemm(8, 16, 8, "exact"), Gemm(20, 16, 8, "edge"), Gemm(8, 40, 8, "edge"),
    Gemm(8, 16, 20, "edge"), Gemm(20, 16, 20, "edge", "hand-worked in docs/scalesim.md"),
    Gemm(17, 33, 19, "edge"), Gemm(24, 8, 64, "deep"),
    Gemm(64, 8, 4, "tall"), Gemm(4, 64, 8, "wide"), Gemm(48, 48, 48, "large"),
    Gemm(64, 1, 9, "mobilenetv2", "depthwise, one channel @8x8"),
    Gemm(16, 96, 16, "mobilenetv2", "expand 16->96 k1 @4x4"),
    Gemm(16, 24, 96, "mobilenetv2", "project 96->24 k1 @4x4"),
)
MEMORY_PAPER_ARRAY_SHAPES = (
    Gemm(70, 40, 90, "edge"), Gemm(64, 64, 144, "mobilenetv2", "project 144->64-like k1 @8x8"),
)
MEMORY_SRAM_KB = (1, 64)
MEMORY_BANDWIDTHS = (1, 8)  # words per cycle


MEMORY_COLUMNS = ("total_cycles", "stall_cycles", "total_cycles_incl_prefetch", "dram_ifmap_read_words",
                  "dram_filter_read_words", "dram_ofmap_write_words", "sram_ifmap_read_words",
                  "sram_filter_read_words", "sram_ofmap_write_words")


def memory_row(gemm, *, rows: int, cols: int, dataflow: str, sram_kb: int, bandwidth: int) -> tuple[dict, float]:
    """One GEMM through SCALE-Sim in USER bandwidth mode: (the recorded row, SCALE-Sim's wall s)."""
    (r,), wall_s = run_scalesim([gemm], rows=rows, cols=cols, dataflow=dataflow, sram_kb=sram_kb,
                                bandwidth_words_per_cycle=bandwidth)
    return ({**{key: r[key] for key in ("m", "n", "k", "rows", "cols", "dataflow")},
             "sram_kb": sram_kb, "bandwidth_words_per_cycle": bandwidth,
             **{key: r[key] for key in MEMORY_COLUMNS}, "kind": gemm.kind, "name": gemm.name}, wall_s)


def cmd_memory(out_dir: Path) -> int:
    """Record SCALE-Sim's USER-bandwidth-mode figures (DRAM words per operand, stall and total
    cycles) for MEMORY_SHAPES on 8x16 and MEMORY_PAPER_ARRAY_SHAPES on 32x64, every dataflow, SRAM
    size and bandwidth, one SCALE-Sim run per GEMM (its buffers carry state from layer to layer)."""
    plan = [((8, 16), MEMORY_SHAPES), ((32, 64), MEMORY_PAPER_ARRAY_SHAPES)]
    recorded, total_s = [], 0.0
    for sram_kb in MEMORY_SRAM_KB:
        for bandwidth in MEMORY_BANDWIDTHS:
            for (rows, cols), shapes in plan:
                for dataflow in DATAFLOWS:
                    for gemm in shapes:
                        row, wall_s = memory_row(gemm, rows=rows, cols=cols, dataflow=dataflow, sram_kb=sram_kb,
                                                 bandwidth=bandwidth)
                        recorded.append(row)
                        total_s += wall_s
                print(f"SRAM {sram_kb} kB, {bandwidth} words/cycle, {rows}x{cols}: {len(shapes)} GEMMs x 3, "
                      f"{total_s:.1f} s so far", flush=True)
    write_atomically(out_dir / "gemm_memory_user.csv", to_csv(recorded))
    print(f"wrote {len(recorded)} rows to {out_dir / 'gemm_memory_user.csv'} in {total_s:.1f} s ({versions()})")
    return 0


# Held-out spill set (``memory-spill``): recorded after accel_sim.memory_scalesim's spill model
# was fitted to gemm_memory_user.csv, to check it on shapes, SRAM sizes and bandwidths it was not
# developed on. Batch-1 CIFAR MobileNetV2 layers (im2col GEMMs) and one odd edge shape on the
# paper's 32x64 array; every operand larger than the active half of at least one SRAM size.
MEMORY_SPILL_SHAPES = (
    Gemm(256, 96, 16, "mobilenetv2", "expand 16->96 k1 @16x16"),
    Gemm(256, 24, 96, "mobilenetv2", "project 96->24 k1 @16x16"),
    Gemm(1024, 32, 27, "mobilenetv2", "stem conv 3x3 3->32 @32x32"),
    Gemm(64, 384, 64, "mobilenetv2", "expand 64->384 k1 @8x8"),
    Gemm(1024, 1, 9, "mobilenetv2", "depthwise, one channel @32x32"),
    Gemm(100, 130, 70, "edge"),
)
MEMORY_SPILL_CONFIGS = ((2, 4), (4, 22), (16, 2))  # (SRAM kB, DRAM words per cycle); 22: the default hardware's


def cmd_memory_spill(out_dir: Path) -> int:
    """Record the held-out spill set (MEMORY_SPILL_SHAPES on 32x64, every dataflow, each of
    MEMORY_SPILL_CONFIGS) in USER bandwidth mode, with the columns of ``memory``."""
    recorded, total_s = [], 0.0
    for sram_kb, bandwidth in MEMORY_SPILL_CONFIGS:
        for dataflow in DATAFLOWS:
            for gemm in MEMORY_SPILL_SHAPES:
                row, wall_s = memory_row(gemm, rows=32, cols=64, dataflow=dataflow, sram_kb=sram_kb,
                                         bandwidth=bandwidth)
                recorded.append(row)
                total_s += wall_s
        print(f"SRAM {sram_kb} kB, {bandwidth} words/cycle: {len(MEMORY_SPILL_SHAPES)} GEMMs x 3, "
              f"{total_s:.1f} s so far", flush=True)
    write_atomically(out_dir / "gemm_memory_spill.csv", to_csv(recorded))
    print(f"wrote {len(recorded)} rows to {out_dir / 'gemm_memory_spill.csv'} in {total_s:.1f} s ({versions()})")
    return 0


@dataclass(frozen=True)
class ConvLayer:
    """One conv / linear layer of the forward pass at batch 1 and its im2col GEMM."""

    name: str
    kind: str  # "conv" | "depthwise" | "linear"
    c_in: int
    c_out: int
    kernel: int
    stride: int
    h_in: int

    @property
    def h_out(self) -> int:
        """PyTorch's output size with padding kernel // 2: floor((h + 2p - kernel) / stride) + 1."""
        pad = self.kernel // 2
        return (self.h_in + 2 * pad - self.kernel) // self.stride + 1

    @property
    def gemm(self) -> tuple[int, int, int, int]:
        """(m, n, k, count): conv m = P*Q, n = C_out, k = C_in*R*S; depthwise = C single-channel
        GEMMs (m = P*Q, n = 1, k = R*S), SCALE-Sim's split of "DP" layers; linear m = 1."""
        if self.kind == "linear":
            return 1, self.c_out, self.c_in, 1
        pq = self.h_out * self.h_out
        if self.kind == "depthwise":
            return pq, 1, self.kernel * self.kernel, self.c_in
        return pq, self.c_out, self.c_in * self.kernel * self.kernel, 1


def mobilenetv2_cifar_layers() -> list[ConvLayer]:
    """Forward layers of the paper's CIFAR MobileNetV2 (appendix 0.F.1, Tab. 14) at 32x32, TIN_S=1.

    Stem Conv(3, 32, k=3, s=1) (padding 1, as every 3x3 conv of the table), then inverted-residual
    blocks (expand 1x1, depthwise 3x3, project 1x1; block B1's expansion is a 32->32 1x1 conv as in
    the table), Conv(320, 1280, k=1), average pool, FC(1280, 100, bias=False). The table lists
    the main path only; like workloads/models.py (kuangliu/pytorch-cifar) a stride-1 block whose
    width changes adds a 1x1 shortcut conv (B1.0, B2.0, B5.0, B7.0 at 32x32).
    """
    # (expansion t, out channels c, repeats, first stride s) per stage B1..B7, Tab. 14.
    stages = [(1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
              (6, 160, 3, 2), (6, 320, 1, 1)]
    layers = [ConvLayer("conv1", "conv", 3, 32, 3, 1, 32)]
    c_in, h = 32, 32
    for stage, (t, c_out, repeats, first_stride) in enumerate(stages, start=1):
        for rep in range(repeats):
            stride = first_stride if rep == 0 else 1
            hidden = c_in * t
            prefix = f"B{stage}.{rep}"
            layers.append(ConvLayer(f"{prefix}.expand", "conv", c_in, hidden, 1, 1, h))
            dw = ConvLayer(f"{prefix}.depthwise", "depthwise", hidden, hidden, 3, stride, h)
            layers.append(dw)
            h = dw.h_out
            layers.append(ConvLayer(f"{prefix}.project", "conv", hidden, c_out, 1, 1, h))
            if stride == 1 and c_in != c_out:
                layers.append(ConvLayer(f"{prefix}.shortcut", "conv", c_in, c_out, 1, 1, h))
            c_in = c_out
    layers.append(ConvLayer("conv2", "conv", 320, 1280, 1, 1, h))
    layers.append(ConvLayer("classifier", "linear", 1280, 100, 1, 1, 1))
    return layers


# SCALE-Sim keeps every layer's demand and trace matrices until the run ends (~6 MB per layer on
# the 32x64 array), so thousands of depthwise channels cannot go in one run: split the GEMM list
# into runs of at most this many layers and add their wall times.
MAX_LAYERS_PER_RUN = 64


def cmd_mobilenetv2(out_dir: Path) -> int:
    """Time SCALE-Sim on MobileNetV2's forward GEMMs (32x64 array, os) and record the layer list."""
    rows, cols, dataflow = 32, 64, "os"
    layers = mobilenetv2_cifar_layers()
    gemms, owner = [], []
    for index, layer in enumerate(layers):
        m, n, k, count = layer.gemm
        gemms += [Gemm(m, n, k, layer.kind, layer.name)] * count
        owner += [index] * count
    recorded, wall_s = [], 0.0
    load_before = os.getloadavg()[0]
    for start in range(0, len(gemms), MAX_LAYERS_PER_RUN):
        result, seconds = run_scalesim(gemms[start:start + MAX_LAYERS_PER_RUN], rows=rows,
                                       cols=cols, dataflow=dataflow)
        recorded += result
        wall_s += seconds
        print(f"{start + len(result)}/{len(gemms)} GEMMs, {wall_s:.1f} s", flush=True)
    bad = check_closed_form(recorded)
    for message in bad:
        print("closed form disagrees:", message, file=sys.stderr)

    per_layer = []
    for index, layer in enumerate(layers):
        mine = [r for r, o in zip(recorded, owner) if o == index]
        m, n, k, count = layer.gemm
        per_layer.append({
            "layer": layer.name, "kind": layer.kind, "c_in": layer.c_in, "c_out": layer.c_out,
            "kernel": layer.kernel, "stride": layer.stride, "h_in": layer.h_in,
            "h_out": layer.h_out,
            "m": m, "n": n, "k": k, "count": count, "macs": m * n * k * count,
            "scalesim_total_cycles": sum(r["total_cycles"] for r in mine),
            "scalesim_stall_cycles": sum(r["stall_cycles"] for r in mine),
        })
    total_reported = sum(r["total_cycles"] for r in recorded)
    timing = {
        "what": "SCALE-Sim wall time on the forward GEMMs of the CIFAR MobileNetV2 (paper appendix "
                "0.F.1 Tab. 14), 32x32 input, batch 1, measured once",
        "command": "$SCALESIM_VENV/bin/python scripts/record_scalesim.py mobilenetv2",
        "versions": versions(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_1min_before": load_before, "load_avg_1min_after": os.getloadavg()[0]},
        "array_rows": rows, "array_cols": cols, "dataflow": dataflow,
        "depthwise": "one single-channel GEMM per channel (m = P*Q, n = 1, k = 9), as SCALE-Sim "
                     "splits depthwise ('DP') layers",
        "num_layers": len(layers), "num_scalesim_gemms": len(gemms),
        "num_scalesim_runs": math.ceil(len(gemms) / MAX_LAYERS_PER_RUN),
        "macs": sum(p["macs"] for p in per_layer),
        "scalesim_total_cycles_sum": total_reported,
        "scalesim_stall_cycles_sum": sum(r["stall_cycles"] for r in recorded),
        "cycle_count_sum": total_reported + len(gemms),
        "cycle_count_note": "SCALE-Sim reports each GEMM's last zero-based cycle index; the number "
                            "of cycles is that + 1 per GEMM (see README.md)",
        "closed_form_mismatches": len(bad),
        "wall_s": round(wall_s, 3),
        "simulated_cycles_per_s": round(total_reported / wall_s),
    }
    write_atomically(out_dir / "mobilenetv2_fwd_layers.csv", to_csv(per_layer))
    write_atomically(out_dir / "mobilenetv2_fwd_timing.json", json.dumps(timing, indent=2) + "\n")
    print(json.dumps(timing, indent=2))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["gemm", "accesses", "memory", "memory-spill", "mobilenetv2"],
                        help="gemm: record the golden GEMM set; accesses: record SRAM / DRAM "
                             "accesses; memory: record DRAM traffic and stalls in USER bandwidth mode; "
                             "memory-spill: the held-out spill set in that mode; "
                             "mobilenetv2: time the forward GEMMs")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR,
                        help=f"where to write (default {DEFAULT_OUT_DIR})")
    args = parser.parse_args(argv)
    try:
        import scalesim  # noqa: F401
    except ImportError:
        parser.exit(2, "error: SCALE-Sim is not importable; run this script with the SCALE-Sim "
                       "venv's python (see the top of scripts/record_scalesim.py)\n")
    commands = {"gemm": cmd_gemm, "accesses": cmd_accesses, "memory": cmd_memory, "memory-spill": cmd_memory_spill,
                "mobilenetv2": cmd_mobilenetv2}
    return commands[args.command](args.out_dir)


if __name__ == "__main__":
    sys.exit(main())

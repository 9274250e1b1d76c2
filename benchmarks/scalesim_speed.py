"""How long SCALE-Sim 3.0 takes for a trace's forward GEMMs, next to ``accel_sim``'s closed form.

Run once, by hand, with a Python that has SCALE-Sim (PyPI ``scalesim``, which needs
``numpy<2.3``, so use its own venv) and this repository on its path::

    python -m venv /tmp/ss && /tmp/ss/bin/pip install scalesim "numpy<2.3"
    PYTHONPATH=$PWD /tmp/ss/bin/python benchmarks/scalesim_speed.py trace.jsonl [--batch-divisor 64]

It takes the trace's dense (groups = 1) forward GEMMs, divides ``m`` by ``--batch-divisor`` (to
get SCALE-Sim's batch-1 convention: a batch-64 step would take SCALE-Sim hours), runs each through
SCALE-Sim as a one-layer GEMM topology on the 32 x 64 array (weight stationary, the default
forward dataflow), and times it against ``accel_sim.systolic.gemm_cycles`` on the same shapes. It
also checks that both give the same cycles. Not part of the test suite (CI has no SCALE-Sim).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

from accel_sim.systolic import gemm_cycles
from accel_sim.trace_schema import load_trace

CONFIG = """[general]
run_name = run

[architecture_presets]
ArrayHeight: {rows}
ArrayWidth: {cols}
IfmapSramSzkB: 1024
FilterSramSzkB: 1024
OfmapSramSzkB: 1024
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth: 10
Dataflow: {dataflow}
MemoryBanks: 1
ReadRequestBuffer: 512
WriteRequestBuffer: 512

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport: false
SparseRep: ellpack_block
OptimizedMapping: false
BlockSize: 8
RandomNumberGeneratorSeed: 40

[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""


def scalesim_total_cycles(m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str, workdir: Path) -> int:
    """SCALE-Sim's "Total Cycles" for one GEMM (zero stalls in its CALC bandwidth mode)."""
    from scalesim.scale_sim import scalesim

    (workdir / "c.cfg").write_text(CONFIG.format(rows=rows, cols=cols, dataflow=dataflow))
    (workdir / "t.csv").write_text(f"Layer, M, N, K,\nL0, {m}, {n}, {k},\n")
    (workdir / "l.csv").write_text("Layer, a, b, c, d, e,\n")
    shutil.rmtree(workdir / "out", ignore_errors=True)
    sim = scalesim(save_disk_space=True, verbose=False, config=str(workdir / "c.cfg"), topology=str(workdir / "t.csv"),
                   layout=str(workdir / "l.csv"), input_type_gemm=True)
    with contextlib.redirect_stdout(io.StringIO()):
        sim.run_scale(top_path=str(workdir / "out"))
    row = (workdir / "out/run/COMPUTE_REPORT.csv").read_text().splitlines()[1].split(",")
    return int(row[2])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--batch-divisor", type=int, default=64)
    parser.add_argument("--dataflow", default="ws", choices=("os", "ws", "is"))
    args = parser.parse_args()
    trace = load_trace(args.trace)
    shapes = [
        (max(1, op.work.m // args.batch_divisor), op.work.n, op.work.k)
        for op in trace.ops
        if op.work.kind == "gemm" and op.work.role == "fwd" and op.work.groups == 1
    ]
    rows, cols = 32, 64
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        theirs = [scalesim_total_cycles(*s, rows=rows, cols=cols, dataflow=args.dataflow, workdir=Path(tmp)) for s in shapes]
        scalesim_s = time.perf_counter() - start
    repeats = 100
    start = time.perf_counter()
    for _ in range(repeats):
        ours = [gemm_cycles(*s, rows=rows, cols=cols, dataflow=args.dataflow) for s in shapes]
    ours_s = (time.perf_counter() - start) / repeats
    mismatches = sum(a != b for a, b in zip(ours, theirs))
    print(f"{len(shapes)} dense forward GEMMs of {args.trace} (m / {args.batch_divisor}), {args.dataflow}, {rows} x {cols}")
    print(f"SCALE-Sim 3.0: {scalesim_s:.2f} s for {sum(theirs):,} cycles ({sum(theirs) / scalesim_s:,.0f} cycles/s)")
    print(f"accel_sim.systolic.gemm_cycles: {ours_s * 1e6:.1f} us; ratio {scalesim_s / ours_s:,.0f}x")
    print(f"cycle mismatches: {mismatches}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

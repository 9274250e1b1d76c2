"""Benchmark: pricing a hardware design space, vectorized (``accel_sim.batch``) against a loop over
``simulate`` (issue 24: 1,000 points x 4 methods of MobileNetV2 at batch 64 in <= 10 s on one core
after capture; a loop over ``simulate`` takes 25-28 ms per point and method).

The four traces are captured once (not timed): one steady-state local training step of FedAvg and
of SphereFed (``workloads.cost.step.method_step_trace``, CIFAR-100 shapes, batch 64), and one
client-statistics batch of each calibration, CCVR on the FedAvg model and FFC on the SphereFed
model (``client_statistics`` of ``workloads.fl.methods``, as ``workloads.cost.calibration``
captures it, batch 64). The space: 1,000 points around the paper's accelerator (rows x cols x equal
A / B buffers x DRAM bandwidth x the weight-gradient dataflow). Prints the vectorized time and
points per second, the loop's on a random sample of the same points (``--loop-sample``; ``0``: all
of them, ~2 min), their ratio, and checks that every sampled row equals ``simulate``'s.

    PYTHONPATH=$PWD python benchmarks/bench_dse.py [--loop-sample N] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, numpy and torch alike
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel_sim.batch import TraceWork, price_points  # noqa: E402
from accel_sim.simulate import simulate  # noqa: E402
from accel_sim.space import space_from_dict  # noqa: E402

BATCH = 64
SPACE = {
    "axes": {
        "rows": [8, 16, 32, 64, 128],
        "cols": [16, 32, 64, 128, 256],
        "a_buffer_bytes": [262144, 524288, 1048576, 1572864],
        "b_buffer_bytes": [262144, 524288, 1048576, 1572864],
        "dram_peak_bytes_per_s": {"start": 3.2e9, "stop": 51.2e9, "factor": 2},
        "dataflow_dw": ["os", "ws"],
    },
    "constraints": ["a_buffer_bytes == b_buffer_bytes"],
}


def capture_traces(batch: int = 64, classes: int = 100) -> dict:
    """The four traces of the module docstring, by method (``bench.dse.traces``, as the command captures them)."""
    import torch

    from bench.dse.traces import method_trace

    torch.set_num_threads(1)
    return {m: method_trace("mobilenetv2", m, batch_size=batch, num_classes=classes, image_size=32)
            for m in ("fedavg", "spherefed", "ccvr", "ffc")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop-sample", type=int, default=50,
                        help="points the loop over simulate prices (0: every point of the space)")
    parser.add_argument("--repeat", type=int, default=3, help="vectorized runs; the best is reported")
    args = parser.parse_args()

    traces = capture_traces(BATCH)
    works = {m: TraceWork.of(t) for m, t in traces.items()}
    for method, work in works.items():
        what = "training step" if method in ("fedavg", "spherefed") else "calibration statistics batch"
        print(f"trace {method:9} MobileNetV2 {what}, batch {BATCH}: {work.ops:>5,} ops, {len(work.gemms):>3} "
              f"distinct GEMMs of {int(work.gemm_counts.sum()):,}")
    space = space_from_dict(SPACE)
    chunks = list(space.chunks())
    print(f"space: {space.size:,} points ({space.grid_size:,} before the constraint a_buffer_bytes == b_buffer_bytes), "
          f"{len(works)} methods")

    best_wall = best_cpu = float("inf")
    for _ in range(args.repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        priced = [price_points(list(works.values()), chunk.points) for chunk in chunks]
        best_wall, best_cpu = min(best_wall, time.perf_counter() - wall), min(best_cpu, time.process_time() - cpu)
    pairs = space.size * len(works)
    vector_rate = space.size / best_wall
    print(f"vectorized (accel_sim.batch.price_points): {pairs:,} point-methods in {best_wall:.2f} s wall "
          f"({best_cpu:.2f} s CPU; best of {args.repeat}): {vector_rate:,.0f} points/s "
          f"({best_wall / pairs * 1e3:.3f} ms per point and method)")

    rows = [(n, i) for n, chunk in enumerate(chunks) for i in range(len(chunk))]
    sample = rows if args.loop_sample <= 0 else random.Random(24).sample(rows, min(args.loop_sample, len(rows)))
    wall = time.perf_counter()
    reports = [(n, i, [simulate(traces[m], chunks[n].points.config(i)) for m in works]) for n, i in sample]
    loop_s = time.perf_counter() - wall
    loop_rate = len(sample) / loop_s
    print(f"loop over simulate: {len(sample) * len(works):,} point-methods "
          f"({'all' if len(sample) == len(rows) else f'a random sample of {len(sample)}'} points) in {loop_s:.2f} s: "
          f"{loop_rate:,.1f} points/s ({loop_s / (len(sample) * len(works)) * 1e3:.1f} ms per point and method)")
    print(f"ratio: vectorized {vector_rate / loop_rate:,.0f}x the loop's points/s; the whole space by the loop "
          f"~{space.size / loop_rate:.0f} s, vectorized {best_wall:.2f} s")
    exact = ("total_cycles", "compute_cycles", "dram_read_bytes", "dram_write_bytes", "sram_read_bytes",
             "sram_write_bytes", "peak_memory_bytes")
    for n, i, by_method in reports:
        for costs, report in zip(priced[n], by_method):
            row, summary = costs.row(i), report.summary()
            if any(row[k] != summary[k] for k in exact) or abs(row["energy_j"] - summary["energy_j"]) > 1e-9 * summary["energy_j"]:
                raise SystemExit(f"error: grid point {int(chunks[n].index[i])}: vectorized and simulate differ")
    print(f"check: the {len(sample) * len(works):,} sampled rows equal simulate's (cycles, bytes, peak memory exact; "
          f"energy to 1e-9)")
    target = 10.0
    print(f"target: {space.size:,} points x {len(works)} methods <= {target:g} s on one core: "
          f"{'met' if best_wall <= target else 'MISSED'} ({best_wall:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: time to simulate one MobileNetV2 (CIFAR-100, batch 64) training-step trace.

Targets: under 1 s on one core (issue 3); with energy priced, under 0.2 s (issue 11), under either
memory model (issue 16). Prints, per ``memory_model`` (``accel_sim.hardware.MEMORY_MODELS``), the
best and median of several runs of ``simulate(trace, HardwareConfig(memory_model=...))`` (every op's cycles and
energy; trace loading excluded), of the same plus the energy queries a report prints
(``report.energy_j``, ``by_phase()``, ``by_layer()``), the best process CPU time of the first,
and the trace's size. Each run prices its step cold: ``gemm_memory_scalesim``'s cache of GEMM
shapes is cleared first (shapes repeat within a step: 75 distinct of 173). Then times
``accel_sim.systolic.gemm_cycles`` on the MobileNetV2 forward GEMMs that SCALE-Sim 3.0 was run on
once (``tests/data/scalesim/mobilenetv2_fwd_layers.csv``, batch 1, os, 32 x 64; its wall time is in
``mobilenetv2_fwd_timing.json``) and prints the ratio.

    PYTHONPATH=$PWD python benchmarks/bench_simulate.py [trace.jsonl] [--repeat N]

With no trace file it captures one (``workloads.capture``, meta device: the real autograd graph of
a FedAvg step of the paper's MobileNetV2, SGD with momentum); capture time is not measured.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel_sim.hardware import HardwareConfig
from accel_sim.hardware_fields import MEMORY_MODELS
from accel_sim.memory_scalesim import gemm_memory_scalesim  # noqa: E402
from accel_sim.simulate import simulate  # noqa: E402
from accel_sim.systolic import gemm_cycles  # noqa: E402
from accel_sim.trace_io import load_trace


def captured_mobilenetv2_step(batch: int = 64, classes: int = 100):
    import torch

    from workloads.cost.step import method_setup
    from workloads.capture import capture_training_step

    model, loss_fn = method_setup("fedavg", "mobilenetv2", num_classes=classes, image_size=32, norm="bn")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-5, foreach=False)
    x, y = torch.zeros(batch, 3, 32, 32), torch.arange(batch) % classes
    return capture_training_step(model, x, y, loss_fn=loss_fn, optimizer=optimizer, model_name="mobilenetv2", method="fedavg")


def closed_form_vs_scalesim(repeat: int = 100) -> str:
    """Our time on the GEMMs SCALE-Sim was timed on, against its recorded wall time."""
    data = Path(__file__).resolve().parents[1] / "tests/data/scalesim"
    with open(data / "mobilenetv2_fwd_layers.csv", newline="") as f:
        layers = [(int(r["m"]), int(r["n"]), int(r["k"]), int(r["count"])) for r in csv.DictReader(f)]
    recorded = json.loads((data / "mobilenetv2_fwd_timing.json").read_text())
    start = time.perf_counter()
    for _ in range(repeat):
        cycles = sum(c * gemm_cycles(m, n, k, rows=32, cols=64, dataflow="os") for m, n, k, c in layers)
    ours_s = (time.perf_counter() - start) / repeat
    if cycles != recorded["cycle_count_sum"]:
        raise SystemExit(f"error: closed form gives {cycles:,} cycles, SCALE-Sim's recording {recorded['cycle_count_sum']:,}")
    return (f"MobileNetV2 forward GEMMs (batch 1, os, 32 x 64; {len(layers)} layers = "
            f"{recorded['num_scalesim_gemms']:,} SCALE-Sim GEMMs, {cycles:,} cycles): SCALE-Sim 3.0 "
            f"{recorded['wall_s']:.1f} s (recorded once), gemm_cycles {ours_s * 1e6:.1f} us: "
            f"{recorded['wall_s'] / ours_s:,.0f}x faster")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", help="a captured trace (default: the synthetic MobileNetV2 step)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    trace = load_trace(args.trace) if args.trace else captured_mobilenetv2_step()
    source = args.trace or "captured MobileNetV2 FedAvg step, CIFAR-100, batch 64 (workloads.capture, meta device)"
    gemms = sum(1 for op in trace.ops if op.work.kind == "gemm")
    print(f"trace: {source}: {len(trace.ops)} ops ({gemms} GEMMs)")
    for memory_model in MEMORY_MODELS:
        hw = HardwareConfig(memory_model=memory_model)
        times, cpu_times, with_queries = [], [], []
        for _ in range(args.repeat):
            gemm_memory_scalesim.cache_clear()  # each run prices its step cold (shapes repeat within it)
            start, start_cpu = time.perf_counter(), time.process_time()
            report = simulate(trace, hw)
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - start_cpu)
            report.energy_j, report.by_phase(), report.by_layer()
            with_queries.append(time.perf_counter() - start)
        print(f"memory_model = {memory_model!r}:")
        print(f"  simulate() (cycles and energy of every op): best {min(times) * 1e3:.1f} ms, median "
              f"{statistics.median(times) * 1e3:.1f} ms over {args.repeat} runs (target < 200 ms); CPU time best "
              f"{min(cpu_times) * 1e3:.1f} ms (what other jobs on a shared machine do not inflate)")
        print(f"  simulate() + energy_j, by_phase(), by_layer(): best {min(with_queries) * 1e3:.1f} ms, median "
              f"{statistics.median(with_queries) * 1e3:.1f} ms (target < 200 ms)")
        print(f"  result: {report.total_cycles:,} cycles = {report.latency_s * 1e3:.1f} ms at 100 MHz "
              f"(stall {report.totals.stall_cycles:,}), DRAM read {report.totals.dram_read_bytes / 1e6:.1f} MB, "
              f"write {report.totals.dram_write_bytes / 1e6:.1f} MB, peak {report.peak_memory_bytes / 1e6:.1f} MB, "
              f"utilization {report.utilization():.1%}")
        parts = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in report.energy.by_component_j().items())
        print(f"  energy: {report.energy_j * 1e3:.1f} mJ ({parts} mJ)")
    print(closed_form_vs_scalesim())
    return 0


if __name__ == "__main__":
    sys.exit(main())

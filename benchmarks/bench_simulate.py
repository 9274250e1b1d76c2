"""Benchmark: time to simulate one MobileNetV2 (CIFAR-100, batch 64) training-step trace.

Target (issue 3): under 1 s on one core. Prints the best and median of several runs of
``simulate(trace, HardwareConfig())`` (trace loading excluded) and the trace's size.

    PYTHONPATH=$PWD python benchmarks/bench_simulate.py [trace.jsonl] [--repeat N]

With no trace file it captures one (``workloads.trace``, meta device: the real autograd graph of
a FedAvg step of the paper's MobileNetV2, SGD with momentum); capture time is not measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel_sim.hardware import HardwareConfig  # noqa: E402
from accel_sim.simulate import simulate  # noqa: E402
from accel_sim.trace_schema import load_trace  # noqa: E402


def captured_mobilenetv2_step(batch: int = 64, classes: int = 100):
    import torch

    from workloads.trace import capture_training_step, method_setup

    model, loss_fn = method_setup("fedavg", "mobilenetv2", num_classes=classes, image_size=32, norm="bn")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-5, foreach=False)
    x, y = torch.zeros(batch, 3, 32, 32), torch.arange(batch) % classes
    return capture_training_step(model, x, y, loss_fn=loss_fn, optimizer=optimizer, model_name="mobilenetv2", method="fedavg")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", help="a captured trace (default: the synthetic MobileNetV2 step)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    trace = load_trace(args.trace) if args.trace else captured_mobilenetv2_step()
    source = args.trace or "captured MobileNetV2 FedAvg step, CIFAR-100, batch 64 (workloads.trace, meta device)"
    hw = HardwareConfig()
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        report = simulate(trace, hw)
        times.append(time.perf_counter() - start)
    gemms = sum(1 for op in trace.ops if op.work.kind == "gemm")
    print(f"trace: {source}: {len(trace.ops)} ops ({gemms} GEMMs)")
    print(f"simulate(): best {min(times) * 1e3:.1f} ms, median {statistics.median(times) * 1e3:.1f} ms "
          f"over {args.repeat} runs (target < 1000 ms)")
    print(f"result: {report.total_cycles:,} cycles = {report.seconds * 1e3:.1f} ms at 100 MHz, "
          f"peak {report.peak_bytes / 1e6:.1f} MB, utilization {report.utilization():.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

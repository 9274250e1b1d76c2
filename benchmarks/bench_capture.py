"""Benchmark: capturing one MobileNetV2 training step (CIFAR 32x32, 100 classes, batch 64) on the
meta device. Target (issue 2): under 2 s on the project's 2-core CPU.

Times the whole ``capture_training_step`` call (model copy to meta, warm-up step, captured step,
trace assembly); prints the median of ``--repeat`` runs after one untimed run (imports, first-call
caches).

    python benchmarks/bench_capture.py [--repeat 5] [--batch-size 64]
"""

import argparse
import statistics
import time

import torch

from workloads.cost.step import method_setup
from workloads.capture import capture_training_step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for method in ("fedavg", "spherefed"):
        model, loss_fn = method_setup(method, "mobilenetv2", num_classes=100, image_size=32, norm="bn")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-5)
        x, y = torch.zeros(args.batch_size, 3, 32, 32), torch.arange(args.batch_size) % 100

        def run():
            return capture_training_step(model, x, y, loss_fn=loss_fn, optimizer=opt, device="meta")

        trace = run()
        seconds = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
        print(
            f"mobilenetv2 {method} batch {args.batch_size} meta: {len(trace.ops)} ops, "
            f"median {statistics.median(seconds):.3f} s (min {min(seconds):.3f}, max {max(seconds):.3f}) "
            f"over {args.repeat} runs"
        )


if __name__ == "__main__":
    main()

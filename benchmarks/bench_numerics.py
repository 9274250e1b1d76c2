"""Benchmark: the overhead of training in a number format (workloads.numerics) per local step of
MobileNetV2 (batch 32, 16 x 16 inputs, 10 classes, FedAvg's step as the federated loop runs it),
each format against FP32. Target (issue 32): at most 2x FP32 on the CPU.

Each format's step is timed ``--repeat`` times after two untimed steps, interleaved with FP32 so
that a noisy machine slows both alike; prints the median per format and its ratio to FP32's.

    python benchmarks/bench_numerics.py [--repeat 10] [--threads 1] [--model mobilenetv2] [--channels-last]
"""

import argparse
import statistics
import time

import torch

from workloads.fl.execution import Execution
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.loop import arithmetic_of
from workloads.fl.methods import parse_method
from workloads.models import build_model

FORMATS = ("bf16", "bf16_sr", "fp16", "e4m3", "e5m2", "bfp_m8_g16", "bfp_m4_g16", "bfp_m4_g16_sr", "bfp_m2_g16")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default="mobilenetv2")
    p.add_argument("--channels-last", action="store_true", help="NHWC activations (the quick preset's choice)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.model}, batch 32, 16x16, "
          f"{'channels-last' if args.channels_last else 'NCHW'}")
    method = parse_method("fedavg")
    torch.manual_seed(0)
    model = prepare_model(build_model(args.model, num_classes=10, image_size=16), method, seed=0)
    x, y = torch.randn(32, 3, 16, 16), torch.arange(32) % 10
    if args.channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)

    def trainer(fmt: str):
        return client_trainer(model, model.state_dict(), Hparams(lr=0.01), method,
                              arithmetic=arithmetic_of(Execution(number_format=fmt), 0, 1, 0))

    def seconds(step) -> float:
        start = time.perf_counter()
        step(x, y)
        return time.perf_counter() - start

    fp32 = trainer("fp32").step
    print(f"{'format':<15}{'ms/step':>10}{'fp32 ms':>10}{'ratio':>8}")
    for fmt in FORMATS:
        step = trainer(fmt).step
        for _ in range(2):
            step(x, y), fp32(x, y)
        ours, base = [], []
        for _ in range(args.repeat):
            ours.append(seconds(step))
            base.append(seconds(fp32))
        a, b = statistics.median(ours), statistics.median(base)
        print(f"{fmt:<15}{1e3 * a:>10.1f}{1e3 * b:>10.1f}{a / b:>8.2f}")


if __name__ == "__main__":
    main()

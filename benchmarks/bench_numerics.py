"""Benchmark: the overhead of training in a number format (workloads.numerics) per local step of
MobileNetV2 (batch 32, 16 x 16 inputs, 10 classes, FedAvg's step as the federated loop runs it),
each format against FP32. Target (issue 43): at most 1.5x FP32 on the CPU.

Each format's step is timed ``--repeat`` times after two untimed steps, interleaved with FP32 so
that a noisy machine slows both alike; prints the median per format and its ratio to FP32's.
``--device cuda`` measures the same table on a GPU (each step synchronized before its clock stops).

    python benchmarks/bench_numerics.py [--repeat 10] [--threads 1] [--model mobilenetv2] [--channels-last]
                                        [--device cpu|cuda] [--formats bf16,mxfp4_e2m1,...] [--batch 32]
"""

import argparse
import statistics
import time

import torch

from accel_sim.formats import NumberFormat
from workloads.fl.execution import Execution, resolve_device
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.loop import arithmetic_of
from workloads.fl.methods import parse_method
from workloads.models import build_model

FORMATS = ("bf16", "bf16_sr", "fp16", "e4m3", "e5m2", "e4m3_cs", "e4m3_ds", "fp8_hybrid_ds", "mxfp8_e4m3",
           "mxfp6_e3m2", "mxfp4_e2m1", "mxint8", "bfp_m8_g16", "bfp_m4_g16", "bfp_m4_g16_sr", "bfp_m2_g16")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default="mobilenetv2")
    p.add_argument("--channels-last", action="store_true", help="NHWC activations (the quick preset's choice)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--formats", default=",".join(FORMATS), help="comma-separated format names (default: all above)")
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args()
    formats = [NumberFormat.parse(f).name for f in args.formats.split(",")]  # a bad name fails before any work
    device = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {device}, {torch.get_num_threads()} thread(s), {args.model}, batch {args.batch}, "
          f"16x16, {'channels-last' if args.channels_last else 'NCHW'}")
    method = parse_method("fedavg")
    torch.manual_seed(0)
    model = prepare_model(build_model(args.model, num_classes=10, image_size=16), method, seed=0).to(device)
    x, y = torch.randn(args.batch, 3, 16, 16, device=device), torch.arange(args.batch, device=device) % 10
    if args.channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def trainer(fmt: str):
        return client_trainer(model, model.state_dict(), Hparams(lr=0.01), method,
                              arithmetic=arithmetic_of(Execution(device=device, number_format=fmt), 0, 1, 0))

    def seconds(step) -> float:
        sync()
        start = time.perf_counter()
        step(x, y)
        sync()
        return time.perf_counter() - start

    fp32 = trainer("fp32").step
    print(f"{'format':<15}{'ms/step':>10}{'fp32 ms':>10}{'ratio':>8}")
    for fmt in formats:
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

"""Benchmark: the overhead of training in a number format (workloads.numerics) per local step of
MobileNetV2 (batch 32, 16 x 16 inputs, 10 classes, FedAvg's step as the federated loop runs it),
each format against FP32. Target (issue 43): at most 1.5x FP32 on the CPU.

Each format's step is timed ``--repeat`` times after two untimed steps, interleaved with FP32 so
that a noisy machine slows both alike; prints the median per format and its ratio to FP32's, and
the best (fastest) step of each and their ratio (on a loaded machine the least disturbed steps: the
median's ratio there moves by 0.1-0.5x between runs; the files keep both, ``best_*``).
``--device cuda`` measures the same table on a GPU (each step synchronized before its clock stops).
``--kernel off`` rounds BFP, MX and scaled FP8 with torch operations instead of the fused kernel
(``workloads.numerics.fused``), for comparison. ``--out F.json`` keeps the table with the run's
configuration, commit and load average; ``--render F.json ...`` prints the kept tables as one
markdown table (``docs/numerics.md``'s; ``--render-best``: the best steps' ratios, where kept).

    python benchmarks/bench_numerics.py [--repeat 10] [--threads 1] [--model mobilenetv2] [--channels-last]
                                        [--device cpu|cuda] [--formats bf16,mxfp4_e2m1,...] [--batch 32]
                                        [--kernel on|off] [--out F.json]
    python benchmarks/bench_numerics.py --render A.json B.json ... [--render-best]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from accel_sim.formats import NumberFormat
from workloads.fl.execution import Execution, resolve_device
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.loop import arithmetic_of
from workloads.fl.methods import parse_method
from workloads.models import build_model
from workloads.numerics import fused
from iokit.provenance import git_commit

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
    p.add_argument("--kernel", choices=("on", "off"), default="on", help="the fused quantizer's kernel (default on)")
    p.add_argument("--out", type=Path, help="write the table, configuration, commit and load average as JSON")
    p.add_argument("--render", type=Path, nargs="+", help="print these JSON tables as one markdown table and exit")
    p.add_argument("--render-best", action="store_true", help="with --render: the best steps' ratios instead of the medians'")
    args = p.parse_args()
    if args.render:
        missing = [str(f) for f in args.render if not f.is_file()]
        if missing:
            sys.exit(print(f"bench_numerics: no such file: {', '.join(missing)} (write one with --out)", file=sys.stderr) or 2)
        print(render([json.loads(f.read_text()) for f in args.render], "best_ratio" if args.render_best else "ratio"))
        return
    formats = [NumberFormat.parse(f).name for f in args.formats.split(",")]  # a bad name fails before any work
    if args.out is not None and not args.out.parent.is_dir():
        sys.exit(print(f"bench_numerics: --out {args.out}: no folder {args.out.parent} (create it first)", file=sys.stderr) or 2)
    fused._kernel_enabled = args.kernel == "on"
    kernel = "numba" if args.kernel == "on" and fused.kernel() is not None else "torch operations"
    load_before = os.getloadavg()[0]
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
    print(f"{'format':<15}{'ms/step':>10}{'fp32 ms':>10}{'ratio':>8}{'best ms':>10}{'fp32 best':>10}{'ratio':>8}"
          f"   (median, then best of {args.repeat}; quantizer: {kernel})")
    rows = []
    for fmt in formats:
        step = trainer(fmt).step
        for _ in range(2):
            step(x, y), fp32(x, y)
        ours, base = [], []
        for _ in range(args.repeat):
            ours.append(seconds(step))
            base.append(seconds(fp32))
        a, b = statistics.median(ours), statistics.median(base)
        rows.append({"format": fmt, "ms_per_step": round(1e3 * a, 2), "fp32_ms_per_step": round(1e3 * b, 2),
                     "ratio": round(a / b, 3), "best_ms_per_step": round(1e3 * min(ours), 2),
                     "fp32_best_ms_per_step": round(1e3 * min(base), 2), "best_ratio": round(min(ours) / min(base), 3)})
        print(f"{fmt:<15}{1e3 * a:>10.1f}{1e3 * b:>10.1f}{a / b:>8.2f}{1e3 * min(ours):>10.1f}{1e3 * min(base):>10.1f}"
              f"{min(ours) / min(base):>8.2f}")
    if args.out is not None:
        run = {"command": " ".join(["python", *sys.argv]), "git_commit": git_commit(), "torch": torch.__version__,
               "device": device, "machine": platform.processor() or platform.machine(), "threads": args.threads,
               "model": args.model, "batch": args.batch, "layout": "channels-last" if args.channels_last else "NCHW",
               "quantizer": kernel, "repeat": args.repeat,
               "load_average_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)], "rows": rows}
        args.out.write_text(json.dumps(run, indent=1) + "\n")


def render(runs: list[dict], key: str = "ratio") -> str:
    """One markdown table of runs kept with ``--out``: a column per run (its layout, quantizer and
    load average), a row per format, each cell the format's step time over FP32's (``key``: the
medians' ``ratio`` or the best steps' ``best_ratio``, blank where a run did not keep it)."""
    formats = list(dict.fromkeys(r["format"] for run in runs for r in run["rows"]))
    head = [f"{run['layout']}, {run['quantizer']}, load {run['load_average_1min_before_after'][0]:.0f}-"
            f"{run['load_average_1min_before_after'][1]:.0f} ({run['git_commit'][:7]})" for run in runs]
    lines = ["| format | " + " | ".join(head) + " |", "|---|" + "---|" * len(runs)]
    for fmt in formats:
        cells = [next((f"{r[key]:.2f}x" for r in run["rows"] if r["format"] == fmt and key in r), "") for run in runs]
        lines.append(f"| `{fmt}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Benchmark: the fused kernel alone on every operand one MobileNetV2 step rounds, today's kernel
against another commit's (``workloads.numerics._fused_kernel``; issue 55).

One step of ``bench_numerics.py``'s (batch 32, 16 x 16 inputs, FedAvg's step, one thread) runs in
the format with the kernel calls recorded (each operand's values, loop nests and constants, its
stochastic rounding's stream and key included); then each recorded call is timed with the other
commit's kernel and today's, interleaved, the best of ``--repeat`` each (robust to a loaded
machine: the best run is the one least disturbed), and the two kernels' outputs are compared bit
for bit on every operand (the run stops at the first that differs). Prints the step's kernel
milliseconds (the sum of the operands' best times) and ns a value, before and today, and for a
scaled format the largest-magnitude pass alone (``_fused_kernel.largest_bits_at``: the pass of its
own that delayed scaling's amax took before the kernel read it in the rounding's pass), with the
1-minute load average before and after. ``--nearest`` (a stochastic format) times today's kernel on
the same calls rounding to nearest too (no random words: the same nests and constants), interleaved
with the others: stochastic rounding's own share of the step's kernel time is the difference.

    PYTHONPATH=. python benchmarks/bench_step_kernel.py [--before HEAD] [--format fp8_hybrid_ds] [--channels-last] [--repeat 15] [--nearest]
"""

import argparse
import os
import sys
import time

import numpy as np
import torch

from benchmarks.bench_sr_kernel import kernel_at, kernel_format
from iokit.provenance import git_commit
from workloads.fl.execution import Execution
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.loop import arithmetic_of
from workloads.fl.methods import parse_method
from workloads.models import build_model
from workloads.numerics import fused


def recorded_calls(fmt: str, channels_last: bool) -> list[tuple]:
    """The kernel calls of one MobileNetV2 step in ``fmt`` (after two untimed steps), each as
    ``(values, n, nests, floats, ints)`` with a copy of the operand's values."""
    method = parse_method("fedavg")
    torch.manual_seed(0)
    model = prepare_model(build_model("mobilenetv2", num_classes=10, image_size=16), method, seed=0)
    x, y = torch.randn(32, 3, 16, 16), torch.arange(32) % 10
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    step = client_trainer(model, model.state_dict(), Hparams(lr=0.01), method,
                          arithmetic=arithmetic_of(Execution(device="cpu", number_format=fmt), 0, 1, 0)).step
    step(x, y), step(x, y)
    calls, real = [], fused.kernel()

    def record(x_address, out_address, n, nests, floats, ints):
        values = torch.empty(n)
        values.view(-1).copy_(torch.frombuffer((ctypes_array(x_address, n)), dtype=torch.float32))
        calls.append((values, n, nests.copy(), floats.copy(), ints.copy()))
        return real(x_address, out_address, n, nests, floats, ints)

    fused._kernel = record
    try:
        step(x, y)
    finally:
        fused._kernel = real
    return calls


def ctypes_array(address: int, n: int):
    """The ``n`` float32 values at ``address`` as a ctypes array (no copy)."""
    import ctypes
    return (ctypes.c_float * n).from_address(address)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="HEAD", help="the commit whose kernel to compare with (default HEAD)")
    p.add_argument("--format", default="fp8_hybrid_ds", help="a BFP, MX or scaled FP8 format (default fp8_hybrid_ds)")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--nearest", action="store_true", help="time today's kernel rounding to nearest too (a stochastic --format)")
    args = p.parse_args()
    fmt = kernel_format("bench_step_kernel", args.format, lambda f: f.kind in ("bfp", "mx") or f.scaling != "none",
                        "rounded by the kernel (a BFP, MX or scaled FP8 format, e.g. fp8_hybrid_ds, bfp_m4_g16_sr)")
    if args.nearest and fmt.rounding != "stochastic":
        sys.exit(print(f"bench_step_kernel: --nearest needs a stochastic --format, not {fmt.name} (e.g. bfp_m4_g16_sr)",
                       file=sys.stderr) or 2)
    torch.set_num_threads(1)
    before = kernel_at(args.before)
    load_before = os.getloadavg()[0]
    calls = recorded_calls(fmt.name, args.channels_last)
    from workloads.numerics._fused_kernel import largest_bits_at
    kernels = {"before": before.round_at, "today": fused.kernel(),
               "amax pass": lambda x_address, out_address, n, *_: largest_bits_at(x_address, n)}
    if args.nearest:  # the same calls with no random bits (their ints' last entry 0: to nearest)
        kernels["nearest"] = fused.kernel()
    total = {name: 0.0 for name in kernels}
    for values, n, nests, floats, ints in calls:
        outs = {name: torch.empty(n) for name in kernels}
        best = {name: float("inf") for name in kernels}
        constants = {name: ints for name in kernels}
        if args.nearest:
            constants["nearest"] = np.concatenate([ints[:5], [0]]).astype(ints.dtype)
        for _ in range(args.repeat):
            for name, round_at in kernels.items():
                start = time.perf_counter()
                round_at(values.data_ptr(), outs[name].data_ptr(), n, nests, floats, constants[name])
                best[name] = min(best[name], time.perf_counter() - start)
        if not torch.equal(outs["before"].view(torch.int32), outs["today"].view(torch.int32)) or (
                int(ints[0]) == fused.SCALED and fused.kernel()(values.data_ptr(), outs["today"].data_ptr(), n, nests, floats, ints)
                != largest_bits_at(values.data_ptr(), n)):
            raise SystemExit(f"bench_step_kernel: the kernels round an operand of {n} values differently "
                             "(or today's gives back another largest magnitude)")
        for name in kernels:
            total[name] += best[name]
    values = sum(c[1] for c in calls)
    print(f"{fmt.name}, {'channels-last' if args.channels_last else 'NCHW'}: {len(calls)} kernel calls, {values} values "
          f"a step, the same bits on every one; kernel only, best of {args.repeat}: {args.before} "
          f"{1e3 * total['before']:.2f} ms ({1e9 * total['before'] / values:.3f} ns a value), today "
          f"({git_commit()[:12]}) {1e3 * total['today']:.2f} ms ({1e9 * total['today'] / values:.3f} ns a value); "
          f"the largest-magnitude pass alone {1e3 * total['amax pass']:.2f} ms")
    if args.nearest:
        print(f"today's kernel rounding to nearest {1e3 * total['nearest']:.2f} ms: stochastic rounding's own "
              f"{1e3 * (total['today'] - total['nearest']):.2f} ms a step today, "
              f"{1e3 * (total['before'] - total['nearest']):.2f} ms with {args.before}'s kernel")
    print(f"load average (1 min) before, after: {load_before:.2f}, {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

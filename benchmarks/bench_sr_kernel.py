"""Benchmark: stochastic rounding's cost in the fused kernel alone (``workloads.numerics._fused_kernel``),
today's kernel against another commit's on the same operands (issue 55: SplitMix64's draws against
Philox2x32-10's at 176f654, the commit before the change).

Each operand (a MobileNetV2 step's kinds of layout at batch 32: activations NCHW and channels-last,
grouped along channels and along batch and pixels, and a linear layer's input) is rounded once
through ``quantize.round_to_format`` to record the kernel's arguments (its loop nests and
constants), then the kernel call alone is timed: the other commit's kernel stochastically, today's
stochastically and to nearest, interleaved, the best of ``--repeat`` each (robust to a loaded
machine: the best run is the one least disturbed). Prints ns a value per operand and the draws' share
(stochastic less today's nearest: the two commits' kernels differ only in their draws), with the
1-minute load average before and after; the nearest outputs of the two kernels are checked equal
(the same nests and constants reach both).

    PYTHONPATH=. python benchmarks/bench_sr_kernel.py [--before 176f654] [--format bfp_m4_g16_sr] [--repeat 25]
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from accel_sim.formats import NumberFormat, NumberFormatError
from iokit.provenance import git_commit
from workloads.numerics import fused
from workloads.numerics.quantize import round_to_format

OPERANDS = [((32, 96, 16, 16), False, 1), ((32, 96, 16, 16), False, (0, 2, 3)),
            ((32, 96, 16, 16), True, 1), ((32, 96, 16, 16), True, (0, 2, 3)), ((32, 1280), False, -1)]
"""``(shape, channels_last, dim)``: the operand and the dims its groups run along."""


def kernel_at(commit: str):
    """The fused kernel's module as of ``commit`` (``git show``), imported from a temporary file."""
    source = subprocess.run(["git", "show", f"{commit}:workloads/numerics/_fused_kernel.py"],
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "_fused_kernel_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("_fused_kernel_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_arguments(x: torch.Tensor, fmt: NumberFormat, dim) -> tuple:
    """The ``(n, nests, floats, ints)`` today's ``round_to_format`` hands the kernel for ``x``."""
    calls = []
    real = fused.kernel()

    def record(x_address, out_address, n, nests, floats, ints):
        calls.append((n, nests, floats, ints))
        return real(x_address, out_address, n, nests, floats, ints)

    fused._kernel = record
    try:
        round_to_format(x, fmt, dim=dim, generator=torch.Generator().manual_seed(0))
    finally:
        fused._kernel = real
    if len(calls) != 1:
        raise SystemExit(f"bench_sr_kernel: {tuple(x.shape)} along {dim} made {len(calls)} kernel calls, not one")
    return calls[0]


def best_times_s(x: torch.Tensor, arguments: tuple, kernels: dict, repeat: int) -> dict:
    """The best of ``repeat`` interleaved calls of each ``kernels`` entry (name -> ``(round_at,
    ints)``) on ``x``'s values, in seconds."""
    n, nests, floats, _ = arguments
    out = torch.empty_like(x)
    best = {name: float("inf") for name in kernels}
    for _ in range(repeat):
        for name, (round_at, ints) in kernels.items():
            start = time.perf_counter()
            round_at(x.data_ptr(), out.data_ptr(), n, nests, floats, ints)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def nearest_outputs_agree(x: torch.Tensor, arguments: tuple, before, ints: np.ndarray) -> bool:
    """Whether the two kernels round ``x`` to nearest to the same bits (the same nests reach both)."""
    n, nests, floats, _ = arguments
    a, b = torch.empty_like(x), torch.empty_like(x)
    before.round_at(x.data_ptr(), a.data_ptr(), n, nests, floats, ints)
    fused.kernel()(x.data_ptr(), b.data_ptr(), n, nests, floats, ints)
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def kernel_format(prog: str, name: str, timed: Callable[[NumberFormat], bool], wanted: str) -> NumberFormat:
    """``--format name`` parsed, one the benchmark ``prog`` times (``timed``), with the fused kernel
    available; else one line saying why (``wanted``: what ``--format`` must name) and exit 2."""
    try:
        fmt = NumberFormat.parse(name)
    except NumberFormatError as e:
        sys.exit(print(f"{prog}: --format {e}", file=sys.stderr) or 2)
    if not timed(fmt):
        sys.exit(print(f"{prog}: --format {name} is not {wanted}", file=sys.stderr) or 2)
    if fused.kernel() is None:
        sys.exit(print(f"{prog}: the fused kernel is not available ({fused.fallback_reason})", file=sys.stderr) or 2)
    return fmt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="176f654", help="the commit whose kernel to compare with (default 176f654)")
    p.add_argument("--format", default="bfp_m4_g16_sr", help="a stochastic BFP or MX format (default bfp_m4_g16_sr)")
    p.add_argument("--repeat", type=int, default=25)
    args = p.parse_args()
    fmt = kernel_format("bench_sr_kernel", args.format, lambda f: f.rounding == "stochastic" and f.kind in ("bfp", "mx"),
                        "a stochastic BFP or MX format (e.g. bfp_m4_g16_sr, mxfp8_e4m3_sr)")
    torch.set_num_threads(1)
    before = kernel_at(args.before)
    load_before = os.getloadavg()[0]
    print(f"{args.format}, kernel only, best of {args.repeat}, ns a value: {args.before} (before) against "
          f"{git_commit()[:12]} (today)")
    print(f"{'operand':<48}{'before SR':>10}{'today SR':>10}{'nearest':>9}{'draws before':>14}{'draws today':>13}")
    for shape, channels_last, dim in OPERANDS:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 3
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        arguments = kernel_arguments(x, fmt, dim)
        ints = arguments[3]
        nearest = ints.copy()
        nearest[5] = 0  # no uniform bits: round to nearest
        if not nearest_outputs_agree(x, arguments, before, nearest):
            raise SystemExit(f"bench_sr_kernel: the kernels round {shape} to nearest differently")
        best = best_times_s(x, arguments, {"before": (before.round_at, ints), "today": (fused.kernel(), ints),
                                           "nearest": (fused.kernel(), nearest)}, args.repeat)
        ns = {k: v / x.numel() * 1e9 for k, v in best.items()}
        name = f"{tuple(shape)} {'channels-last' if channels_last else 'NCHW' if len(shape) == 4 else 'matrix'} along {dim}"
        print(f"{name:<48}{ns['before']:>10.3f}{ns['today']:>10.3f}{ns['nearest']:>9.3f}"
              f"{ns['before'] - ns['nearest']:>14.3f}{ns['today'] - ns['nearest']:>13.3f}")
    print(f"load average (1 min) before, after: {load_before:.2f}, {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

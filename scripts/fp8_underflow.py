"""Why SphereFed collapses in E4M3 and FedAvg less (docs/numerics.md), measured: the share of the
gradients a training step multiplies (the output gradients dy of every backward GEMM, the operand
autograd hands to the array) that a number format flushes to zero, per method, on the first local
step (the model as the loop builds it, the first 32 training digits at 16 x 16).

SphereFed's MSE against a frozen orthonormal head on normalized features sends 30-50x smaller
gradients into the body than FedAvg's cross-entropy (docs/fl.md, "SphereFed's slow start"); E4M3's
smallest subnormal is 2^-9 and its smallest normal 2^-6 (no scaling factor is applied here), so a
format with E4M3's range loses more of SphereFed's gradients. E5M2 reaches 2^-16.

    python scripts/fp8_underflow.py [--model convnet] [--formats e4m3 e5m2 bf16 bfp_m4_g16]
"""

from __future__ import annotations

import argparse

import torch

from workloads.fl.data import load_dataset
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.methods import parse_method
from workloads.models import build_model
from workloads.numerics.emulate import Arithmetic
from workloads.numerics.quantize import round_to_format


class Counting(Arithmetic):
    """Arithmetic that also counts the non-zero values of each convolution's output gradient dy that
    the format rounds to zero (dy grouped as the dX GEMM groups it: along its channels)."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt, generator=torch.Generator().manual_seed(0))
        self.nonzero = 0
        self.flushed = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func.overloadpacket) == "aten.convolution_backward":
            dy = args[0]
            live = dy != 0
            rounded = round_to_format(dy, self.fmt, dim=1, generator=torch.Generator().manual_seed(1))
            self.nonzero += int(live.sum())
            self.flushed += int((live & (rounded == 0)).sum())
        return super().__torch_dispatch__(func, types, args, kwargs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="convnet")
    p.add_argument("--formats", nargs="+", default=["e4m3", "e5m2", "bf16", "bfp_m4_g16", "bfp_m2_g16"])
    args = p.parse_args()
    torch.set_num_threads(1)
    train, _ = load_dataset("digits", image_size=16)
    x, y = train.x[:32], train.y[:32]
    print(f"{args.model}, digits 16x16, one step at batch 32: share of the non-zero values of the convolutions' "
          "output gradients dy rounded to zero")
    print(f"{'method':<12}" + "".join(f"{f:>14}" for f in args.formats))
    for name in ("fedavg", "spherefed"):
        method = parse_method(name)
        cells = []
        for fmt in args.formats:
            torch.manual_seed(0)
            model = prepare_model(build_model(args.model, num_classes=10, image_size=16, head=method.head),
                                  method, seed=0)
            counting = Counting(fmt)
            client_trainer(model, model.state_dict(), Hparams(lr=0.05), method, arithmetic=counting).step(x, y)
            cells.append(f"{100 * counting.flushed / max(counting.nonzero, 1):13.1f}%")
        print(f"{name:<12}" + "".join(cells))


if __name__ == "__main__":
    main()

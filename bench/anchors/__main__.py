"""``python -m bench.anchors``: modeled vs measured GFLOPS of two published FPGA accelerators,
Zhang et al. (FPGA 2015, AlexNet's convolutions) and EF-Train (Tang et al., TODAES 2022, VGG16
training); ``bench.lib.anchors``, docs/accel_sim.md "Held against measured FPGAs"."""

from __future__ import annotations

import sys

from accel_sim.hardware import load_hardware_config
from bench.lib.anchors import (EFTRAIN_BATCHES, EFTRAIN_HW, ZHANG_HW, eftrain_variants, format_anchor, format_variant,
                               price_eftrain, price_zhang, zhang_variants)
from iokit import cli

BATCH_MAX = 256  # VGG16 at 224 x 224: batch 256 still prices in seconds


@cli.command()
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m bench.anchors", description=__doc__.splitlines()[0].split(": ", 1)[-1])
    parser.add_argument("--zhang-hw", default=str(ZHANG_HW), help="hardware TOML for Zhang et al.'s accelerator "
                        "(default configs/hw/zhang2015_vc707.toml)")
    parser.add_argument("--eftrain-hw", default=str(EFTRAIN_HW), help="hardware TOML for EF-Train's accelerator "
                        "(default configs/hw/eftrain_zcu102.toml)")
    parser.add_argument("--eftrain-batch", type=cli.int_in(1, BATCH_MAX), nargs="+", default=list(EFTRAIN_BATCHES),
                        help=f"EF-Train training batch sizes (default {' '.join(map(str, EFTRAIN_BATCHES))}: the two its "
                             "released code names; the paper's is not pinned)")
    parser.add_argument("--variants", action="store_true", help="also price each hardware file with one assumption "
                        "changed at a time (buffer split, DRAM bandwidth, partial sums on chip)")
    args = parser.parse_args(argv)
    with cli.bad_input():
        batches = cli.distinct(args.eftrain_batch, "--eftrain-batch")
        zhang_hw = load_hardware_config(args.zhang_hw)
        eftrain_hw = load_hardware_config(args.eftrain_hw)
    with cli.run_failure():
        print(format_anchor(price_zhang(zhang_hw)))
        if args.variants:
            for name, hw in zhang_variants(zhang_hw).items():
                print(format_variant(name, price_zhang(hw)))
        for batch in batches:
            print()
            print(format_anchor(price_eftrain(batch, eftrain_hw)))
            if args.variants:
                for name, hw in eftrain_variants(eftrain_hw).items():
                    print(format_variant(name, price_eftrain(batch, hw)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

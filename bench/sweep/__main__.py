"""``python -m bench.sweep``: the sensitivity of SphereFed's savings to the accelerator parameters the
paper does not publish (``bench.sweep``'s doc lists them); writes ``sweep.csv``, ``sweep.json`` and
``sweep.png`` into ``--out``."""

from __future__ import annotations

import shlex
import sys
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from bench.lib import spec
from bench.lib.plots import save
from bench.lib.plots.sweep import plot_sweep
from accel_sim.hardware import HardwareConfig, load_hardware_config
from bench.lib.results import FORMAT_VERSION, write_json
from bench.sweep import BATCH_SIZES, SWEEP_CSV, sweep
from iokit import checks, cli, outputs
from iokit.provenance import git_commit
from workloads import model_spec

COMMAND = "bench.sweep"

def parser() -> cli.Parser:
    p = cli.Parser(prog="python -m bench.sweep", description=__doc__.splitlines()[0])
    spec.add_flags(p, COMMAND, ["models", "hw_path"], several_models=True)  # default: mobilenetv2
    batch = cli.int_in(1, checks.BATCH_SIZE_MAX)
    p.add_argument("--batch-size", type=batch, default=64,
                   help=f"batch of the hardware sweeps (default 64, at most {checks.BATCH_SIZE_MAX:,})")
    p.add_argument("--batch-sizes", type=batch, nargs="+", default=list(BATCH_SIZES), metavar="B",
                   help=f"batch sizes of the batch sweep (default {' '.join(map(str, BATCH_SIZES))})")
    p.add_argument("--out", help="output folder (default results/sweep)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing results folder of this suite")
    return p


@cli.command("interrupted; nothing written (--out appears only when complete)")
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    with cli.bad_input():
        models = cli.distinct(list(spec.models_of(args) or ("mobilenetv2",)), "--models")
        batch_sizes = cli.distinct(args.batch_sizes, "--batch-sizes")
        for model in models:  # a paper model or package.module:factory (docs/byom.md), checked before work
            model_spec.build(model_spec.ModelSpec(model), num_classes=100)
        hw = spec.one_hw(args.hw_path, COMMAND)
        base = load_hardware_config(hw) if hw is not None else HardwareConfig()
        config = {"models": models, "batch_size": args.batch_size, "batch_sizes": batch_sizes,
                  "hardware": asdict(base)}
        out = outputs.out_folder(args.out, "results/sweep")
        outputs.check_out(out, command=COMMAND, overwrite=args.overwrite)
    with outputs.claim(out):
        frame = sweep(models, base, batch_size=args.batch_size, batch_sizes=tuple(batch_sizes),
                      progress=lambda msg: print(msg, file=sys.stderr))

        def build(tmp: Path) -> None:
            frame.to_csv(tmp / SWEEP_CSV, index=False)
            write_json(tmp / "sweep.json", {"version": FORMAT_VERSION, "command": shlex.join(["python", "-m", "bench.sweep",
                                                                                             *argv]),
                                           "git_commit": git_commit(), **config})
            save(plot_sweep(frame), tmp / "sweep.png")

        with cli.run_failure():
            outputs.write_results_dir(out, build, command=COMMAND, config_sha256=outputs.config_hash(config),
                                      version=FORMAT_VERSION, replace=args.overwrite)
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(frame[["model", "parameter", "value", "latency_saving_pct", "memory_saving_pct", "energy_saving_pct"]]
              .to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

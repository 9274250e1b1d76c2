"""``python -m bench.capture``: one FL method's steady-state local training step as a trace file
(JSON Lines, ``accel_sim.trace_schema``), to price with ``python -m accel_sim simulate``.

    python -m bench.capture --model mobilenetv2 --method spherefed --batch-size 64 --classes 100 \\
        --out trace.jsonl [--lr 0.1 --momentum 0.9 --weight-decay 1e-5] [--overwrite]

The step is the federated loop's own (``workloads.cost.step.local_step_trace``: the method's model
preparation, loss, penalty and SGD with these optimizer settings; default the paper's Tab. 16),
captured by the one steady-state capture path (``workloads.capture.capture_step``). Every input is
checked before the capture; ``--out`` is a file path, replaced only with ``--overwrite`` and only if it
is a trace file of this suite; the trace
is written to a temporary file renamed at the end.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from accel_sim.trace_schema import FORMAT_NAME
from accel_sim.trace_io import dump_trace
from iokit import checks, cli, outputs
from iokit.files import atomic_write
from workloads.capture import summary
from workloads.cost.step import method_step_trace
from workloads.fl.hparams import Hparams
from workloads.fl.local import prepare_model
from workloads.fl.methods import parse_method
from workloads.model_spec import ModelSpec, build, parse_input_shape
from workloads.models import MODELS


def parser() -> cli.Parser:
    defaults = Hparams()
    p = cli.Parser(prog="python -m bench.capture",
                   description="Capture one FL method's steady-state local training step as a trace file (JSON Lines).")
    p.add_argument("--model", required=True,
                   help=f"{', '.join(sorted(MODELS))}, package.module:factory, torchvision:NAME or timm:NAME")
    p.add_argument("--method", required=True, help="a training method: fedavg, spherefed, fedprox, fedcos, ...")
    p.add_argument("--batch-size", type=cli.int_in(1, checks.BATCH_SIZE_MAX), default=64,
                   help=f"default 64, at most {checks.BATCH_SIZE_MAX:,}")
    p.add_argument("--classes", type=cli.int_in(1, checks.CLASSES_MAX), default=100,
                   help=f"default 100, at most {checks.CLASSES_MAX:,}")
    p.add_argument("--image-size", type=int, choices=(16, 32, 64),
                   help="input side of the paper models (default 32; or give --input-shape)")
    p.add_argument("--input-shape", metavar="C,H,W", help="one sample's input shape (default 3,S,S with S = --image-size)")
    p.add_argument("--classifier", metavar="DOTTED.NAME",
                   help="the nn.Linear of a user model the FL methods act on (default: its last nn.Linear)")
    p.add_argument("--norm", default="bn", choices=("bn", "gn"))
    p.add_argument("--lr", type=cli.finite_float(positive=True), default=defaults.lr,
                   help=f"SGD learning rate (default {defaults.lr:g}, Tab. 16)")
    p.add_argument("--momentum", type=cli.finite_float(low=0.0, high=0.999), default=defaults.momentum,
                   help=f"SGD momentum (default {defaults.momentum:g}, Tab. 16)")
    p.add_argument("--weight-decay", type=cli.finite_float(low=0.0), default=defaults.weight_decay,
                   help=f"SGD weight decay (default {defaults.weight_decay:g}, Tab. 16)")
    p.add_argument("--out", required=True, help="the trace file to write (.jsonl)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out trace file")
    return p


def is_trace_file(path: Path) -> bool:
    """Whether ``path`` starts with a trace header of ours (``accel_sim.trace_schema``): the only
    kind of file ``--overwrite`` may replace."""
    try:
        with path.open("rb") as f:
            head = json.loads(f.readline(1 << 24))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(head, dict) and head.get("format") == FORMAT_NAME


@cli.command("interrupted; nothing written")
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli.bad_input():
        out = Path(args.out)
        if not args.out.strip():
            raise ValueError("--out is empty; give a trace file path, e.g. trace.jsonl")
        if out.exists() and not out.is_dir() and not args.overwrite:
            raise ValueError(f"{out} already exists; choose another --out or pass --overwrite to replace it")
        if out.exists() and not out.is_dir() and not is_trace_file(out):
            raise ValueError(f"--out {out}: --overwrite replaces only a trace file of this suite, and {out} is not "
                             "one; choose another --out")
        outputs.check_writable(out, "--out", folder=False)
        if args.image_size is not None and args.input_shape:
            raise ValueError(f"give either --image-size {args.image_size} or --input-shape {args.input_shape}, "
                             "not both (the shape sets the size)")
        if args.classifier is not None and args.model in MODELS:
            raise ValueError(f"--classifier {args.classifier}: the paper model {args.model!r} has its classifier "
                             "built in; --classifier picks the nn.Linear of a user model (docs/byom.md)")
        method = parse_method(args.method)
        if method.calibration:
            raise ValueError(f"--method {args.method}: a calibration has no training step; give its base method "
                             "(fedavg for ccvr, spherefed for ffc)")
        side = args.image_size or 32
        shape = parse_input_shape(args.input_shape) if args.input_shape else (3, side, side)
        spec = ModelSpec(args.model, shape, args.classifier)
        prepare_model(build(spec, num_classes=args.classes, norm=args.norm, head=method.head), method, seed=0)
        hp = Hparams(declared=method.knobs, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    trace = method_step_trace(spec, args.method, hp=hp, batch_size=args.batch_size, num_classes=args.classes,
                              norm=args.norm)
    atomic_write(out, lambda tmp: dump_trace(trace, tmp))
    print(summary(trace))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m workloads.fl.capture``: one FL method's steady-state local training step as a trace
file (JSON Lines, ``accel_sim.trace_schema``), and ``method_setup``, the model and loss of that
method as the accuracy runs build them.

    python -m workloads.fl.capture --model mobilenetv2 --method spherefed --batch-size 64 \\
        --classes 100 --out trace.jsonl

This lives in ``workloads.fl`` because it needs the FL methods; the capture engine
(``workloads.trace``) knows nothing of them (docs/architecture.md). Every input is checked before
the capture (``workloads.cli``): numbers within their bounds, ``--out`` a writable file path (not a
folder); the trace is written to a temporary file renamed at the end.
"""

from __future__ import annotations

import sys
from typing import Sequence

import torch

from accel_sim.trace_schema import dump_trace
from workloads import cli
from workloads.atomic import atomic_write
from workloads.fl.local import loss_function, prepare_model
from workloads.fl.methods import parse_method
from workloads.model_spec import DEFAULT_INPUT_SHAPE, ModelSpec, as_spec, build, parse_input_shape
from workloads.models import MODELS
from workloads.trace import capture_training_step, summary

METHODS = ("fedavg", "spherefed")  # methods whose local step is a plain forward + loss + SGD step


def method_setup(method: str, model_name: str | ModelSpec, *, num_classes: int, image_size: int, norm: str):
    """(model, loss_fn) of one FL method's local training, built by the FL code itself:
    ``workloads.fl.methods.parse_method``, ``workloads.fl.local.prepare_model`` (seed 0) and
    ``workloads.fl.local.loss_function``, exactly as the accuracy runs build them (docs/fl.md).

    fedavg: trainable classifier, cross-entropy. spherefed: FeatureNorm before a frozen
    orthonormal QR classifier, MSE against one-hot targets (built by ``scatter``, so meta and CPU
    run the same ops). Methods with a penalty or a second head (FedProx, FedCos, double head) are
    not a plain ``training_step``: capture ``workloads.fl.local.client_trainer(...).step`` instead
    (``bench/traces.py`` does).

    ``model_name`` is a name (paper model or ``module:factory``, 3 x image_size x image_size
    inputs) or a :class:`workloads.model_spec.ModelSpec` (its own input shape and classifier)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    cfg = parse_method(method)
    model = build(as_spec(model_name, image_size), num_classes=num_classes, norm=norm, spherefed=cfg.spherefed)
    return prepare_model(model, cfg, seed=0), loss_function(cfg)


def _parser() -> cli.Parser:
    p = cli.Parser(
        prog="python -m workloads.fl.capture",
        description="Capture one steady-state local training step as a trace file (JSON Lines).",
    )
    p.add_argument("--model", required=True,
                   help=f"{', '.join(sorted(MODELS))}, package.module:factory, torchvision:NAME or timm:NAME")
    p.add_argument("--method", required=True, choices=METHODS)
    p.add_argument("--batch-size", type=cli.int_in(1, cli.BATCH_SIZE_MAX), default=64,
                   help=f"default 64, at most {cli.BATCH_SIZE_MAX:,}")
    p.add_argument("--classes", type=cli.int_in(1, cli.CLASSES_MAX), default=100,
                   help=f"default 100, at most {cli.CLASSES_MAX:,}")
    p.add_argument("--image-size", type=int, default=32, choices=(16, 32, 64),
                   help="input side of the paper models (default 32)")
    p.add_argument("--input-shape", metavar="C,H,W",
                   help=f"one sample's input shape (default 3,S,S with S = --image-size: "
                        f"{','.join(map(str, DEFAULT_INPUT_SHAPE))})")
    p.add_argument("--classifier", metavar="DOTTED.NAME",
                   help="the nn.Linear the FL methods act on (default: the model's last nn.Linear)")
    p.add_argument("--norm", default="bn", choices=("bn", "gn"))
    p.add_argument("--device", default="meta", choices=("meta", "cpu"))
    p.add_argument("--lr", type=cli.finite_float(positive=True), default=0.1, help="SGD learning rate (default 0.1)")
    p.add_argument("--out", required=True, help="the trace file to write (.jsonl)")
    return p


@cli.command("interrupted; nothing written")
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cli.check_writable(args.out, "--out", folder=False)
        shape = parse_input_shape(args.input_shape) if args.input_shape else (3, args.image_size, args.image_size)
        spec = ModelSpec(args.model, shape, args.classifier)
        model, loss_fn = method_setup(
            args.method, spec, num_classes=args.classes, image_size=args.image_size, norm=args.norm
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-5, foreach=False)
    inputs = torch.zeros(args.batch_size, *spec.input_shape, device=args.device)  # on meta: no memory
    targets = torch.arange(args.batch_size, device=args.device) % args.classes
    meta = {"classes": args.classes, "image_size": spec.input_shape[-1], "input_shape": list(spec.input_shape),
            "norm": args.norm, "lr": args.lr}
    trace = capture_training_step(
        model, inputs, targets, loss_fn=loss_fn, optimizer=optimizer, device=args.device,
        model_name=args.model, method=args.method, meta=meta,
    )
    atomic_write(args.out, lambda tmp: dump_trace(trace, tmp))  # the folder is made only now
    print(summary(trace))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.formulas table1``: SphereFed's Table 1 recomputed from its closed forms
(classifier communication and FLOPs per method; ``bench.formulas``, docs/formulas.md)."""

from __future__ import annotations

import sys
from dataclasses import fields

from bench.lib.formulas import Table1Setup, format_table1
from iokit import cli

COUNT_MAX = 10**12  # any Table 1 setting by orders of magnitude (CIFAR-100: 50,000 samples)


@cli.command()
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m bench.formulas", description=__doc__.splitlines()[0].split(": ", 1)[-1])
    sub = parser.add_subparsers(dest="command", required=True)
    t1 = sub.add_parser("table1", help="print SphereFed Table 1 recomputed (classifier communication, FLOPs)")
    d = Table1Setup()
    for flag, field_name, what in (
        ("--l", "feature_dim", "feature size l"),
        ("--classes", "num_classes", "classes C"),
        ("--clients", "num_clients", "clients K"),
        ("--rounds", "rounds", "rounds R"),
        ("--samples", "train_samples", "training samples |D| of all clients"),
        ("--epochs", "local_epochs", "local epochs E"),
        ("--batch-size", "batch_size", "local batch size B"),
        ("--word-bytes", "word_bytes", "bytes per communicated word"),
        ("--virtual-per-class", "virtual_per_class", "CCVR virtual features per class M_c"),
        ("--finetune-epochs", "finetune_epochs", "CCVR fine-tuning epochs (unpublished)"),
    ):
        t1.add_argument(flag, dest=field_name, type=cli.int_in(1, COUNT_MAX), default=getattr(d, field_name),
                        help=f"{what} (default {getattr(d, field_name)})")
    args = parser.parse_args(argv)
    with cli.bad_input():
        setup = Table1Setup(**{f.name: getattr(args, f.name) for f in fields(Table1Setup)})
    print(format_table1(setup))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.findings [--check]``: write docs/findings.md and the README's headline table
from the shipped studies' results (``bench.lib.findings``); ``--check``: write nothing, recompute
every shipped study's statistics from its runs (``bench.lib.study.recheck``) and exit 1 with one
line per value that differs, per undeclared run from uncommitted code and per generated file that
no longer matches the results. A missing or malformed results folder or summary: one line, exit 2,
nothing written."""

from __future__ import annotations

import sys

from bench.lib.findings import check, outputs, stale
from iokit import cli
from iokit.files import atomic_write_text
from iokit.outputs import CHECKOUT_ROOT


@cli.command()
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m bench.findings", description=__doc__.split("\n\n")[0].split(": ", 1)[-1])
    parser.add_argument("--check", action="store_true", help="write nothing; recompute every study's statistics "
                        "from its runs and exit 1 on any difference, or if a generated file is stale")
    args = parser.parse_args(argv)
    with cli.bad_input():
        texts = outputs(CHECKOUT_ROOT)  # every section rendered (and every verdict checked) before anything is written
        if args.check:
            problems = check(CHECKOUT_ROOT)
            problems += [f"{path.relative_to(CHECKOUT_ROOT)} does not match the results: run python -m bench.findings"
                         for path in stale(texts)]
            for line in problems:
                print(line)
            return 1 if problems else 0
    for path, text in texts.items():
        atomic_write_text(path, text)
        print(f"wrote {path.relative_to(CHECKOUT_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

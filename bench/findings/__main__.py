"""``python -m bench.findings [--check]``: write docs/findings.md and the README's headline table
from the shipped studies' results (``bench.lib.findings``); ``--check``: write nothing, exit 1
naming each generated file that no longer matches the results."""

from __future__ import annotations

import sys

from bench.lib.findings import outputs, stale
from iokit import cli
from iokit.files import atomic_write_text
from iokit.outputs import CHECKOUT_ROOT


@cli.command()
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m bench.findings", description=__doc__.split("\n\n")[0].split(": ", 1)[-1])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    args = parser.parse_args(argv)
    with cli.bad_input():
        texts = outputs(CHECKOUT_ROOT)  # every section rendered (and every verdict checked) before anything is written
        if args.check:
            old = stale(texts)
            for path in old:
                print(f"{path.relative_to(CHECKOUT_ROOT)} does not match the results: run python -m bench.findings")
            return 1 if old else 0
    for path, text in texts.items():
        atomic_write_text(path, text)
        print(f"wrote {path.relative_to(CHECKOUT_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

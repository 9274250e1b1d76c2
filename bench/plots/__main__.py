"""``python -m bench.plots RUN_DIR``: rewrite the figures of a ``bench.run`` folder from its saved data:
``fig5.png`` (``bench.lib.plots.fig5``), ``breakdown_<model>.png`` (``bench.lib.plots.breakdown``) and
``tta.png`` (``bench.lib.plots.tta``). Every input is read and checked before the first figure is
written."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.lib.plots.run import run_figures
from bench.lib.plots import save
from bench.lib.plots.tta import TTA_PNG, read_rounds, tta_figure
from bench.lib.results import ResultsError, load_summary
from iokit import cli, outputs

@cli.command("interrupted; the figures written so far are complete, the others unchanged")
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m bench.plots", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a results folder written by python -m bench.run")
    args = parser.parse_args(argv)
    try:
        if not args.run_dir.is_dir():
            raise ResultsError(f"{args.run_dir} is not a folder: give a folder written by `python -m bench.run`")
        outputs.check_writable(args.run_dir, "run_dir")
        summary = load_summary(args.run_dir)
        tta = tta_figure(summary, read_rounds(args.run_dir))  # every input read and checked first
        figures = run_figures(args.run_dir)
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a key missing, a figure not a number
        what = f"key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        print(f"error: {args.run_dir}/summary.json or its CSVs cannot be drawn ({what}); rerun `python -m bench.run` "
              "to rewrite the folder", file=sys.stderr)
        return 2
    for fig, path in figures:
        print(save(fig, path))
    print(save(tta, args.run_dir / TTA_PNG, dpi=110))
    return 0


if __name__ == "__main__":
    sys.exit(main())

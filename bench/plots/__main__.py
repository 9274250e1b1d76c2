"""``python -m bench.plots RUN_DIR``: rewrite the figures of a ``bench.run`` folder from its saved data,
the same figures the run wrote (``bench.lib.plots.run.run_figures``): ``fig5.png``,
``breakdown_<model>.png``, ``tta.png``, for a run on several accelerators ``hardware_<model>.png``,
and for a run on a fleet ``fleet_<model>.png`` (also of a ``bench.fl`` folder, its only figure).
Every input is read and checked before the first figure is written."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.lib.plots import save
from bench.lib.plots.run import run_figures
from bench.lib.results import ResultsError
from iokit import cli, outputs


@cli.command("interrupted; the figures written so far are complete, the others unchanged")
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m bench.plots", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a results folder written by python -m bench.run (or bench.fl)")
    args = parser.parse_args(argv)
    try:
        if not args.run_dir.is_dir():
            raise ResultsError(f"{args.run_dir} is not a folder: give a folder written by `python -m bench.run`")
        outputs.check_writable(args.run_dir, "run_dir")
        figures = run_figures(args.run_dir)  # every input read and checked, every figure drawn, first
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a key missing, a figure not a number
        what = f"key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        print(f"error: {args.run_dir}/summary.json or its CSVs cannot be drawn ({what}); rerun `python -m bench.run` "
              "to rewrite the folder", file=sys.stderr)
        return 2
    for drawn in figures:
        print(save(drawn.figure, drawn.path, dpi=drawn.dpi))
    return 0


if __name__ == "__main__":
    sys.exit(main())

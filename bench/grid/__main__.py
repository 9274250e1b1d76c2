"""``python -m bench.grid GRID.toml``: many independent runs, locally or on Ray (``bench.lib.grid.engine``;
docs/grid.md).

    python -m bench.grid grid.toml [--out DIR] [--backend local|ray] [--workers N] [--address ADDR]
                                   [--resources-per-run cpus=1,gpus=0] [--retry-failed]
"""

from __future__ import annotations

import sys

from bench.lib import spec as run_spec
from bench.lib.grid.engine import load_grid, run_grid
from bench.lib.grid.backends import add_backend_flags, check_backend, parse_resources
from bench.lib.grid.point import GridError, PointResult
from bench.lib.results import ResultsError
from iokit import cli, outputs


@cli.command("interrupted; finished points are kept under --out: rerun the same command to resume")
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m bench.grid", description="Run a grid of independent runs, locally or on Ray.")
    parser.add_argument("grid", help="grid file (TOML), e.g. configs/grids/small.toml")
    parser.add_argument("--out", default=None, help="results folder (default: results/grid-<name>)")
    add_backend_flags(parser)
    run_spec.add_flags(parser, "bench.grid", ["workers"], workers=1)  # the local backend's
    parser.add_argument("--retry-failed", action="store_true", help="run again the points that failed before")
    args = parser.parse_args(argv)
    try:
        spec = load_grid(args.grid)
        resources = parse_resources(args.resources_per_run)
        check_backend(args.backend, address=args.address, workers=args.workers, resources=resources)
        out = outputs.out_folder(args.out, f"results/grid-{spec.name}", error=GridError)

        def show(result: PointResult, i: int, total: int) -> None:
            extra = f" ({result.elapsed_s:.1f} s)" if result.status == "done" else ""
            extra += f": {result.error}" if result.error else ""
            print(f"[{i}/{total}] {result.run_id} {result.status}{extra}", file=sys.stderr, flush=True)

        report = run_grid(spec, out, backend=args.backend, resources=resources, retry_failed=args.retry_failed,
                          address=args.address, progress=show, workers=args.workers)
    except (GridError, ResultsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    counts = {s: report.count(s) for s in ("done", "skipped", "failed", "failed-earlier", "busy")}
    print("grid %s: %s; tables in %s" % (spec.name, ", ".join(f"{v} {k}" for k, v in counts.items() if v), out))
    return 1 if counts["failed"] or counts["failed-earlier"] else 0


if __name__ == "__main__":
    sys.exit(main())


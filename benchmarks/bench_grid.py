"""Benchmark: the small grid (configs/grids/small.toml) on the local backend vs Ray with 2 workers.

    python benchmarks/bench_grid.py [--grid configs/grids/small.toml]

Both backends run every point with 1 torch thread (the grid's default --resources-per-run
cpus=1); Ray starts a local instance with one CPU per core, so on a 2-core machine it runs two
points at a time. Prints both wall times and their ratio (target: Ray <= 0.6 x local), timing the
whole command including Ray's start-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.grid import Resources, load_grid, run_grid  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default=str(ROOT / "configs" / "grids" / "small.toml"))
    args = parser.parse_args()
    spec = load_grid(args.grid)
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("local", "ray"):
            start = time.perf_counter()
            report = run_grid(spec, Path(tmp) / backend, backend=backend, resources=Resources(cpus=1))
            times[backend] = time.perf_counter() - start
            assert report.count("done") == len(spec.points()), report
    print(f"grid {spec.name}: {len(spec.points())} runs on {os.cpu_count()} cores")
    print(f"local backend          {times['local']:7.1f} s")
    print(f"ray backend, 2 workers {times['ray']:7.1f} s")
    print(f"ratio ray / local      {times['ray'] / times['local']:7.2f}  (target <= 0.60)")


if __name__ == "__main__":
    main()

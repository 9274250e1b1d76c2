"""Benchmark: the small grid (configs/grids/small.toml) on the local backend vs Ray with 2 workers.

    python benchmarks/bench_grid.py [--grid configs/grids/small.toml] [--repeats 1]

Each backend is timed as a user runs it: the whole ``python -m bench.grid GRID --backend B``
command in a fresh Python process (imports, Ray's start and shutdown, the aggregation included),
into a fresh folder, the two backends alternating. Both run every point with 1 torch thread (the
grid's default ``--resources-per-run cpus=1``); Ray starts a local instance with one CPU per core,
so on a 2-core machine it runs two points at a time. Prints the wall times (median over repeats)
and their ratio (target: Ray <= 0.6 x local).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def time_command(grid: str, backend: str, out: Path) -> float:
    cmd = [sys.executable, "-m", "bench.grid", grid, "--backend", backend, "--out", str(out)]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def run_seconds(out: Path) -> list[float]:
    return [json.loads(p.read_text())["seconds"] for p in out.glob("runs/*/point.json")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default=str(ROOT / "configs" / "grids" / "small.toml"))
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"local": [], "ray": []}
    per_run: dict[str, list[float]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for backend in ("local", "ray"):
                out = Path(tmp) / f"{backend}-{r}"
                times[backend].append(time_command(args.grid, backend, out))
                per_run[backend] += run_seconds(out)
                print(f"repeat {r}: {backend:5s} {times[backend][-1]:6.1f} s", file=sys.stderr, flush=True)
    n = len(per_run["local"]) // args.repeats
    local, ray = statistics.median(times["local"]), statistics.median(times["ray"])
    print(f"grid {Path(args.grid).name}: {n} runs on {os.cpu_count()} cores, median of {args.repeats}")
    print(f"local backend          {local:7.1f} s   (runs: mean {statistics.mean(per_run['local']):.1f} s)")
    print(f"ray backend, 2 workers {ray:7.1f} s   (runs: mean {statistics.mean(per_run['ray']):.1f} s, two at a time)")
    print(f"ratio ray / local      {ray / local:7.2f}  (target <= 0.60)")


if __name__ == "__main__":
    main()

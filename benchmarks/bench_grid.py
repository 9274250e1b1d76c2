"""Benchmark: the small grid (configs/grids/small.toml) on the local backend vs Ray with 2 workers.

    python benchmarks/bench_grid.py [--grid configs/grids/small.toml] [--repeats 2]

Each backend is timed as a user runs it: the whole ``python -m bench.lib.grid.engine GRID --backend B``
command in a fresh Python process (imports, Ray's start and shutdown, the aggregation included),
into a fresh folder. Both run every point with 1 torch thread (the grid's default
``--resources-per-run cpus=1``); Ray starts a local instance with one CPU per core, so on a 2-core
machine it runs two points at a time.

The machine's speed drifts over minutes (it is shared), so the commands run in pairs in ABBA order
(local, ray, ray, local, ...): a drift that is linear in time slows both backends alike. Printed:
each pair's wall times and ratio, the median ratio (target: Ray <= 0.6 x local), and where each
command's time goes, from the start and end times every run writes into its point.json: before
the first run began (Python, imports, Ray's start), from the first run's start to the last run's
end, after the last run (Ray's shutdown, the tables), and the sum of the runs' own times (which
grows when two runs share the two cores). The "runs only" line, the sum of the Ray runs' times over
(cores x) the local ones, is the ratio a grid tends to as it grows and the fixed costs (imports,
Ray's start and stop) amortize; the last lines compare the mean run of each model.
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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class Timing:
    """One timed grid command; every figure in seconds."""

    wall_s: float
    before_first_run_s: float
    run_span_s: float
    after_last_run_s: float
    run_sum_s: float
    runs: int
    run_mean_s_by_model: dict[str, float]


def time_command(grid: str, backend: str, out: Path) -> Timing:
    cmd = [sys.executable, "-m", "bench.lib.grid.engine", grid, "--backend", backend, "--out", str(out)]
    start_unix_s, start = time.time(), time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall_s = time.perf_counter() - start
    points = [json.loads(p.read_text()) for p in out.glob("runs/*/point.json")]
    first, last = min(p["start_unix_s"] for p in points), max(p["end_unix_s"] for p in points)
    by_model: dict[str, list[float]] = {}
    for p in points:
        by_model.setdefault(str(p["config"].get("model", "all")), []).append(p["elapsed_s"])
    return Timing(wall_s=wall_s, before_first_run_s=first - start_unix_s, run_span_s=last - first,
                  after_last_run_s=start_unix_s + wall_s - last, run_sum_s=sum(p["elapsed_s"] for p in points),
                  runs=len(points), run_mean_s_by_model={m: statistics.mean(v) for m, v in sorted(by_model.items())})


def abba_order(repeats: int) -> list[str]:
    """local, ray, ray, local, local, ray, ...: ``repeats`` pairs, alternating which comes first."""
    return [b for r in range(repeats) for b in (BACKENDS if r % 2 == 0 else BACKENDS[::-1])]


def median_of(timings: list[Timing], field: str) -> float:
    return statistics.median(getattr(t, field) for t in timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default=str(ROOT / "configs" / "grids" / "small.toml"))
    parser.add_argument("--repeats", type=int, default=2, help="pairs of commands (default 2)")
    args = parser.parse_args()
    timings: dict[str, list[Timing]] = {b: [] for b in BACKENDS}
    with tempfile.TemporaryDirectory() as tmp:
        for i, backend in enumerate(abba_order(args.repeats)):
            timing = time_command(args.grid, backend, Path(tmp) / f"{i}-{backend}")
            timings[backend].append(timing)
            print(f"pair {i // 2}: {backend:5s} {timing.wall_s:6.1f} s", file=sys.stderr, flush=True)
    local, ray = timings["local"], timings["ray"]
    ratios = [r.wall_s / l.wall_s for l, r in zip(local, ray)]
    print(f"grid {Path(args.grid).name}: {local[0].runs} runs on {os.cpu_count()} cores, "
          f"{args.repeats} pairs in ABBA order")
    print("pair   local      ray   ratio")
    for i, (l, r, q) in enumerate(zip(local, ray, ratios)):
        print(f"{i:4d} {l.wall_s:6.1f} s {r.wall_s:6.1f} s  {q:5.2f}")
    print(f"median ratio ray / local: {statistics.median(ratios):.2f}  (target <= 0.60)")
    print()
    print(f"where the time goes (medians)              {'local':>8s} {'ray':>8s}")
    rows = [("whole command", "wall_s"),
            ("before the first run (imports, Ray start)", "before_first_run_s"),
            ("first run's start to last run's end", "run_span_s"),
            ("after the last run (Ray shutdown, tables)", "after_last_run_s"),
            ("sum of the runs' own times", "run_sum_s")]
    for label, field in rows:
        print(f"{label:42s} {median_of(local, field):7.1f}s {median_of(ray, field):7.1f}s")
    workers = os.cpu_count() or 1  # the local Ray runs one point per core
    runs_only = median_of(ray, "run_sum_s") / (workers * median_of(local, "run_sum_s"))
    label = f"runs only: ray sum / ({workers} x local sum)"
    print(f"{label:42s} {runs_only:8.2f}  (the ratio as a grid's fixed costs amortize)")
    for model in local[0].run_mean_s_by_model:
        lm = statistics.median(t.run_mean_s_by_model[model] for t in local)
        rm = statistics.median(t.run_mean_s_by_model[model] for t in ray)
        print(f"{'mean run, ' + model:42s} {lm:7.2f}s {rm:7.2f}s  (ray / local {rm / lm:.2f})")


if __name__ == "__main__":
    main()

"""What pricing every round adds to a federated run: ``workloads.fl.presets --preset small``.

    PYTHONPATH=. python benchmarks/bench_round_pricing.py [--preset small] [--threads 1] [--rounds N]

Runs the FL CLI once (every method of the preset) and prints, per method, the wall time of its
federated run and of pricing its rounds (``workloads.cost.rounds.price_run``: the step captures
of each distinct batch size, the aggregation and calibration captures, the round model), both as
recorded in ``results.json`` by the CLI itself, and the share pricing adds to the whole command.
Captures are shared by the methods of a run, so the first method of each step program pays for
them. Target (issue 17): pricing adds at most 5 % to the run's wall time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.fl.__main__ import main as fl_run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, help="override the preset's rounds")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--preset", a.preset, "--threads", str(a.threads), "--out", str(Path(tmp) / "out")]
        argv += ["--rounds", str(a.rounds)] if a.rounds else []
        start = time.perf_counter()
        if fl_run(argv) != 0:
            raise SystemExit("the FL run failed")
        total = time.perf_counter() - start
        doc = json.loads((Path(tmp) / "out" / "results.json").read_text())
    print(f"{'method':<28} {'run s':>8} {'pricing s':>10}")
    for name, m in doc["methods"].items():
        print(f"{name:<28} {m['wall_s']:>8.2f} {m['pricing_wall_s']:>10.2f}")
    run_s = sum(m["wall_s"] for m in doc["methods"].values())
    pricing_s = sum(m["pricing_wall_s"] for m in doc["methods"].values())
    print(f"whole command {total:.1f} s: federated runs {run_s:.1f} s, pricing {pricing_s:.1f} s "
          f"= {100 * pricing_s / run_s:.1f} % of the runs' time (target <= 5 %)")


if __name__ == "__main__":
    main()

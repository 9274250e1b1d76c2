"""One run of every shipped study re-trained by today's code and compared with the study's runs.csv:
the same run id (a run's identity comes from its fields) and the same final accuracy (the trainer's
behaviour). Issue 52 ("behaviour unchanged"): a sample of each shipped study's runs re-trained under
the recorded kernels gives the same numbers.

    python scripts/reproduce_sample.py [STUDY ...]

Per study (results/reference/<name>/ with a runs.csv), among its FP32 rows in a plain data setting
(iid or alpha=A: the ones bench.study.reproduce re-runs), the fastest row of a method other than
FedAvg (FedAvg where it is the only one), re-trained by ``python -m bench.study.reproduce`` with the
CPU kernels capped to AVX2 as the reference studies were trained (their ``kernels``). Exit 1 when any
differs.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REFERENCE = Path("results/reference")
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
PLAIN = re.compile(r"iid|alpha=[0-9.]+")


def sample_row(runs_csv: Path) -> dict[str, str] | None:
    rows = [r for r in csv.DictReader(runs_csv.open(newline=""))
            if PLAIN.fullmatch(r["setting"]) and r["number_format"] in ("fp32", "")]
    pool = [r for r in rows if r["method"] != "fedavg"] or rows
    return min(pool, key=lambda r: float(r["run_wall_s"] or "inf"), default=None)


def main(names: list[str]) -> int:
    differing = 0
    for folder in sorted(p for p in REFERENCE.iterdir() if (p / "runs.csv").is_file() and (p / "summary.json").is_file()):
        if names and folder.name not in names:
            continue
        r = sample_row(folder / "runs.csv")
        if r is None:
            print(f"{folder.name}: no FP32 run in a plain data setting", flush=True)
            continue
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "bench.study.reproduce", str(folder), r["model"], r["setting"],
                               r["method"], r["seed"]], capture_output=True, text=True, env={**os.environ, **AVX2})
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        found = re.search(r"run (\w+): final test accuracy ([0-9.]+) %", lines[-1] if lines else "")
        same_id = bool(found) and found.group(1) == r["run_id"]
        same = bool(found) and f"{float(found.group(2)):.4f}" == f"{float(r['final_accuracy_pct']):.4f}"
        differing += not (same_id and same)
        print(f"{folder.name}: {r['model']} {r['setting']} {r['method']} seed {r['seed']}: shipped "
              f"{float(r['final_accuracy_pct']):.4f} % (run {r['run_id']}), today "
              f"{found.group(2) + ' %' if found else 'no result (exit ' + str(proc.returncode) + ')'}"
              f"{'' if not found else ' (run ' + found.group(1) + ')'}; "
              f"{'same' if same_id and same else 'DIFFERENT'} ({time.perf_counter() - started:.0f} s)", flush=True)
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The ``results/<run>/`` folder: its layout, an atomic writer and a validating reader.

Layout (docs/results.md describes every field)::

    results/<run>/
      summary.json   every figure of the run, the resolved config, hardware config, git commit, command
      ops.csv        one row per priced op:    model, method, region, idx, aten, layer, phase, work, gemm_groups,
                     macs, cycles, latency_s, compute_cycles, stall_cycles, energy_j, energy_<component>_j
      layers.csv     one row per layer/phase:  the same sums per model, method, region, layer, phase
      breakdown.csv  one row per block/kind of work: model, method, region, block, kind, cycles, energy
      fig5.png       Fig. 5 (a)-(e) style bars plus energy panels for every model of the run
      breakdown_<model>.png   latency and energy of one training step by block and kind of work
      rounds.csv     one row per model, method and round of the accuracy run, priced (workloads.cost.system)
      tta.png        accuracy against modeled wall time, energy and bytes (time-to-accuracy)

      manifest.json  what the suite wrote (iokit.outputs): the command, the config's hash, the format version

A run is written into a temporary sibling folder and renamed into place at the end, so an
interrupted run leaves no half-written ``results/<run>``; an existing folder is only replaced when
the caller asks to overwrite it and it is a results folder of this suite (``iokit.outputs``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from accel_sim.energy import COMPONENTS
from iokit.files import atomic_write_text
from workloads.cost.system import ROUNDS_COLUMNS

FORMAT_NAME = "fl-accel-bench-results"
FORMAT_VERSION = 4
"""Version of every file bench writes: a run folder's summary.json, bench.sweep's sweep.json, a grid's
point.json. 2: energy (summary, ops.csv, layers.csv), breakdown.csv, rounds.csv, time_to_accuracy.
3: one spelling per quantity (docs/results.md, "changes in version 3")."""
SUMMARY = "summary.json"
FL_RESULTS = "results.json"  # a bench.fl folder's results (bench.lib.fl.pipeline.RESULTS_FILES)
OPS_CSV = "ops.csv"
LAYERS_CSV = "layers.csv"
BREAKDOWN_CSV = "breakdown.csv"
ROUNDS_CSV = "rounds.csv"
SUMMARY_KEYS = ("command", "git_commit", "config", "hardware", "hardware_label", "models")
MODEL_SECTIONS = ("training", "calibration", "communication", "accuracy", "time_to_accuracy")
ENERGY_COLUMNS = ("energy_j", *(f"energy_{part}_j" for part in COMPONENTS))  # total, then each part
COST_COLUMNS = ("macs", "total_cycles", "latency_s", "compute_cycles", "stall_cycles", *ENERGY_COLUMNS)
OPS_COLUMNS = ("model", "method", "region", "idx", "aten", "layer", "phase", "work", "gemm_groups", *COST_COLUMNS)
LAYER_KEYS = ("model", "method", "region", "layer", "phase")  # a layers.csv row: ops.csv summed over these
BLOCK_KEYS = ("model", "method", "region", "block", "kind")  # a breakdown.csv row: ops.csv summed over these
LAYERS_COLUMNS = (*LAYER_KEYS, *COST_COLUMNS)
BREAKDOWN_COLUMNS = (*BLOCK_KEYS, *COST_COLUMNS)
ROUNDS_CSV_COLUMNS = ("model", *ROUNDS_COLUMNS)


class ResultsError(ValueError):
    """A results folder that is missing, malformed or already present. The message says what to do."""


def check_finite(obj: Any, where: str = "summary") -> None:
    """Raise ResultsError naming the first NaN or infinite number in a JSON-like object."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ResultsError(f"{where} is {obj}: every figure in a results folder must be finite")
    if isinstance(obj, dict):
        for key, value in obj.items():
            check_finite(value, f"{where}.{key}")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            check_finite(value, f"{where}[{i}]")


def write_json(path: Path, obj: Any) -> None:
    """Write JSON (finite numbers only) through a temporary file renamed into place."""
    check_finite(obj, path.name)
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def load_summary(run_dir: Path) -> dict:
    """Read and check ``summary.json`` of a results folder; one clear error if anything is off."""
    run_dir = Path(run_dir)
    path = run_dir / SUMMARY
    if not path.is_file():
        raise ResultsError(f"{path} not found: give a folder written by `python -m bench.run`")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ResultsError(f"{path} is not valid JSON ({exc}); rerun `python -m bench.run`") from None
    if not isinstance(summary, dict) or summary.get("format") != FORMAT_NAME:
        raise ResultsError(f"{path} is not a {FORMAT_NAME} summary (missing or wrong 'format')")
    if summary.get("version") != FORMAT_VERSION:
        raise ResultsError(f"{path} has version {summary.get('version')!r}; this code reads {FORMAT_VERSION}")
    absent = [k for k in SUMMARY_KEYS if k not in summary]
    if absent:
        raise ResultsError(f"{path} lacks key(s) {absent}; rerun `python -m bench.run`")
    models = summary.get("models")
    if not isinstance(models, dict) or not models:
        raise ResultsError(f"{path} has no 'models' section with at least one model")
    for name, sections in models.items():
        missing = [s for s in MODEL_SECTIONS if not isinstance(sections.get(s), dict)]
        if missing:
            raise ResultsError(f"{path}: model {name!r} lacks section(s) {missing}")
    check_finite(summary, path.name)
    return summary

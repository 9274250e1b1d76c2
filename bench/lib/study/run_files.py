"""What one run of an accuracy study leaves in its folder: ``curve.csv`` (``CURVE_COLUMNS``: one row
per method label and round) and ``run.json``, how they are written and read back, and whether they
hold the whole run (``missing_rounds``, ``out_of_range``); ``bench.lib.study.runner``'s module doc.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from iokit.files import atomic_write_text
from workloads.cost.system import CUMULATIVE_COLUMNS, DROPPED_COLUMNS
from workloads.fl.methods import MethodConfig, parse_method


CURVE_CSV = "curve.csv"


RUN_JSON = "run.json"


CURVE_COLUMNS = ("method", "round", "stage", "lr", "mean_loss", "accuracy", "val_accuracy", *CUMULATIVE_COLUMNS)
"""``curve.csv``: accuracies in [0, 1] (empty where not evaluated); ``cum_*`` the modeled cost up
to and including the round (``workloads.cost.system.ROUNDS_COLUMNS``); ``lr`` and ``mean_loss``
empty on the calibration row."""


def labels_of(method: MethodConfig) -> tuple[str, ...]:
    """The method labels a run of ``method`` gives: its training method, and itself when it calibrates."""
    training = method.training.name
    return (training, method.name) if method.calibration else (training,)


def curve_rows(method: MethodConfig, history: Sequence[Mapping], rows: Sequence[Mapping],
               val_after_calibration: float | None) -> list[dict[str, Any]]:
    """``curve.csv`` rows of one run: the loop's history (lr, loss, test and validation accuracy per
    round) joined with its priced rounds (``rounds.csv`` rows), for every label of the run."""
    by_round = {h["round"]: h for h in history}
    out = []
    for label in labels_of(method):
        for row in rows:
            if row["stage"] == "calibration" and label != method.name:
                continue  # the training method's curve ends before the calibration
            h = by_round.get(row["round"], {})
            calibration = row["stage"] == "calibration"
            out.append({"method": label, "round": row["round"], "stage": row["stage"],
                        "lr": None if calibration else h.get("lr"), "mean_loss": None if calibration else h.get("mean_loss"),
                        "accuracy": row["accuracy"],
                        "val_accuracy": val_after_calibration if calibration else h.get("val_accuracy"),
                        **{k: row[k] for k in CUMULATIVE_COLUMNS}})
    return out


def correct_by_label(method: MethodConfig, result) -> dict[str, str]:
    """Label -> the final global model's right-or-wrong per test sample (``workloads.fl.evaluation.
    correct_per_sample``'s hex) of a run's ``RunResult``: its training method's before the calibration,
    and its own; ``run.json``'s ``test_correct``, the input of the test-image bootstrap
    (``bench.lib.study.image_bootstrap``)."""
    labels = labels_of(method)
    values = (result.correct_per_sample_before_calibration, result.correct_per_sample) if method.calibration else (result.correct_per_sample,)
    return {label: value for label, value in zip(labels, values) if value is not None}


def participation(rows: Sequence[Mapping[str, Any]]) -> dict[str, list]:
    """Per training round of a run's ``rounds.csv`` rows: the clients aggregated, those sampled and
    those dropped by reason (``workloads.cost.system.DROP_REASONS``), and the collection time."""
    train = [r for r in rows if r["stage"] == "train"]
    return {"clients": [int(r["clients"]) for r in train], "sampled": [int(r["sampled"]) for r in train],
            **{column: [int(r[column]) for r in train] for column in DROPPED_COLUMNS},
            "collect_s": [float(r["collect_s"]) for r in train]}


def curve_text(curve: Sequence[Mapping[str, Any]]) -> str:
    """``curve.csv``'s text of ``curve_rows`` (None as an empty cell, numbers as Python writes them)."""
    lines = [list(CURVE_COLUMNS)] + [["" if row[c] is None else row[c] for c in CURVE_COLUMNS] for row in curve]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(lines)
    return buf.getvalue()


def run_json_text(info: Mapping[str, Any]) -> str:
    return json.dumps(dict(info), indent=1, sort_keys=True, default=str) + "\n"


def write_run(out_dir: Path, curve: Sequence[Mapping[str, Any]], info: Mapping[str, Any]) -> dict[str, float]:
    """``curve.csv`` and ``run.json`` into ``out_dir``; returns the point's metrics (the last
    evaluated test and validation accuracy of every label). Also what a test's stand-in runner calls."""
    atomic_write_text(Path(out_dir) / CURVE_CSV, curve_text(curve))
    atomic_write_text(Path(out_dir) / RUN_JSON, run_json_text(info))
    metrics: dict[str, float] = {}
    for row in curve:
        if row["accuracy"] is not None:
            metrics[f"{row['method']}.accuracy"] = float(row["accuracy"])
        if row["val_accuracy"] is not None:
            metrics[f"{row['method']}.val_accuracy"] = float(row["val_accuracy"])
    return metrics


def missing_rounds(point: Mapping[str, Any], curve: Sequence[Mapping[str, Any]]) -> str:
    """Why ``curve`` (``curve.csv``'s rows, typed or as text) is not the whole run of ``point`` ("" when
    it is): every label of its method (``labels_of``) has its training rounds 1..R of the point's
    ``fl.rounds``, each once, and a calibrated method's label its calibration round R + 1. A run
    that diverged never left a curve (it failed); a curve with fewer rounds was cut after the run
    finished (a copy or an edit that stopped early), and is not that run."""
    method = parse_method(point["method"])
    rounds = int(point["fl"]["rounds"])
    for label in labels_of(method):
        train = [int(r["round"]) for r in curve if r["method"] == label and r["stage"] == "train"]
        if train != list(range(1, rounds + 1)):
            shown = f"{train[0]}..{train[-1]}" if train and train == list(range(train[0], train[-1] + 1)) else train
            return f"curve.csv has {label}'s training rounds {shown or 'none'}, not 1..{rounds}"
        calibration = [int(r["round"]) for r in curve if r["method"] == label and r["stage"] == "calibration"]
        wanted = [rounds + 1] if label == method.name and method.calibration else []
        if calibration != wanted:
            return f"curve.csv has {label}'s calibration rounds {calibration or 'none'}, not {wanted or 'none'}"
    return ""


def read_curve(path: Path) -> tuple[dict, ...]:
    """``curve.csv`` rows with numbers as numbers and empty cells as None."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    typed = []
    for row in rows:
        typed.append({k: (v if k in ("method", "stage") else None if v == "" else
                          int(v) if k == "round" else float(v)) for k, v in row.items()})
    return tuple(typed)


def out_of_range(curve: Sequence[Mapping[str, Any]]) -> str:
    """The first accuracy of ``curve`` (``read_curve``'s rows) that no run writes ("" when none): one
    outside [0, 1] or not a number (a run writes a fraction of its samples, or nothing where it did
    not evaluate): a file edited or damaged after the run finished, read as not whole."""
    for row in curve:
        for column in ("accuracy", "val_accuracy"):
            value = row.get(column)
            if value is not None and not 0.0 <= value <= 1.0:  # NaN fails both comparisons
                return f"curve.csv has {column} = {value!r} in {row['method']}'s round {row['round']}"
    return ""

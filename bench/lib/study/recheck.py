"""A study's statistics recomputed from its runs, and compared with what its ``summary.json``
states (``python -m bench.findings --check``; docs/study.md, "Outputs").

Truth is the runs: each evaluation run's ``grid/runs/<run_id>/curve.csv`` (the accuracy of every
round, as the run wrote it) and ``run.json`` (the local test mode's accuracy, and where recorded
the right-or-wrong per test image, whose share must equal the curve's final accuracy). From them, and from
nothing else but the rules the summary records (margin, correction, power, primary test), every
cell's final-accuracy estimate and every comparison (each family's p-values adjusted together, the
verdicts) are computed again with the report's own functions (``bench.lib.study.compare``), and
each recorded value is compared with its recomputation: a changed accuracy in one run's curve, a
forged p-value, a verdict whose word was edited with its numbers, each gives one line naming the
study, the cell and the value. ``runs.csv`` is checked against the curves on the way.

What it does not catch: a comparison deleted from the summary with its whole family's adjustment
redone by hand, or runs deleted with the rows that name them (the run ids come from ``runs.csv``).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Iterator, Mapping

from bench.lib.study import compare
from bench.lib.study.stats import estimate, resolution_pts
from iokit.bits import unpacked

ESTIMATE_KEYS = ("n", "mean", "std", "ci_low", "ci_high")
RELATIVE_TOLERANCE = 1e-9


class MissingKey(ValueError):
    """A summary (or a run's record) without a key the check needs; the message names the file and key."""


def need(mapping: Any, key: str, where: str) -> Any:
    """``mapping[key]``, or MissingKey naming ``where`` and ``key`` (never a KeyError traceback)."""
    if not isinstance(mapping, Mapping) or key not in mapping:
        raise MissingKey(f"{where}: no {key!r} recorded; rebuild the report (python -m bench.study <study> --out "
                         "<its folder> --report-only)")
    return mapping[key]


def _label_final_pct(curve: Path, label: str) -> float | None:
    """The last evaluated test accuracy (percent) of ``label`` in a run's ``curve.csv``."""
    last = None
    with curve.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("method") == label and row.get("accuracy"):
                last = 100 * float(row["accuracy"])
    return last


def _local_pct(folder: Path, method: str) -> float | None:
    """The local test mode's accuracy of ``method`` in a run's ``run.json`` (percent): the run's own
    method's, or its training method's (before the calibration)."""
    info = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    point = json.loads((folder / "point.json").read_text(encoding="utf-8"))
    v = info.get("local_accuracy" if point.get("config", {}).get("method") == method
                 else "local_accuracy_before_calibration")
    return None if v is None else 100 * float(v)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-12)


def differences(recorded: Any, recomputed: Any, path: str = "") -> Iterator[str]:
    """``path: recorded X, recomputed Y`` for every value of ``recomputed`` that ``recorded`` states otherwise."""
    if isinstance(recomputed, Mapping):
        if not isinstance(recorded, Mapping):
            yield f"{path}: recorded {recorded!r}, recomputed a table"
            return
        for key, value in recomputed.items():
            where = f"{path}.{key}" if path else key
            if key not in recorded:
                yield f"{where}: not recorded (recomputed {value!r})"
            else:
                yield from differences(recorded[key], value, where)
    elif isinstance(recomputed, list):
        if not isinstance(recorded, list) or len(recorded) != len(recomputed):
            yield f"{path}: recorded {recorded!r}, recomputed {recomputed!r}"
        else:
            for i, (a, b) in enumerate(zip(recorded, recomputed)):
                yield from differences(a, b, f"{path}[{i}]")
    elif not _close(recorded, recomputed):
        yield f"{path}: recorded {recorded!r}, recomputed from the runs {recomputed!r}"


class Runs:
    """A study folder's evaluation runs as their own files give them: (model, setting, method, seed)
    -> final test accuracy (from ``curve.csv``), local accuracy (from ``run.json``), test samples."""

    def __init__(self, folder: Path, name: str):
        self.final: dict[tuple[str, str, str, int], float] = {}
        self.local: dict[tuple[str, str, str, int], float] = {}
        self.samples: dict[tuple[str, str, str], int] = {}
        self.images: dict[tuple[str, str, str], dict[int, Any]] = {}
        self.problems: list[str] = []
        path = folder / "runs.csv"
        if not path.is_file():
            raise MissingKey(f"{path}: missing; the check recomputes the statistics from the runs it lists")
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        for i, row in enumerate(rows):
            where = f"{path}, row {i + 2}"
            key = (need(row, "model", where), need(row, "setting", where), need(row, "method", where),
                   int(need(row, "seed", where)))
            run = folder / "grid" / "runs" / need(row, "run_id", where)
            if not (run / "curve.csv").is_file():
                self.problems.append(f"{name}: {' '.join(map(str, key))}: run {row['run_id']} has no curve.csv")
                continue
            final = _label_final_pct(run / "curve.csv", key[2])
            if final is None:
                self.problems.append(f"{name}: {' '.join(map(str, key))}: run {row['run_id']}'s curve.csv has no "
                                     f"accuracy of {key[2]}")
                continue
            stated = float(need(row, "final_accuracy_pct", where))
            if not _close(stated, final):
                self.problems.append(f"{name}: runs.csv {' '.join(map(str, key))}: final_accuracy_pct {stated!r}, "
                                     f"but run {row['run_id']}'s curve.csv says {final!r}")
            self.final[key] = final
            local = _local_pct(run, key[2]) if row.get("final_local_accuracy_pct") else None
            if local is not None:
                self.local[key] = local
            samples = int(float(need(row, "test_samples", where)))
            self.samples[key[:3]] = max(samples, self.samples.get(key[:3], 0))
            self._read_images(run, key, samples, final)

    def _read_images(self, run: Path, key: tuple[str, str, str, int], samples: int, final_pct: float) -> None:
        """The run's right-or-wrong per test image of ``key``'s label, where ``run.json`` records it;
        a problem when its share is not the curve's final accuracy."""
        text = json.loads((run / "run.json").read_text(encoding="utf-8")).get("test_correct", {}).get(key[2])
        if text is None:
            return
        try:
            bits = unpacked(text, samples)
        except ValueError as err:
            self.problems.append(f"run {run.name}: run.json test_correct of {key[2]}: {err}")
            return
        if not _close(100 * int(bits.sum()) / samples, final_pct):
            self.problems.append(f"run {run.name}: run.json test_correct of {key[2]} says "
                                 f"{100 * int(bits.sum()) / samples!r} %, its curve.csv {final_pct!r} %")
            return
        self.images.setdefault(key[:3], {})[key[3]] = bits

    def by_seed(self, model: str, setting: str, method: str, accuracy: str = "final") -> dict[int, float]:
        values = self.local if accuracy == "local" else self.final
        return {k[3]: v for k, v in values.items() if k[:3] == (model, setting, method)}


def rules_of(summary: Mapping[str, Any], where: str) -> compare.Rules:
    """The comparison rules the summary's study records."""
    study = need(summary, "study", where)
    v = need(study, "verdicts", f"{where}: study")
    return compare.Rules(float(need(study, "equivalence_margin_pts", f"{where}: study")),
                         need(v, "correction", f"{where}: study.verdicts"), float(need(v, "power", f"{where}: study.verdicts")),
                         need(v, "primary_test", f"{where}: study.verdicts"))


def _recompute(runs: Runs, e: Mapping[str, Any], rules: compare.Rules, where: str) -> dict[str, Any]:
    ops = need(e, "operands", where)
    model, accuracy = need(ops, "model", where), need(ops, "accuracy", where)
    a, b = need(ops, "a", where), need(ops, "b", where)
    ka = (model, need(a, "setting", where), need(a, "method", where))
    kb = (model, need(b, "setting", where), need(b, "method", where))
    floor = resolution_pts(max(runs.samples.get(ka, 1), runs.samples.get(kb, 1)))
    images = (runs.images.get(ka), runs.images.get(kb)) if accuracy == "final" else (None, None)
    return compare.comparison(runs.by_seed(*ka, accuracy), runs.by_seed(*kb, accuracy), floor, rules,
                              need(e, "family", where), ops, images if all(images) else None)


def recheck(folder: Path, name: str, summary: Mapping[str, Any]) -> list[str]:
    """Every difference between ``summary`` and its statistics recomputed from the runs in ``folder``
    (module doc), one line each: ``<study>: <cell>: <value>: recorded X, recomputed from the runs Y``.
    MissingKey naming the file and key where the summary lacks one the check needs."""
    where = f"{folder / 'summary.json'}"
    rules = rules_of(summary, where)
    runs = Runs(folder, name)
    out = list(runs.problems)
    families: dict[str, list[tuple[str, Mapping[str, Any], dict[str, Any]]]] = {}
    for c in need(summary, "cells", where):
        cell = f"{need(c, 'model', where)} {need(c, 'setting', where)} {need(c, 'method', where)}"
        if not need(c, "n", f"{where}: cell {cell}"):
            continue
        finals = runs.by_seed(c["model"], c["setting"], c["method"])
        seeds = sorted(finals)
        if seeds != need(c, "seeds", f"{where}: cell {cell}"):
            out.append(f"{name}: cell {cell}: seeds: recorded {c['seeds']}, the runs have {seeds}")
            continue
        samples = runs.samples[(c["model"], c["setting"], c["method"])]
        e = estimate([finals[s] for s in seeds], floor=resolution_pts(samples)).record()
        recorded = need(c, "final_accuracy_pct", f"{where}: cell {cell}")
        out += [f"{name}: cell {cell}: final_accuracy_pct.{line}"
                for line in differences(recorded, {k: e[k] for k in ESTIMATE_KEYS})][:1]
        for family, key in compare.CELL_FAMILIES.items():
            if key in c:
                families.setdefault(family, []).append((f"cell {cell}: {key}", c[key], {}))
    for p in summary.get("pairs", []):
        label = f"pair {need(p, 'model', where)} {need(p, 'setting', where)} {need(p, 'a', where)} - {need(p, 'b', where)}"
        families.setdefault("compare", []).append((f"{label}: difference_pct", need(p, "difference_pct", where), {}))
    for members in families.values():
        fresh = [_recompute(runs, e, rules, f"{where}: {label}") for label, e, _ in members]
        compare.adjust_family(fresh, rules)
        for (label, e, _), new in zip(members, fresh):
            out += [f"{name}: {label}.{line}" for line in differences(e, new)][:1]
    return out

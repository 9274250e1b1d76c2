"""``python -m bench.dse SPACE.toml --run DIR``: a finished bench.run run's accuracy curve re-priced on every
point of the space, without re-training (issue 24 item 3; docs/dse.md).

A run's ``rounds.csv`` (docs/rounds.md) holds, per method and round, the accuracy after the round
and the round's device time and energy summed over its clients. Both are sums of priced steps (a
calibration row: of priced client-statistics batches), so on another accelerator each round's
device time and energy scale by the ratio of one step's latency (energy) there to the run's own:

    device_s(point) = sum over the rows up to the target round of round_device_s x step_latency_s(point) / step_latency_s(run)

with the step of the method's training (a calibration's training is its base method's,
the calibration's ``trained_with``) for ``train`` rows and the calibration's batch for its
``calibration`` row; bytes do not depend on the accelerator. The round reaching the target is
``workloads.cost.system.time_to_accuracy``'s (the one definition), so the round does not move.

What the ratio leaves out (docs/dse.md): a client's last partial batch is priced at its real size
by the run, here at the full batch's ratio; client speed factors other than 1 scale static energy
differently; the wall time is not re-priced (``rounds.csv`` does not split the slowest client's
round into links and compute).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from accel_sim.batch import TraceWork, price_points
from accel_sim.hardware import HardwareConfig, HardwareConfigError, hardware_config_from_dict
from accel_sim.points import HardwarePoints
from bench.dse.spec import Dse, DseError
from iokit.consumed import finished_folder
from workloads.fl.methods import calibration_named, is_calibration
from workloads.cost.system import ROUNDS_COLUMNS, time_to_accuracy


@dataclass(frozen=True)
class Run:
    """What re-pricing needs of a finished run."""

    folder: Path
    model: str
    batch_size: int
    hw: HardwareConfig
    target_pct: float
    rounds: pd.DataFrame  # rounds.csv of this model


def stage_methods(method: str) -> dict[str, str]:
    """The dse method whose step prices each stage of ``method``'s rounds.csv rows."""
    return {"train": calibration_named(method).trained_with if is_calibration(method) else method,
            "calibration": method}


def _read_run(folder: Path, meta: Path, bad: Callable[[str], DseError]) -> tuple[dict, pd.DataFrame]:
    """The run's ``summary.json`` (an object) and ``rounds.csv``, each readable."""
    try:
        doc = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise bad(f"{meta} cannot be read ({type(err).__name__})") from None
    try:
        rounds = pd.read_csv(folder / "rounds.csv")
    except (OSError, ValueError) as err:  # pandas' parser errors are ValueErrors
        raise bad(f"{folder / 'rounds.csv'} cannot be read ({type(err).__name__}: {str(err)[:80]})") from None
    if not isinstance(doc, dict):
        raise bad(f"{meta} holds a JSON {type(doc).__name__}, not a summary")
    return doc, rounds


def _check_rounds(folder: Path, rounds: pd.DataFrame, bad: Callable[[str], DseError]) -> None:
    """``rounds.csv`` has every column of ``ROUNDS_COLUMNS``, numbers where numbers belong."""
    missing = sorted(set(ROUNDS_COLUMNS) - set(rounds.columns))
    if missing:
        raise DseError(f"--run {folder}: rounds.csv lacks {', '.join(missing)}; give a folder a run wrote")
    for column in (c for c in ROUNDS_COLUMNS if c not in ("method", "stage")):
        if not pd.api.types.is_numeric_dtype(rounds[column]):
            raise bad(f"{folder / 'rounds.csv'} column {column} holds a value that is not a number")


def _batch_and_image(folder: Path, meta: Path, setting: Any, bad: Callable[[str], DseError]) -> tuple[int, int]:
    """The run's batch size and image size, from its summary's ``accuracy_setting``, both integers."""
    hparams, fl = (setting.get(k) if isinstance(setting, dict) else None for k in ("hparams", "fl"))
    if not isinstance(hparams, dict) or not isinstance(fl, dict):
        raise bad(f"{meta}: accuracy_setting lacks its hparams or fl table")
    batch, image = hparams.get("batch_size"), fl.get("image_size")
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise bad(f"{meta}: accuracy_setting.hparams.batch_size = {batch!r} is not an integer")
    if image is None:
        raise DseError(f"--run {folder}: the run kept its dataset's own image size (its preset sets no image_size), "
                       "which the run does not record; re-price a run whose preset sets image_size")
    if isinstance(image, bool) or not isinstance(image, int):
        raise bad(f"{meta}: accuracy_setting.fl.image_size = {image!r} is not an integer")
    return batch, image


def _run_target(folder: Path, doc: Mapping[str, Any], model: str, target_pct: float | None) -> float:
    """``--target``, else the run's own time-to-accuracy target, in (0, 100]."""
    if target_pct is None:
        figures = doc.get("models")
        figures = figures.get(model) if isinstance(figures, dict) else None
        tta = figures.get("time_to_accuracy") if isinstance(figures, dict) else None
        target_pct = tta.get("target_accuracy_pct") if isinstance(tta, dict) else None
    if target_pct is None or isinstance(target_pct, bool) or not isinstance(target_pct, (int, float)) \
            or not 0 < target_pct <= 100:
        raise DseError(f"--run {folder}: no target accuracy in the run (models.{model}.time_to_accuracy."
                       f"target_accuracy_pct = {target_pct!r}); give --target PCT (in (0, 100])")
    return target_pct


def load_run(folder: str | Path, dse: Dse, target_pct: float | None) -> Run:
    """The run in ``folder``, checked against the space file before any capture: every value read
    from its ``summary.json`` and ``rounds.csv`` is checked for its type, one line naming the file
    and the key otherwise."""
    folder = Path(folder)
    meta = folder / "summary.json"
    if not (folder / "rounds.csv").is_file() or not meta.is_file():
        raise DseError(f"--run {folder}: not a finished bench.run results folder (needs rounds.csv and summary.json); "
                       f"give a folder python -m bench.run wrote")

    finished_folder(folder, command="bench.run", flag="--run", error=DseError)  # finished, nothing missing

    def bad(what: str) -> DseError:
        return DseError(f"--run {folder}: {what}; give a folder python -m bench.run wrote")

    doc, rounds = _read_run(folder, meta, bad)
    try:
        hw = hardware_config_from_dict(doc.get("hardware"), f"{meta}: hardware")
    except (HardwareConfigError, TypeError, ValueError) as err:
        raise bad(str(err)) from None
    _check_rounds(folder, rounds, bad)
    setting = doc.get("accuracy_setting") or {}
    if "model" not in rounds or not setting:
        raise DseError(f"--run {folder}: not a bench.run results folder (bench.fl's method labels are not re-priced "
                       f"yet); give a folder python -m bench.run wrote")
    batch, image = _batch_and_image(folder, meta, setting, bad)
    models = sorted(set(map(str, rounds["model"])))
    model = next((m for m in models if m in dse.models), None)
    if model is None:
        raise DseError(f"--run {folder}: the run's model(s) {', '.join(models)} not in the space's "
                       f"[dse] models; add it there")
    rounds = rounds[rounds["model"] == model]
    if batch != dse.batch_size or image != dse.image_size:
        raise DseError(f"--run {folder}: the run trained at batch {batch}, {image}x{image} inputs; the space prices "
                       f"batch {dse.batch_size}, {dse.image_size}x{dse.image_size}: set [dse] batch_size = {batch}, "
                       f"image_size = {image}")
    for method in sorted(set(rounds["method"])):
        for stage_method in stage_methods(method).values():
            if stage_method not in dse.methods:
                raise DseError(f"--run {folder}: the run's {method} needs {stage_method} priced; add \"{stage_method}\" "
                               f"to [dse] methods")
    target_pct = _run_target(folder, doc, model, target_pct)
    return Run(folder, model, int(batch), hw, float(target_pct), rounds.reset_index(drop=True))


def run_rows(run: Run) -> list[dict]:
    """rounds.csv's rows as ``time_to_accuracy`` reads them (an empty accuracy: not evaluated)."""
    return [{**row, "accuracy": None if pd.isna(row["accuracy"]) else float(row["accuracy"])}
            for row in run.rounds.to_dict("records")]


def step_price(work: TraceWork, hw: HardwareConfig) -> tuple[float, float]:
    """(latency_s, energy_j) of one step of ``work`` on ``hw``: the denominator of ``on_points``."""
    cost = price_points([work], HardwarePoints.of([hw]))[0]
    return float(cost.latency_s[0]), float(cost.energy_j[0])


def on_points(device_s: float, energy_j: float, step: pd.DataFrame, own: tuple[float, float]):
    """Device time and energy that cost ``device_s`` and ``energy_j`` on the run's accelerator, on each
    point of ``step`` (points.csv rows of the stage's method): scaled by the ratio of one step's
    latency (energy) there to the run's own, ``own`` (``step_price``; module docstring)."""
    return (device_s * step["step_latency_s"].to_numpy() / own[0], energy_j * step["step_energy_j"].to_numpy() / own[1])


def reprice(run: Run, works: dict[tuple[str, str], TraceWork], points: pd.DataFrame) -> pd.DataFrame:
    """Per method of the run and point of ``points`` (points.csv's columns ``point``, ``model``,
    ``method``, ``step_latency_s``, ``step_energy_j``, ``fits``): the round reaching the run's target and the
    device time, energy and bytes to it (module docstring). Methods that never reach it are left out."""
    rows = run_rows(run)
    reached = time_to_accuracy(rows, run.target_pct / 100)
    own = {key: step_price(work, run.hw) for key, work in works.items() if key[0] == run.model}
    mine = points[points["model"] == run.model]
    by_method = {m: g.set_index("point")[["step_latency_s", "step_energy_j", "fits"]] for m, g in mine.groupby("method")}
    frames = []
    for method, tta in reached.items():
        if not tta.reached:
            continue
        upto = [r for r in rows if r["method"] == method and r["round"] <= tta.round]
        stages = stage_methods(method)
        index = by_method[stages["train"]].index
        device = np.zeros(len(index))
        energy = np.zeros(len(index))
        for stage, dse_method in stages.items():
            done = [r for r in upto if r["stage"] == stage]
            if not done:
                continue
            d, e = on_points(math.fsum(r["round_device_s"] for r in done), math.fsum(r["round_energy_j"] for r in done),
                             by_method[dse_method].loc[index], own[(run.model, dse_method)])
            device += d
            energy += e
        frames.append(pd.DataFrame({"model": run.model, "method": method, "point": index,
                                    "fits": by_method[stages["train"]]["fits"].to_numpy(),
                                    "target_accuracy_pct": run.target_pct, "round": tta.round,
                                    "device_s_to_target": device, "energy_j_to_target": energy,
                                    "bytes_to_target": tta.bytes, "run_device_s": tta.device_s,
                                    "run_energy_j": tta.energy_j}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def printout(run: Run, tta: pd.DataFrame, describe: Callable[[int], str] = str) -> list[str]:
    """The run's own figures beside the best point per method for device time and energy to the
    target (``describe``: a grid index as its design)."""
    lines = [f"re-priced {run.folder}'s curve to {run.target_pct:.2f} % ({run.model}, batch {run.batch_size}):"]
    if tta.empty:
        return lines + ["  no method reached the target; nothing to re-price"]
    for method, g in tta.groupby("method", sort=False):
        first = g.iloc[0]
        fitting = g[g["fits"].astype(bool)]
        among = "among the points that fit the device" if len(fitting) else "no point fits the device; among all"
        g = fitting if len(fitting) else g
        lines.append(f"  {method}: round {first['round']}, on the run's accelerator {first['run_device_s']:.4g} s device, "
                     f"{first['run_energy_j']:.4g} J, {first['bytes_to_target']:,} B; {among}:")
        for column, unit in (("device_s_to_target", "s"), ("energy_j_to_target", "J")):
            best = g.sort_values([column, "point"], kind="stable").iloc[0]
            lines.append(f"    least {column}: {best[column]:.4g} {unit} at point {int(best['point'])} "
                         f"({describe(int(best['point']))})")
    return lines

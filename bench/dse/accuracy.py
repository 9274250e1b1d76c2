"""``python -m bench.dse SPACE.toml --study DIR``: every point of the space priced to a target accuracy
with the accuracy curve of *its own* number format, from an accuracy study that trained in each
format (``bench.study`` with ``number_formats``; docs/numerics.md, docs/dse.md).

A study's ``curves.csv`` holds, per number format, method, seed and round, the test accuracy and
the cumulative device time, energy and bytes of the run, each run priced on the study's hardware
computing in the run's format (``accel_sim.mac_energy.hardware_in_format``). Per format and method
we take the mean curve over the study's seeds (accuracy and cumulative costs averaged round by
round) and its first round at or above the target (``workloads.cost.system.time_to_accuracy``,
the one definition). On a point of the space in format ``f``, as ``bench.dse --run`` does for one
run (``bench.dse.rerun.on_points``), each stage's device time and energy scale by the ratio of the method's
step there to the step on the study's hardware in ``f``:

    device_s(point) = device_s_train(f, R) x step_latency_s(point) / step_latency_s(study hw in f)
                      + device_s_calibration(f) x batch_latency_s(point) / batch_latency_s(study hw in f)

(energy alike with the step's energy); bytes do not depend on the accelerator. A point whose
format the study did not train in is marked ``measured = False`` and gets no figure: it is never
given another format's accuracy. Fronts: energy to the target against ASIC area and against DSP
slices, among the measured points that fit the device.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from accel_sim.batch import TraceWork
from accel_sim.formats import NumberFormat
from accel_sim.hardware import HardwareConfig, HardwareConfigError, load_hardware_config
from accel_sim.mac_energy import hardware_in_format
from accel_sim.pareto import pareto_front
from bench.dse.rerun import on_points, step_price
from bench.dse.spec import Dse, DseError
from iokit.consumed import every_seed, finished_folder, finite_numbers
from workloads.cost.system import CUMULATIVE_COLUMNS, time_to_accuracy
from workloads.fl.methods import is_calibration, parse_method

STUDY_FILES = ("curves.csv", "summary.json")
FRONT_PAIRS = (("energy_j_to_target", "asic_area_mm2"), ("energy_j_to_target", "dsp_slices"))
TTA_COLUMNS = ("model", "method", "number_format", "point", "fits", "measured", "target_accuracy_pct", "reached",
               "round", "device_s_to_target", "energy_j_to_target", "bytes_to_target")


@dataclass(frozen=True)
class StudyCurves:
    """What pricing to a target needs of a study: its mean curves per (format, method)."""

    folder: Path
    model: str
    setting: str  # the data setting (``iid``, ``alpha=0.1``)
    hw: HardwareConfig  # the study's hardware as given (FP32): its runs were priced on it in their format
    target_pct: float
    curves: pd.DataFrame  # mean over seeds: number_format, method (canonical), round, stage, accuracy, cum_*
    seeds: int
    formats: tuple[str, ...]


def _stage_names(method: str) -> dict[str, str]:
    """The study's canonical method label -> the canonical names of its training and calibration."""
    parsed = parse_method(method)
    stages = {"train": replace(parsed, calibration=None).name}
    if parsed.calibration:
        stages["calibration"] = parsed.calibration
    return stages


def dse_names(dse: Dse) -> dict[str, str]:
    """Canonical name (``fedavg+spherefed``, ``ccvr``) -> the space file's spelling (``spherefed``)."""
    return {name if is_calibration(name) else parse_method(name).name: name for name in dse.methods}


def _check_shape(folder: Path, point: Mapping[str, Any], dse: Dse) -> None:
    """The study's batch size and image size (of its chosen ``point``) are the space's."""
    batch, image = point["hparams"]["batch_size"], point["fl"]["image_size"]
    if image is None:
        raise DseError(f"--study {folder}: the study kept its dataset's own image size (its preset sets no "
                       "image_size), which the study does not record; re-price a study whose preset sets image_size")
    if batch != dse.batch_size or image != dse.image_size:
        raise DseError(f"--study {folder}: the study trained at batch {batch}, {image}x{image} inputs; the space "
                       f"prices batch {dse.batch_size}, {dse.image_size}x{dse.image_size}: set [dse] batch_size = "
                       f"{batch}, image_size = {image}")


def _chosen_setting(folder: Path, settings: list[str], setting: str | None) -> str:
    """``--setting``, one of the study's data settings; by default its only one."""
    if setting is None:
        if len(settings) > 1:
            raise DseError(f"--study {folder}: the study has data settings {', '.join(settings)}; choose one with "
                           f"--setting")
        return settings[0]
    if setting not in settings:
        raise DseError(f"--setting {setting}: the study has {', '.join(settings)}")
    return setting


def _target_pct(folder: Path, study: Mapping[str, Any], target_pct: float | None) -> float:
    """``--target``, else the study's first declared target accuracy, in (0, 100]."""
    if target_pct is None:
        declared = study.get("targets", {}).get("accuracy_pct") or []
        target_pct = declared[0] if declared else None
    if target_pct is None or not 0 < target_pct <= 100:
        raise DseError(f"--study {folder}: the study declares no target accuracy; give --target PCT (in (0, 100])")
    return target_pct


def load_study(folder: str | Path, dse: Dse, target_pct: float | None, setting: str | None) -> StudyCurves:
    """The study in ``folder``, checked against the space file before any capture (DseError naming it)."""
    folder = Path(folder)
    missing = [name for name in STUDY_FILES if not (folder / name).is_file()]
    if missing:
        raise DseError(f"--study {folder}: not a finished bench.study folder (no {missing[0]}); give a folder "
                       f"python -m bench.study wrote")
    finished_folder(folder, command="bench.study", flag="--study", error=DseError)  # finished, nothing missing
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        study = summary["study"]
        curves = pd.read_csv(folder / "curves.csv")
        hw = load_hardware_config(study["hw"]) if study.get("hw") else HardwareConfig()
        points = [c["point"] for c in summary.get("choices", []) if c.get("point")]
    except (ValueError, KeyError, TypeError, OSError, HardwareConfigError) as err:
        raise DseError(f"--study {folder}: unreadable study ({err}); give a folder python -m bench.study wrote") \
            from None
    needed = {"model", "setting", "method", "seed", "round", "stage", "accuracy_pct", *CUMULATIVE_COLUMNS}
    if not needed <= set(curves.columns) or not points:
        raise DseError(f"--study {folder}: curves.csv or summary.json lacks what re-pricing reads "
                       f"({', '.join(sorted(needed - set(curves.columns))) or 'the chosen points'}); rerun the study's "
                       f"command to regenerate its report")
    finite_numbers(curves.to_dict("records"), ["round", "seed", *sorted(needed - {"model", "setting", "method",
                                                                          "seed", "round", "stage"})],
                   whole=("round", "seed"), where=f"--study {folder / 'curves.csv'}", error=DseError)
    curves = curves.astype({"round": int, "seed": int})
    if "number_format" not in curves.columns:
        curves = curves.assign(number_format="fp32")  # a study from before number formats: FP32 only
    model = next((m for m in dict.fromkeys(curves["model"]) if m in dse.models), None)
    if model is None:
        raise DseError(f"--study {folder}: the study's model(s) {', '.join(map(str, dict.fromkeys(curves['model'])))} "
                       f"not in the space's [dse] models; add it there")
    _check_shape(folder, points[0], dse)
    curves = curves[curves["model"] == model]
    data = curves["setting"].str.split(" ").str[0]
    setting = _chosen_setting(folder, list(dict.fromkeys(data)), setting)
    curves = curves[data == setting]
    every_seed({f"{fmt} {method}": g["seed"] for (fmt, method), g in curves.groupby(["number_format", "method"])},
               study.get("seeds", []), where=f"--study {folder}", error=DseError)
    names = dse_names(dse)
    for method in dict.fromkeys(curves["method"]):
        for stage in _stage_names(method).values():
            if stage not in names:
                raise DseError(f"--study {folder}: the study's {method} needs {stage} priced; add it to [dse] methods")
    target_pct = _target_pct(folder, study, target_pct)
    mean = (curves.groupby(["number_format", "method", "round", "stage"], sort=False)
            [["accuracy_pct", *CUMULATIVE_COLUMNS]].mean().reset_index())
    formats = tuple(NumberFormat.parse(f).name for f in dict.fromkeys(mean["number_format"]))
    return StudyCurves(folder, model, setting, hw, float(target_pct), mean, int(curves["seed"].nunique()), formats)


def _stage_parts(records: list[dict], tta) -> list[tuple[str, float, float]]:
    """(stage, device seconds, joules) up to the target on the study's hardware: the training rounds
    up to the target round, and the calibration where the target was reached by it (after the last round)."""
    train = [r for r in records if r["stage"] == "train" and r["round"] <= tta.round]
    train_s, train_j = train[-1]["cum_device_s"], train[-1]["cum_energy_j"]
    parts = [("train", train_s, train_j)]
    if tta.device_s > train_s:  # reached by the calibration, after the last round
        parts.append(("calibration", tta.device_s - train_s, tta.energy_j - train_j))
    return parts


def reprice(study: StudyCurves, dse: Dse, works: dict[tuple[str, str], TraceWork],
            points: pd.DataFrame) -> pd.DataFrame:
    """Per method of the study and point of ``points`` (points.csv's ``point``, ``model``, ``method``,
    ``number_format``, ``step_latency_s``, ``step_energy_j``, ``fits``, ``asic_area_mm2``,
    ``dsp_slices``): the target round of the point's own format and the device time, energy and
    bytes to it (module doc); ``measured`` False where the study has no curve in that format."""
    names = dse_names(dse)
    mine = points[points["model"] == study.model]
    by_method = {m: g.set_index("point") for m, g in mine.groupby("method")}
    own: dict[tuple[str, str], tuple[float, float]] = {}  # (method, format) -> its step on the study's hardware

    frames = []
    for method in dict.fromkeys(study.curves["method"]):
        stages = {stage: names[name] for stage, name in _stage_names(method).items()}
        table = by_method[stages["train"]]
        index = table.index.to_numpy()
        formats = np.array([NumberFormat.parse(f).name for f in table["number_format"]])
        device = np.full(len(index), np.nan)
        energy = np.full(len(index), np.nan)
        target_round = np.full(len(index), np.nan)
        reached_at = np.zeros(len(index), dtype=bool)
        bytes_to = np.full(len(index), np.nan)
        for fmt in np.unique(formats):
            rows = study.curves[(study.curves["method"] == method) & (study.curves["number_format"] == fmt)]
            if rows.empty:
                continue  # not measured: stays NaN
            records = [{**r, "accuracy": r["accuracy_pct"] / 100} for r in rows.to_dict("records")]
            tta = time_to_accuracy(records, study.target_pct / 100)[method]
            at = formats == fmt
            if not tta.reached:
                continue
            parts = _stage_parts(records, tta)
            d = np.zeros(at.sum())
            e = np.zeros(at.sum())
            for stage, stage_s, stage_j in parts:
                key = (stages[stage], fmt)
                if key not in own:
                    own[key] = step_price(works[(study.model, stages[stage])], hardware_in_format(study.hw, fmt))
                stage_d, stage_e = on_points(stage_s, stage_j, by_method[stages[stage]].loc[index[at]], own[key])
                d += stage_d
                e += stage_e
            device[at], energy[at], target_round[at], reached_at[at], bytes_to[at] = d, e, tta.round, True, tta.bytes
        measured = np.isin(formats, study.formats)
        frames.append(pd.DataFrame({
            "model": study.model, "method": method, "number_format": formats, "point": index,
            "fits": table["fits"].to_numpy(), "measured": measured, "target_accuracy_pct": study.target_pct,
            "reached": reached_at, "round": target_round, "device_s_to_target": device,
            "energy_j_to_target": energy, "bytes_to_target": bytes_to,
            "asic_area_mm2": table["asic_area_mm2"].to_numpy(), "dsp_slices": table["dsp_slices"].to_numpy()}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=TTA_COLUMNS)


def fronts(tta: pd.DataFrame) -> pd.DataFrame:
    """Per method, the Pareto fronts of ``FRONT_PAIRS`` (both minimized) among the measured points that
    fit the device and reach the target."""
    frames = []
    for method, g in tta.groupby("method", sort=False):
        ok = g[g["fits"].astype(bool) & g["reached"].astype(bool)]
        for x, y in FRONT_PAIRS:
            if ok.empty:
                continue
            keep = pareto_front(ok[[x, y]].to_numpy(dtype=float))
            frames.append(ok[keep].assign(front=f"{x}|{y}"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def best(tta: pd.DataFrame) -> dict[str, pd.Series | None]:
    """Per method, the fitting point with the least energy to the target (ties: the smaller point index)."""
    out = {}
    for method, g in tta.groupby("method", sort=False):
        ok = g[g["fits"].astype(bool) & g["reached"].astype(bool)]
        out[method] = None if ok.empty else ok.sort_values(["energy_j_to_target", "point"], kind="stable").iloc[0]
    return out


def best_records(tta: pd.DataFrame, describe: Callable[[int], str] = str) -> dict[str, dict | None]:
    """``best`` as plain records (summary.json): the point, its design and its figures to the target."""
    out = {}
    for method, row in best(tta).items():
        out[method] = None if row is None else {
            "point": int(row["point"]), "design": describe(int(row["point"])), "number_format": row["number_format"],
            "round": int(row["round"]), "energy_j_to_target": float(row["energy_j_to_target"]),
            "device_s_to_target": float(row["device_s_to_target"]), "bytes_to_target": float(row["bytes_to_target"])}
    return out


def printout(study: StudyCurves, tta: pd.DataFrame, describe: Callable[[int], str] = str) -> list[str]:
    """Per method: the cheapest design to the target in its own format's accuracy, what is unmeasured,
    and whether the methods' best designs differ."""
    lines = [f"priced to {study.target_pct:g} % test accuracy with each point's own format's curve: {study.folder} "
             f"({study.model}, {study.setting}, mean curve over {study.seeds} seeds; formats studied: "
             f"{', '.join(study.formats)})"]
    if tta.empty:
        return lines + ["  no point to price"]
    unmeasured = sorted(set(tta.loc[~tta["measured"].astype(bool), "number_format"]))
    if unmeasured:
        lines.append(f"  not priced (no accuracy measured in the format): {', '.join(unmeasured)}")
    winners = best(tta)
    for method, row in winners.items():
        g = tta[(tta["method"] == method) & tta["measured"].astype(bool)]
        rounds = g.drop_duplicates("number_format").set_index("number_format")["round"]
        reach = ", ".join(f"{f} {'—' if math.isnan(r) else int(r)}" for f, r in rounds.items())
        lines.append(f"  {method}: round reaching the target per format: {reach}")
        if row is None:
            lines.append("    no fitting point reaches the target")
            continue
        lines.append(f"    least energy to the target: {row['energy_j_to_target']:.4g} J, "
                     f"{row['device_s_to_target']:.4g} s device, round {int(row['round'])} at point "
                     f"{int(row['point'])} ({describe(int(row['point']))})")
    found = {m: int(r["point"]) for m, r in winners.items() if r is not None}
    if len(set(found.values())) > 1:
        lines.append("  the best design differs between methods once accuracy counts: " +
                     "; ".join(f"{m} point {p}" for m, p in found.items()))
    elif found:
        lines.append(f"  every method's best design is point {next(iter(found.values()))}")
    return lines

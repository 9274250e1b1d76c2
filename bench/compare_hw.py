"""``python -m bench.run --hw A.toml B.toml ...``: every method priced on several accelerators, side by side.

The first ``--hw`` is the run's hardware: ``summary.json``'s ``models`` and the usual table are
priced on it, unchanged. With more than one, each training method's step is captured once and
priced on every accelerator (``accel_sim.simulate``), each calibration is priced on every
accelerator, and ``summary.json`` gains ``hardware_comparison``: per accelerator (labelled by its
file name), its config and, per model, the same ``training`` / ``calibration`` figures as
``models``. Communication and accuracy do not depend on the accelerator and are not repeated.
The table printed after the usual one has one column group per accelerator (value, and the
saving normalized to FedAvg / CCVR on that accelerator), and ``hardware_<model>.png`` plots it.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from accel_sim.hardware import HardwareConfig, load_hardware_config  # noqa: E402
from bench.traces import local_training_trace  # noqa: E402
from workloads.atomic import atomic_write  # noqa: E402
from workloads.fl.calibration_cost import calibration_cost  # noqa: E402
from workloads.fl.hparams import Hparams  # noqa: E402
from workloads.fl.step_cost import simulate_complete  # noqa: E402
from workloads.model_spec import ModelSpec  # noqa: E402

ROWS = (  # (section, metric, baseline method, unit, scale): the hardware-dependent figures
    ("training", "peak_memory_bytes", "fedavg", "MB", 1e-6),
    ("training", "step_latency_s", "fedavg", "ms", 1e3),
    ("training", "round_latency_s", "fedavg", "s", 1),
    ("training", "step_energy_j", "fedavg", "mJ", 1e3),
    ("calibration", "latency_s", "ccvr", "s", 1),
    ("calibration", "energy_j", "ccvr", "J", 1),
)


def hardware_label(path: str) -> str:
    """The label of a hardware file: its name without ``.toml``."""
    return Path(path).stem


def load_hardware_set(paths) -> dict[str, HardwareConfig]:
    """label -> config, in the order given; ValueError on two files with the same label."""
    labels = [hardware_label(p) for p in paths]
    if len(set(labels)) != len(labels):
        raise ValueError(f"--hw files need different names to label their columns, got {labels}")
    return {label: load_hardware_config(p) for label, p in zip(labels, paths)}


def hardware_figures(model: str, spec: ModelSpec, training, calibrations, *, batch_size: int, num_classes: int,
                     steps_per_round: int, train_samples: int, num_clients: int, seed: int,
                     hws: dict[str, HardwareConfig], progress) -> dict:
    """label -> {"training": {method: figures}, "calibration": {calibration: figures}} for one model;
    the calibration's average client holds ``train_samples / num_clients`` samples."""
    out = {label: {"training": {}, "calibration": {}} for label in hws}
    for method in training:
        progress(f"{model}: capturing one {method} training step to price on {len(hws)} accelerators")
        trace = local_training_trace(spec, method, batch_size=batch_size, num_classes=num_classes, seed=seed)
        for label, hw in hws.items():
            report = simulate_complete(trace, hw, f"{model} {method} training step on {label}")
            out[label]["training"][method] = {
                "step_cycles": report.total_cycles, "step_latency_s": report.latency_s,
                "steps_per_round": steps_per_round, "round_latency_s": report.latency_s * steps_per_round,
                "peak_memory_bytes": report.peak_memory_bytes, "step_energy_j": report.energy_j,
                "round_energy_j": report.energy_j * steps_per_round, "macs": report.macs}
    for calibration in calibrations:
        for label, hw in hws.items():
            progress(f"{model}: pricing {calibration} calibration on {label}")
            cost = calibration_cost(calibration, spec, train_samples=train_samples, num_clients=num_clients,
                                    num_classes=num_classes, image_size=spec.input_shape[-1], hp=Hparams(), hw=hw)
            out[label]["calibration"][calibration] = {
                "client_cycles": cost.client_cycles, "server_cycles": cost.server_cycles, "latency_s": cost.latency_s,
                "client_energy_j": cost.client_energy_j, "server_energy_j": cost.server_energy_j,
                "energy_j": cost.energy_j}
    return out


def comparison(models: dict[str, dict], hws: dict[str, HardwareConfig]) -> dict:
    """The ``hardware_comparison`` block of summary.json from per-model ``hardware_figures``."""
    return {"labels": list(hws), "by_hardware": {
        label: {"hardware": asdict(hw), "models": {m: figs[label] for m, figs in models.items()}}
        for label, hw in hws.items()}}


def _cell(section: dict, method: str, metric: str, base: str, scale: float) -> tuple[str, str]:
    value = section.get(method, {}).get(metric)
    if value is None:
        return "", ""
    base_value = section.get(base, {}).get(metric)
    norm = f"{value / base_value:.4f}" if base_value else ""
    return f"{value * scale:.4g}", norm


def format_comparison(summary: dict) -> str:
    """One table per model: rows = figure x method, one (value, normalized) column group per accelerator."""
    block = summary["hardware_comparison"]
    labels = block["labels"]
    width = max(18, *(len(label) + 2 for label in labels))
    lines = []
    for model in next(iter(block["by_hardware"].values()))["models"]:
        lines.append(f"== {model} on {len(labels)} accelerators (value, normalized to FedAvg / CCVR on each)")
        lines.append(f"{'figure':<34} {'method':<12}" + "".join(f"{label:>{width + 8}}" for label in labels))
        for section, metric, base, unit, scale in ROWS:
            methods = dict.fromkeys(m for label in labels
                                    for m in block["by_hardware"][label]["models"][model][section])
            for method in methods:
                cells = [_cell(block["by_hardware"][label]["models"][model][section], method, metric, base, scale)
                         for label in labels]
                lines.append(f"{section + ' ' + metric + ' (' + unit + ')':<34} {method:<12}"
                             + "".join(f"{v:>{width}} {n:>7}" for v, n in cells))
        lines.append("")
    return "\n".join(lines).rstrip()


def plot_comparison(summary: dict, folder: Path) -> list[Path]:
    """``hardware_<model>.png``: one panel per figure, accelerators on the x axis, one bar per method."""
    block = summary["hardware_comparison"]
    labels = block["labels"]
    written = []
    for model in next(iter(block["by_hardware"].values()))["models"]:
        fig, axes = plt.subplots(1, len(ROWS), figsize=(4 * len(ROWS), 3.6), squeeze=False)
        for ax, (section, metric, _base, unit, scale) in zip(axes[0], ROWS):
            methods = list(dict.fromkeys(m for label in labels
                                         for m in block["by_hardware"][label]["models"][model][section]))
            x = np.arange(len(labels))
            shown = []
            for i, method in enumerate(methods):
                values = np.array([block["by_hardware"][label]["models"][model][section].get(method, {})
                                   .get(metric, math.nan) for label in labels]) * scale
                shown += [v for v in values if v > 0]
                ax.bar(x + (i - (len(methods) - 1) / 2) * 0.8 / max(len(methods), 1), values,
                       0.8 / max(len(methods), 1), label=method)
            ax.set_xticks(x, labels, rotation=20, fontsize=8)
            if shown and max(shown) > 10 * min(shown):  # accelerators apart by orders of magnitude
                ax.set_yscale("log")
            ax.set_title(f"{section} {metric}", fontsize=9)
            ax.set_ylabel(unit)
            if methods:
                ax.legend(fontsize=7)
        fig.suptitle(f"{model}: one local step and calibration on each accelerator")
        fig.tight_layout()
        path = folder / f"hardware_{model.replace(':', '-')}.png"
        atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110))
        plt.close(fig)
        written.append(path)
    return written

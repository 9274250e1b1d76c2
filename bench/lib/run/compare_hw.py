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

from dataclasses import asdict
from pathlib import Path

from accel_sim.hardware import HardwareConfig, load_hardware_config
from bench.lib.paper import PAPER
from iokit import identity
from workloads.cost.calibration import calibration_cost
from workloads.cost.step import method_step_trace, simulate_complete
from workloads.fl.hparams import Hparams
from workloads.model_spec import ModelSpec

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
    """label -> config, in the order given; ValueError on one file given twice (``iokit.identity``:
    by the file, not its spelling) or two files with the same label."""
    identity.distinct_resolved([str(p) for p in paths], identity.resolved_file, name="--hw")
    labels = [hardware_label(p) for p in paths]
    if len(set(labels)) != len(labels):
        raise ValueError(f"--hw files need different names to label their columns, got {labels}")
    return {label: load_hardware_config(p) for label, p in zip(labels, paths)}


def hardware_figures(model: str, spec: ModelSpec, training, calibrations, *, batch_size: int, num_classes: int,
                     seed: int, hws: dict[str, HardwareConfig], progress) -> dict:
    """label -> {"training": {method: figures}, "calibration": {calibration: figures}} for one model
    at the paper's setting (``bench.lib.paper.PAPER``: a round's steps, the calibration's average client)."""
    steps_per_round = PAPER.steps_per_round(batch_size)
    train_samples, num_clients = PAPER.train_samples, PAPER.num_clients
    out = {label: {"training": {}, "calibration": {}} for label in hws}
    for method in training:
        progress(f"{model}: capturing one {method} training step to price on {len(hws)} accelerators")
        trace = method_step_trace(spec, method, batch_size=batch_size, num_classes=num_classes, seed=seed)
        for label, hw in hws.items():
            report = simulate_complete(trace, hw, f"{model} {method} training step on {label}")
            out[label]["training"][method] = {
                "step_total_cycles": report.total_cycles, "step_latency_s": report.latency_s,
                "steps_per_round": steps_per_round, "round_latency_s": report.latency_s * steps_per_round,
                "peak_memory_bytes": report.peak_memory_bytes, "step_energy_j": report.energy_j,
                "round_energy_j": report.energy_j * steps_per_round, "macs": report.macs}
    for calibration in calibrations:
        for label, hw in hws.items():
            progress(f"{model}: pricing {calibration} calibration on {label}")
            cost = calibration_cost(calibration, spec, train_samples=train_samples, num_clients=num_clients,
                                    num_classes=num_classes, image_size=spec.input_shape[-1], hp=Hparams(), hw=hw)
            out[label]["calibration"][calibration] = {
                "client_total_cycles": cost.client_total_cycles, "server_total_cycles": cost.server_total_cycles, "latency_s": cost.latency_s,
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

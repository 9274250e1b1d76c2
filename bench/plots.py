"""Figures of a results folder, regenerated from ``summary.json`` and ``layers.csv`` alone.

``python -m bench.plots results/<run>`` rewrites ``fig5.png`` (SphereFed Fig. 5 (a)-(e) style:
normalized communication, peak memory, one-round latency, calibration latency, accuracy; models on
the x axis, one bar per method), ``layers_<model>.png`` (per-layer latency of one round of
local training, one bar per method, the slowest layers first) and ``tta.png`` (``bench.tta``,
from ``rounds.csv``). Nothing is recomputed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.results import LAYERS_COLUMNS, LAYERS_CSV, ResultsError, load_summary  # noqa: E402
from bench.tta import plot_time_to_accuracy  # noqa: E402
from workloads.atomic import atomic_write  # noqa: E402

FIG5_PNG = "fig5.png"
TOP_LAYERS = 15


@dataclass(frozen=True)
class Panel:
    """One panel of Fig. 5: ``summary.models[m][section][method][metric]``, divided by ``baseline``'s."""

    label: str
    section: str
    metric: str
    baseline: str | None  # None: plot absolute values
    ylabel: str


FIG5_PANELS = (
    Panel("(a) total communication", "communication", "total_bytes", "fedavg", "normalized to FedAvg"),
    Panel("(b) peak memory, local training", "training", "peak_memory_bytes", "fedavg", "normalized to FedAvg"),
    Panel("(c) one-round local training latency", "training", "round_latency_s", "fedavg", "normalized to FedAvg"),
    Panel("(d) calibration latency", "calibration", "latency_s", "ccvr", "normalized to CCVR"),
    Panel("(e) accuracy", "accuracy", "accuracy_pct", None, "test accuracy (%)"),
)


def panel_values(summary: dict, panel: Panel) -> pd.DataFrame:
    """Models x methods table of one panel (normalized when the panel has a baseline); NaN where absent."""
    table = {}
    for model, sections in summary["models"].items():
        section = sections[panel.section]
        row = {m: float(v[panel.metric]) for m, v in section.items() if isinstance(v, dict) and panel.metric in v}
        if panel.baseline is not None:
            base = row.get(panel.baseline)
            if not base:
                raise ResultsError(
                    f"model {model!r}: {panel.section} has no nonzero {panel.metric} for "
                    f"{panel.baseline!r}, which panel {panel.label!r} is normalized to"
                )
            row = {m: v / base for m, v in row.items()}
        table[model] = row
    return pd.DataFrame.from_dict(table, orient="index")


def _bars(ax, frame: pd.DataFrame, panel: Panel) -> None:
    models, methods = list(frame.index), list(frame.columns)
    width = 0.8 / max(len(methods), 1)
    x = np.arange(len(models))
    for i, method in enumerate(methods):
        values = frame[method].to_numpy(dtype=float)
        bars = ax.bar(x + (i - (len(methods) - 1) / 2) * width, values, width, label=method)
        ax.bar_label(bars, labels=[f"{v:.3g}" if np.isfinite(v) else "" for v in values], fontsize=6)
    ax.set_xticks(x, models, fontsize=8)
    ax.set_title(panel.label, fontsize=9)
    ax.set_ylabel(panel.ylabel, fontsize=8)
    ax.legend(fontsize=7)


def fig5(summary: dict):
    """Fig. 5 (a)-(e) of SphereFed (Sec. 5.4) for every model of a run, as one matplotlib figure."""
    fig, axes = plt.subplots(1, len(FIG5_PANELS), figsize=(4 * len(FIG5_PANELS), 3.6))
    for ax, panel in zip(axes, FIG5_PANELS):
        frame = panel_values(summary, panel)
        if frame.empty or frame.isna().all().all():
            ax.set_title(f"{panel.label}\n(not in this run)", fontsize=9)
            ax.set_axis_off()
            continue
        _bars(ax, frame, panel)
    fig.suptitle(f"Efficiency on the modeled accelerator ({summary['hardware_label']})",
                 fontsize=10)
    fig.tight_layout()
    return fig


def layer_latency(layers: pd.DataFrame, model: str, region: str = "training") -> pd.DataFrame:
    """Layers x methods latency (s) of one model, summed over phases, slowest (first method) first."""
    rows = layers[(layers["model"] == model) & (layers["region"] == region)]
    table = rows.pivot_table(index="layer", columns="method", values="latency_s", aggfunc="sum", fill_value=0.0)
    return table.sort_values(by=list(table.columns), ascending=False)


def layer_breakdown(layers: pd.DataFrame, model: str):
    """Per-layer latency of one local training step: the TOP_LAYERS slowest layers, the classifier
    (the layer SphereFed changes) and the rest summed."""
    table = layer_latency(layers, model)
    if table.empty:
        raise ResultsError(f"{LAYERS_CSV} has no training rows for model {model!r}")
    shown = list(table.index[:TOP_LAYERS]) + [l for l in table.index[TOP_LAYERS:] if l == "classifier"]
    top = table.loc[shown]
    if len(table) > len(shown):
        rest = table.drop(index=shown).sum()
        top = pd.concat([top, rest.to_frame(f"{len(table) - len(shown)} other layers").T])
    top_ms = top * 1e3
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(top_ms) + 1.5))
    height = 0.8 / len(top_ms.columns)
    y = np.arange(len(top_ms))
    for i, method in enumerate(top_ms.columns):
        ax.barh(y + (i - (len(top_ms.columns) - 1) / 2) * height, top_ms[method], height, label=method)
    ax.set_yticks(y, [str(layer) or "(outside modules)" for layer in top_ms.index], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("latency per training step (ms)")
    ax.set_title(f"{model}: per-layer latency of one local training step", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def read_layers(run_dir: Path) -> pd.DataFrame:
    path = Path(run_dir) / LAYERS_CSV
    if not path.is_file():
        raise ResultsError(f"{path} not found: give a folder written by `python -m bench.run`")
    layers = pd.read_csv(path, keep_default_na=False, dtype={"layer": str})
    missing = [c for c in LAYERS_COLUMNS if c not in layers.columns]
    if missing:
        raise ResultsError(f"{path} lacks column(s) {missing}; rerun `python -m bench.run`")
    return layers


def _save(fig, path: Path) -> Path:
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    finally:
        plt.close(fig)


def plot_run(run_dir: Path) -> list[Path]:
    """Write every figure of a results folder from its saved data; returns the PNG paths."""
    run_dir = Path(run_dir)
    summary = load_summary(run_dir)
    layers = read_layers(run_dir)
    written = [_save(fig5(summary), run_dir / FIG5_PNG)]
    for model in summary["models"]:
        written.append(_save(layer_breakdown(layers, model), run_dir / f"layers_{model}.png"))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a results folder written by python -m bench.run")
    args = parser.parse_args(argv)
    try:
        for path in plot_run(args.run_dir):
            print(path)
        print(plot_time_to_accuracy(args.run_dir))
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

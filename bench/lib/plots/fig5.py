"""SphereFed's Fig. 5 (a)-(e) for every model of a ``bench.run`` folder: normalized communication,
peak memory, one-round latency, calibration latency, accuracy (models on the x axis, one bar per
method), plus (f) one-round training energy and (g) calibration energy, which the paper does not
report. Drawn from ``summary.json`` alone. Panel (e) shows, where a reference study covers the
accuracy run, the study's mean ± std over seeds as a black diamond with an error bar on each bar."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bench.lib.results import ResultsError

FIG5_PNG = "fig5.png"


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
    Panel("(f) one-round local training energy", "training", "round_energy_j", "fedavg", "normalized to FedAvg"),
    Panel("(g) calibration energy", "calibration", "energy_j", "ccvr", "normalized to CCVR"),
)


def panel_values(summary: dict, panel: Panel) -> pd.DataFrame:
    """Models x methods table of one panel (normalized when the panel has a baseline); NaN where absent.
    A model whose section holds no method with the panel's figure (a run without calibrations, say)
    has an empty row; one that holds some but not the baseline is malformed."""
    table = {}
    for model, sections in summary["models"].items():
        section = sections[panel.section]
        row = {m: float(v[panel.metric]) for m, v in section.items() if isinstance(v, dict) and panel.metric in v}
        if panel.baseline is not None and row:
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


def _reference_bars(ax, summary: dict, frame: pd.DataFrame) -> None:
    """Panel (e): a reference study's mean ± std over seeds (``bench.lib.run.reference``) on each bar it covers."""
    models, methods = list(frame.index), list(frame.columns)
    width = 0.8 / max(len(methods), 1)
    for row, model in enumerate(models):
        reference = (summary["models"][model].get("reference") or {}).get("methods", {})
        for i, method in enumerate(methods):
            if method in reference:
                ref = reference[method]
                ax.errorbar([row + (i - (len(methods) - 1) / 2) * width], [ref["mean"]], yerr=[[ref["std"] or 0.0],
                            [ref["std"] or 0.0]], color="black", marker="D", markersize=3, capsize=3, linewidth=1)


def fig5(summary: dict):
    """Fig. 5 (a)-(e) of SphereFed (Sec. 5.4) for every model of a run, as one matplotlib figure."""
    ncols = 4
    nrows = -(-len(FIG5_PANELS) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4 * ncols, 3.6 * nrows), squeeze=False)
    for ax in axes.flat[len(FIG5_PANELS):]:
        ax.set_axis_off()
    for ax, panel in zip(axes.flat, FIG5_PANELS):
        frame = panel_values(summary, panel)
        if frame.empty or frame.isna().all().all():
            ax.set_title(f"{panel.label}\n(not in this run)", fontsize=9)
            ax.set_axis_off()
            continue
        _bars(ax, frame, panel)
        if panel.section == "accuracy":
            _reference_bars(ax, summary, frame)
    fig.suptitle(f"Efficiency on the modeled accelerator ({summary['hardware_label']})",
                 fontsize=10)
    fig.tight_layout()
    return fig

"""pareto.png of ``python -m bench.dse``: per model, one panel per objective pair (step latency
against step energy, and against ASIC-style area), every method in its colour: a sample of the
points that fit the device (faint), the Pareto front (line), and the paper's accelerator and each
configs/hw preset (labelled markers; priced in their own word size's number format)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

LABELS = {"step_latency_s": "step latency (s)", "step_energy_j": "step energy (J)",
          "asic_area_mm2": "ASIC-style area at 45 nm (mm²)"}


def plot_pareto(model: str, methods: list[str], pairs, samples: dict, fronts: dict, presets: pd.DataFrame,
                title: str):
    fig, axes = plt.subplots(1, len(pairs), figsize=(6.2 * len(pairs), 4.6), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (x, y) in zip(axes[0], pairs):
        for i, method in enumerate(methods):
            colour = colours[i % len(colours)]
            cloud = samples.get(method)
            if cloud is not None and not cloud.empty:
                ax.scatter(cloud[x], cloud[y], s=4, alpha=0.15, color=colour, linewidths=0)
            front = fronts.get((method, f"{x}|{y}"))
            if front is not None and not front.empty:
                front = front.sort_values(x)
                ax.plot(front[x], front[y], "-o", ms=3, color=colour, label=f"{method} front ({len(front)})")
            if not presets.empty:
                mine = presets[presets["method"] == method]
                ax.scatter(mine[x], mine[y], marker="*", s=90, color=colour, edgecolors="black", linewidths=0.6,
                           zorder=5)
                if i == 0:
                    for _, row in mine.iterrows():
                        ax.annotate(row["preset"] + ("" if row["fits"] else " (does not fit)"), (row[x], row[y]),
                                    fontsize=7, xytext=(4, 4), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(LABELS.get(x, x))
        ax.set_ylabel(LABELS.get(y, y))
        ax.set_title(f"{model}: {LABELS.get(y, y).split(' (')[0]} vs latency", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # nothing fits: no front, no legend
            ax.legend(fontsize=7, loc="best")
    fig.suptitle(title + "  (stars: presets, the paper's accelerator first; faint: a sample of the fitting points)",
                 fontsize=8)
    fig.tight_layout()
    return fig

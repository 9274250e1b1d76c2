"""``sweep.png`` of ``python -m bench.sweep``: one panel per hardware parameter, SphereFed's latency,
peak-memory and energy saving against FedAvg per value and model, the paper's claims as red lines."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from bench.lib.paper import LATENCY_SAVING, MEMORY_SAVING

def plot_sweep(frame: pd.DataFrame):
    """One panel per parameter: latency, memory and energy saving (%) per value, per model."""
    parameters = list(dict.fromkeys(frame["parameter"]))
    widths = [3 if p == "energy" else 1 for p in parameters]  # the energy panel has 11 values
    fig, axes = plt.subplots(3, len(parameters), figsize=(3.2 * sum(widths), 9), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for col, parameter in enumerate(parameters):
        part = frame[frame["parameter"] == parameter]
        for row, (metric, paper, label) in enumerate((
            ("latency_saving_pct", LATENCY_SAVING.up_to_pct, "latency saving (%)"),
            ("memory_saving_pct", MEMORY_SAVING.up_to_pct, "peak-memory saving (%)"),
            ("energy_saving_pct", None, "energy saving (%)"),
        )):
            ax = axes[row][col]
            table = part.pivot(index="value", columns="model", values=metric).reindex(list(dict.fromkeys(part["value"])))
            table.plot.bar(ax=ax, rot=30, fontsize=7, legend=(col == 0))
            if paper is not None:  # the paper reports no energy
                ax.axhline(paper, color="red", linestyle="--", linewidth=1, label=f"paper, up to {paper}%")
            ax.axhline(0, color="black", linewidth=0.5)
            ax.set_title(parameter if row == 0 else "", fontsize=9)
            ax.set_xlabel("")
            ax.set_ylabel(label if col == 0 else "", fontsize=8)
            if col == 0:
                ax.legend(fontsize=7)
    fig.suptitle("SphereFed vs FedAvg, one local training step: saving as each unpublished parameter varies",
                 fontsize=10)
    fig.tight_layout()
    return fig

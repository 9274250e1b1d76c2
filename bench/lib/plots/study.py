"""An accuracy study's curves (``curves_<model>.png``): test accuracy against the round, the modeled
wall time, the clients' device energy and the bytes exchanged, one row per data setting; per
method, the mean over the evaluation seeds as a line and mean ± one sample standard deviation as a
band (the x of a cost axis: the mean cumulative cost of that round over the seeds). A calibrated
method is drawn dashed; its last point is the calibration after the final round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from bench.lib.plots import save

AXES = (("round", "round", 1.0), ("cum_wall_s", "modeled wall time (s)", 1.0),
        ("cum_energy_j", "clients' device energy (J)", 1.0), ("cum_bytes", "bytes exchanged (MB)", 1e-6))


def mean_band(curves: pd.DataFrame, x: str) -> pd.DataFrame:
    """Per round of one method: the mean of ``x`` and the mean and sample std of the accuracy over seeds."""
    evaluated = curves[curves["accuracy_pct"].notna()]
    grouped = evaluated.groupby("round", sort=True)
    return pd.DataFrame({"x": grouped[x].mean(), "mean": grouped["accuracy_pct"].mean(),
                         "std": grouped["accuracy_pct"].std().fillna(0.0), "n": grouped["accuracy_pct"].count()})


def study_figure(curves: pd.DataFrame, model: str, settings: Sequence[str], methods: Sequence[str]):
    """The figure of one model (module doc); ``curves`` is the study's ``curves.csv`` as a frame."""
    fig, axes = plt.subplots(len(settings), len(AXES), figsize=(4.0 * len(AXES), 3.2 * len(settings)), squeeze=False)
    colors = {m: f"C{i}" for i, m in enumerate(methods)}
    for row, setting in enumerate(settings):
        here = curves[(curves["model"] == model) & (curves["setting"] == setting)]
        for col, (key, label, scale) in enumerate(AXES):
            ax = axes[row][col]
            for method in methods:
                mine = here[here["method"] == method]
                if mine.empty:
                    continue
                band = mean_band(mine, key)
                calibrated = (mine["stage"] == "calibration").any()
                ax.plot(band["x"] * scale, band["mean"], color=colors[method], label=f"{method} (n={band['n'].max()})",
                        linestyle="--" if calibrated else "-", linewidth=1.2 if calibrated else 2.0)
                ax.fill_between(band["x"] * scale, band["mean"] - band["std"], band["mean"] + band["std"],
                                color=colors[method], alpha=0.15, linewidth=0)
            ax.set_xlabel(label)
            ax.set_ylabel("test accuracy (%)")
            ax.set_title(f"{model}, {setting}: accuracy vs {label.split(' (')[0]}", fontsize=8)
            ax.grid(alpha=0.3)
        axes[row][0].legend(fontsize=6)
    fig.suptitle(f"{model}: mean over seeds (line), ± one sample std (band)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_study(out: Path, curves: pd.DataFrame, models: Sequence[str], settings: Sequence[str],
               methods: Sequence[str]) -> list[Path]:
    """``curves_<model>.png`` of every model with curves, into ``out``; returns the paths."""
    paths = []
    for model in models:
        if (curves["model"] == model).any():
            paths.append(save(study_figure(curves, model, settings, methods), Path(out) / f"curves_{model}.png", dpi=100))
    return paths

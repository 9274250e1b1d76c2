"""All figures of a ``bench.run`` folder, regenerated from its saved data (``summary.json``,
``breakdown.csv``, ``rounds.csv``); nothing is recomputed."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from bench.lib.plots import save
from bench.lib.plots.breakdown import block_breakdown, read_breakdown
from bench.lib.plots.fig5 import FIG5_PNG, fig5
from bench.lib.results import load_summary

def run_figures(run_dir: Path) -> list[tuple[object, Path]]:
    """(figure, path) of ``fig5.png`` and every ``breakdown_<model>.png``, drawn from the checked
    inputs; nothing written. A model with no training method in the run (calibrations only) has no
    per-block figure."""
    run_dir = Path(run_dir)
    summary = load_summary(run_dir)
    frame = read_breakdown(run_dir)
    figures = []
    try:
        figures.append((fig5(summary), run_dir / FIG5_PNG))
        for model in summary["models"]:
            if summary["models"][model]["training"]:
                figures.append((block_breakdown(frame, model, float(summary["hardware"]["clock_hz"])),
                                run_dir / f"breakdown_{model}.png"))
    except BaseException:
        for fig, _ in figures:
            plt.close(fig)
        raise
    return figures


def plot_run(run_dir: Path) -> list[Path]:
    """Write every figure of a results folder from its saved data (all drawn before the first is
    written); returns the PNG paths."""
    return [save(fig, path) for fig, path in run_figures(run_dir)]

"""Every figure of a ``bench.run`` folder, drawn from its saved data (``summary.json``,
``breakdown.csv``, ``rounds.csv``); nothing is recomputed. ``run_figures`` is the one list of a
run's figures: ``bench.run`` writes it (``plot_run``), ``python -m bench.plots`` redraws it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt

from bench.lib.plots import save
from bench.lib.plots.breakdown import block_breakdown, read_breakdown
from bench.lib.plots.compare_hw import compared_models, comparison_figure, comparison_path
from bench.lib.plots.fig5 import FIG5_PNG, fig5
from bench.lib.plots.tta import TTA_PNG, read_rounds, tta_figure
from bench.lib.results import load_summary


@dataclass(frozen=True)
class RunFigure:
    """One drawn figure of a run folder (nothing written yet), the file it goes to and its resolution."""

    figure: object
    path: Path
    dpi: int = 120


def run_figures(run_dir: Path) -> list[RunFigure]:
    """Every figure of a run folder, drawn from the checked inputs (every input read first); nothing
    written:

    * ``fig5.png``: SphereFed's Fig. 5 panels (``bench.lib.plots.fig5``);
    * ``breakdown_<model>.png``: one training step's time and energy per block, for each model with a
      training method (calibrations only: none) (``bench.lib.plots.breakdown``);
    * ``tta.png``: accuracy against modeled time, energy and bytes (``bench.lib.plots.tta``);
    * ``hardware_<model>.png``: for each model when the run priced several accelerators
      (``--hw A.toml B.toml ...``) (``bench.lib.plots.compare_hw``).
    """
    run_dir = Path(run_dir)
    summary = load_summary(run_dir)
    frame = read_breakdown(run_dir)
    rounds = read_rounds(run_dir)
    figures = []
    try:
        figures.append(RunFigure(fig5(summary), run_dir / FIG5_PNG))
        for model in summary["models"]:
            if summary["models"][model]["training"]:
                figures.append(RunFigure(block_breakdown(frame, model, float(summary["hardware"]["clock_hz"])),
                                         run_dir / f"breakdown_{model}.png"))
        figures.append(RunFigure(tta_figure(summary, rounds), run_dir / TTA_PNG, dpi=110))
        figures += [RunFigure(comparison_figure(summary, model), comparison_path(run_dir, model), dpi=110)
                    for model in compared_models(summary)]
    except BaseException:
        for drawn in figures:
            plt.close(drawn.figure)
        raise
    return figures


def plot_run(run_dir: Path) -> list[Path]:
    """Write every figure of a run folder (``run_figures``: all drawn before the first is written);
    returns the PNG paths."""
    return [save(drawn.figure, drawn.path, dpi=drawn.dpi) for drawn in run_figures(run_dir)]

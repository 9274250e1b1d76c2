"""Every figure of a ``bench.run`` folder, drawn from its saved data (``summary.json``,
``breakdown.csv``, ``rounds.csv``), and of a ``bench.fl`` folder (``results.json``, ``rounds.csv``);
nothing is recomputed. ``run_figures`` is the one list of a run's figures: ``bench.run`` and
``bench.fl`` write it (``plot_run``), ``python -m bench.plots`` redraws it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from bench.lib.plots import save
from bench.lib.plots.breakdown import block_breakdown, read_breakdown
from bench.lib.plots.compare_hw import compared_models, comparison_figure, comparison_path
from bench.lib.plots.fig5 import FIG5_PNG, fig5
from bench.lib.plots.fleet import check_fleet_rounds, fleet_figure, fleet_png, fleet_title
from bench.lib.plots.tta import TTA_PNG, read_rounds, tta_figure
from bench.lib.results import FL_RESULTS, ROUNDS_CSV, SUMMARY, ResultsError, load_summary


@dataclass(frozen=True)
class RunFigure:
    """One drawn figure of a run folder (nothing written yet), the file it goes to and its resolution."""

    figure: object
    path: Path
    dpi: int = 120


def run_figures(run_dir: Path) -> list[RunFigure]:
    """Every figure of a ``bench.run`` folder (``summary.json``) or a ``bench.fl`` folder
    (``results.json``: ``fl_figures``), drawn from the checked inputs (every input read first);
    nothing written. A ``bench.run`` folder's:

    * ``fig5.png``: SphereFed's Fig. 5 panels (``bench.lib.plots.fig5``);
    * ``breakdown_<model>.png``: one training step's time and energy per block, for each model with a
      training method (calibrations only: none) (``bench.lib.plots.breakdown``);
    * ``tta.png``: accuracy against modeled time, energy and bytes (``bench.lib.plots.tta``);
    * ``hardware_<model>.png``: for each model when the run priced several accelerators
      (``--hw A.toml B.toml ...``) (``bench.lib.plots.compare_hw``);
    * ``fleet_<model>.png``: for each model whose accuracy runs were on a fleet (``--fleet``): accuracy
      and each round's arrivals and drops against the modeled wall time (``bench.lib.plots.fleet``).
    """
    run_dir = Path(run_dir)
    if not (run_dir / SUMMARY).exists() and (run_dir / FL_RESULTS).exists():
        return fl_figures(run_dir)
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
        fleets = {model: s["fleet"] for model, s in summary["models"].items() if "fleet" in s}
        if fleets:
            check_fleet_rounds(rounds, run_dir / ROUNDS_CSV)
        figures += [RunFigure(fleet_figure(rounds[rounds["model"] == model], fleet_title(model, fleet),
                                           _targets(summary["models"][model]["time_to_accuracy"]["target_accuracy_pct"])),
                              run_dir / fleet_png(model), dpi=110) for model, fleet in fleets.items()]
    except BaseException:
        for drawn in figures:
            plt.close(drawn.figure)
        raise
    return figures


def fl_figures(run_dir: Path) -> list[RunFigure]:
    """A ``bench.fl`` folder's figures: ``fleet_<model>.png`` when its run was on a fleet
    (``results.json`` has ``fleet``), none otherwise; every input read and checked first."""
    path = Path(run_dir) / FL_RESULTS
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        fleet, model = doc.get("fleet"), doc["config"]["model"]
        targets = [float(t) for t in doc.get("targets_accuracy_pct", [])]  # older folders: none
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ResultsError(f"{path} cannot be read as a bench.fl results file ({type(exc).__name__}: {exc}); "
                           "rerun `python -m bench.fl`") from None
    if fleet is None:
        return []
    rounds = read_csv(Path(run_dir) / ROUNDS_CSV)
    check_fleet_rounds(rounds, Path(run_dir) / ROUNDS_CSV)
    return [RunFigure(fleet_figure(rounds, fleet_title(model, fleet), targets), Path(run_dir) / fleet_png(model),
                      dpi=110)]


def _targets(target_pct: float | None) -> tuple[float, ...]:
    return () if target_pct is None else (float(target_pct),)


def read_csv(path: Path) -> pd.DataFrame:
    """A results CSV, or a ResultsError naming it."""
    try:
        return pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path} cannot be read ({exc}); rerun the command that wrote it") from None


def plot_run(run_dir: Path) -> list[Path]:
    """Write every figure of a run folder (``run_figures``: all drawn before the first is written);
    returns the PNG paths."""
    return [save(drawn.figure, drawn.path, dpi=drawn.dpi) for drawn in run_figures(run_dir)]

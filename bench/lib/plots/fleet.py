"""A run on a fleet (docs/fleets.md): ``fleet_<model>.png``, who arrived in each round and what the
global model learnt from them, against the modeled wall time.

Top panel: the test accuracy after each round against the cumulative modeled wall time
(``cum_wall_s``), one line per method (a calibrated method, CCVR or FFC, dashed over its base
method's line, its last point the calibration), and the run's time-to-accuracy targets as grey
dashed lines. Bottom row, one panel per training method: each
round a bar spanning its wall time (from ``cum_wall_s - round_wall_s`` to ``cum_wall_s``), its
height the clients sampled: the clients that arrived and were aggregated (``clients``) at the
bottom, the dropped ones stacked above by reason (``dropped_unavailable``, ``dropped_memory``,
``dropped_deadline``, ``dropped_surplus``). A calibrated method trained the same rounds as its base
method (the same plan), so it has no panel of its own. Drawn from ``rounds.csv`` only; nothing is
recomputed.

Reading it: a deadline that cuts slow clients makes the bars narrower (shorter rounds) and their
green part shorter (fewer updates aggregated); whether that reaches a given accuracy sooner is the
top panel's question.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from bench.lib.results import ResultsError
from workloads.cost.system import DROPPED_COLUMNS

FLEET_COLUMNS = ("method", "round", "stage", "accuracy", "clients", "sampled", *DROPPED_COLUMNS, "round_wall_s",
                 "collect_s", "cum_wall_s")
"""The ``rounds.csv`` columns the figure reads."""
PARTS = (("clients", "arrived", "tab:green"), ("dropped_unavailable", "unavailable", "tab:gray"),
         ("dropped_memory", "memory", "tab:purple"), ("dropped_deadline", "deadline", "tab:red"),
         ("dropped_surplus", "surplus", "tab:orange"))
"""The stacked parts of a round's bar, bottom first: (column, legend label, colour)."""


def fleet_png(model: str) -> str:
    """The file name of a model's fleet figure."""
    return f"fleet_{model}.png"


def check_fleet_rounds(rounds: pd.DataFrame, source: Path) -> None:
    """The columns the figure draws, numbers in every training row (ResultsError naming ``source``)."""
    missing = [c for c in FLEET_COLUMNS if c not in rounds.columns]
    if missing:
        raise ResultsError(f"{source} lacks column(s) {missing} of a fleet run; rerun the command that wrote it")
    train = rounds[rounds["stage"] == "train"]
    for column in FLEET_COLUMNS[4:]:
        if not pd.api.types.is_numeric_dtype(train[column]) or train[column].isna().any():
            raise ResultsError(f"{source}: column {column} is not a number in every training round (a truncated "
                               "file?); rerun the command that wrote it")


def participation_methods(rounds: pd.DataFrame) -> list[str]:
    """The methods that get a participation panel: those without a calibration stage (a calibrated
    method trained its base method's rounds), or every method when all are calibrated."""
    methods = list(dict.fromkeys(rounds["method"]))
    calibrated = set(rounds.loc[rounds["stage"] == "calibration", "method"])
    return [m for m in methods if m not in calibrated] or methods


def fleet_title(model: str, fleet: dict) -> str:
    """The figure's title: the model, the fleet and its round rule as results record it
    (``Fleet.describe``: the deadline and over-commitment, and which of them the run overrode)."""
    overridden = fleet.get("overridden") or []
    return (f"{model} on fleet {fleet['name']}: deadline {fleet['deadline_s']} s, over-commitment "
            f"{fleet['overcommit']:g}" + (f" ({', '.join(overridden)} set by the run)" if overridden else ""))


def fleet_figure(rounds: pd.DataFrame, title: str, targets_pct: Sequence[float] = ()):
    """The fleet figure of one model's checked ``rounds.csv`` rows (nothing written); ``targets_pct``:
    the accuracies the run's time-to-accuracy is measured to (bench.run's target, a preset's
    ``[targets] accuracy_pct``)."""
    panels = participation_methods(rounds)
    fig = plt.figure(figsize=(max(6.0, 3.6 * len(panels)), 6.4))
    grid = fig.add_gridspec(2, len(panels), height_ratios=(1.2, 1.0))
    top = fig.add_subplot(grid[0, :])
    for method, points in rounds[rounds["accuracy"].notna()].groupby("method", sort=False):
        calibrated = (points["stage"] == "calibration").any()
        top.plot(points["cum_wall_s"], 100 * points["accuracy"], label=method,
                 **({"linestyle": "--", "marker": "x", "markersize": 6, "linewidth": 1.2} if calibrated
                    else {"marker": "o", "markersize": 3, "linewidth": 2.0}))
    for i, target in enumerate(targets_pct):
        top.axhline(target, color="grey", linestyle="--", linewidth=1, label="target" if i == 0 else None)
    top.set_ylabel("test accuracy (%)")
    top.set_title("accuracy after each round" + (" (dashed: the time-to-accuracy target)" if targets_pct else ""),
                  fontsize=9)
    top.grid(alpha=0.3)
    top.legend(fontsize=7)
    first = None
    for col, method in enumerate(panels):
        ax = fig.add_subplot(grid[1, col], sharex=top, sharey=first)
        first = first or ax
        train = rounds[(rounds["method"] == method) & (rounds["stage"] == "train")]
        start = train["cum_wall_s"] - train["round_wall_s"]
        bottom = pd.Series(0.0, index=train.index)
        for column, label, color in PARTS:
            ax.bar(start, train[column], width=train["round_wall_s"], bottom=bottom, align="edge", color=color,
                   edgecolor="white", linewidth=0.5, label=label)
            bottom = bottom + train[column]
        ax.set_xlabel("modeled wall time (s)")
        ax.set_title(f"{method}: clients per round", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    first.set_ylabel("sampled clients")
    first.set_ylim(0, 1.45 * max(float(rounds["sampled"].max()), 1.0))  # room for the legend above the bars
    first.legend(fontsize=6, loc="upper left", ncol=3)
    top.set_xlabel("modeled wall time (s)")
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return fig

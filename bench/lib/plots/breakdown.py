"""Where one local training step's time and energy go, per block of the model
(``breakdown_<model>.png``): stacked by kind of work and by energy component, one panel per method,
from a ``bench.run`` folder's ``breakdown.csv`` (``bench.lib.run.breakdown``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from accel_sim.energy import COMPONENTS
from bench.lib.results import BREAKDOWN_COLUMNS, BREAKDOWN_CSV, COST_COLUMNS, ResultsError

def read_breakdown(run_dir: Path) -> pd.DataFrame:
    """``breakdown.csv`` of a results folder, checked: readable, every column, numbers in every
    cost column (a truncated or empty file fails here, before anything is written)."""
    path = Path(run_dir) / BREAKDOWN_CSV
    if not path.is_file():
        raise ResultsError(f"{path} not found: give a folder written by `python -m bench.run`")
    try:
        frame = pd.read_csv(path, keep_default_na=False, dtype={"block": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise ResultsError(f"{path} cannot be read ({str(exc).splitlines()[0]}); rerun `python -m bench.run`") from None
    missing = [c for c in BREAKDOWN_COLUMNS if c not in frame.columns]
    if missing:
        raise ResultsError(f"{path} lacks column(s) {missing}; rerun `python -m bench.run`")
    for column in COST_COLUMNS:
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.isna().any():
            raise ResultsError(f"{path}: column {column} is not a number in every row (a truncated file?); "
                               "rerun `python -m bench.run`")
        frame[column] = values
    return frame


def latency_stacks(rows: pd.DataFrame, clock_hz: float) -> pd.DataFrame:
    """Blocks x segments latency (s) of one model and method: compute per kind of work, then all
    memory stalls as one segment; blocks in model order."""
    table = rows.pivot_table(index="block", columns="kind", values="compute_cycles", aggfunc="sum", fill_value=0,
                             sort=False)
    table = table[list(dict.fromkeys(rows["kind"]))]
    table["memory_stall"] = rows.groupby("block", sort=False)["stall_cycles"].sum()
    return table.reindex(list(dict.fromkeys(rows["block"]))).fillna(0) / clock_hz


def energy_stacks(rows: pd.DataFrame) -> pd.DataFrame:
    """Blocks x energy components (J) of one model and method, blocks in model order."""
    columns = [f"energy_{c}_j" for c in COMPONENTS]
    table = rows.groupby("block", sort=False)[columns].sum()
    return table.rename(columns=dict(zip(columns, COMPONENTS)))


def _stacked(ax, table: pd.DataFrame, scale: float, colors: dict) -> None:
    left = np.zeros(len(table))
    y = np.arange(len(table))
    for column in table.columns:
        values = table[column].to_numpy(dtype=float) * scale
        ax.barh(y, values, left=left, color=colors[column])
        left += values
    for row, total in zip(y, left):  # every bar's total, so that small blocks (the classifier) read too
        ax.text(total, row, f" {total:.3g}", va="center", fontsize=6)
    ax.margins(x=0.12)
    ax.set_yticks(y, list(table.index), fontsize=7)
    if not ax.yaxis_inverted():
        ax.invert_yaxis()


def block_breakdown(frame: pd.DataFrame, model: str, clock_hz: float, region: str = "training"):
    """One local training step of ``model``, one column of panels per method: latency per block
    stacked by kind of work (compute) plus memory stall, and energy per block stacked by component."""
    rows = frame[(frame["model"] == model) & (frame["region"] == region)]
    if rows.empty:
        raise ResultsError(f"{BREAKDOWN_CSV} has no {region} rows for model {model!r}")
    methods = list(dict.fromkeys(rows["method"]))
    kinds = list(dict.fromkeys(rows["kind"])) + ["memory_stall"]
    palette = plt.get_cmap("tab10").colors
    kind_colors = {k: palette[i % len(palette)] for i, k in enumerate(kinds)}
    energy_colors = {c: plt.get_cmap("Set2").colors[i] for i, c in enumerate(COMPONENTS)}
    blocks = list(dict.fromkeys(rows["block"]))  # every method's bars on the same rows
    fig, axes = plt.subplots(2, len(methods), figsize=(5 * len(methods) + 2, 2 * (0.22 * len(blocks) + 1.2)),
                             squeeze=False, sharex="row", sharey=True)
    for col, method in enumerate(methods):
        mine = rows[rows["method"] == method]
        latency = latency_stacks(mine, clock_hz).reindex(blocks, fill_value=0.0)
        energy = energy_stacks(mine).reindex(blocks, fill_value=0.0)
        _stacked(axes[0][col], latency, 1e3, kind_colors)
        axes[0][col].set_xlabel("latency per training step (ms)", fontsize=8)
        axes[0][col].set_title(f"{method}: {latency.to_numpy().sum() * 1e3:.4g} ms", fontsize=9)
        _stacked(axes[1][col], energy, 1e3, energy_colors)
        axes[1][col].set_xlabel("energy per training step (mJ)", fontsize=8)
        axes[1][col].set_title(f"{method}: {energy.to_numpy().sum() * 1e3:.4g} mJ", fontsize=9)
    for ax, colors in ((axes[0][-1], kind_colors), (axes[1][-1], energy_colors)):
        ax.legend(handles=[Patch(color=c, label=k) for k, c in colors.items()], fontsize=7,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{model}: where one local training step's time and energy go, per block", fontsize=10)
    fig.tight_layout()
    return fig

"""Figures of a results folder, regenerated from ``summary.json`` and ``layers.csv`` alone.

``python -m bench.plots results/<run>`` rewrites ``fig5.png`` (SphereFed Fig. 5 (a)-(e) style:
normalized communication, peak memory, one-round latency, calibration latency, accuracy; models on
the x axis, one bar per method; plus (f) one-round training energy and (g) calibration energy,
which the paper does not report), ``breakdown_<model>.png`` (latency and energy of one local
training step per block of the model, stacked by kind of work and by energy component, one panel
per method; ``bench.breakdown``) from ``summary.json`` and ``breakdown.csv``, and ``tta.png``
(``bench.tta``, from ``rounds.csv``). Nothing is recomputed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import pandas as pd  # noqa: E402

from accel_sim.energy import COMPONENTS  # noqa: E402
from bench.results import BREAKDOWN_COLUMNS, BREAKDOWN_CSV, COST_COLUMNS, ResultsError, load_summary  # noqa: E402
from bench.tta import read_rounds, save_tta, tta_figure  # noqa: E402
from workloads import cli  # noqa: E402
from workloads.atomic import atomic_write  # noqa: E402

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
    fig.suptitle(f"Efficiency on the modeled accelerator ({summary['hardware_label']})",
                 fontsize=10)
    fig.tight_layout()
    return fig


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


def _save(fig, path: Path) -> Path:
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    finally:
        plt.close(fig)


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
    return [_save(fig, path) for fig, path in run_figures(run_dir)]


@cli.command("interrupted; the figures written so far are complete, the others unchanged")
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m bench.plots", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a results folder written by python -m bench.run")
    args = parser.parse_args(argv)
    try:
        if not args.run_dir.is_dir():
            raise ResultsError(f"{args.run_dir} is not a folder: give a folder written by `python -m bench.run`")
        cli.check_writable(args.run_dir, "run_dir")
        summary = load_summary(args.run_dir)
        tta = tta_figure(summary, read_rounds(args.run_dir))  # every input read and checked first
        figures = run_figures(args.run_dir)
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for fig, path in figures:
        print(_save(fig, path))
    print(save_tta(tta, args.run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())

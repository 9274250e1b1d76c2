"""Time-to-accuracy: the printed table and ``tta.png`` of a results folder.

``tta.png`` has one row of three panels per model: test accuracy against the modeled wall time,
the clients' device energy and the bytes exchanged, cumulative over the rounds of the accuracy run
(``rounds.csv``), one line per method, with the target accuracy as a grey dashed line. Where a
reference study covers the run (``bench.lib.run.reference``), each method's reference mean ± std over
seeds is a diamond with an error bar at the run's last point, and the same setting's longer
(converged) reference run its dotted mean curve. Reading it:
the method whose line crosses the target furthest to the left needs the least of that resource; a
calibrated method (CCVR, FFC) is drawn dashed over its base method's line, its last point the
calibration after the final round (docs/rounds.md).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from bench.lib.results import ROUNDS_CSV, ResultsError

TTA_PNG = "tta.png"
AXES = (("cum_wall_s", "modeled wall time (s)", 1.0),
        ("cum_energy_j", "clients' device energy (J)", 1.0),
        ("cum_bytes", "bytes exchanged (MB)", 1e-6))


ROUNDS_NUMERIC = ("cum_wall_s", "cum_energy_j", "cum_bytes")  # every row has them; accuracy may be empty


def read_rounds(run_dir: Path) -> pd.DataFrame:
    """``rounds.csv`` of a results folder, checked: readable, the columns ``tta.png`` draws, and
    numbers in every row (a truncated file fails here, before anything is drawn or written)."""
    path = Path(run_dir) / ROUNDS_CSV
    try:
        rounds = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path} cannot be read ({exc}); rerun `python -m bench.run`") from None
    missing = [c for c in ("model", "method", "stage", "accuracy", *ROUNDS_NUMERIC) if c not in rounds.columns]
    if missing:
        raise ResultsError(f"{path} lacks column(s) {missing}; rerun `python -m bench.run`")
    for column in ROUNDS_NUMERIC:
        if not pd.api.types.is_numeric_dtype(rounds[column]) or rounds[column].isna().any():
            raise ResultsError(f"{path}: column {column} is not a number in every row (a truncated file?); "
                               "rerun `python -m bench.run`")
    return rounds


def tta_figure(summary: dict, rounds: pd.DataFrame):
    """The ``tta.png`` figure of a checked summary and rounds table (nothing written)."""
    models = list(summary["models"])
    fig, axes = plt.subplots(len(models), len(AXES), figsize=(4.2 * len(AXES), 3.4 * len(models)), squeeze=False)
    for row, model in enumerate(models):
        target = summary["models"][model]["time_to_accuracy"]["target_accuracy_pct"]
        own = rounds[(rounds["model"] == model) & rounds["accuracy"].notna()]
        for col, (key, label, scale) in enumerate(AXES):
            ax = axes[row][col]
            reference = summary["models"][model].get("reference") or {}
            for method, points in own.groupby("method", sort=False):
                calibrated = (points["stage"] == "calibration").any()  # drawn dashed over its base method
                line, = ax.plot(points[key] * scale, 100 * points["accuracy"], label=method,
                                **({"linestyle": "--", "marker": "x", "markersize": 6, "linewidth": 1.2} if calibrated
                                   else {"marker": "o", "markersize": 3, "linewidth": 2.5, "alpha": 0.8}))
                reference_band(ax, reference, method, points[key].iloc[-1] * scale, key, scale, line.get_color())
            if target is not None:
                ax.axhline(target, color="grey", linestyle="--", linewidth=1)
            ax.set_xlabel(label)
            ax.set_ylabel("test accuracy (%)")
            ax.set_title(f"{model}: accuracy vs {label.split(' (')[0]}", fontsize=9)
            ax.grid(alpha=0.3)
        axes[row][0].legend(fontsize=7)
    fig.suptitle(f"time to accuracy (target dashed; diamond: a reference study's mean ± std over seeds, dotted: "
                 f"its longer run's mean curve); {summary['hardware_label']}", fontsize=8)
    fig.tight_layout()
    return fig


def reference_band(ax, reference: dict, method: str, x_end: float, key: str, scale: float, color: str) -> None:
    """The reference study's band of ``method`` (``bench.lib.run.reference``): its mean ± std over seeds
    as an error bar at the run's last point, and the converged reference's mean curve, dotted."""
    ref = reference.get("methods", {}).get(method)
    if ref is not None:
        ax.errorbar([x_end], [ref["mean"]], yerr=[[ref["std"] or 0.0], [ref["std"] or 0.0]], color=color, capsize=4,
                    marker="D", markersize=4, linewidth=1.5, alpha=0.9)
    conv = (reference.get("converged_reference") or {}).get("methods", {}).get(method)
    if conv is not None:
        xs = conv["round"] if key == "round" else [v * scale for v in conv[key]]
        ax.plot(xs, conv["mean_pct"], color=color, linestyle=":", linewidth=1.0, alpha=0.8)

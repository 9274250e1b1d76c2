"""``hardware_<model>.png`` of a ``bench.run --hw A.toml B.toml ...`` folder: one panel per figure,
accelerators on the x axis, one bar per method."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from bench.lib.run.compare_hw import ROWS


def comparison_path(folder: Path, model: str) -> Path:
    """``hardware_<model>.png`` in ``folder`` (``:`` of a ``package.module:factory`` model written as ``-``)."""
    return Path(folder) / f"hardware_{model.replace(':', '-')}.png"


def comparison_figure(summary: dict, model: str):
    """``model``'s figure of the summary's ``hardware_comparison`` block (nothing written): one panel
    per figure (``ROWS``), accelerators on the x axis, one bar per method."""
    block = summary["hardware_comparison"]
    labels = block["labels"]
    fig, axes = plt.subplots(1, len(ROWS), figsize=(4 * len(ROWS), 3.6), squeeze=False)
    for ax, (section, metric, _base, unit, scale) in zip(axes[0], ROWS):
        methods = list(dict.fromkeys(m for label in labels
                                     for m in block["by_hardware"][label]["models"][model][section]))
        x = np.arange(len(labels))
        shown = []
        for i, method in enumerate(methods):
            values = np.array([block["by_hardware"][label]["models"][model][section].get(method, {})
                               .get(metric, math.nan) for label in labels]) * scale
            shown += [v for v in values if v > 0]
            ax.bar(x + (i - (len(methods) - 1) / 2) * 0.8 / max(len(methods), 1), values,
                   0.8 / max(len(methods), 1), label=method)
        ax.set_xticks(x, labels, rotation=20, fontsize=8)
        if shown and max(shown) > 10 * min(shown):  # accelerators apart by orders of magnitude
            ax.set_yscale("log")
        ax.set_title(f"{section} {metric}", fontsize=9)
        ax.set_ylabel(unit)
        if methods:
            ax.legend(fontsize=7)
    fig.suptitle(f"{model}: one local step and calibration on each accelerator")
    fig.tight_layout()
    return fig


def compared_models(summary: dict) -> list[str]:
    """The models of the summary's ``hardware_comparison`` block (none when the run priced one accelerator)."""
    block = summary.get("hardware_comparison")
    return list(next(iter(block["by_hardware"].values()))["models"]) if block else []

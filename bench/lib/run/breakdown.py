"""Where the time and energy of a step go: per block of the model and per kind of work.

A *block* groups a model's layers the way its architecture table does (SphereFed appendix 0.F.1):
the module path without the model's ``body.`` prefix, cut after its first numeric index, else its
first name. MobileNetV2 ``body.blocks.3.depthwise.conv`` -> ``blocks.3`` (one inverted-residual
block), ResNet18 ``body.layer2.1.conv1`` -> ``layer2.1`` (one basic block), ConvNet
``body.conv3.norm`` -> ``conv3``, ``body.stem.conv`` -> ``stem``, ``classifier`` -> ``classifier``;
ops outside any module (the loss) form ``(outside modules)``; a parameter's optimizer update
belongs to the module that owns the parameter (the trace's layer). Every block is shown, the
classifier included.

A *kind* of work says which unit did it and for which pass: ``array_fwd``, ``array_dx``,
``array_dw`` (GEMMs on the systolic array, by role), ``array_<role>_grouped`` (GEMMs with
groups > 1: depthwise and grouped convolutions, batched matmuls, which map poorly onto the array),
``special_unit_<phase>`` (vector work: ``fwd``, ``bwd``, ``update``, ``calibration``),
``linalg_<phase>`` (factorizations and solves).
Each row of the breakdown keeps its compute and its memory-stall cycles apart, and its energy by
component (``accel_sim.energy``), so the figure can stack latency as compute per kind plus
memory stall, and energy as MAC / SRAM / DRAM / special unit / static.
"""

from __future__ import annotations

import pandas as pd

from accel_sim.report import CostReport
from bench.lib.results import BLOCK_KEYS, BREAKDOWN_COLUMNS, COST_COLUMNS

OUTSIDE_MODULES = "(outside modules)"
UNITS = {"gemm": "array", "vector": "special_unit", "linalg": "linalg"}


def block_of(layer: str) -> str:
    """The block a layer belongs to (module docstring)."""
    if not layer:
        return OUTSIDE_MODULES
    parts = layer.split(".")
    if parts[0] == "body" and len(parts) > 1:
        parts = parts[1:]
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return parts[0]


def kind_of(work: str, phase: str, gemm_groups: int = 1) -> str:
    """The kind of work of an op from its ``work`` ("gemm:dw", "vector:norm", "linalg:solve",
    "none"), phase and GEMM groups: ``array_<role>`` for GEMMs (``array_<role>_grouped`` with
    groups > 1), ``<unit>_<phase>`` otherwise; "" for free ops."""
    unit, _, op = work.partition(":")
    if unit == "gemm":
        return f"array_{op}_grouped" if gemm_groups > 1 else f"array_{op}"
    return f"{UNITS[unit]}_{phase}" if unit in UNITS else ""


def breakdown(ops: pd.DataFrame) -> pd.DataFrame:
    """``ops.csv`` rows summed per model, method, region, block and kind, in the order blocks and
    kinds first appear; free ops (no cycles, no energy) are left out."""
    frame = ops.assign(block=ops["layer"].map(block_of),
                       kind=[kind_of(w, p, g) for w, p, g in zip(ops["work"], ops["phase"], ops["gemm_groups"])])
    frame = frame[frame["kind"] != ""]
    return frame.groupby(list(BLOCK_KEYS), sort=False, as_index=False)[list(COST_COLUMNS)].sum()[list(BREAKDOWN_COLUMNS)]


def energy_by_kind(report: CostReport) -> dict[str, float]:
    """Joules of a priced trace per kind of work (``kind_of``), in the order kinds first appear."""
    out: dict[str, float] = {}
    for c in report.ops:
        kind = kind_of(f"{c.work_kind}:{c.work_op}" if c.work_op else c.work_kind, c.phase, c.gemm_groups)
        if kind:
            out[kind] = out.get(kind, 0.0) + c.energy_j
    return out

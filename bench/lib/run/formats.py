"""The main job's line on number formats: which formats a shipped study trained in, and the cheapest
design that reaches the target with its own format's accuracy, from the shipped explorations priced
with such a study (``python -m bench.dse SPACE --study DIR``; docs/numerics.md). Read from their
``summary.json`` only: nothing is trained or priced here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.lib.run.reference import REFERENCE_DIR, _shown


def explorations(root: Path = REFERENCE_DIR) -> list[dict[str, Any]]:
    """Every shipped exploration priced with a study's per-format accuracy: its folder and study block."""
    out = []
    for path in sorted(root.glob("*/summary.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and str(doc.get("command", "")).startswith("python -m bench.dse") and \
                isinstance(doc.get("study"), dict) and doc["study"].get("best"):
            out.append({**doc["study"], "study_folder": doc["study"]["folder"], "folder": _shown(path.parent)})
    return out


def figures(models: list[str], number_format: str, root: Path = REFERENCE_DIR) -> dict[str, Any]:
    """What the line says (summary.json's ``number_formats``): the shipped explorations of this run's
    models, and the models none covers."""
    found = [e for e in explorations(root) if e["model"] in models]
    return {"run_number_format": number_format, "explorations": found,
            "models_not_studied": [m for m in models if m not in {e["model"] for e in found}]}


def _array(design: str) -> str:
    """``rows=16 cols=32 ... number_format=bf16`` as ``a 16x32 bf16 array`` (the axes a design names)."""
    axes = dict(part.split("=", 1) for part in design.split() if "=" in part)
    shape = f"{axes['rows']}x{axes['cols']} " if "rows" in axes and "cols" in axes else ""
    return f"a {shape}{axes.get('number_format', '')} array".replace("  ", " ")


def format_line(fig: dict[str, Any]) -> str:
    """One line naming the formats studied and each method's cheapest design to the target."""
    parts = [f"number formats: this run trains in {fig['run_number_format']} (--number-format)"]
    if fig["models_not_studied"]:
        parts.append(f"{', '.join(fig['models_not_studied'])} not studied in other formats")
    for e in fig["explorations"]:
        by_design: dict[str, list[str]] = {}
        for method, b in e["best"].items():
            key = "none reaches it" if b is None else \
                f"{_array(b['design'])} ({b['energy_j_to_target']:.3g} J, round {b['round']}, point {b['point']})"
            by_design.setdefault(key, []).append(method)
        best = "; ".join(f"{', '.join(methods)}: {key}" for key, methods in by_design.items())
        parts.append(f"{e['folder']} prices each design with its own format's accuracy ({e['model']} trained in "
                     f"{', '.join(e['formats'])}, {e['seeds']} seeds, {e['setting']}); least energy to "
                     f"{e['target_accuracy_pct']:g} %: {best}")
    return "; ".join(parts)

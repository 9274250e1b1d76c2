"""The main job's line on number formats: which formats a shipped study trained in, and the cheapest
design that reaches the target with its own format's accuracy, from the shipped explorations priced
with such a study (``python -m bench.dse SPACE --study DIR``; docs/numerics.md). Read from their
``summary.json`` only: nothing is trained or priced here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.run.reference import REFERENCE_DIR, _shown


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
            out.append({"folder": _shown(path.parent), **doc["study"]})
    return out


def figures(models: list[str], number_format: str, root: Path = REFERENCE_DIR) -> dict[str, Any]:
    """What the line says (summary.json's ``number_formats``)."""
    found = explorations(root)
    return {"run_number_format": number_format, "explorations": found,
            "models_studied": sorted({e["model"] for e in found}),
            "models_not_studied": [m for m in models if m not in {e["model"] for e in found}]}


def format_line(fig: dict[str, Any]) -> str:
    """One line (wrapped) naming the formats studied and each method's cheapest design to the target."""
    parts = [f"number formats: this run trains in {fig['run_number_format']} (--number-format)"]
    if fig["models_not_studied"]:
        parts.append(f"{', '.join(fig['models_not_studied'])}: not studied in other formats")
    for e in fig["explorations"]:
        best = "; ".join(f"{method} {b['number_format']} ({b['design']}) {b['energy_j_to_target']:.3g} J, round "
                         f"{b['round']}" if b else f"{method} none reaches it"
                         for method, b in e["best"].items())
        parts.append(f"{e['study_folder'] if 'study_folder' in e else e['folder']}: {e['model']} {e['setting']} "
                     f"in {', '.join(e['formats'])} ({e['seeds']} seeds); least energy to {e['target_accuracy_pct']:g} % "
                     f"with each format's own accuracy: {best}")
    return "; ".join(parts)

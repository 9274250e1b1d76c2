"""The main job's line on number formats: which formats a shipped study trained in, and the cheapest
design that reaches the target with its own format's accuracy, from the shipped explorations priced
with such a study (``python -m bench.dse SPACE --study DIR``; docs/numerics.md). Read from their
``summary.json`` only: nothing is trained or priced here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accel_sim.cost_tables import DEFAULT_COST_TABLE
from bench.lib.findings_costs import table_of
from bench.lib.run.reference import REFERENCE_DIR, _shown


def explorations(root: Path = REFERENCE_DIR) -> list[dict[str, Any]]:
    """Every shipped exploration priced with a study's per-format accuracy: its folder, its cost table
    (``findings_costs.table_of``) and study block."""
    out = []
    for path in sorted(root.glob("*/summary.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and str(doc.get("command", "")).startswith("python -m bench.dse") and \
                isinstance(doc.get("study"), dict) and doc["study"].get("best"):
            out.append({**doc["study"], "study_folder": doc["study"]["folder"], "folder": _shown(path.parent),
                        "cost_table": table_of(doc)})
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
    """One line naming the formats studied and each method's cheapest design to the target; the
    explorations of one study under several cost tables (``bench.dse --cost-table``) as one clause,
    each design with its energy's range over the tables."""
    parts = [f"number formats: this run trains in {fig['run_number_format']} (--number-format)"]
    if fig["models_not_studied"]:
        parts.append(f"{', '.join(fig['models_not_studied'])} not studied in other formats")
    groups: dict[str, list[dict[str, Any]]] = {}
    for e in fig["explorations"]:
        groups.setdefault(e["study_folder"], []).append(e)
    for group in groups.values():
        e = group[0]
        tables = ", ".join(x["cost_table"] for x in group)
        priced = f"priced in cost table{'s' if len(group) > 1 else ''} {tables}" if len(group) > 1 or \
            e["cost_table"] != DEFAULT_COST_TABLE else ""
        folders = [x["folder"] for x in group]
        named = folders[0] if len(folders) == 1 else f"{', '.join(folders[:-1])} and {folders[-1]}"
        parts.append(f"{named} price{'s' if len(group) == 1 else ''} each design "
                     f"with its own format's accuracy ({e['model']} trained in {', '.join(e['formats'])}, {e['seeds']} "
                     f"seeds, {e['setting']}{'; ' + priced if priced else ''}); least energy to "
                     f"{e['target_accuracy_pct']:g} %: {_best_designs(group)}")
    return "; ".join(parts)


def _best_designs(group: list[dict[str, Any]]) -> str:
    """Each method's cheapest design over one study's explorations, methods with the same design
    together: ``a 32x64 bfp_m4_g16 array (74.7-74.9 J, round 5, point 130)``; a method whose design
    differs between the cost tables names each table's."""
    by_design: dict[str, list[str]] = {}
    for method in group[0]["best"]:
        bests = [(x["cost_table"], x["best"].get(method)) for x in group]
        designs = {None if b is None else (b["design"], b["round"], b["point"]) for _, b in bests}
        if designs == {None}:
            key = "none reaches it"
        elif len(designs) == 1:
            b = bests[0][1]
            key = f"{_array(b['design'])} ({_energy([x for _, x in bests])} J, round {b['round']}, point {b['point']})"
        else:
            key = ", ".join(f"{table}: none reaches it" if b is None else f"{table}: {_array(b['design'])} "
                            f"({b['energy_j_to_target']:.3g} J, round {b['round']}, point {b['point']})"
                            for table, b in bests)
        by_design.setdefault(key, []).append(method)
    return "; ".join(f"{', '.join(methods)}: {key}" for key, methods in by_design.items())


def _energy(bests: list[dict[str, Any]]) -> str:
    """One design's energy to the target over the cost tables: ``74.8`` or ``74.7-74.9`` (3 digits)."""
    low, high = (f"{f(b['energy_j_to_target'] for b in bests):.3g}" for f in (min, max))
    return low if low == high else f"{low}-{high}"

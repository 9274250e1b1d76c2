"""The format explorations' answer under each cost table (``accel_sim.cost_tables``): per exploration
and method, the cheapest design to the study's target under every table it was rebuilt with
(``python -m bench.dse <space> --study <study> --cost-table <table>``), and the range of its energy
over the tables. Rendered into docs/findings.md by ``bench.lib.findings.render_findings``."""

from __future__ import annotations

from typing import Any, Mapping

from accel_sim.cost_tables import COST_TABLES, DEFAULT_COST_TABLE


def table_of(summary: Mapping[str, Any]) -> str:
    """The cost table an exploration was priced under (explorations before tables: the default)."""
    return summary.get("config", {}).get("cost_table", DEFAULT_COST_TABLE)


def base_name(name: str) -> str:
    """An exploration's folder name without its table's suffix (``mnist5k-formats-dse-epfl28`` ->
    ``mnist5k-formats-dse``)."""
    for table in COST_TABLES:
        if name.endswith(f"-{table}"):
            return name[: -len(table) - 1]
    return name


def cost_tables_section(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The section's lines: one table per exploration rebuilt under more than one cost table; none
    when there is no such exploration."""
    groups: dict[str, dict[str, Mapping[str, Any]]] = {}
    for name, summary in summaries.items():
        if "cells" not in summary:
            groups.setdefault(base_name(name), {})[table_of(summary)] = summary
    groups = {base: by for base, by in groups.items() if len(by) > 1}
    if not groups:
        return []
    lines = ["## The answer under each cost table", "",
             "The cheapest design to each study's target (least energy), per method, with every MAC priced "
             "from each published cost table (docs/accel_sim.md, \"Cost tables\"): the winning format and "
             "design per table, and the range of its energy to the target over the tables.", ""]
    for base, by in groups.items():
        tables = [t for t in COST_TABLES if t in by]
        methods = list(dict.fromkeys(m for s in by.values() for m in s["study"]["best"]))
        lines += [f"### {base}", "",
                  "| method | " + " | ".join(tables) + " | J to target, range | same winner |",
                  "|---|" + "---|" * len(tables) + "---|---|"]
        for method in methods:
            bests = [by[t]["study"]["best"].get(method) or {} for t in tables]
            reached = [b for b in bests if b.get("point") is not None]
            cells = [f"{b['number_format']} (point {b['point']}), {b['energy_j_to_target']:.3g} J"
                     if b.get("point") is not None else "not reached" for b in bests]
            energies = [b["energy_j_to_target"] for b in reached]
            span = f"{min(energies):.3g} – {max(energies):.3g}" if energies else "—"
            same = "yes" if reached and len(reached) == len(bests) and len({b["point"] for b in reached}) == 1 \
                else "no"
            lines.append(f"| {method} | " + " | ".join(cells) + f" | {span} | {same} |")
        lines.append("")
    return lines

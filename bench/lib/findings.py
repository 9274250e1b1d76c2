"""What the shipped studies say, written from their results and nowhere else (docs/findings.md).

Every number, interval and verdict word that the README and docs state about a shipped study
(``results/reference/<name>/``) is rendered here from that study's ``summary.json``; prose written
by hand may explain why, never restate a result. ``render_findings`` writes one section per study
(headed by its folder's name, so ``docs/findings.md#<name>`` links to it) and ``headline`` the
README's short table. Each verdict is re-derived from the p-values beside it before it is written
(``bench.lib.study.verdicts.check``): a summary whose words are stronger than its numbers is
refused, not rendered. ``stale`` lists the generated files that no longer match the results, so a
test fails when a stated number and its data disagree.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from bench.lib.findings_costs import cost_tables_section
from bench.lib.findings_study import FindingsError, study_section, verdict
from bench.lib.study import recheck, verdicts

FINDINGS = Path("docs/findings.md")
README = Path("README.md")
REFERENCE = Path("results/reference")
START, END = "<!-- findings:headline:start -->", "<!-- findings:headline:end -->"
HEADLINE_STUDIES = ("digits", "digits-mobilenetv2", "mnist5k")
"""The studies of the README's headline table, in its order (the ones present are shown)."""


def load(root: Path) -> dict[str, dict[str, Any]]:
    """Every shipped results folder's summary, by folder name (sorted); a study's or an exploration's.
    FindingsError (one line naming the path and the fix) where there is no ``results/reference`` folder,
    none with a summary, or a study's or exploration's folder (its ``manifest.json``) whose
    ``summary.json`` is missing, unreadable or not a table: the generated files are never rewritten
    from less than every shipped result (issue 56 item 7)."""
    ref = root / REFERENCE
    if not ref.is_dir():
        raise FindingsError(f"{ref}: no such folder; run python -m bench.findings from the root of a checkout that "
                            "holds the shipped results (results/reference/)")
    out = {}
    for folder in sorted(p for p in ref.iterdir() if p.is_dir()):
        if not (folder / "manifest.json").is_file():
            continue  # not a study's or an exploration's folder (e.g. a bench.fl run's)
        path = folder / "summary.json"
        rebuild = (f"rebuild it (python -m bench.study <study> --out {REFERENCE / folder.name} --report-only, or the "
                   "exploration's bench.dse command)")
        if not path.is_file():
            raise FindingsError(f"{path}: missing beside its manifest.json; {rebuild}")
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise FindingsError(f"{path}: not readable JSON ({type(err).__name__}); {rebuild}") from None
        if not isinstance(summary, dict):
            raise FindingsError(f"{path}: a JSON {type(summary).__name__}, not a summary (a table); {rebuild}")
        if "cells" in summary or ("study" in summary and "best" in summary):
            out[folder.name] = summary
    if not out:
        raise FindingsError(f"{ref}: no study's summary.json in it; the findings are written from the shipped results")
    return out


def exploration_section(name: str, summary: Mapping[str, Any]) -> list[str]:
    """A format exploration's answer (``bench.dse --study``): per method, the design with the least
    energy to the study's target, priced with its own format's mean curve."""
    st = summary["study"]
    lines = [f"## {name}", "", f"[`summary.json`](../results/reference/{name}/summary.json) · "
             f"`{summary['command']}`: {st['model']} at {st['setting']}, formats {', '.join(st['formats'])}, each "
             f"priced with its own format's mean curve over {st['seeds']} seeds of `{st['folder']}`.", "",
             f"| method | least energy to {st['target_accuracy_pct']:g} % | format | round | J | device s | MB |",
             "|---|---|---|---|---|---|---|"]
    for method, b in st["best"].items():
        if not b or b.get("point") is None:
            lines.append(f"| {method} | not reached by any design | | | | | |")
            continue
        lines.append(f"| {method} | point {b['point']}: {b['design']} | {b['number_format']} | {b['round']} | "
                     f"{b['energy_j_to_target']:.3g} | {b['device_s_to_target']:.3g} | "
                     f"{b['bytes_to_target'] / 1e6:.1f} |")
    return lines + ["", "A mean curve over few seeds: these designs are what the means say, not verdicts."]


# ----------------------------------------------------------------------------- the files


def render_findings(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    lines = ["# Findings: what the shipped studies say", "",
             "Generated by `python -m bench.findings` from `results/reference/*/summary.json`; do not edit (a test "
             "fails when this page and the results disagree). Each study's own `table.md` has every table; the "
             "rules behind the words are in [study.md](study.md#verdicts).", ""]
    lines += [f"* [{name}](#{name})" for name in summaries] + [""]
    for name, summary in summaries.items():
        with reading(name):
            lines += study_section(name, summary) if "cells" in summary else exploration_section(name, summary)
        lines.append("")
    lines += cost_tables_section(summaries)
    return "\n".join(lines).rstrip() + "\n"


def headline(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """The README's short table: each headline study's methods against its base, per data setting."""
    present = [n for n in HEADLINE_STUDIES if n in summaries]
    settings = list(dict.fromkeys(c["setting"] for n in present for c in summaries[n]["cells"]))
    rows = ["| study | model | method − base | " + " | ".join(settings) + " |", "|---|---|---|" + "---|" * len(settings)]
    for name in present:
        with reading(name):
            rows += _headline_rows(name, summaries[name], settings)
    return "\n".join(["Final test accuracy, paired difference against the base method in points [95 % interval]: "
                      "verdict, with the adjusted p of the study's primary test that carries it (the rules: "
                      "[docs/study.md](docs/study.md#verdicts); every table and the accuracies themselves: "
                      "[docs/findings.md](docs/findings.md)). Generated by `python -m bench.findings`.",
                      "", *rows])


def _headline_rows(name: str, summary: Mapping[str, Any], settings: Sequence[str]) -> list[str]:
    rows = []
    base = summary["study"]["base"]
    by = {(c["model"], c["method"], c["setting"]): c for c in summary["cells"] if c.get("n")}
    for model, method in dict.fromkeys((m, x) for m, x, _ in by if x != base):
        cells = []
        for setting in settings:
            c = by.get((model, method, setting))
            e = None if c is None else c.get("paired_difference_vs_base_pct")
            cells.append("—" if not e or e.get("ci_low") is None else
                         f"{e['mean']:+.2f} [{e['ci_low']:+.2f}, {e['ci_high']:+.2f}]: "
                         + verdict(name, f"{setting} {method}", e)
                         + f" ({_carrying_p(e)})")
        rows.append(f"| [{name}](docs/findings.md#{name}) | {model} | {method} − {base} | " + " | ".join(cells)
                    + " |")
    return rows


def _carrying_p(e: Mapping[str, Any]) -> str:
    """The adjusted p that carries a verdict, short: the difference's, the TOST's, or both (not resolved)."""
    d, q = verdicts.p_text(e.get("p_difference_adjusted")), verdicts.p_text(e.get("p_equivalence_adjusted"))
    v = e["verdict"]
    return (f"adj. p {d}" if v == "different" else f"TOST adj. p {q}" if v.startswith("equivalent")
            else f"adj. p {d}, TOST {q}")


@contextlib.contextmanager
def reading(name: str) -> Iterator[None]:
    """A summary's rendering: a key it lacks, or a value of the wrong kind, is one line naming the file (issue 56 item 8)."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, IndexError) as err:
        raise FindingsError(f"{REFERENCE / name / 'summary.json'}: no usable {err} recorded ({type(err).__name__}); "
                            f"rebuild the report (python -m bench.study <study> --out {REFERENCE / name} "
                            "--report-only)") from None


def check(root: Path) -> list[str]:
    """``--check``: one line per difference between a shipped study's summary and its statistics
    recomputed from its runs (``bench.lib.study.recheck``), and per study with runs from
    uncommitted code that its study file does not declare (``[[deviations]]`` keys ``code``)."""
    out = []
    for name, summary in load(root).items():
        if "cells" not in summary:
            continue
        try:
            out += recheck.recheck(root / REFERENCE / name, name, summary)
        except recheck.MissingKey as err:
            raise FindingsError(str(err)) from None
        dirty = sum(n for commit, n in summary.get("run_commits", {}).items() if commit.endswith("-dirty"))
        declared = any("code" in d.get("keys", ()) for d in summary["study"].get("deviations") or [])
        if dirty and not declared:
            out.append(f"{name}: {dirty} run(s) trained from uncommitted code (-dirty commits) and no [[deviations]] "
                       f"with keys = [\"code\"] in {summary['study'].get('source', 'its study file')} declares them")
    return out


def with_headline(readme: str, table: str) -> str:
    """``readme`` with the text between its two marker lines replaced by ``table``."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise FindingsError(f"README.md must hold the line {START} once, then {END} once")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table}\n{END}{tail}"


def outputs(root: Path) -> dict[Path, str]:
    """What the generated files should hold, from the results under ``root``."""
    summaries = load(root)
    readme = (root / README).read_text(encoding="utf-8")
    return {root / FINDINGS: render_findings(summaries), root / README: with_headline(readme, headline(summaries))}


def stale(texts: Mapping[Path, str]) -> list[Path]:
    """The generated files whose text differs from ``texts``, what the results say (``outputs``)."""
    return [p for p, text in texts.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]

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

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from bench.lib.findings_costs import cost_tables_section
from bench.lib.study import verdicts

FINDINGS = Path("docs/findings.md")
README = Path("README.md")
REFERENCE = Path("results/reference")
START, END = "<!-- findings:headline:start -->", "<!-- findings:headline:end -->"
HEADLINE_STUDIES = ("digits", "digits-mobilenetv2", "mnist5k")
"""The studies of the README's headline table, in its order (the ones present are shown)."""


class FindingsError(ValueError):
    """A results folder the findings cannot be written from; the message names it."""


def load(root: Path) -> dict[str, dict[str, Any]]:
    """Every shipped results folder's summary, by folder name (sorted); a study's or an exploration's."""
    out = {}
    for path in sorted((root / REFERENCE).glob("*/summary.json")):
        summary = json.loads(path.read_text(encoding="utf-8"))
        if "cells" in summary or ("study" in summary and "best" in summary):
            out[path.parent.name] = summary
    return out


# ----------------------------------------------------------------------------- words from numbers


def _f(v: float | None, spec: str = ".2f") -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)



def verdict(name: str, what: str, e: Mapping[str, Any]) -> str:
    """The verdict of one recorded comparison, after checking that its adjusted p-values give it."""
    try:
        return verdicts.check(e["verdict"], e["n"], e.get("p_difference_adjusted"), e.get("p_equivalence_adjusted"),
                              e["margin_pts"])
    except verdicts.OverstatedVerdict as err:
        raise FindingsError(f"results/reference/{name}/summary.json, {what}: {err}") from None
    except KeyError as err:
        raise FindingsError(f"results/reference/{name}/summary.json, {what}: no {err} recorded; rebuild the "
                            f"report (python -m bench.study <study> --out results/reference/{name} --report-only)"
                            ) from None


def comparison_text(name: str, what: str, e: Mapping[str, Any] | None) -> str:
    """``+0.28 [-0.41, +0.97], adj. p 1: not resolved with 3 seeds (MDD 0.86)``; — for none."""
    if not e:
        return "—"
    if e.get("ci_low") is None:
        return f"{e['mean']:+.2f} (one seed: no verdict)"
    return (f"{e['mean']:+.2f} [{e['ci_low']:+.2f}, {e['ci_high']:+.2f}], "
            f"adj. p {verdicts.p_text(e.get('p_difference_adjusted'))}"
            f": {verdict(name, what, e)} (MDD {_f(e.get('minimum_detectable_pts'))})")


def _accuracy(cell: Mapping[str, Any]) -> str:
    f = cell["final_accuracy_pct"]
    return f"{f['mean']:.2f}" + (f" ± {f['std']:.2f}" if f.get("std") is not None else "") + f" (n={cell['n']})"


# ----------------------------------------------------------------------------- one study


def _rule_line(summary: Mapping[str, Any]) -> str:
    s = summary["study"]
    v = s.get("verdicts", {})
    ns = sorted({c["n"] for c in summary["cells"] if c.get("n")})
    seeds = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}" if ns else "0"
    return (f"{summary['setting_note']}; {s['rounds']} rounds; {seeds} paired evaluation seeds, tuning seeds "
            f"{', '.join(map(str, s['tuning_seeds']))}. Verdicts at α = 0.05 on p-values adjusted per table "
            f"({v.get('correction', 'none')}), equivalence margin ± {s['equivalence_margin_pts']:g} point(s); "
            f"spreads floored at one test sample; MDD: the smallest difference the seeds detect with "
            f"{100 * v.get('power', 0.8):g} % power.")


def study_section(name: str, summary: Mapping[str, Any]) -> list[str]:
    """One study's section (module doc)."""
    s = summary["study"]
    base = s["base"]
    lines = [f"## {name}", "", f"[`table.md`](../results/reference/{name}/table.md) · {_rule_line(summary)}", "",
             f"| model | setting | method | final accuracy (%) | converged at the end | vs {base} (points) |",
             "|---|---|---|---|---|---|"]
    for c in summary["cells"]:
        if not c.get("n"):
            continue
        what = f"{c['model']} {c['setting']} {c['method']} vs {base}"
        lines.append(f"| {c['model']} | {c['setting']} | {c['method']} | {_accuracy(c)} | {c['converged']}/{c['n']} | "
                     + ("—" if c["method"] == base else
                        comparison_text(name, what, c.get("paired_difference_vs_base_pct"))) + " |")
    formats = [c for c in summary["cells"] if c.get("paired_difference_vs_fp32_pct")]
    if formats:
        lines += ["", "Against the same method and seeds in FP32 (points):", "",
                  "| model | setting | method | vs fp32 |", "|---|---|---|---|"]
        lines += [f"| {c['model']} | {c['setting']} | {c['method']} | "
                  f"{comparison_text(name, c['setting'] + ' ' + c['method'] + ' vs fp32', c['paired_difference_vs_fp32_pct'])} |"
                  for c in formats]
    if summary.get("pairs"):
        lines += ["", "The study's other comparisons (`compare`, a − b, points):", "",
                  "| model | setting | a − b | difference |", "|---|---|---|---|"]
        lines += [f"| {p['model']} | {p['setting']} | {p['a']} − {p['b']} | "
                  f"{comparison_text(name, p['setting'] + ' ' + p['a'] + ' - ' + p['b'], p['difference_pct'])} |"
                  for p in summary["pairs"]]
    rates = sorted({c["point"]["hparams"]["ccvr_lr"] for c in summary.get("choices", [])
                    if c.get("point") and "ccvr_lr" in c["point"].get("hparams", {}) and "ccvr" in c["point"]["method"]})
    if rates:
        lines += ["", f"CCVR re-trained its classifier at `ccvr_lr` {', '.join(f'{r:g}' for r in rates)} (recorded in the "
                  "runs)" + ("; at SphereFed Tab. 16's 1e-5 it re-trains next to nothing on the digits (measured: "
                             "[methods.md](methods.md#ccvrs-re-training-learning-rate)), so its rows measure that "
                             "setting, not CCVR at its best." if rates == [1e-5] and s["dataset"] == "digits" else ".")]
    lines += claims_lines(name, summary) + _tta_lines(summary)
    lines += _fleet_lines(summary.get("fleets", []))
    choices = [c for c in summary.get("choices", []) if len(c.get("scores", [])) > 1]
    ties = [c for c in choices if c.get("tie")]
    if choices:
        lines += ["", f"Tuning: {len(ties)} of {len(choices)} choices are ties (another value within one validation "
                  "sample: validation cannot rank them)."]
    return lines + [""]


CLAIMS = (("fedavg+spherefed", "fedavg", "the frozen, orthonormal head costs no accuracy (SphereFed >= FedAvg)"),
          ("fedavg+spherefed+ffc", "fedavg", "SphereFed + FFC >= FedAvg (SphereFed Tab. 2)"),
          ("fedavg+spherefed+ffc", "fedavg+ccvr", "FFC >= CCVR (SphereFed Tab. 4)"))
"""SphereFed's directional claims, as (a, b, the claim a >= b); a study answers those whose
comparison it ran (against the base, or a ``compare`` pair)."""


def claim_word(name: str, what: str, e: Mapping[str, Any]) -> str:
    """What one comparison's verdict says of the claim a >= b (``CLAIMS``), and nothing more."""
    v = verdict(name, what, e)
    m = f"{e['margin_pts']:g}"
    if v == "different":
        return "holds: above" if e["mean"] > 0 else "contradicted: below"
    if v.startswith("different, but within"):
        return f"holds: above, by less than {m}" if e["mean"] > 0 else f"below, by less than {m}"
    if v.startswith("equivalent"):
        return f"holds within ± {m}: equivalent"
    return f"open: {v} (MDD {_f(e.get('minimum_detectable_pts'))})"


def claims_lines(name: str, summary: Mapping[str, Any]) -> list[str]:
    """Per data setting, what the study's verdicts say of each of SphereFed's claims it ran."""
    base = summary["study"]["base"]
    found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for c in summary["cells"]:
        if c.get("paired_difference_vs_base_pct"):
            found[(c["model"], c["setting"], f"{c['method']}|{base}")] = c["paired_difference_vs_base_pct"]
    for p in summary.get("pairs", []):
        found[(p["model"], p["setting"], f"{p['a']}|{p['b']}")] = p["difference_pct"]
    rows = [(model, setting, claim, claim_word(name, f"{model} {setting} {a} - {b}", e))
            for (model, setting, pair), e in found.items() for a, b, claim in CLAIMS if pair == f"{a}|{b}"]
    if not rows:
        return []
    return ["", "SphereFed's claims, as these verdicts answer them (at ± the study's margin):", "",
            "| model | setting | claim | answer |", "|---|---|---|---|",
            *(f"| {model} | {setting} | {claim} | {answer} |" for model, setting, claim, answer in rows)]


def _tta_lines(summary: Mapping[str, Any]) -> list[str]:
    """Time and energy to the first declared target, per cell: median [range] over the seeds that reached it."""
    rows = []
    for c in summary["cells"]:
        declared = [t for t in c.get("time_to_accuracy", []) if t["source"] == "declared in the study file"]
        if not declared:
            continue
        t = declared[0]
        span = lambda k, spec: ("—" if t[k]["median"] is None else  # noqa: E731
                                f"{t[k]['median']:{spec}} [{t[k]['min']:{spec}}–{t[k]['max']:{spec}}]")
        rows.append(f"| {c['model']} | {c['setting']} | {c['method']} | {t['target_pct']:g} | {t['reached']}/{t['of']} | "
                    f"{span('round', '.0f')} | {span('wall_s', '.3g')} | {span('energy_j', '.3g')} |")
    if not rows:
        return []
    return ["", "Time and energy to the first declared target (modeled; median [range] over the seeds that reached it):",
            "", "| model | setting | method | target (%) | reached | round | wall time (s) | energy (J) |",
            "|---|---|---|---|---|---|---|---|", *rows]


def _fleet_lines(answers: Sequence[Mapping[str, Any]]) -> list[str]:
    chosen = [a for a in answers if a.get("choice_deadline_s") is not None and len(a["deadlines"]) > 1]
    if not chosen:
        return []
    lines = ["", "Fleets: the deadline with the least mean time to the target among those every seed reached, "
             "against each other deadline (paired time difference, adjusted p):", "",
             "| model | fleet | method | target (%) | choice (s) | against |", "|---|---|---|---|---|---|"]
    for a in chosen:
        others = [f"{r['deadline_s']} s: {r['wall_s_vs_choice']['mean']:+.3g} s, adj. p "
                  f"{verdicts.p_text(r['wall_s_vs_choice'].get('p_adjusted'))}, "
                  + ("resolved" if r.get("choice_resolved") else "not resolved")
                  for r in a["deadlines"] if "wall_s_vs_choice" in r]
        lines.append(f"| {a['model']} | {a['fleet']} | {a['method']} | {a['target_pct']:g} | "
                     f"{a['choice_deadline_s']} | {'; '.join(others) or '— (no other deadline reached it on every seed)'} |")
    return lines


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
        summary = summaries[name]
        base = summary["study"]["base"]
        by = {(c["model"], c["method"], c["setting"]): c for c in summary["cells"] if c.get("n")}
        for model, method in dict.fromkeys((m, x) for m, x, _ in by if x != base):
            cells = []
            for setting in settings:
                c = by.get((model, method, setting))
                e = None if c is None else c.get("paired_difference_vs_base_pct")
                cells.append("—" if not e or e.get("ci_low") is None else
                             f"{e['mean']:+.2f} [{e['ci_low']:+.2f}, {e['ci_high']:+.2f}]: "
                             + verdict(name, f"{setting} {method}", e))
            rows.append(f"| [{name}](docs/findings.md#{name}) | {model} | {method} − {base} | " + " | ".join(cells)
                        + " |")
    return "\n".join(["Final test accuracy, paired difference against the base method in points [95 % interval]: "
                      "verdict (the rules: [docs/study.md](docs/study.md#verdicts); every table and the accuracies "
                      "themselves: [docs/findings.md](docs/findings.md)). Generated by `python -m bench.findings`.",
                      "", *rows])


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

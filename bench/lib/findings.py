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
import math
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from bench.lib.findings_costs import cost_tables_section
from bench.lib.study import compare, recheck, verdicts

FINDINGS = Path("docs/findings.md")
README = Path("README.md")
REFERENCE = Path("results/reference")
START, END = "<!-- findings:headline:start -->", "<!-- findings:headline:end -->"
HEADLINE_STUDIES = ("digits", "digits-mobilenetv2", "mnist5k")
"""The studies of the README's headline table, in its order (the ones present are shown)."""


class FindingsError(ValueError):
    """A results folder the findings cannot be written from; the message names it."""


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
    """``+2.07 [+0.49, +3.65]: different (exact sign-flip adj. p: difference 0.0027); the t-test says ...
    (MDD 1.59)``: the verdict with the adjusted p that carries it; — for none."""
    if not e:
        return "—"
    if e.get("ci_low") is None:
        return f"{e['mean']:+.2f} (one seed: no verdict)"
    verdict(name, what, e)
    return (f"{e['mean']:+.2f} [{e['ci_low']:+.2f}, {e['ci_high']:+.2f}]: {compare.carrying_text(e)} "
            f"(MDD {_f(e.get('minimum_detectable_pts'))})")


def _slope(e: Mapping[str, Any] | None) -> str:
    """``; +0.05 [-0.02, +0.12]``: the mean slope of the seeds' last rounds and its t interval."""
    if not e:
        return ""
    return f"; {e['mean']:+.2f}" + (f" [{e['ci_low']:+.2f}, {e['ci_high']:+.2f}]" if e.get("ci_low") is not None else "")


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
            f"{', '.join(map(str, s['tuning_seeds']))}. Verdicts at α = 0.05 on the "
            f"{compare.TEST_NAMES[v['primary_test']]}'s p-values (the study's primary test; the other's word is "
            f"given where it differs), adjusted per table ({v.get('correction', 'none')}), equivalence margin "
            f"± {s['equivalence_margin_pts']:g} point(s)"
            + (f" ({s['equivalence_margin_argument']})" if s.get("equivalence_margin_argument") else
               " (no argument for it recorded in the study file)")
            + _margin_scale(summary)
            + f"; t-test spreads floored at one test sample; MDD: the smallest difference the seeds detect with "
            f"{100 * v.get('power', 0.8):g} % power. Scope: every interval and test is over seeds on one fixed test "
            f"set; the sampling of the test images is not in them (the runs record no per-image correctness, so no "
            f"images × seeds bootstrap can be made).")


def _margin_scale(summary: Mapping[str, Any]) -> str:
    """The margin in test images and against the base method's lowest error rate (FP32, every client)."""
    s = summary["study"]
    m, base = s["equivalence_margin_pts"], s["base"]
    cells = [c for c in summary["cells"] if c.get("n") and c["method"] == base and c.get("number_format", "fp32") == "fp32"
             and "fleet=" not in c["setting"]]
    if not cells:
        return ""
    best = min(cells, key=lambda c: 100 - c["final_accuracy_pct"]["mean"])
    error = 100 - best["final_accuracy_pct"]["mean"]
    images = f"{m * best['test_samples'] / 100:.3g} of {best['test_samples']} test images"
    return (f"; ± {m:g} point is {images}" + (f", {100 * m / error:.0f} % of {base}'s lowest error rate "
                                               f"({error:.2f} % at {best['setting']})" if error > 0 else ""))


def study_section(name: str, summary: Mapping[str, Any]) -> list[str]:
    """One study's section (module doc)."""
    s = summary["study"]
    base = s["base"]
    lines = [f"## {name}", "", f"[`table.md`](../results/reference/{name}/table.md) · {_rule_line(summary)}", "",
             f"| model | setting | method | final accuracy (%) | converged at the end; last "
             f"{2 * s['convergence']['last_rounds']} rounds' slope (points/round) | vs {base} (points) |",
             "|---|---|---|---|---|---|"]
    for c in summary["cells"]:
        if not c.get("n"):
            continue
        what = f"{c['model']} {c['setting']} {c['method']} vs {base}"
        lines.append(f"| {c['model']} | {c['setting']} | {c['method']} | {_accuracy(c)} | {c['converged']}/{c['n']}"
                     f"{_slope(c.get('end_slope_pts_per_round'))} | "
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
    lines += claims_lines(name, summary) + deviation_lines(summary) + _tta_lines(summary)
    lines += _fleet_lines(summary.get("fleets", []))
    choices = [c for c in summary.get("choices", []) if len(c.get("scores", [])) > 1]
    ties = [c for c in choices if c.get("tie")]
    if choices:
        lines += ["", f"Tuning: {len(ties)} of {len(choices)} choices are ties (another value within one validation "
                  "sample: validation cannot rank them)."]
    return lines + [""]


CLAIMS = (("fedavg+spherefed", "fedavg", ">=", "the frozen, orthonormal head costs no accuracy (SphereFed >= FedAvg)"),
          ("fedavg+spherefed+ffc", "fedavg", ">=", "SphereFed + FFC >= FedAvg (SphereFed Tab. 2)"),
          ("fedavg+spherefed+ffc", "fedavg+ccvr", ">=", "FFC >= CCVR (SphereFed Tab. 4)"))
"""SphereFed's directional claims, as (a, b, relation, the claim); a study answers those whose
comparison it ran (against the base, or a ``compare`` pair)."""
RELATIONS = {">=": ("noninferiority", "non-inferiority (one-sided, H0: a - b <= -{m})"),
             ">": ("superiority", "superiority (one-sided, H0: a - b <= 0)"),
             "=": ("equivalence", "equivalence (TOST, H0: |a - b| >= {m})")}
"""Each relation a claim states, the test that answers it (``bench.lib.study.compare.HYPOTHESES``)
and its name: a >= b by non-inferiority at the margin, a > b by superiority, a = b by equivalence."""


def claim_test(relation: str, margin: float) -> str:
    """The test that answers a claim of ``relation``, named (``RELATIONS``)."""
    return RELATIONS[relation][1].format(m=f"{margin:g}")


def claim_word(name: str, what: str, e: Mapping[str, Any], relation: str = ">=") -> str:
    """What one comparison's tests say of the claim a ``relation`` b (``RELATIONS``), with the adjusted
    p that carries the word: *holds* where the claim's own test rejects its null; *contradicted* where
    the difference test resolves a difference the wrong way (a below b; for =, any difference beyond
    the margin); else *open*."""
    v = verdict(name, what, e)
    hypothesis = RELATIONS[relation][0]
    try:
        p = e[f"p_{hypothesis}_adjusted"]
    except KeyError as err:
        raise FindingsError(f"results/reference/{name}/summary.json, {what}: no {err} recorded; rebuild the report "
                            f"(python -m bench.study <study> --out results/reference/{name} --report-only)") from None
    m = f"{e['margin_pts']:g}"
    test = compare.TEST_NAMES.get(e.get("primary_test", "t"), "t-test")
    carried = f"{test} adj. p {verdicts.p_text(p)}"
    if p is not None and p < verdicts.ALPHA:
        return {">=": f"holds: not below by {m} or more ({carried})", ">": f"holds: above ({carried})",
                "=": f"holds: within ± {m} ({carried})"}[relation]
    by_difference = f"{test} adj. p {verdicts.p_text(e.get('p_difference_adjusted'))}, difference"
    if v == "different" and (relation == "=" or e["mean"] < 0):
        return f"contradicted: {'different' if relation == '=' else 'below'} ({by_difference})"
    return f"open: not shown ({carried}; MDD {_f(e.get('minimum_detectable_pts'))})"


def claims_lines(name: str, summary: Mapping[str, Any]) -> list[str]:
    """Per data setting, what the study's tests say of each of SphereFed's claims it ran, and which test said it."""
    base = summary["study"]["base"]
    found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for c in summary["cells"]:
        if c.get("paired_difference_vs_base_pct"):
            found[(c["model"], c["setting"], f"{c['method']}|{base}")] = c["paired_difference_vs_base_pct"]
    for p in summary.get("pairs", []):
        found[(p["model"], p["setting"], f"{p['a']}|{p['b']}")] = p["difference_pct"]
    rows = [(model, setting, claim, claim_test(rel, e["margin_pts"]),
             claim_word(name, f"{model} {setting} {a} - {b}", e, rel))
            for (model, setting, pair), e in found.items() for a, b, rel, claim in CLAIMS
            if pair == f"{a}|{b}" and e.get("ci_low") is not None]
    if not rows:
        return []
    return ["", "SphereFed's claims, each answered by its own test (a >= b: non-inferiority at the study's margin; "
            "a > b: superiority; a = b: equivalence), the study's primary test, adjusted with the comparison's family:",
            "", "| model | setting | claim | test | answer |", "|---|---|---|---|---|",
            *(f"| {model} | {setting} | {claim} | {test} | {answer} |" for model, setting, claim, test, answer in rows)]


def deviation_lines(summary: Mapping[str, Any]) -> list[str]:
    """The study's declared deviations from its registered plan (``[[deviations]]``), every one."""
    devs = summary["study"].get("deviations") or []
    if not devs:
        return []
    return ["", "Deviations from the registered plan (declared in the study file):", "",
            *(f"* **{', '.join(d['keys'])}**: {d['what']} Reason: {d['reason']}" for d in devs)]


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

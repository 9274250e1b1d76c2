"""One accuracy study's section of docs/findings.md (``study_section``), from its ``summary.json``: its
cells, comparisons and claims in words, each verdict checked against its adjusted p-values before it
is written (``verdict``); and the error the findings raise (``FindingsError``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from bench.lib.study import compare, verdicts


class FindingsError(ValueError):
    """A results folder the findings cannot be written from; the message names it."""


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
            f"{100 * v.get('power', 0.8):g} % power. " + compare.scope_text(summary["cells"], summary.get("pairs", ())))


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
    """Time, energy and bytes to the first declared target, per cell: median [range] over the seeds
    that reached it (bytes in MB, 10^6 B; "—" where a summary predates the bytes)."""
    rows = []
    for c in summary["cells"]:
        declared = [t for t in c.get("time_to_accuracy", []) if t["source"] == "declared in the study file"]
        if not declared:
            continue
        t = declared[0]

        def span(key: str, spec: str, unit: float = 1.0) -> str:
            s = t.get(key)
            if not s or s["median"] is None:
                return "—"
            return f"{s['median'] / unit:{spec}} [{s['min'] / unit:{spec}}–{s['max'] / unit:{spec}}]"

        rows.append(f"| {c['model']} | {c['setting']} | {c['method']} | {t['target_pct']:g} | {t['reached']}/{t['of']} | "
                    f"{span('round', '.0f')} | {span('wall_s', '.3g')} | {span('energy_j', '.3g')} | "
                    f"{span('bytes', '.3g', 1e6)} |")
    if not rows:
        return []
    return ["", "Time, energy and bytes to the first declared target (modeled; median [range] over the seeds that "
            "reached it):", "", "| model | setting | method | target (%) | reached | round | wall time (s) | energy (J) "
            "| MB sent and received |", "|---|---|---|---|---|---|---|---|---|", *rows]


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

"""An accuracy study's ``table.md``: SphereFed Tab. 2's layout (rows model / method, columns data
settings), then the intervals, verdicts, best accuracy, convergence, time-to-accuracy and the tuning
choices, rendered from ``summary.json``'s contents (``bench.study.report.build_summary``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from bench.study.fleets import fleet_markdown
from bench.study.choices import edge_text
from bench.lib.study.spec import Setting, Study
from bench.lib.study import compare, verdicts


def _cell_text(cell: Mapping[str, Any], study: Study) -> str:
    if not cell.get("n"):
        return "—"
    f = cell["final_accuracy_pct"]
    text = f"{f['mean']:.2f}" + (f" ± {f['std']:.2f}" if f["std"] is not None else "")
    d = cell.get("paired_difference_vs_base_pct")
    if d is not None:
        text += f" ({'↑' if d['mean'] >= 0 else '↓'} {abs(d['mean']):.2f})"
    if cell["converged"] < cell["n"]:
        text += " †"
    return text


def _grid(study: Study, cells_: Sequence[Mapping[str, Any]], text,
          settings: Sequence[Setting] | None = None) -> list[str]:
    """Rows model / method, a column per setting (default: the study's), each cell ``text(cell)``."""
    settings = study.settings if settings is None else settings
    by = {(c["model"], c["setting"], c["method"]): c for c in cells_}
    lines = ["| model | method | " + " | ".join(s.title for s in settings) + " |", "|---|---|" + "---|" * len(settings)]
    for model in study.models:
        for i, method in enumerate(study.methods):
            values = [text(by[(model, s.label, method)]) for s in settings]
            lines.append(f"| {model if i == 0 else ''} | {method} | " + " | ".join(values) + " |")
    return lines


def _interval(e: Mapping[str, Any] | None, signed: bool = False, bold: bool = False) -> str:
    if not e:
        return "—"
    fmt = "{:+.2f}" if signed else "{:.2f}"
    if e["ci_low"] is None:
        return fmt.format(e["mean"]) + " (n=1)"
    text = f"{fmt.format(e['mean'])} [{fmt.format(e['ci_low'])}, {fmt.format(e['ci_high'])}]"
    return f"**{text}**" if bold else text


def _median_range(entry: Mapping[str, Any], key: str, scale: float = 1.0, digits: int = 3) -> str:
    v = entry[key]
    if v["median"] is None:
        return "—"
    fmt = lambda x: f"{x * scale:.{digits}g}"  # noqa: E731
    return f"{fmt(v['median'])} [{fmt(v['min'])}–{fmt(v['max'])}]"


def table_markdown(study: Study, summary: Mapping[str, Any]) -> str:
    """The study's ``table.md``, section by section."""
    cells_ = summary["cells"]
    lines = (_accuracy_lines(study, summary) + _comparison_lines(study, summary)
             + _local_and_fleet_lines(study, summary) + _cost_and_convergence_lines(study, cells_)
             + _seed_plan_lines(study, summary.get("seed_plans", []), cells_)
             + ["", "## Provenance", ""] + _provenance_lines(summary) + _plan_lines(summary)
             + _tta_lines(study, cells_) + _tuning_lines(study, summary))
    return "\n".join(lines) + "\n"


def _accuracy_lines(study: Study, summary: Mapping[str, Any]) -> list[str]:
    """The title, the setting and provenance line, the final test accuracy (SphereFed Tab. 2's layout)."""
    cells_ = summary["cells"]
    s = summary["study"]
    n_seeds = len(s["seeds"])
    lines = [f"# Accuracy study `{study.name}`", "",
             f"{summary['setting_note']}; {s['rounds']} rounds, {s['holdout_fraction']:g} validation hold-out, "
             f"evaluation seeds {s['seeds']}, tuning seeds {s['tuning_seeds']}. Report written at commit "
             f"{summary['git_commit']}; runs by commit: {_commits_text(summary['run_commits'])}; "
             + (f"their cost columns re-priced (`--reprice`) by commit: {_commits_text(summary['repriced_commits'])}; "
                if summary.get("repriced_commits") else "")
             + f"{summary['wall']['text']}.", "",
             f"## Final test accuracy (%), mean ± std over {_seeds_text(cells_, n_seeds)} (SphereFed Tab. 2 layout)",
             "",
             f"In parentheses: the mean paired change against {study.base} (same seeds: same partition, same initial "
             "weights); the next table says whether the seeds resolve it. †: not every seed's curve converged at its "
             f"end (the plateau rule: the last {study.plateau.last_rounds} rounds' mean within "
             f"{study.plateau.tolerance_pct:g} point(s) of the {study.plateau.last_rounds} before, and within "
             f"{2 * study.plateau.tolerance_pct:g} of each other; docs/study.md).", ""]
    lines += _grid(study, cells_, lambda c: _cell_text(c, study))
    return lines


def _comparison_lines(study: Study, summary: Mapping[str, Any]) -> list[str]:
    """The paired differences against the base method, the study's ``compare`` pairs, the intervals."""
    cells_ = summary["cells"]
    lines = ["", f"## Paired difference against {study.base} (points): mean [95 % Student-t interval], verdict", "",
             _verdict_rule(study, cells_, summary.get("pairs", ())), ""]
    lines += _grid(study, cells_, lambda c: "—" if c.get("method") == study.base or not c.get("n")
                   else _comparison_text(c.get("paired_difference_vs_base_pct")))
    if summary.get("pairs"):
        lines += ["", "## The study's other comparisons (`compare`), a - b (points)", "",
                  _verdict_rule(study, cells_, summary["pairs"]), "",
                  "| model | setting | a - b | difference |", "|---|---|---|---|"]
        lines += [f"| {p['model']} | {p['setting']} | {p['a']} - {p['b']} | {_comparison_text(p['difference_pct'])} |"
                  for p in summary["pairs"]]
    lines += ["", "## Final test accuracy (%): mean [95 % Student-t interval]", ""]
    lines += _grid(study, cells_, lambda c: _interval(c.get("final_accuracy_pct")) if c.get("n") else "—")
    return lines


def _local_and_fleet_lines(study: Study, summary: Mapping[str, Any]) -> list[str]:
    """The local test mode, the participation on a fleet and the fleets' answers, where the study has them."""
    cells_ = summary["cells"]
    lines: list[str] = []
    if any("local_accuracy_pct" in c for c in cells_):
        lines += ["", "## Local test accuracy (%), mean ± std: the local test mode", "",
                  "Each client's model on the test samples of the classes it holds (Li et al., \"More "
                  "Industry-friendly\", Sec. 4.1), averaged over the clients: the global model for a method "
                  "without local parts; the double head's, the global weights with the client's own local head "
                  "and unshared layers predicting by both heads, over the clients that trained (docs/study.md); "
                  "— where the runs predate its record. In parentheses: the paired difference against "
                  f"{study.base}'s local test accuracy on the same seeds, its verdict (this table's comparisons are "
                  "one family, corrected as the others).", ""]
        lines += _grid(study, cells_,
                       lambda c: (_mean_std(c["local_accuracy_pct"]) if "local_accuracy_pct" in c else "—")
                       + (f" ({_comparison_text(c['local_difference_vs_base_pct'], short=True)} vs {study.base})"
                          if "local_difference_vs_base_pct" in c else ""))
    if any("participation" in c for c in cells_):
        lines += ["", "## Participation on a fleet: clients aggregated / sampled per round; drops per run by reason", "",
                  "Mean over the training rounds and the seeds; drops summed over a run's rounds, mean over seeds "
                  "(unavailable, memory, deadline, surplus: docs/fleets.md); — without a fleet (every sampled "
                  "client aggregated).", ""]
        lines += _grid(study, cells_, lambda c: "—" if "participation" not in c else _participation(c["participation"]))
    lines += fleet_markdown(summary.get("fleets", []))
    return lines


def _cost_and_convergence_lines(study: Study, cells_: Sequence[Mapping[str, Any]]) -> list[str]:
    """Bytes exchanged, best accuracy, convergence and the number formats' paired differences."""
    lines = ["", f"## Communication: bytes exchanged per run (MB, modeled, mean over seeds), × {study.base}'s", ""]
    lines += _grid(study, cells_, lambda c: "—" if not c.get("n") else f"{c['bytes'] / 1e6:.1f}"
                   + (f" (× {c['bytes_vs_base']:.3f})" if c.get("bytes_vs_base") is not None else ""))
    lines += ["", "## Best test accuracy over the rounds (%), mean ± std", ""]
    lines += _grid(study, cells_, lambda c: "—" if not c.get("n") else f"{c['best_accuracy_pct']['mean']:.2f}"
                   + (f" ± {c['best_accuracy_pct']['std']:.2f}" if c['best_accuracy_pct']['std'] is not None else ""))
    lines += ["", "## Convergence at the curve's end; still learning while the rate was high", "",
              "Seeds whose curve converged at its end (the plateau rule on its last rounds; other verdicts in "
              "parentheses), then the seeds whose curve was still rising over the rounds run at >= "
              f"{100 * study.plateau.rate_fraction:g} % of the peak learning rate (`high_rate_verdict` in runs.csv): "
              "a curve can do both, learning while its steps were large and flat at its end; then the least-squares slope "
              f"of each seed's last {2 * study.plateau.last_rounds} rounds, mean [95 % t interval] over the seeds "
              "(docs/study.md).", ""]
    lines += _grid(study, cells_, lambda c: "—" if not c.get("n") else f"{c['converged']}/{c['n']}" + (
        " (" + ", ".join(f"{k} {v}" for k, v in c["verdicts"].items() if k != "converged") + ")"
        if c["converged"] < c["n"] else "") + f"; rising at a high rate {c['rising_at_high_rate']}/{c['n']}"
        + (f"; slope of the last {2 * study.plateau.last_rounds} rounds {_interval(c['end_slope_pts_per_round'], signed=True)} "
           "points/round" if c.get("end_slope_pts_per_round") else ""))
    formats = [s for s in study.settings if s.number_format != "fp32"]
    if formats:
        lines += ["", "## Number formats: paired difference against FP32 (points), mean [95 % Student-t interval]", "",
                  "The same method, seeds and hyper-parameters (tuned in FP32) trained with every GEMM operand rounded "
                  "to the format (docs/numerics.md). " + _verdict_rule(study, cells_), ""]
        lines += _grid(study, cells_, lambda c: _comparison_text(c.get("paired_difference_vs_fp32_pct")), formats)
    return lines


def _tta_lines(study: Study, cells_: Sequence[Mapping[str, Any]]) -> list[str]:
    """Time to accuracy per target, and where each target came from."""
    lines = ["", "## Time to accuracy: median [range] over seeds, modeled", "",
             "Targets fixed before the run (declared in the study file) or derived from the base method's "
             "validation curves only; a calibrated method's curve ends with its calibration. Wall time: the "
             "synchronous rounds on the default system model (links and devices, docs/rounds.md)"
             + ("; a fleet setting's, its rounds with a deadline on its own devices and links (docs/fleets.md)."
                 if any(s.fleet is not None for s in study.settings) else "."), "",
             "| model | setting | method | target (%) | reached | round | wall time (s) | energy (J) | MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in cells_:
        for t in c.get("time_to_accuracy", []):
            lines.append(f"| {c['model']} | {c['setting']} | {c['method']} | {t['target_pct']:.2f} | "
                         f"{t['reached']}/{t['of']} | {_median_range(t, 'round')} | {_median_range(t, 'wall_s')} | "
                         f"{_median_range(t, 'energy_j')} | {_median_range(t, 'bytes', 1e-6)} |")
    lines += ["", "Target sources: " + "; ".join(sorted({f"{t['target_pct']:.2f} %: {t['source']}"
                                                          for c in cells_ for t in c.get("time_to_accuracy", [])}))]
    return lines


def _tuning_lines(study: Study, summary: Mapping[str, Any]) -> list[str]:
    """The tuning rule and every choice with its trials."""
    lines = ["", "## Tuning (validation only)", "",
             f"Score: mean validation accuracy of the last {study.tuning_last_rounds} rounds, averaged over the tuning "
             "seeds; the highest wins; equal scores" + (" and scores within one validation sample" if
                                                        study.near_tie == "centre" else "")
             + " tie, and a tie goes to the value nearest the centre of the values tried, then the smaller (never "
             "the grid's order). Decisive by: the choice's score minus the best other trial's, in validation "
             "samples; under 1, one validation sample decides it: a tie, not a win (docs/study.md, \"Tuning\"). "
             "A calibrated method takes its training method's "
             f"choice. A choice at the smallest or largest value tried extends the grid on that side, one geometric "
             f"step (the grid's own ratio there) at a time, up to {study.extend_steps} value(s) beyond the study "
             "file's grid (`[tuning] extend_steps`), until it is interior; each choice says which.", "",
             "| model | setting | method | chosen | validation score (%) | decisive by | every trial (score %) |",
             "|---|---|---|---|---|---|---|"]
    for ch in summary["choices"]:
        trials = "; ".join(f"{_values(t['trial'])}: " + ("failed" if t["score_pct"] is None else f"{t['score_pct']:.2f}")
                           for t in ch["scores"])
        chosen = "none (every trial failed)" if ch["trial"] is None else _values(ch["trial"]) + "".join(
            f"; {e['key']} {edge_text(e)}" for e in ch.get("extension", []))
        score_text = "—" if ch["score_pct"] is None else f"{ch['score_pct']:.2f}"
        lines.append(f"| {ch['model']} | {ch['setting']} | {ch['method']} | {chosen} | {score_text} | "
                     f"{_decisive_text(ch)} | {trials} |")
    return lines


def _verdict_rule(study: Study, cells_: Sequence[Mapping[str, Any]], pairs: Sequence[Mapping[str, Any]] = ()) -> str:
    m = f"{study.equivalence_margin_pts:g}"
    correction = {"holm": "Holm's step-down correction (family-wise error)",
                  "bh": "the Benjamini-Hochberg correction (false discovery rate)", "none": "no correction"}
    primary = compare.TEST_NAMES[study.primary_test]
    return (f"Each comparison is tested by the exact sign-flip permutation test and by the paired t-test (spread "
            f"floored at one test sample, 100 / N points); every p-value is adjusted for the table's family of "
            f"comparisons by {correction[study.correction]} (`[verdicts] correction`), and the words follow the "
            f"adjusted p-values of the study's primary test, the {primary} (`[verdicts] primary_test`), at α = 0.05: "
            f"\"different\" (bold), \"equivalent within ± {m}\" (the two one-sided tests against ± {m} point(s)), "
            f"both, or \"not resolved with n seeds\"; beside each word the adjusted p that carries it, and where the "
            f"other test's word differs, that word and its p. SW: the Shapiro-Wilk p of the paired differences (small: "
            f"not normal, the t-test's assumption fails). MDD: the smallest true difference these seeds detect "
            f"with {100 * study.power:g} % power (t-test); for ± {m}: the seeds an equivalence within ± {m} needs "
            "at this spread. " + compare.scope_text(cells_, pairs))


def _comparison_text(e: Mapping[str, Any] | None, short: bool = False) -> str:
    """A paired difference with its interval, the verdict with the adjusted p that carries it (and the
    other test's word where it differs), the normality diagnostic and what its seeds could detect."""
    if not e:
        return "—"
    text = _interval(e, signed=True, bold=e.get("verdict", "").startswith("different"))
    if e.get("p_difference") is None:
        return text
    if short:
        return f"{text}: {compare.carrying_text(e)}"
    return (f"{text}: {compare.carrying_text(e)}; SW {verdicts.p_text(e.get('shapiro_wilk_p'))}; "
            f"MDD {e['minimum_detectable_pts']:.2f}, for ± {e['margin_pts']:g}: {e['seeds_for_margin']} seeds")


def _seeds_text(cells_: Sequence[Mapping[str, Any]], n_seeds: int) -> str:
    ns = sorted({c["n"] for c in cells_ if c.get("n")})
    return f"{n_seeds} seeds" if ns in ([], [n_seeds]) else f"{ns[0]}-{ns[-1]} seeds (the seed plan's)"


def _decisive_text(choice: Mapping[str, Any]) -> str:
    m = choice.get("margin_samples")
    if m is None:
        return "—"
    if not choice.get("near"):
        return f"{m:.1f} samples"
    return f"tie ({m:+.1f} samples; within one: {'; '.join(_values(t) for t in choice['near'])})"


def _seed_plan_lines(study: Study, plans: Sequence[Mapping[str, Any]], cells_: Sequence[Mapping[str, Any]]) -> list[str]:
    if not plans:
        return []
    from bench.lib.study.power import SD_CONFIDENCE, delivered_power

    m = study.equivalence_margin_pts
    lines = ["", "## Seed plan (before the evaluation runs) and the power delivered", "",
             f"Per model and data setting, from the paired differences of the final validation accuracy on the tuning "
             f"seeds (the pilot): their mean, taken as the truth; their spread (floored at one validation sample) and "
             f"its upper {100 * SD_CONFIDENCE:g} % confidence bound, which the plan uses; each test at α / k (k the "
             f"comparisons against {study.base}: Holm's worst case); the seeds that resolve the comparison either way "
             f"(TOST within ± {m:g} or the difference test) with {100 * study.power:g} % power"
             + (", at least those the exact test needs to reach α / k" if study.primary_test == "permutation" else "")
             + f", the setting running the largest need within [{study.seed_plan.min_seeds}, "
             f"{study.seed_plan.max_seeds}] (bench/lib/study/power.py); the registered plan's count binds "
             "(`registration.json`). Power: the TOST's at the seeds run, planned (the plan's spread bound) and "
             "delivered (the spread of the test accuracies' paired differences, floored at one test sample).", "",
             "| model | setting | seeds run | comparison: pilot mean, sd → bound, α per test, seeds needed; TOST power "
             "planned → delivered |", "|---|---|---|---|"]
    by = {(c["model"], c["setting"], c["method"]): c.get("paired_difference_vs_base_pct") for c in cells_}
    for p in plans:
        parts = []
        for c in p["comparisons"]:
            e = by.get((p["model"], p["setting"], c["method"]))
            got = "—" if not e or e.get("std") is None else \
                f"{delivered_power(c, max(e['std'], e.get('std_floor', 0.0)), e['n'], m):.2f}"
            parts.append(f"{c['method']}: {c.get('mean_pts', 0.0):+.2f}, {c['sd_pts']:.2f} → "
                         f"{c.get('sd_upper_pts', c['sd_pts']):.2f}, {c.get('alpha', 0.05):.2g}, {c['seeds_needed']}; "
                         f"{c.get('planned_power', math.nan):.2f} → {got}")
        lines.append(f"| {p['model']} | {p['setting']} | {p['seeds']} | " + "; ".join(parts) + " |")
    return lines


def _provenance_lines(summary: Mapping[str, Any]) -> list[str]:
    missing = summary["missing_provenance"]
    total = sum(summary["run_commits"].values())
    lines = [f"Every run's record (`grid/runs/<run_id>/point.json`, `run.json`) and `runs.csv` give the commit of "
             f"the code that trained it (`git_commit`, `git_dirty`), the CPU kernels (`kernels`) and the machine "
             f"(`cpu`, `host`, `torch_threads`). Of {total} runs:"]
    for what, ids in missing.items():
        which = "" if not ids else " (all: recorded before runs recorded it)" if len(ids) == total else \
            f" (recorded before runs recorded it: {', '.join(ids)})"
        lines.append(f"* without `{what}`: {len(ids)}{which}")
    return lines


def _plan_lines(summary: Mapping[str, Any]) -> list[str]:
    """The registered plan (``registration.json``) and every declared deviation from it."""
    reg = summary.get("registration")
    lines = ["", "## Registered plan and deviations", ""]
    lines.append("No plan registered (the folder has no registration.json)." if not reg else
                 f"Plan sha256 {reg['sha256'][:12]}, {reg['note']} (`registration.json`): seeds "
                 f"{reg['planned']['seeds']}, margin ± {reg['planned']['equivalence_margin_pts']:g}, primary test "
                 f"{reg['planned']['primary_test']}, correction {reg['planned']['correction']}"
                 + (f", seed counts {reg['planned']['seed_counts']}" if reg["planned"].get("seed_counts") else "") + ".")
    devs = summary["study"].get("deviations") or []
    lines += ["", "Deviations declared in the study file:" if devs else "No deviation declared."]
    lines += [f"* {', '.join(d['keys'])}: {d['what']} Reason: {d['reason']}" for d in devs]
    return lines


def _mean_std(e: Mapping[str, Any]) -> str:
    return f"{e['mean']:.2f}" + (f" ± {e['std']:.2f}" if e["std"] is not None else "")


def _commits_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{commit} ({n})" for commit, n in counts.items()) or "none"


def _values(trial: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in trial.items())


def _participation(p: Mapping[str, float]) -> str:
    drops = ", ".join(f"{k.removeprefix('dropped_')} {v:.1f}" for k, v in p.items() if k.startswith("dropped_") and v)
    return f"{p['clients_per_round']:.1f} / {p['sampled_per_round']:.1f}" + (f"; {drops}" if drops else "")

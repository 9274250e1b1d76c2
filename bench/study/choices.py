"""A study's tuning choices from its tuning runs' validation curves (``bench.lib.study.tuning``): every
cell's chosen trial over every trial tried, the study file's and the edge extension's, with its edge
status in words (docs/study.md, "Tuning").
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from bench.lib.study.spec import Study
from bench.lib.study.stats import resolution_pts
from bench.lib.study.tuning import Choice, choose, edge_status, extension_value, score, trial_score

if TYPE_CHECKING:
    from bench.study.phases import Outcome


def edge_text(e: Mapping[str, Any]) -> str:
    """One key's edge status in words (``bench.lib.study.tuning.edge_status``)."""
    added = f"{e['steps']} value(s) added {'above' if e['side'] == 'high' else 'below'} the grid"
    return {"interior": f"interior after {added}",
            "bound": f"at the {e['side']} edge: bound hit ({added}; bound {e['bound_steps']})",
            "diverged": f"at the {e['side']} edge: the next value failed (diverged or rejected; {added})",
            "fixed": f"at the {e['side']} edge: not a geometric grid, not extended",
            "not run": f"at the {e['side']} edge: extension not run ({added})"}[e["status"]]


def trial_key(trial: Mapping[str, Any]) -> str:
    return json.dumps(dict(trial), sort_keys=True)


def choices_from(study: Study, tuned: Sequence[Outcome]) -> dict[tuple[str, str, str], Choice]:
    """Every cell's choice from its tuning runs' validation curves (``bench.lib.study.tuning``), over
    every trial tried (the study file's and the edge extension's), with its edge status."""
    by_cell: dict[tuple[str, str, str], dict[str, dict[int, float | None]]] = {}
    trials: dict[tuple[str, str, str], dict[str, Mapping[str, Any]]] = {}
    status: dict[tuple[str, str, str], dict[str, set]] = {}
    for o in tuned:
        p = o.planned
        cell = (p.model, p.setting.label, p.training)
        key = trial_key(p.trial)
        trials.setdefault(cell, {})[key] = p.trial
        status.setdefault(cell, {}).setdefault(key, set()).add(o.status)
        value = score(o.label_curve(p.training), study.tuning_last_rounds) if o.status == "done" else None
        by_cell.setdefault(cell, {}).setdefault(key, {})[p.seed] = value
    val_samples = {(o.planned.model, o.planned.setting.label, o.planned.training): int(o.info["val_samples"])
                   for o in tuned if o.status == "done" and o.info.get("val_samples")}
    out = {}
    for cell, by_trial in by_cell.items():
        initial = study.search[cell[2]]
        scores = [trial_score(trials[cell][k], seeds) for k, seeds in by_trial.items()]
        # the values that ran on every tuning seed: a failed (or missing) value beyond an edge leaves it an edge
        ran = [s.trial for s in scores if s.score_pct is not None] or [s.trial for s in scores]
        tried = {k: tuple(dict.fromkeys(t[k] for t in ran)) for k in initial}
        sample = resolution_pts(val_samples[cell]) if cell in val_samples else None
        choice = choose(scores, tried, sample, study.near_tie)
        failed_next = {}
        for k in choice.at_edge:
            state, value = extension_value(initial[k], tried[k], choice.trial[k], study.extend_steps)
            nxt = {**choice.trial, k: value}
            if state == "extend" and not accepts_trial(study, cell[2], nxt):
                failed_next[k] = True  # the hyper-parameters reject the next value: no further on that side
            elif state == "extend" and trial_key(nxt) in status[cell]:
                failed_next[k] = "failed" in status[cell][trial_key(nxt)]
        out[cell] = replace(choice, extension=edge_status(choice, initial, tried, failed_next, study.extend_steps))
    return out


def accepts_trial(study: Study, training: str, trial: Mapping[str, Any]) -> bool:
    """Whether every method of ``training``'s run accepts ``trial`` (an extension may leave the range)."""
    try:
        for m in study.labels(training):
            study.hparams(m, trial)
    except ValueError:
        return False
    return True

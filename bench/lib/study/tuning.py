"""Choosing each method's hyper-parameters on the validation hold-out, never on test.

The rule (SphereFed Sec. 5.1 tunes by grid search on a 15 % validation split; the score is ours):
for each model, data setting and training method, every trial of its search space (the cartesian
product of ``[search.<method>]``) runs on every tuning seed; a trial's score is the mean, over the
tuning seeds, of its mean *validation* accuracy over the last ``last_rounds`` evaluated rounds
(the curve before any calibration). The trial with the highest score is chosen; a trial whose run
failed on any tuning seed (a diverged run) is out.

Ties do not depend on the order of the grid (our rule, docs/study.md "Tuning"). Trials with equal
scores are a tie; with ``near_tie = "centre"`` so are the trials within one validation sample of
the best (100 / N_val points: a difference one validation image can make, which validation cannot
rank). A tie goes to the trial nearest the centre of the values tried (per numeric key, the
distance from the middle of the tried range, on a log scale for positive values, in units of that
range, summed over keys), then to the smaller values. Every choice reports how decisive it was:
its score minus the best other trial's, in validation samples (``margin_samples``), and the
trials within one sample of it (``near``): a choice that one validation sample decides is
reported as a tie, not a win. A calibrated
method takes its training method's choice. Test accuracy is never read here: ``score`` sees the
``val_accuracy`` column only.

A choice at the edge of its grid is not a tuned optimum: a value beyond the edge may score
higher. So the search extends (``extension_value``, ``edge_status``): while the chosen value of a
numeric key is the smallest or largest tried, the next value on that side, the edge value times
the grid's own ratio at that edge (0.05 below [0.1, 0.2, 0.4], 0.8 above it: geometric), runs
on every tuning seed, the other keys at their chosen values, and the choice is made again over
every trial. It stops when the choice is interior ("interior"), when ``extend_steps`` values have
been added on that side ("bound": the stated bound), when the next value failed (a diverged run:
"diverged"), or when its runs are not there (a report written without running: "not run").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class TrialScore:
    """One trial of one cell: its values, its score (None: failed or missing on a tuning seed)."""

    trial: Mapping[str, Any]
    score_pct: float | None
    seed_scores_pct: Mapping[int, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Choice:
    """The chosen trial of one cell, with every trial's score and where the choice sits in the grid."""

    trial: Mapping[str, Any] | None  # None: every trial failed
    score_pct: float | None
    scores: tuple[TrialScore, ...]
    at_edge: tuple[str, ...] = ()  # searched keys whose chosen value is the smallest or largest candidate
    extension: tuple[Mapping[str, Any], ...] = ()  # per key extended or at an edge: ``edge_status``
    margin_samples: float | None = None  # score minus the best other trial's, in validation samples (module doc)
    near: tuple[Mapping[str, Any], ...] = ()  # the other trials within one validation sample of the choice

    @property
    def tie(self) -> bool:
        """Whether validation could not rank the choice: another trial within one validation sample."""
        return bool(self.near)


NEAR_TIE_RULES = ("best", "centre")


def score(curve: Sequence[Mapping[str, Any]], last_rounds: int) -> float | None:
    """Mean validation accuracy (percent) of the last ``last_rounds`` evaluated training rounds of
    one run's curve (``curve.csv`` rows of the training method); None without a validation score."""
    val = [float(r["val_accuracy"]) for r in curve if r["stage"] == "train" and r["val_accuracy"] is not None]
    if not val:
        return None
    return 100 * statistics.fmean(val[-last_rounds:])


def choose(scores: Sequence[TrialScore], space: Mapping[str, Sequence[Any]], val_resolution_pts: float | None = None,
           near_tie: str = "best") -> Choice:
    """The highest-scoring trial, ties broken by ``centre_distance`` then the smaller values, never
    by the grid's order (module doc); ``space`` (the searched values) marks a choice at the edge of
    the grid, where a wider grid might choose otherwise. ``val_resolution_pts``: one validation
    sample's worth of score (None: unknown, decisiveness not reported)."""
    if near_tie not in NEAR_TIE_RULES:
        raise ValueError(f"near_tie {near_tie!r}: give one of {', '.join(NEAR_TIE_RULES)}")
    ok = [s for s in scores if s.score_pct is not None]
    if not ok:
        return Choice(None, None, tuple(scores))
    top = max(s.score_pct for s in ok)
    sample = val_resolution_pts
    within = lambda s, ref: sample is not None and abs(ref - s.score_pct) < sample * (1 - 1e-9)  # noqa: E731
    pool = [s for s in ok if s.score_pct >= top - 1e-9 or (near_tie == "centre" and within(s, top))]
    best = min(pool, key=lambda s: (centre_distance(s.trial, space), _canonical(s.trial)))
    others = [s for s in ok if s is not best]
    margin = None if sample is None or not others else (best.score_pct - max(s.score_pct for s in others)) / sample
    near = tuple(dict(s.trial) for s in others if within(s, best.score_pct) or s.score_pct >= best.score_pct)
    edge = tuple(k for k, values in space.items()
                 if len(values) > 1 and _is_number(best.trial[k]) and best.trial[k] in (min(values), max(values)))
    return Choice(dict(best.trial), best.score_pct, tuple(scores), edge, margin_samples=margin, near=near)


def centre_distance(trial: Mapping[str, Any], space: Mapping[str, Sequence[Any]]) -> float:
    """How far ``trial`` lies from the centre of the values tried (module doc): per numeric key with
    two or more values, |position - middle| / range, positions on a log scale when every value is
    positive; summed over keys."""
    total = 0.0
    for key, values in space.items():
        nums = [v for v in values if _is_number(v)]
        if len(set(nums)) < 2 or not _is_number(trial.get(key)):
            continue
        pos = (lambda v: math.log(v)) if all(v > 0 for v in nums) else (lambda v: float(v))
        low, high = pos(min(nums)), pos(max(nums))
        total += abs(pos(trial[key]) - (low + high) / 2) / (high - low)
    return total


def _canonical(trial: Mapping[str, Any]) -> tuple:
    """An order of trials that no grid's listing order changes: by key name, then value."""
    return tuple((k, (0, trial[k]) if _is_number(trial[k]) else (1, str(trial[k]))) for k in sorted(trial))


def trial_score(trial: Mapping[str, Any], seed_scores: Mapping[int, float | None]) -> TrialScore:
    """A trial's score: the mean of its seeds' scores, None if any seed has none."""
    values = list(seed_scores.values())
    mean = None if not values or any(v is None for v in values) else statistics.fmean(values)
    return TrialScore(dict(trial), mean, dict(seed_scores))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def grid_ratio(values: Sequence[float], side: str) -> float | None:
    """The grid's geometric step at its ``side`` ("low" or "high"): edge / its neighbour (None when
    the values are not positive numbers or fewer than 2)."""
    v = sorted(set(values))
    if len(v) < 2 or not all(_is_number(x) and x > 0 for x in v):
        return None
    return v[0] / v[1] if side == "low" else v[-1] / v[-2]


def extension_value(initial: Sequence[Any], tried: Sequence[Any], chosen: Any, max_steps: int) -> tuple[str, Any]:
    """The next value of one key whose choice ``chosen`` is at an edge of the values ``tried``
    (module doc): ("extend", value), or ("interior" | "bound" | "fixed", None). ``initial``: the
    study file's values (their ratio at that edge is the step; "fixed": not a geometric grid)."""
    tried = sorted(set(tried))
    if len(tried) < 2 or chosen not in (tried[0], tried[-1]):
        return "interior", None
    side = "low" if chosen == tried[0] else "high"
    ratio = grid_ratio(initial, side)
    if ratio is None:
        return "fixed", None
    beyond = [v for v in tried if (v < min(initial) if side == "low" else v > max(initial))]
    if len(beyond) >= max_steps:
        return "bound", None
    value = chosen * ratio
    if all(isinstance(v, int) for v in initial):
        value = int(round(value))
        if value == chosen or value < 1:
            return "bound", None
    return "extend", value


def edge_status(choice: Choice, initial: Mapping[str, Sequence[Any]], tried: Mapping[str, Sequence[Any]],
                failed_next: Mapping[str, bool], max_steps: int) -> tuple[dict[str, Any], ...]:
    """Per searched key that was extended or whose choice is at an edge: the side, the values added
    beyond the study file's grid, and why the search stopped (module doc). ``failed_next``: per key,
    whether the next value's trial ran and failed (True) or is missing (False); absent: not tried."""
    if choice.trial is None:
        return ()
    out = []
    for key, values in initial.items():
        added = sorted(v for v in set(tried.get(key, ())) if v not in values)
        chosen = choice.trial[key]
        at_edge = key in choice.at_edge
        if not added and not at_edge:
            continue
        state, _ = extension_value(values, tried.get(key, values), chosen, max_steps)
        if not at_edge:
            status = "interior"
        elif key in failed_next:
            status = "diverged" if failed_next[key] else "not run"
        else:
            status = state if state in ("bound", "fixed") else "not run"
        side = "high" if chosen == max(tried.get(key, values)) else "low"
        out.append({"key": key, "side": side if at_edge else ("high" if added and min(added) > max(values) else "low"),
                    "added": added, "steps": len(added), "bound_steps": max_steps, "status": status})
    return tuple(out)

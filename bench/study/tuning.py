"""Choosing each method's hyper-parameters on the validation hold-out, never on test.

The rule (SphereFed Sec. 5.1 tunes by grid search on a 15 % validation split; the score is ours):
for each model, data setting and training method, every trial of its search space (the cartesian
product of ``[search.<method>]``) runs on every tuning seed; a trial's score is the mean, over the
tuning seeds, of its mean *validation* accuracy over the last ``last_rounds`` evaluated rounds
(the curve before any calibration). The trial with the highest score is chosen; ties go to the one
listed first; a trial whose run failed on any tuning seed (a diverged run) is out. A calibrated
method takes its training method's choice. Test accuracy is never read here: ``score`` sees the
``val_accuracy`` column only.
"""

from __future__ import annotations

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


def score(curve: Sequence[Mapping[str, Any]], last_rounds: int) -> float | None:
    """Mean validation accuracy (percent) of the last ``last_rounds`` evaluated training rounds of
    one run's curve (``curve.csv`` rows of the training method); None without a validation score."""
    val = [float(r["val_accuracy"]) for r in curve if r["stage"] == "train" and r["val_accuracy"] is not None]
    if not val:
        return None
    return 100 * statistics.fmean(val[-last_rounds:])


def choose(scores: Sequence[TrialScore], space: Mapping[str, Sequence[Any]]) -> Choice:
    """The highest-scoring trial (module doc), first listed on ties; ``space`` (the searched values)
    marks a choice at the edge of the grid, where a wider grid might choose otherwise."""
    best: TrialScore | None = None
    for s in scores:
        if s.score_pct is not None and (best is None or s.score_pct > best.score_pct):
            best = s
    if best is None:
        return Choice(None, None, tuple(scores))
    edge = tuple(k for k, values in space.items()
                 if len(values) > 1 and _is_number(best.trial[k]) and best.trial[k] in (min(values), max(values)))
    return Choice(dict(best.trial), best.score_pct, tuple(scores), edge)


def trial_score(trial: Mapping[str, Any], seed_scores: Mapping[int, float | None]) -> TrialScore:
    """A trial's score: the mean of its seeds' scores, None if any seed has none."""
    values = list(seed_scores.values())
    mean = None if not values or any(v is None for v in values) else statistics.fmean(values)
    return TrialScore(dict(trial), mean, dict(seed_scores))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

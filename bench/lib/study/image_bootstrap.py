"""How much a paired verdict leans on the one test set: a bootstrap over test images and seeds
(docs/study.md, "Scope: one test set").

Every interval of a study is over seeds on one fixed test set of N images. Another test set of the
same size, drawn from the same distribution, would move every accuracy; a verdict that holds only
for this draw of images says less than it seems. The study's runs record, per label, whether the
final global model classifies each test image right (``run.json``'s ``test_correct``,
``workloads.fl.evaluation.correct_per_sample``), so a paired difference a − b can be resampled on
both levels of its design (Davison & Hinkley, "Bootstrap Methods and their Application", Cambridge
1997, Sec. 3.8 "Hierarchical data"; the test-set term is the one Bouthillier et al., "Accounting
for Variance in Machine Learning Benchmarks", MLSys 2021, Sec. 2, call data sampling):

    D_s = c_a,s − c_b,s ∈ {−1, 0, +1}^N               (per seed s, per image: right minus right)
    one draw: images i_1 … i_N with replacement, shared by every seed (one other test set);
              seeds s_1 … s_n with replacement
    statistic = 100 · (1/n) Σ_k (1/N) Σ_j D_{s_k}(i_j)   (points)

``DRAWS`` draws from a generator seeded ``SEED`` (the same interval every time); the percentile
intervals (Efron & Tibshirani, "An Introduction to the Bootstrap", Chapman & Hall 1993, Ch. 13) at
95 % (two-sided, the difference test's) and 90 % (the TOST's, two one-sided 5 % tests).

``holds`` reads the verdict against them: *different* holds when the 95 % interval excludes 0 on
the mean's side, *equivalent within ± m* when the 90 % interval lies inside ± m; a verdict that does
not resolve has nothing to hold. The intervals are not adjusted for the family: this is a
sensitivity column beside the test that carries the word, not a second test.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

DRAWS = 10_000
SEED = 0
_CHUNK = 1_000


def bootstrap_means_pts(d: np.ndarray, draws: int = DRAWS, seed: int = SEED) -> np.ndarray:
    """``draws`` bootstrap means (points) of D's paired difference (module doc): images and seeds
    drawn with replacement, the images shared by every seed of a draw."""
    n, images = d.shape
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, draws, _CHUNK):
        size = min(_CHUNK, draws - start)
        image_counts = rng.multinomial(images, np.full(images, 1 / images), size=size)  # size x N
        seed_counts = rng.multinomial(n, np.full(n, 1 / n), size=size)  # size x n
        per_seed = image_counts @ d.T.astype(np.int64) / images  # size x n: each seed's mean on the drawn images
        out.append(100 * (seed_counts * per_seed).sum(axis=1) / n)
    return np.concatenate(out)


def image_bootstrap(d: np.ndarray, draws: int = DRAWS, seed: int = SEED) -> dict[str, Any]:
    """The record a comparison keeps (``summary.json``'s ``image_bootstrap``): the 95 % and 90 %
    percentile intervals (points) of ``bootstrap_means_pts``, with what was drawn."""
    means = bootstrap_means_pts(d, draws, seed)
    q = np.percentile(means, [2.5, 97.5, 5.0, 95.0])
    return {"interval_95_pts": [float(q[0]), float(q[1])], "interval_90_pts": [float(q[2]), float(q[3])],
            "seeds": int(d.shape[0]), "images": int(d.shape[1]), "draws": draws, "generator_seed": seed}


def holds(record: Mapping[str, Any], verdict: str, mean_pts: float, margin_pts: float) -> bool | None:
    """Whether ``verdict`` survives the image bootstrap ``record`` (module doc); None when the verdict
    resolves nothing."""
    lo95, hi95 = record["interval_95_pts"]
    lo90, hi90 = record["interval_90_pts"]
    if verdict.startswith("different"):
        return bool(lo95 > 0) if mean_pts > 0 else bool(hi95 < 0)
    if verdict.startswith("equivalent"):
        return bool(-margin_pts < lo90 and hi90 < margin_pts)
    return None

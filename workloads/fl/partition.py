"""How a training set is split over federated clients (numpy in, numpy out).

Every partition function takes the label array of the training set and returns one sorted int64
index array per client (positions into that label array). All are deterministic for a ``seed``
(one ``numpy.random.default_rng(seed)`` per call). Unless a split says otherwise the parts are
disjoint and cover every sample. ``PARTITIONS`` maps the CLI names to the functions; each takes
its one parameter by keyword too, e.g. ``PARTITIONS["dirichlet"](labels, 10, alpha=0.1, seed=0)``.

* ``dirichlet_partition``: label skew of NIID-Bench (Li et al., "Federated learning on non-IID
  data silos", ICDE 2022), used by SphereFed Sec. 5.1 with K = 10 clients and alpha in {0.1, 0.5,
  IID}: per class, client proportions ~ Dir(alpha), redrawn until every client has >= min_size.
* ``iid_partition``: shuffle, then equal parts.
* ``fedcos_partition``: FedCos Sec. VI-B: "totally non-IID" = sorted by label, equal contiguous
  parts; "90 % / 70 % non-IID" = then 10 % / 30 % of each client's data pooled, shuffled and dealt
  back out.
* ``dispatch_partition``: "different clients own samples of uncrossed classes" (the dispatch
  setting of Li et al., "More industry-friendly", Sec. 4.1).
* ``holdout_split``: SphereFed's "15 % of training data for validation" (Sec. 5.1).
* ``partition_summary`` / ``save_partition_summary``: the clients x classes sample counts.

Choices where the papers are silent are documented on each function and in docs/data.md.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Callable

import numpy as np

from iokit.files import atomic_write_text


class PartitionError(ValueError):
    """A partition cannot be made with the given settings (the message says what to change)."""


# --------------------------------------------------------------------------- checks


def _check_labels(labels) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise PartitionError(f"labels must be a 1-D integer array, got dtype {arr.dtype} shape {arr.shape}")
    if arr.size and arr.min() < 0:
        raise PartitionError(f"labels must be >= 0, got {arr.min()}")
    return arr.astype(np.int64, copy=False)


def _check_count(value, what: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise PartitionError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_clients(num_clients, n: int) -> int:
    k = _check_count(num_clients, "num_clients")
    if k > n:
        raise PartitionError(f"num_clients={k} exceeds the {n} samples: every client needs at least one")
    return k


def _sorted_parts(parts) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


# --------------------------------------------------------------------------- partitions


def iid_partition(labels, num_clients: int, *, seed: int) -> list[np.ndarray]:
    """IID: a random permutation cut into ``num_clients`` parts whose sizes differ by at most one."""
    y = _check_labels(labels)
    k = _check_clients(num_clients, len(y))
    rng = np.random.default_rng(seed)
    return _sorted_parts(np.array_split(rng.permutation(len(y)), k))


def dirichlet_partition(labels, num_clients: int, alpha: float, *, min_size: int = 10,
                        max_retries: int = 1000, seed: int) -> list[np.ndarray]:
    """Dirichlet label skew, NIID-Bench convention (``partition="noniid-labeldir"``).

    One draw: for each class c (in increasing order), shuffle its samples, draw client proportions
    p ~ Dir(alpha, ..., alpha), set p_k = 0 for clients already holding >= N / K samples (NIID-Bench's
    balancing cap; if that zeroes every remaining p_k, the uncapped p is used), and cut
    the class at ``floor(cumsum(p) / sum(p) * n_c)``. (NIID-Bench computes ``cumsum(p / sum(p))``,
    which can end a hair below 1.0 and so hand one sample to a client whose p_k is 0; dividing the
    cumulative sum by its own last element makes a zero proportion give exactly zero samples.)
    Draws are repeated until every client holds at least ``min_size`` samples; after
    ``max_retries`` draws a ``PartitionError`` suggests what to change.
    Smaller ``alpha`` -> more skew (alpha -> 0: each class on one client; alpha -> inf: IID).
    """
    y = _check_labels(labels)
    k = _check_clients(num_clients, len(y))
    if not (isinstance(alpha, (int, float, np.floating)) and math.isfinite(alpha) and alpha > 0):
        raise PartitionError(f"alpha must be a finite number > 0, got {alpha!r}")
    min_size = _check_count(min_size, "min_size", minimum=0)
    max_retries = _check_count(max_retries, "max_retries")
    n = len(y)
    advice = "use a larger alpha, fewer clients or a smaller min_size"
    if k * min_size > n:
        raise PartitionError(f"dirichlet_partition: {k} clients x min_size {min_size} exceeds the {n} samples; "
                             f"{advice}")
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    cap = n / k
    smallest = 0
    for _ in range(max_retries):
        parts: list[list[np.ndarray]] = [[] for _ in range(k)]
        sizes = np.zeros(k, dtype=np.int64)
        for c in classes:
            idx_c = rng.permutation(np.flatnonzero(y == c))
            p = rng.dirichlet(np.full(k, float(alpha)))
            capped = np.where(sizes < cap, p, 0.0)
            p = capped if capped.sum() > 0 else p
            cum = np.cumsum(p)  # cum / cum[-1] is exactly 1.0 after the last p_k > 0
            cuts = (cum[:-1] / cum[-1] * len(idx_c)).astype(np.int64)
            for j, piece in enumerate(np.split(idx_c, cuts)):
                parts[j].append(piece)
                sizes[j] += len(piece)
        smallest = int(sizes.min())
        if smallest >= min_size:
            return _sorted_parts(np.concatenate(pieces) for pieces in parts)
    raise PartitionError(
        f"dirichlet_partition: after {max_retries} draws some client still had fewer than {min_size} samples "
        f"(smallest in the last draw: {smallest}) with alpha={alpha}, {k} clients, {n} samples in "
        f"{len(classes)} classes; {advice}")


def fedcos_partition(labels, num_clients: int, non_iid_fraction: float, *, seed: int,
                     shards_per_client: int = 1) -> list[np.ndarray]:
    """FedCos's label-sorted splits (FedCos Sec. VI-B; Tables I-III use 1.0, 0.9, 0.7).

    1. Sort the samples by label (ties in a seeded random order) and cut them into
       ``num_clients * shards_per_client`` contiguous equal shards (sizes differ by <= 1); deal the
       shards to clients in a seeded random order, ``shards_per_client`` each. With the default 1
       this is the paper's "totally non-IID" split; 2 is the split of its Fig. 6 ("each client is
       randomly allocated 2 subsets").
    2. For ``non_iid_fraction`` f < 1 ("90 % non-IID" is f = 0.9): take ``round((1 - f) * n_k)``
       random samples out of each client k, pool them, shuffle, cut the pool into ``num_clients``
       equal parts and give client k part k. f = 0 pools everything: an IID split.
    Silent in the paper, chosen here: the random tie order, the random shard order, round() for
    the extracted count, and that a client may get some of its own samples back from the pool.
    """
    y = _check_labels(labels)
    k = _check_clients(num_clients, len(y))
    spc = _check_count(shards_per_client, "shards_per_client")
    if not (isinstance(non_iid_fraction, (int, float, np.floating)) and 0.0 <= non_iid_fraction <= 1.0):
        raise PartitionError(f"non_iid_fraction must be a number in [0, 1] (1.0 = totally non-IID), "
                             f"got {non_iid_fraction!r}")
    if k * spc > len(y):
        raise PartitionError(f"fedcos_partition: {k} clients x {spc} shards exceeds the {len(y)} samples")
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(len(y))
    by_label = shuffled[np.argsort(y[shuffled], kind="stable")]
    shards = np.array_split(by_label, k * spc)
    order = rng.permutation(k * spc)
    own = [np.concatenate([shards[s] for s in order[j * spc:(j + 1) * spc]]) for j in range(k)]
    homogeneous = 1.0 - float(non_iid_fraction)
    kept, pooled = [], []
    for part in own:
        take = rng.permutation(len(part))[: int(round(homogeneous * len(part)))]
        mask = np.zeros(len(part), dtype=bool)
        mask[take] = True
        kept.append(part[~mask])
        pooled.append(part[mask])
    pool = rng.permutation(np.concatenate(pooled))
    dealt = np.array_split(pool, k)
    return _sorted_parts(np.concatenate([a, b]) for a, b in zip(kept, dealt))


def dispatch_classes(num_classes: int, num_clients: int, classes_per_client: int | None, *,
                     seed: int) -> list[np.ndarray]:
    """The disjoint class sets of the dispatch split: a seeded permutation of ``0..num_classes-1``
    cut into consecutive groups (``classes_per_client`` each, or, for None, all classes in
    ``num_clients`` groups whose sizes differ by at most one)."""
    c = _check_count(num_classes, "num_classes")
    k = _check_count(num_clients, "num_clients")
    perm = np.random.default_rng(seed).permutation(c)
    if classes_per_client is None:
        if k > c:
            raise PartitionError(f"dispatch: {k} clients cannot own disjoint classes out of {c}; use fewer clients")
        return _sorted_parts(np.array_split(perm, k))
    m = _check_count(classes_per_client, "classes_per_client")
    if k * m > c:
        raise PartitionError(f"dispatch: {k} clients x {m} classes each exceeds the {c} classes (classes must not "
                             f"cross clients); use fewer clients or fewer classes_per_client")
    return _sorted_parts(perm[j * m:(j + 1) * m] for j in range(k))


def dispatch_partition(labels, num_clients: int, classes_per_client: int | None, *, seed: int,
                       num_classes: int | None = None) -> list[np.ndarray]:
    """Dispatch split (Li et al., "More industry-friendly", Sec. 4.1): clients own disjoint classes.

    Client k gets every sample of the classes ``dispatch_classes(num_classes, num_clients,
    classes_per_client, seed=seed)[k]``. ``num_classes`` defaults to ``max(labels) + 1``; the class
    sets depend only on (num_classes, num_clients, classes_per_client, seed), so the same call on
    the test labels gives each client the test samples of its own classes (the paper's "local test
    mode"). With ``classes_per_client * num_clients < num_classes`` the leftover classes are on no
    client (the split does not cover the data); None spreads all classes, covering it.
    """
    y = _check_labels(labels)
    c = int(y.max()) + 1 if num_classes is None and len(y) else num_classes
    if c is None:
        raise PartitionError("dispatch_partition: empty labels; pass num_classes")
    if len(y) and y.max() >= c:
        raise PartitionError(f"labels go up to {y.max()} but num_classes is {c}")
    owned = dispatch_classes(c, num_clients, classes_per_client, seed=seed)
    parts = [np.flatnonzero(np.isin(y, cls)) for cls in owned]
    empty = [j for j, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise PartitionError(f"dispatch: client {empty[0]} owns classes {owned[empty[0]].tolist()}, "
                             f"which have no samples in these labels")
    return _sorted_parts(parts)


def holdout_split(indices, fraction: float = 0.15, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split ``indices`` into (train, val): ``round(fraction * n)`` of them, drawn uniformly, are val.

    SphereFed Sec. 5.1: "To tune hyper-parameters, we use a 15% of training data for validation".
    The paper does not say whether per client or globally; its words ("15 % of training data")
    read as a global hold-out, so the documented use is ``holdout_split(np.arange(N), seed=s)``
    on the training set before it is partitioned (docs/data.md). Calling it on each client's
    indices gives the per-client variant.
    """
    idx = np.asarray(indices)
    if idx.ndim != 1 or not (np.issubdtype(idx.dtype, np.integer) or idx.size == 0):
        raise PartitionError(f"indices must be a 1-D integer array, got dtype {idx.dtype} shape {idx.shape}")
    if not (isinstance(fraction, (int, float, np.floating)) and 0.0 <= fraction < 1.0):
        raise PartitionError(f"fraction must be a number in [0, 1), got {fraction!r}")
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(idx.astype(np.int64))
    n_val = int(math.floor(fraction * len(idx) + 0.5))
    return np.sort(shuffled[n_val:]), np.sort(shuffled[:n_val])


# --------------------------------------------------------------------------- summaries


def partition_summary(labels, parts, num_classes: int) -> np.ndarray:
    """Samples per client per class: int64 ``[len(parts), num_classes]``."""
    y = _check_labels(labels)
    c = _check_count(num_classes, "num_classes")
    if len(y) and y.max() >= c:
        raise PartitionError(f"labels go up to {y.max()} but num_classes is {c}")
    return np.stack([np.bincount(y[np.asarray(p, dtype=np.int64)], minlength=c) for p in parts]).astype(np.int64)


def save_partition_summary(path, labels, parts, num_classes: int) -> Path:
    """Write ``partition_summary`` as CSV (columns ``client, samples, class_0 .. class_{C-1}``).

    Written through ``iokit.files`` (a temporary file renamed into place: never half-written,
    with the mode ``open()`` would give).
    """
    counts = partition_summary(labels, parts, num_classes)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["client", "samples", *(f"class_{c}" for c in range(counts.shape[1]))])
    for j, row in enumerate(counts):
        w.writerow([j, int(row.sum()), *row.tolist()])
    path = atomic_write_text(path, buf.getvalue())
    return path


PARTITIONS: dict[str, Callable[..., list[np.ndarray]]] = {
    "iid": iid_partition,
    "dirichlet": dirichlet_partition,
    "fedcos": fedcos_partition,
    "dispatch": dispatch_partition,
}

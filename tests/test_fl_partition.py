"""Client partitions: disjoint, covering, deterministic, and each split's defining property."""

import csv
import os
import stat

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.fl.partition import (
    PARTITIONS,
    PartitionError,
    dirichlet_partition,
    dispatch_classes,
    dispatch_partition,
    fedcos_partition,
    holdout_split,
    iid_partition,
    partition_summary,
    save_partition_summary,
)

FAST = settings(max_examples=40, deadline=None)


@st.composite
def label_arrays(draw, min_size=20, max_size=300, max_classes=10):
    n = draw(st.integers(min_size, max_size))
    c = draw(st.integers(2, max_classes))
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).integers(0, c, n)


def _assert_partition(parts, n, *, cover=True):
    for p in parts:
        assert p.dtype == np.int64 and np.all(np.diff(p) > 0)  # sorted, no repeats
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)  # disjoint
    assert allidx.min(initial=0) >= 0 and allidx.max(initial=0) < n
    if cover:
        assert len(allidx) == n


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


# --------------------------------------------------------------------------- properties


@FAST
@given(label_arrays(), st.integers(1, 8), st.integers(0, 1000))
def test_iid_disjoint_cover_balanced_deterministic(y, k, seed):
    parts = iid_partition(y, k, seed=seed)
    _assert_partition(parts, len(y))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert _same(parts, iid_partition(y, k, seed=seed))


@FAST
@given(label_arrays(min_size=200), st.integers(1, 6), st.floats(0.5, 100), st.integers(0, 1000))
def test_dirichlet_disjoint_cover_min_size_deterministic(y, k, alpha, seed):
    # min_size 5 with >= 200 samples on <= 6 clients and alpha >= 0.5 succeeds within a few draws.
    parts = dirichlet_partition(y, k, alpha, min_size=5, seed=seed)
    _assert_partition(parts, len(y))
    assert min(len(p) for p in parts) >= 5
    assert _same(parts, dirichlet_partition(y, k, alpha, min_size=5, seed=seed))


@FAST
@given(label_arrays(), st.integers(1, 8), st.sampled_from([1.0, 0.9, 0.7, 0.0, 0.33]),
       st.integers(1, 2), st.integers(0, 1000))
def test_fedcos_disjoint_cover_deterministic(y, k, f, spc, seed):
    parts = fedcos_partition(y, k, f, seed=seed, shards_per_client=spc)
    _assert_partition(parts, len(y))
    assert _same(parts, fedcos_partition(y, k, f, seed=seed, shards_per_client=spc))


@FAST
@given(label_arrays(min_size=50), st.integers(1, 10), st.integers(0, 1000))
def test_dispatch_classes_never_cross_clients(y, k, seed):
    c = int(y.max()) + 1
    k = min(k, c)
    for m in (None, c // k):
        try:
            parts = dispatch_partition(y, k, m, seed=seed)
        except PartitionError as e:  # only when an owned class has no sample in y
            assert "which have no samples" in str(e)
            continue
        _assert_partition(parts, len(y), cover=m is None or m * k == c)
        owned = [set(y[p].tolist()) for p in parts]
        for i in range(k):
            for j in range(i + 1, k):
                assert not owned[i] & owned[j]
        for cls, p in zip(dispatch_classes(c, k, m, seed=seed), parts):
            assert set(y[p].tolist()) <= set(cls.tolist())
            assert len(p) == np.isin(y, cls).sum()  # every sample of an owned class


@FAST
@given(st.lists(st.integers(0, 10**6), unique=True, max_size=200), st.floats(0, 0.99), st.integers(0, 1000))
def test_holdout_disjoint_cover_size(indices, fraction, seed):
    idx = np.array(indices, dtype=np.int64)
    train, val = holdout_split(idx, fraction, seed=seed)
    assert len(val) == int(np.floor(fraction * len(idx) + 0.5))
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.sort(idx))
    assert np.all(np.diff(train) > 0) and np.all(np.diff(val) > 0)
    t2, v2 = holdout_split(idx, fraction, seed=seed)
    assert np.array_equal(train, t2) and np.array_equal(val, v2)


@FAST
@given(label_arrays(), st.integers(1, 8), st.sampled_from(sorted(PARTITIONS)), st.integers(0, 100))
def test_summary_sums_equal_client_and_class_sizes(y, k, name, seed):
    c = int(y.max()) + 1
    params = {"iid": {}, "dirichlet": {"alpha": 1.0, "min_size": 0}, "fedcos": {"non_iid_fraction": 0.9},
              "dispatch": {"classes_per_client": None}}[name]
    k = min(k, c)
    try:
        parts = PARTITIONS[name](y, k, seed=seed, **params)
    except PartitionError as e:  # only dispatch, when an owned class is absent from y
        assert name == "dispatch" and "which have no samples" in str(e)
        return
    counts = partition_summary(y, parts, c)
    assert counts.shape == (k, c) and counts.dtype == np.int64
    assert counts.sum(axis=1).tolist() == [len(p) for p in parts]
    assert counts.sum(axis=0).tolist() == np.bincount(y, minlength=c).tolist()  # all four cover


# --------------------------------------------------------------------------- defining behaviour


def test_iid_class_proportions_follow_the_data():
    # 10,000 balanced samples over 10 classes, 10 clients of 1,000: each client's count of a class
    # is hypergeometric, mean 100, sd = sqrt(1000 * 0.1 * 0.9 * 9000/9999) = 9.0; 60 is 6.7 sd.
    y = np.repeat(np.arange(10), 1000)
    for seed in range(5):
        counts = partition_summary(y, iid_partition(y, 10, seed=seed), 10)
        assert np.abs(counts - 100).max() < 60


def test_dirichlet_alpha_controls_concentration():
    # Share of each class held by its largest client: alpha = 0.01 puts nearly each class on
    # one client; alpha = 100 spreads it almost evenly (1/5 each on 5 clients).
    y = np.repeat(np.arange(20), 100)

    def top_share(alpha):
        counts = partition_summary(y, dirichlet_partition(y, 5, alpha, seed=3), 20)
        return (counts.max(axis=0) / counts.sum(axis=0)).mean()

    assert top_share(0.01) > 0.95
    assert top_share(100.0) < 0.3
    assert top_share(0.01) > top_share(0.5) > top_share(100.0)


def test_dirichlet_niid_bench_cap():
    # Classes are dealt in increasing order; a client already holding >= N / K samples before
    # class c gets none of c (NIID-Bench's cap). Its size before c is the row's prefix sum.
    y = np.repeat(np.arange(30), 50)  # N = 1,500, K = 6: cap 250
    for seed in range(4):
        counts = partition_summary(y, dirichlet_partition(y, 6, 0.3, seed=seed), 30)
        before = np.cumsum(counts, axis=1) - counts
        assert np.all(counts[before >= 250] == 0)
        assert (before >= 250).any()  # the cap did bind somewhere


def test_dirichlet_hand_case_single_client_gets_everything():
    y = np.array([2, 0, 1, 0, 2])
    assert [p.tolist() for p in dirichlet_partition(y, 1, 0.3, min_size=5, seed=0)] == [[0, 1, 2, 3, 4]]


def test_dirichlet_impossible_settings_fail_clearly():
    y = np.repeat(np.arange(2), 10)
    with pytest.raises(PartitionError, match="3 clients x min_size 10 exceeds the 20 samples"):
        dirichlet_partition(y, 3, 0.5, seed=0)
    # Feasible on paper but hopeless: 2 classes over 10 clients at alpha = 0.001 leave most clients
    # empty in every draw; the retry bound ends it with advice.
    with pytest.raises(PartitionError) as e:
        dirichlet_partition(y, 10, 0.001, min_size=1, max_retries=7, seed=0)
    msg = str(e.value)
    assert "after 7 draws" in msg and "larger alpha, fewer clients or a smaller min_size" in msg
    for bad in ({"alpha": 0.0}, {"alpha": float("nan")}, {"alpha": -1}):
        with pytest.raises(PartitionError, match="alpha must be"):
            dirichlet_partition(y, 2, seed=0, **bad)
    with pytest.raises(PartitionError, match="max_retries must be"):
        dirichlet_partition(y, 2, 1.0, max_retries=0, seed=0)


def test_fedcos_totally_non_iid_hand_case():
    # 10 classes x 10 samples, 5 clients: sorted by label and cut into 5 runs of 20, so each
    # client holds exactly two whole adjacent classes (0-1, 2-3, ... in a seeded order).
    y = np.repeat(np.arange(10), 10)
    counts = partition_summary(y, fedcos_partition(y, 5, 1.0, seed=0), 10)
    assert sorted(map(tuple, np.argwhere(counts).reshape(5, 2, 2)[:, :, 1].tolist())) == \
        [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    assert np.all(counts[counts > 0] == 10)


@pytest.mark.parametrize("f, foreign_max", [(0.9, 2), (0.7, 6)])
def test_fedcos_homogeneous_share(f, foreign_max):
    # Each client of 20 gives up round((1 - f) * 20) = 2 (90 %) or 6 (70 %) random samples to a
    # pool dealt back evenly, so it keeps >= 18 (resp. 14) of its own two classes and has 20 again.
    y = np.repeat(np.arange(10), 10)
    for seed in range(3):
        counts = partition_summary(y, fedcos_partition(y, 5, f, seed=seed), 10)
        assert counts.sum(axis=1).tolist() == [20] * 5
        own = np.sort(counts, axis=1)[:, -2:].sum(axis=1)
        assert np.all(own >= 20 - foreign_max)


def test_fedcos_two_shards_per_client_fig6():
    # Fig. 6 of FedCos: 20 label-sorted shards of 5 (5 divides each class's 10, so no shard
    # straddles two classes), two random shards per client over 10 clients: <= 2 classes each.
    y = np.repeat(np.arange(10), 10)
    counts = partition_summary(y, fedcos_partition(y, 10, 1.0, seed=1, shards_per_client=2), 10)
    assert np.all((counts > 0).sum(axis=1) <= 2) and counts.sum(axis=1).tolist() == [10] * 10


def test_fedcos_bad_fraction():
    with pytest.raises(PartitionError, match=r"non_iid_fraction must be a number in \[0, 1\]"):
        fedcos_partition(np.arange(10) % 2, 2, 90, seed=0)


def test_dispatch_same_classes_on_test_labels():
    # "Local test mode": the same call on the test labels gives each client its own classes.
    rng = np.random.default_rng(0)
    y_train, y_test = rng.integers(0, 10, 500), rng.integers(0, 10, 100)
    tr = dispatch_partition(y_train, 3, 3, seed=7, num_classes=10)
    te = dispatch_partition(y_test, 3, 3, seed=7, num_classes=10)
    for a, b in zip(tr, te):
        assert set(y_train[a].tolist()) == set(y_test[b].tolist())
    # 3 x 3 classes leave one class on no client: not covering, by construction.
    assert sum(map(len, tr)) < 500


def test_dispatch_errors():
    y = np.repeat(np.arange(4), 3)
    with pytest.raises(PartitionError, match="3 clients x 2 classes each exceeds the 4 classes"):
        dispatch_partition(y, 3, 2, seed=0)
    with pytest.raises(PartitionError, match="5 clients cannot own disjoint classes out of 4"):
        dispatch_partition(y, 5, None, seed=0)
    with pytest.raises(PartitionError, match="which have no samples"):
        dispatch_partition(np.array([0, 0, 1]), 3, 1, seed=0, num_classes=3)


def test_holdout_hand_case_and_errors():
    # 20 indices, fraction 0.15: round(3.0) = 3 go to validation, 17 stay.
    train, val = holdout_split(np.arange(100, 120), seed=0)
    assert (len(train), len(val)) == (17, 3) and set(val) <= set(range(100, 120))
    with pytest.raises(PartitionError, match=r"fraction must be a number in \[0, 1\)"):
        holdout_split(np.arange(5), 1.0, seed=0)


def test_input_checks():
    with pytest.raises(PartitionError, match="1-D integer"):
        iid_partition(np.array([0.5, 1.0]), 1, seed=0)
    with pytest.raises(PartitionError, match="num_clients=4 exceeds the 3 samples"):
        iid_partition(np.array([0, 1, 1]), 4, seed=0)
    with pytest.raises(PartitionError, match="num_clients must be an integer >= 1"):
        iid_partition(np.array([0, 1, 1]), 0, seed=0)
    with pytest.raises(PartitionError, match="labels go up to 3 but num_classes is 3"):
        partition_summary(np.array([0, 3]), [np.array([0, 1])], 3)
    assert issubclass(PartitionError, ValueError)


def test_summary_hand_case_and_csv(tmp_path):
    y = np.array([0, 1, 1, 2, 2, 2])
    parts = [np.array([0, 3]), np.array([1, 2, 4, 5])]
    # client 0: labels 0, 2 -> [1, 0, 1]; client 1: labels 1, 1, 2, 2 -> [0, 2, 2]
    assert partition_summary(y, parts, 3).tolist() == [[1, 0, 1], [0, 2, 2]]
    path = save_partition_summary(tmp_path / "run" / "partition.csv", y, parts, 3)
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [["client", "samples", "class_0", "class_1", "class_2"], ["0", "2", "1", "0", "1"],
                    ["1", "4", "0", "2", "2"]]
    assert [p.name for p in path.parent.iterdir()] == ["partition.csv"]  # no temp file left


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_summary_file_gets_the_mode_open_would_give(tmp_path, umask, mode):
    # open() creates files 0666 & ~umask; mkstemp's own 0600 must not leak into the result
    old = os.umask(umask)
    try:
        path = save_partition_summary(tmp_path / "partition.csv", np.array([0, 1]), [np.array([0, 1])], 2)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_registry_names():
    assert sorted(PARTITIONS) == ["dirichlet", "dispatch", "fedcos", "iid"]

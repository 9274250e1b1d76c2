"""Peak memory from storage lifetimes: a hand-computed trace and properties."""

from hypothesis import given, settings
from hypothesis import strategies as st

from accel_sim.lifetimes import peak_memory
from accel_sim.trace_schema import STORAGE_KINDS, NoWork, OpRecord, StorageInfo


def op(i, allocs=(), frees=()):
    return OpRecord(i, "aten.x", "", "fwd", NoWork(), allocs=tuple(allocs), frees=tuple(frees))


def test_hand_computed():
    storages = (
        StorageInfo(0, 100, "weight", live_at_start=True),
        StorageInfo(1, 40, "input", live_at_start=True),
        StorageInfo(2, 300, "activation"),
        StorageInfo(3, 50, "workspace"),
        StorageInfo(4, 20, "gradient"),
    )
    ops = (
        op(0, allocs=[2]),  # 100 + 40 + 300 = 440
        op(1, allocs=[3], frees=[1]),  # 440 + 50 = 490 during op 1 (the input is freed after it)
        op(2, allocs=[4], frees=[2, 3]),  # 100 + 300 + 50 + 20 = 470
        op(3),  # 100 + 20 = 120
    )
    peak = peak_memory(storages, ops)
    assert peak.live_bytes_per_op == (440, 490, 470, 120)
    assert (peak.peak_memory_bytes, peak.at_op) == (490, 1)
    assert peak.live_storages == (2, 0, 3, 1)  # largest first
    assert peak.by_kind_bytes == {**{k: 0 for k in STORAGE_KINDS}, "weight": 100, "input": 40, "activation": 300, "workspace": 50}


def test_no_ops_peak_is_the_initial_state():
    peak = peak_memory((StorageInfo(0, 8, "weight", True), StorageInfo(1, 99, "activation")), ())
    assert (peak.peak_memory_bytes, peak.at_op, peak.live_storages) == (8, -1, (0,))


# ----------------------------------------------------------------------------- properties


@st.composite
def lifetimes(draw):
    """Random storages with random [alloc, free] intervals over a random number of ops."""
    n_ops = draw(st.integers(1, 25))
    n_storages = draw(st.integers(1, 20))
    storages, intervals = [], []
    for sid in range(n_storages):
        size = draw(st.integers(0, 10_000))
        kind = draw(st.sampled_from(STORAGE_KINDS))
        at_start = draw(st.booleans())
        start = -1 if at_start else draw(st.integers(0, n_ops - 1))
        end = draw(st.one_of(st.none(), st.integers(max(start, 0), n_ops - 1)))  # None: never freed
        storages.append(StorageInfo(sid, size, kind, at_start))
        intervals.append((start, end))
    ops = [
        op(i, allocs=[s for s, (a, _) in enumerate(intervals) if a == i], frees=[s for s, (_, f) in enumerate(intervals) if f == i])
        for i in range(n_ops)
    ]
    return storages, intervals, ops


def brute_force_live(storages, intervals, i):
    """Bytes live during op i, straight from the intervals."""
    return sum(s.bytes for s, (a, f) in zip(storages, intervals) if a <= i and (f is None or f >= i))


@settings(max_examples=200, deadline=None)
@given(lifetimes())
def test_peak_is_the_largest_live_set_and_at_most_everything(case):
    storages, intervals, ops = case
    peak = peak_memory(storages, ops)
    live = [brute_force_live(storages, intervals, i) for i in range(len(ops))]
    start = sum(s.bytes for s in storages if s.live_at_start)
    assert list(peak.live_bytes_per_op) == live
    assert peak.peak_memory_bytes >= max(live)
    assert peak.peak_memory_bytes == max([start, *live])
    assert peak.peak_memory_bytes <= sum(s.bytes for s in storages)
    assert sum(peak.by_kind_bytes.values()) == peak.peak_memory_bytes
    assert sum(storages[s].bytes for s in peak.live_storages) == peak.peak_memory_bytes


@settings(max_examples=150, deadline=None)
@given(lifetimes(), st.randoms(use_true_random=False))
def test_renumbering_storages_changes_nothing(case, rnd):
    storages, _, ops = case
    new_ids = list(range(1000, 1000 + len(storages)))
    rnd.shuffle(new_ids)
    rename = {s.id: new for s, new in zip(storages, new_ids)}
    renamed_storages = [StorageInfo(rename[s.id], s.bytes, s.kind, s.live_at_start) for s in storages]
    rnd.shuffle(renamed_storages)
    renamed_ops = [op(o.idx, [rename[a] for a in o.allocs], [rename[f] for f in o.frees]) for o in ops]
    a, b = peak_memory(storages, ops), peak_memory(renamed_storages, renamed_ops)
    assert (a.peak_memory_bytes, a.at_op, a.by_kind_bytes, a.live_bytes_per_op) == (b.peak_memory_bytes, b.at_op, b.by_kind_bytes, b.live_bytes_per_op)
    assert sorted(rename[s] for s in a.live_storages) == sorted(b.live_storages)

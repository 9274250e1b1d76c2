"""Peak memory from the trace's storage lifetimes.

Accounting is per storage (views share one), as the trace schema defines it: a storage is live
from the op that lists it in ``allocs`` (or from the start, if ``live_at_start``) until the op
that lists it in ``frees`` (freed *after* that op ran), or to the end of the trace. The live bytes
*during* op ``i`` therefore include what op ``i`` allocates and what it frees. The peak is the
largest of those (and of the bytes live before the first op); its breakdown by storage kind
(weights, gradients, optimizer state, activations, workspace, ...) and the storages live at that
moment come with it. A storage allocated again while live, or freed while not live, changes
nothing (a capture never writes either).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from accel_sim.trace_schema import STORAGE_KINDS, OpRecord, StorageInfo


@dataclass(frozen=True)
class PeakMemory:
    peak_memory_bytes: int
    at_op: int  # index of the op during which the peak occurs; -1 = before the first op
    by_kind_bytes: Mapping[str, int]  # every STORAGE_KINDS key, summing to peak_memory_bytes
    live_storages: tuple[int, ...]  # ids of the storages live at the peak, largest first
    live_bytes_per_op: tuple[int, ...]  # live bytes during each op


def live_bytes_per_op(storages: Sequence[StorageInfo], ops: Sequence[OpRecord]) -> tuple[int, tuple[int, ...]]:
    """``(bytes live before the first op, bytes live during each op)``."""
    size = {s.id: s.bytes for s in storages}
    live = {s.id for s in storages if s.live_at_start}
    current = sum(size[i] for i in live)
    start = current
    during = []
    for op in ops:
        for sid in op.allocs:
            if sid not in live:
                live.add(sid)
                current += size[sid]
        during.append(current)
        for sid in op.frees:
            if sid in live:
                live.remove(sid)
                current -= size[sid]
    return start, tuple(during)


def _live_set_at(storages: Sequence[StorageInfo], ops: Sequence[OpRecord], at_op: int) -> set[int]:
    live = {s.id for s in storages if s.live_at_start}
    for position, op in enumerate(ops[: at_op + 1]):
        live.update(op.allocs)
        if position != at_op:
            live.difference_update(op.frees)
    return live


def peak_memory(storages: Sequence[StorageInfo], ops: Sequence[OpRecord]) -> PeakMemory:
    """The peak of the live bytes over the trace, where it happens, and what is live then."""
    start, during = live_bytes_per_op(storages, ops)
    at_op, peak = -1, start
    for i, value in enumerate(during):
        if value > peak:
            at_op, peak = i, value
    live = _live_set_at(storages, ops, at_op) if at_op >= 0 else {s.id for s in storages if s.live_at_start}
    info = {s.id: s for s in storages}
    by_kind = {kind: 0 for kind in STORAGE_KINDS}
    for sid in live:
        by_kind[info[sid].kind] += info[sid].bytes
    ordered = tuple(sorted(live, key=lambda sid: (-info[sid].bytes, sid)))
    return PeakMemory(peak, at_op, by_kind, ordered, during)

"""Price traces on many hardware points at once: the totals of ``simulate(trace, hw).summary()``
for every point, as numpy columns.

``simulate`` walks a trace op by op (1,522 ops for a MobileNetV2 training step, ~25 ms per
hardware point). A design-space exploration prices the same few traces on thousands of points,
so this module turns the loop around:

1. **Reduce each trace once** (``TraceWork.of``) to its distinct work with counts: GEMMs by
   ``(m, n, k, groups, role)``, vector work by ``(kind, elements, bytes read, bytes written)`` and
   linear algebra by ``(MACs, bytes read, bytes written)`` at each word size (bytes depend on
   ``word_bytes``, ``accel_sim.words``), plus what depends on no hardware field but the word size:
   peak memory, MACs, special-unit elements.
2. **Price each distinct piece of work on all points as arrays**, reading only the fields it
   depends on, and once per distinct combination of them (``_distinct``): a GEMM reads the array,
   its role's dataflow, the grouped mapping, the word size, the buffers, the DRAM bandwidth and
   latency and the memory model; a vector op its special-unit throughput, the bandwidth and
   latency. GEMMs use the closed-form fold model of ``accel_sim.memory_batch``
   (``memory_model = "on_chip_accumulation"``) or, for ``scalesim_v3`` points, the scalar
   SCALE-Sim model (``accel_sim.pricing.scalesim_timing``, cached by shape); the distinct GEMMs
   of all traces are priced together.
3. **Sum with the counts** (exact integer products) and apply the energy model to the summed
   event counts, as ``Totals`` does.

The scalar ``simulate`` stays the reference: every integer column of ``price_points`` equals the
summary's figure exactly and every float is computed by the same operations in the same order
(``tests/test_batch.py`` checks it on random traces and points, and on captured MobileNetV2 steps).
Points are held as columns (``accel_sim.points.HardwarePoints``); a space larger than memory is
priced chunk by chunk (``accel_sim.space.Space.chunks``), each chunk independent of the others.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Sequence

import numpy as np

from accel_sim.dataflows import DATAFLOWS
from accel_sim.effects import linalg_cycles, special_unit_cycles, streaming_total_cycles
from accel_sim.energy import COMPONENTS, energy_of
from accel_sim.hardware import dram_bytes_per_cycle
from accel_sim.lifetimes import peak_memory
from accel_sim.memory import MAX_FOLDS_PER_OP
from accel_sim.memory_batch import gemm_costs_batch, gemm_folds_batch
from accel_sim.points import HardwarePoints, PointColumns
from accel_sim.pricing import GemmTooLargeError, scalesim_timing
from accel_sim.simulate import rounded_values, streamed_bytes
from accel_sim.trace_schema import GEMM_ROLES, GemmWork, Trace
from accel_sim.words import Storing, stored_bytes


@dataclass(frozen=True, eq=False)
class WorkAtWord:
    """The part of a trace that depends on how values are stored (``accel_sim.words.Storing``: the
    word size, the copies of an operand, the shared scales): distinct vector and linear-algebra work
    with counts, peak memory and the values rounded."""

    vector_kinds: tuple[str, ...]
    vector_elements: np.ndarray
    vector_read_bytes: np.ndarray
    vector_write_bytes: np.ndarray
    vector_counts: np.ndarray
    linalg_macs: np.ndarray
    linalg_read_bytes: np.ndarray
    linalg_write_bytes: np.ndarray
    linalg_counts: np.ndarray
    peak_memory_bytes: int
    rounded_values: int


@dataclass(frozen=True, eq=False)
class TraceWork:
    """A trace reduced to its distinct work with counts (module docstring, step 1)."""

    trace: Trace
    ops: int
    unsupported_ops: int
    macs: int  # useful MACs of GEMMs and linear algebra
    special_unit_elements: int
    gemms: tuple[tuple[int, int, int, int, str], ...]  # distinct (m, n, k, groups, role)
    gemm_counts: np.ndarray
    _at_word: dict = field(default_factory=dict, repr=False)

    @staticmethod
    def of(trace: Trace) -> "TraceWork":
        gemms: Counter = Counter()
        macs = elements = unsupported = 0
        for op in trace.ops:
            work = op.work
            if work.kind == "gemm":
                gemms[(work.m, work.n, work.k, work.groups, work.role)] += 1
                macs += work.macs
            elif work.kind == "linalg":
                macs += work.macs
            elif work.kind == "vector":
                elements += work.elements
            elif work.kind == "unsupported":
                unsupported += 1
        keys = tuple(gemms)
        return TraceWork(trace, len(trace.ops), unsupported, macs, elements, keys,
                         np.array([gemms[k] for k in keys], dtype=np.int64))

    def at_word(self, storing: Storing) -> WorkAtWord:
        """The vector and linear-algebra work, the peak memory and the values rounded when values
        are stored as ``storing`` says (cached)."""
        if storing not in self._at_word:
            header = self.trace.header
            tensors = {t.id: t for t in header.tensors}
            stored = stored_bytes(header, self.trace.ops, storing)
            vectors: Counter = Counter()
            linalgs: Counter = Counter()
            rounded = 0
            for op in self.trace.ops:
                rounded += rounded_values(op, stored)
                if op.work.kind in ("vector", "linalg"):
                    read, write = streamed_bytes(op, tensors, stored)
                    if op.work.kind == "vector":
                        vectors[(op.work.op, op.work.elements, read, write)] += 1
                    else:
                        linalgs[(op.work.macs, read, write)] += 1
            v, lin = list(vectors), list(linalgs)

            def column(keys, i):
                return np.array([key[i] for key in keys], dtype=np.int64)

            peak = peak_memory(stored.storages, self.trace.ops)
            self._at_word[storing] = WorkAtWord(
                tuple(key[0] for key in v), column(v, 1), column(v, 2), column(v, 3),
                np.array([vectors[key] for key in v], dtype=np.int64),
                column(lin, 0), column(lin, 1), column(lin, 2), np.array([linalgs[key] for key in lin], dtype=np.int64),
                peak.peak_memory_bytes, rounded)
        return self._at_word[storing]


@dataclass(frozen=True, eq=False)
class PointCosts:
    """What a trace costs on each of ``N`` hardware points: one array per figure, named and
    computed as ``CostReport.summary()`` names and computes it (``energy_<component>_j`` are the
    entries of its ``energy_by_component_j``)."""

    ops: np.ndarray
    macs: np.ndarray
    compute_cycles: np.ndarray
    stall_cycles: np.ndarray
    total_cycles: np.ndarray
    latency_s: np.ndarray
    utilization: np.ndarray
    dram_read_bytes: np.ndarray
    dram_write_bytes: np.ndarray
    sram_read_bytes: np.ndarray
    sram_write_bytes: np.ndarray
    special_unit_elements: np.ndarray
    rounded_values: np.ndarray
    energy_mac_j: np.ndarray
    energy_sram_j: np.ndarray
    energy_dram_j: np.ndarray
    energy_special_unit_j: np.ndarray
    energy_static_j: np.ndarray
    energy_j: np.ndarray
    peak_memory_bytes: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        """Figure name -> array (for ``pandas.DataFrame``)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def row(self, i: int) -> dict[str, int | float]:
        """Point ``i``'s figures as Python numbers."""
        return {name: column[i].item() if hasattr(column[i], "item") else column[i]
                for name, column in self.columns().items()}


def price_points(works: Sequence[TraceWork], points: HardwarePoints) -> list[PointCosts]:
    """Each trace of ``works`` priced on every point of ``points`` (module docstring). Raises
    ``GemmTooLargeError`` naming the point and the GEMM, before anything is priced, if a GEMM takes
    more folds on a point than ``simulate`` prices (``accel_sim.memory.MAX_FOLDS_PER_OP``;
    ``within_fold_bound`` finds such points beforehand)."""
    works = list(works)
    keys = sorted(set().union(*(w.gemms for w in works)), key=lambda key: (key[4], key[:4]))
    _check_fold_bound(keys, points)
    gemm = _price_gemms(keys, points)
    index = {key: i for i, key in enumerate(keys)}
    return [_assemble(w, points, {name: _weighted_sum(w.gemm_counts, figure[[index[key] for key in w.gemms]])
                                  for name, figure in gemm.items()})
            for w in works]


def within_fold_bound(works: Sequence[TraceWork], points: HardwarePoints) -> np.ndarray:
    """Per point: whether every GEMM of ``works`` takes at most ``MAX_FOLDS_PER_OP`` folds there
    (what ``simulate`` and ``price_points`` price)."""
    keys = sorted(set().union(*(w.gemms for w in works)))
    return _max_folds(keys, points) <= MAX_FOLDS_PER_OP


def _max_folds(keys, points: HardwarePoints) -> np.ndarray:
    worst = np.zeros(len(points), dtype=np.int64)
    for role in GEMM_ROLES:
        shapes = [key[:4] for key in keys if key[4] == role]
        for name, flow in DATAFLOWS.items():
            at = np.flatnonzero(points[f"dataflow_{role}"] == name)
            if shapes and at.size:
                hw = PointColumns(points.take(at))
                for m, n, k, groups in shapes:
                    worst[at] = np.maximum(worst[at], gemm_folds_batch(flow, m, n, k, groups, hw))
    return worst


def _check_fold_bound(keys, points: HardwarePoints) -> None:
    worst = _max_folds(keys, points)
    beyond = np.flatnonzero(worst > MAX_FOLDS_PER_OP)
    if beyond.size:
        i = int(beyond[0])
        hw = points.config(i)
        for m, n, k, groups, role in keys:
            folds = int(_max_folds([(m, n, k, groups, role)], points.take([i]))[0])
            if folds > MAX_FOLDS_PER_OP:
                raise GemmTooLargeError(
                    f"hardware point {i}: GEMM m={m} n={n} k={k} groups={groups} ({role}) takes {folds:,} folds on a "
                    f"{hw.rows} x {hw.cols} array ({hw.dataflow(role)}); the fold model prices at most "
                    f"{MAX_FOLDS_PER_OP:,} (2^22) per op")


GEMM_FIGURES = ("compute_cycles", "total_cycles", "dram_read_bytes", "dram_write_bytes", "sram_read_bytes",
                "sram_write_bytes")


NOT_READ_BY_GEMMS = frozenset({"linalg_efficiency", "special_unit", "energy"})
"""The fields and sub-tables no GEMM is priced from (vector work's, linear algebra's, energy's).
Every other field, a new one too, tells GEMM prices apart (``_gemm_fields``)."""


def _gemm_fields(points: HardwarePoints, role: str) -> tuple[str, ...]:
    """The fields a GEMM of ``role`` may be priced from: all but ``NOT_READ_BY_GEMMS`` and the
    other roles' dataflows."""
    skip = NOT_READ_BY_GEMMS | {f"dataflow_{r}" for r in GEMM_ROLES if r != role}
    return tuple(path for path in points.columns if path.partition(".")[0] not in skip)


def _distinct(points: HardwarePoints, paths: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(one point of each distinct combination of ``paths``' values, each point's combination)."""
    codes = [np.unique(points[p], return_inverse=True)[1].reshape(-1) for p in paths]
    _, first, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _price_gemms(keys, points: HardwarePoints) -> dict[str, np.ndarray]:
    """Figure -> (distinct GEMMs x points) array of each GEMM's cost on each point."""
    out = {name: np.zeros((len(keys), len(points)), dtype=np.int64) for name in GEMM_FIGURES}
    for role in GEMM_ROLES:
        rows_of_role = [i for i, key in enumerate(keys) if key[4] == role]
        if not rows_of_role:
            continue
        first, inverse = _distinct(points, _gemm_fields(points, role))
        distinct = points.take(first)
        shapes = np.array([keys[i][:4] for i in rows_of_role], dtype=np.int64)  # (m, n, k, groups)
        priced = {name: np.zeros((len(rows_of_role), len(distinct)), dtype=np.int64) for name in GEMM_FIGURES}
        for name, flow in DATAFLOWS.items():
            at = np.flatnonzero(distinct[f"dataflow_{role}"] == name)
            if not at.size:
                continue
            hw = distinct.take(at)
            costs = gemm_costs_batch(flow, *(shapes[:, j, None] for j in range(4)),
                                     PointColumns(hw))  # every shape (a column) on every point
            for figure in GEMM_FIGURES:
                values = np.asarray(getattr(costs, figure)).reshape(len(shapes), at.size)
                if values.dtype == object:  # past int64 (accel_sim.memory.INT64_SAFE)
                    priced[figure] = priced[figure].astype(object)
                priced[figure][:, at] = values
            for j in np.flatnonzero(hw["memory_model"] == "scalesim_v3"):
                config = hw.config(int(j))
                for s, (m, n, k, groups) in enumerate(shapes.tolist()):
                    timing = scalesim_timing(GemmWork(m, n, k, groups, role), config, name)
                    for figure in ("compute_cycles", "total_cycles", "dram_read_bytes", "dram_write_bytes"):
                        priced[figure][s, at[j]] = getattr(timing, figure)
        for figure in GEMM_FIGURES:
            if priced[figure].dtype == object:
                out[figure] = out[figure].astype(object)
            out[figure][rows_of_role] = priced[figure][:, inverse]
    return out


def _weighted_sum(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``sum_i counts[i] x values[i, :]``, exactly: int64 while it cannot wrap, Python integers beyond."""
    if counts.size == 0:
        return np.zeros(values.shape[1:], dtype=np.int64)
    bound = float(np.abs(counts).sum()) * float(np.abs(values).max(initial=0))
    if bound >= 2**62:
        return (counts.astype(object)[:, None] * values.astype(object)).sum(axis=0)
    return counts @ values


class _EnergyColumns:
    """The ``[energy]`` figures of the points as arrays, read by ``accel_sim.energy`` as it reads
    an ``EnergyCosts``."""

    def __init__(self, points: HardwarePoints):
        for name in ("mac_pj", "sram_pj_per_byte", "dram_pj_per_byte", "special_unit_pj_per_element",
                     "rounding_pj_per_value", "static_w"):
            setattr(self, name, points[f"energy.{name}"])


def _storings(points: HardwarePoints) -> list[Storing]:
    """Each point's ``Storing``: how its words are stored (word and element bits, operand copies,
    scale bits, FP32 weight masters), which decides the vector work's bytes and the peak memory."""
    return [Storing(int(w), c == "per_role", float(b), m == "fp32", int(e)) for w, c, b, m, e in
            zip(points["word_bytes"].tolist(), points["operand_copies"].tolist(),
                points["scale_bits_per_value"].tolist(), points["weight_master"].tolist(),
                points["element_bits"].tolist())]


def _assemble(work: TraceWork, points: HardwarePoints, gemm: dict[str, np.ndarray]) -> PointCosts:
    """Vector and linear-algebra work priced per word size, added to the GEMMs' sums; the energy of
    the summed counts (``Totals``)."""
    n = len(points)
    figures = {name: np.array(gemm[name]) for name in GEMM_FIGURES}
    peak = np.zeros(n, dtype=np.int64)
    bytes_per_cycle = dram_bytes_per_cycle(points["dram_peak_bytes_per_s"], points["clock_hz"], points["dram_efficiency"])
    latency = points["dram_latency_cycles"]
    rounded = np.zeros(n, dtype=np.int64)
    storings = _storings(points)
    for storing in dict.fromkeys(storings):
        at = np.flatnonzero([s == storing for s in storings])
        w = work.at_word(storing)
        peak[at] = w.peak_memory_bytes
        rounded[at] = w.rounded_values
        throughput = np.stack([points[f"special_unit.{kind}"][at] for kind in w.vector_kinds]) if w.vector_kinds \
            else np.zeros((0, at.size))
        for counts, compute, read, write in (
            (w.vector_counts, special_unit_cycles(w.vector_elements[:, None], throughput), w.vector_read_bytes,
             w.vector_write_bytes),
            (w.linalg_counts, linalg_cycles(w.linalg_macs[:, None], points["rows"][at], points["cols"][at],
                                            points["linalg_efficiency"][at]), w.linalg_read_bytes, w.linalg_write_bytes),
        ):
            total = streaming_total_cycles(compute, (read + write)[:, None], bytes_per_cycle[at], latency[at])
            moved_read, moved_write = int(counts @ read), int(counts @ write)
            figures["compute_cycles"][at] += _weighted_sum(counts, compute)
            figures["total_cycles"][at] += _weighted_sum(counts, total)
            for figure, moved in (("dram_read_bytes", moved_read), ("sram_read_bytes", moved_read),
                                  ("dram_write_bytes", moved_write), ("sram_write_bytes", moved_write)):
                figures[figure][at] += moved
    total_cycles = figures["total_cycles"]
    macs = np.full(n, work.macs, dtype=np.int64)
    elements = np.full(n, work.special_unit_elements, dtype=np.int64)
    latency_s = total_cycles / points["clock_hz"]
    energy = energy_of(_EnergyColumns(points), macs=macs,
                       sram_bytes=figures["sram_read_bytes"] + figures["sram_write_bytes"],
                       dram_bytes=figures["dram_read_bytes"] + figures["dram_write_bytes"],
                       special_unit_elements=elements, rounded_values=rounded, latency_s=latency_s)
    cells = points["rows"] * points["cols"]
    with np.errstate(divide="ignore", invalid="ignore"):
        utilization = np.where(total_cycles > 0, macs / (total_cycles * cells), 0.0)
    return PointCosts(
        ops=np.full(n, work.ops, dtype=np.int64), macs=macs, compute_cycles=figures["compute_cycles"],
        stall_cycles=total_cycles - figures["compute_cycles"], total_cycles=total_cycles, latency_s=latency_s,
        utilization=utilization, dram_read_bytes=figures["dram_read_bytes"], dram_write_bytes=figures["dram_write_bytes"],
        sram_read_bytes=figures["sram_read_bytes"], sram_write_bytes=figures["sram_write_bytes"],
        special_unit_elements=elements, rounded_values=rounded, **{f"energy_{c}_j": getattr(energy, f"{c}_j") for c in COMPONENTS},
        energy_j=energy.energy_j, peak_memory_bytes=peak)


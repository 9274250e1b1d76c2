"""The vectorized pricing (``accel_sim.batch``, ``accel_sim.memory_batch``) against the scalar
reference: on random traces and random hardware points every cycle and byte of
``price_points`` equals ``simulate(trace, hw).summary()``'s, and every float agrees to 1e-9
relative; on a captured MobileNetV2 step too (slow)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_sim.batch import PointCosts, TraceWork, price_points, within_fold_bound
from accel_sim.dataflows import DATAFLOWS
from accel_sim.hardware import EnergyCosts, HardwareConfig, SpecialUnit
from accel_sim.memory import MAX_FOLDS_PER_OP
from accel_sim.memory_batch import gemm_costs_batch, gemm_folds_batch
from accel_sim.points import HardwarePoints, PointColumns
from accel_sim.pricing import GemmTooLargeError, gemm_folds, price_gemm
from accel_sim.simulate import simulate
from accel_sim.trace_schema import (GEMM_ROLES, LINALG_OPS, VECTOR_OPS, GemmWork, LinalgWork, NoWork, OpRecord,
                                    StorageInfo, TensorInfo, Trace, TraceHeader, UnsupportedWork, VectorWork)
from tests.accel_traces import small_trace

EXACT = ("ops", "macs", "compute_cycles", "stall_cycles", "total_cycles", "dram_read_bytes", "dram_write_bytes",
         "sram_read_bytes", "sram_write_bytes", "special_unit_elements", "rounded_values", "peak_memory_bytes")
CLOSE = ("latency_s", "utilization", "energy_j")


def assert_equals_simulate(trace: Trace, configs: list[HardwareConfig], costs: PointCosts) -> None:
    for i, hw in enumerate(configs):
        summary, row = simulate(trace, hw).summary(), costs.row(i)
        assert {k: row[k] for k in EXACT} == {k: summary[k] for k in EXACT}, hw
        for k in CLOSE:
            assert math.isclose(row[k], summary[k], rel_tol=1e-9, abs_tol=0.0), (k, hw)
        for component, joules in summary["energy_by_component_j"].items():
            assert math.isclose(row[f"energy_{component}_j"], joules, rel_tol=1e-9, abs_tol=0.0), component


# ----------------------------------------------------------------------------- strategies

def hardware(small: bool = True):
    """Random hardware points: every dataflow per role, both mappings and memory models, word
    sizes, buffers from one word to megabytes, bandwidths that make GEMMs compute- or DRAM-bound."""
    sides = st.integers(1, 9) if small else st.sampled_from([8, 16, 32, 64, 128])
    buffers = st.sampled_from([1, 16, 100, 256, 4096, 65536, 1 << 20])
    dataflows = st.sampled_from(list(DATAFLOWS))
    units = [SpecialUnit(**{name: rate * (i + 1) for i, name in enumerate(VECTOR_OPS)}) for rate in (0.5, 3.0, 16.0)]
    energies = [EnergyCosts(), EnergyCosts(0.7, 12.5, 640 / 4, 0.3, 1.7), EnergyCosts(3.1, 0.0, 99.9, 11.0, 0.0, 0.02)]
    return st.builds(
        HardwareConfig, rows=sides, cols=sides, clock_hz=st.sampled_from([1e8, 7e8]),
        word_bytes=st.sampled_from([1, 2, 4, 8]), dataflow_fwd=dataflows, dataflow_dx=dataflows, dataflow_dw=dataflows,
        a_buffer_bytes=buffers, b_buffer_bytes=buffers, out_buffer_bytes=buffers,
        dram_peak_bytes_per_s=st.sampled_from([1e8, 3.2e9, 12.8e9, 1e11]),
        dram_efficiency=st.sampled_from([0.3, 0.7, 1.0]), dram_latency_cycles=st.integers(0, 40),
        memory_model=st.sampled_from(["on_chip_accumulation", "on_chip_accumulation", "scalesim_v3"]),
        grouped_mapping=st.sampled_from(["per_group", "block_diagonal"]),
        linalg_efficiency=st.sampled_from([0.25, 0.5, 1.0]),
        operand_copies=st.sampled_from(["one", "per_role"]), scale_bits_per_value=st.sampled_from([0.0, 0.25]),
        special_unit=st.sampled_from(units), energy=st.sampled_from(energies))


@st.composite
def traces(draw):
    """A random trace: float32 / float64 / int64 tensors in storages with random lifetimes, and
    GEMMs (empty, grouped, every role), vector work (some stating the bytes they touch), linear
    algebra, free and unsupported ops."""
    n_storages = draw(st.integers(1, 4))
    dtypes = draw(st.lists(st.sampled_from([("float32", 4), ("float64", 8), ("int64", 8)]),
                           min_size=n_storages, max_size=n_storages))
    storages, tensors = [], []
    for i, (dtype, size) in enumerate(dtypes):
        numel = draw(st.integers(1, 64))
        kind = draw(st.sampled_from(["weight", "activation", "workspace", "gradient"]))
        storages.append(StorageInfo(i, numel * size, kind, draw(st.booleans())))
        tensors.append(TensorInfo(i, i, (numel,), dtype, numel * size, kind))
    ids = st.integers(0, n_storages - 1)
    dims = st.integers(0, 40)
    work = st.one_of(
        st.builds(GemmWork, dims, dims, dims, groups=st.integers(1, 6), role=st.sampled_from(GEMM_ROLES)),
        st.builds(VectorWork, st.sampled_from(VECTOR_OPS), st.integers(0, 500)),
        st.builds(VectorWork, st.sampled_from(VECTOR_OPS), st.integers(0, 500), read_bytes=st.integers(0, 300),
                  write_bytes=st.integers(0, 300)),
        st.builds(LinalgWork, st.sampled_from(LINALG_OPS), st.integers(1, 20), st.integers(1, 20),
                  st.integers(0, 5000)),
        st.just(NoWork()), st.just(UnsupportedWork()))
    ops = []
    for idx in range(draw(st.integers(1, 8))):
        ops.append(OpRecord(idx, "aten.op", "layer", "fwd", draw(work), tuple(draw(st.lists(ids, max_size=3))),
                            tuple(draw(st.lists(ids, max_size=2))), allocs=tuple(draw(st.lists(ids, max_size=2))),
                            frees=tuple(draw(st.lists(ids, max_size=2)))))
    return Trace(TraceHeader("random", "method", 2, tuple(storages), tuple(tensors)), tuple(ops))


# ----------------------------------------------------------------------------- GEMMs, one by one

@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.builds(GemmWork, st.integers(0, 90), st.integers(0, 90), st.integers(0, 90),
                                    groups=st.integers(1, 12)),
                          hardware()), min_size=1, max_size=8),
       st.sampled_from(list(DATAFLOWS)))
def test_closed_form_gemm_equals_the_fold_by_fold_pricing(cases, dataflow):
    """Every figure of ``price_gemm`` (on-chip accumulation), per GEMM and hardware: cycles,
    DRAM and on-chip bytes and the fold count, whatever the row and column folds, buffers,
    groups and packing."""
    cases = [(w, hw.with_(dataflow_fwd=dataflow, memory_model="on_chip_accumulation")) for w, hw in cases]

    def column(get):
        return np.array([get(w, hw) for w, hw in cases])

    instances = PointColumns(HardwarePoints.of([hw for _, hw in cases]))  # one point per GEMM
    got = gemm_costs_batch(
        DATAFLOWS[dataflow], column(lambda w, hw: w.m), column(lambda w, hw: w.n), column(lambda w, hw: w.k),
        column(lambda w, hw: w.groups), instances)
    folds = gemm_folds_batch(DATAFLOWS[dataflow], column(lambda w, hw: w.m), column(lambda w, hw: w.n),
                             column(lambda w, hw: w.k), column(lambda w, hw: w.groups), instances)
    for i, (w, hw) in enumerate(cases):
        cost = price_gemm(w, hw)
        t = cost.timing
        assert (int(got.compute_cycles[i]), int(got.total_cycles[i]), int(got.dram_read_bytes[i]),
                int(got.dram_write_bytes[i]), int(got.sram_read_bytes[i]), int(got.sram_write_bytes[i])) == (
            t.compute_cycles, t.total_cycles, t.dram_read_bytes, t.dram_write_bytes, cost.sram_read_bytes,
            cost.sram_write_bytes), (w, hw)
        assert int(got.folds[i]) == int(folds[i]) == gemm_folds(w, hw)


def test_a_hand_counted_schedule():
    # WS m=8, n=4, k=8 on 4 x 4 (tests/test_pricing.py: two row folds of 18 cycles, partial sums on
    # chip, loads 192 B per fold, 128 B stored after the last): at 16 B/cycle and latency 5,
    # 5 + 192/16 + max(18, 192/16) + max(18, 0) + 128/16 = 61 cycles; 384 B read, 128 B written.
    # Three groups back to back: 3 x 36 compute cycles, the copies' loads and stores overlapping.
    hw = HardwareConfig(rows=4, cols=4, dataflow_fwd="ws", dram_peak_bytes_per_s=1.6e9, dram_efficiency=1.0,
                        dram_latency_cycles=5)
    for groups in (1, 3):
        assert hw.dram_bytes_per_cycle == 16.0
        got = gemm_costs_batch(DATAFLOWS["ws"], [8], [4], [8], [groups], PointColumns(HardwarePoints.of([hw])))
        t = price_gemm(GemmWork(8, 4, 8, groups), hw).timing
        assert (got.total_cycles[0], got.dram_read_bytes[0], got.dram_write_bytes[0]) == (
            t.total_cycles, t.dram_read_bytes, t.dram_write_bytes)
    assert t.compute_cycles == 3 * 36
    assert price_gemm(GemmWork(8, 4, 8), hw).timing.total_cycles == 61


def test_beyond_int64_both_paths_count_in_python_integers():
    # WS m = 2^34 streamed through a 65,536 x 65,536 array of 16-byte words: one fold, whose
    # figures bound past 2^62 (accel_sim.memory.per_fold_units_bound x 2^22 folds); both the
    # fold-by-fold model and the closed form then use Python integers and agree exactly.
    hw = HardwareConfig(rows=65536, cols=65536, word_bytes=16, dataflow_fwd="ws")
    work = GemmWork(2**34, 1, 1)
    cost = price_gemm(work, hw)
    got = gemm_costs_batch(DATAFLOWS["ws"], [work.m], [1], [1], [1], PointColumns(HardwarePoints.of([hw])))
    assert got.total_cycles.dtype == object
    assert int(got.total_cycles[0]) == cost.timing.total_cycles
    assert int(got.dram_read_bytes[0]) == cost.timing.dram_read_bytes == (2**34 + 1) * 16  # A once, B once


# ----------------------------------------------------------------------------- whole traces

@settings(max_examples=30, deadline=None)
@given(st.lists(traces(), min_size=1, max_size=2), st.lists(hardware(), min_size=1, max_size=4))
def test_every_figure_equals_simulate_on_random_traces_and_points(trace_list, configs):
    costs = price_points([TraceWork.of(t) for t in trace_list], HardwarePoints.of(configs))
    for trace, per_trace in zip(trace_list, costs):
        assert_equals_simulate(trace, configs, per_trace)


def test_small_trace_by_hand_and_the_column_names():
    # tests/accel_traces.small_trace on the default hardware: what simulate says, and columns named
    # as the summary names them
    configs = [HardwareConfig(), HardwareConfig(word_bytes=2, memory_model="scalesim_v3")]
    costs = price_points([TraceWork.of(small_trace())], HardwarePoints.of(configs))[0]
    assert_equals_simulate(small_trace(), configs, costs)
    summary = simulate(small_trace()).summary()
    assert set(costs.columns()) == {k for k in summary if k in EXACT + CLOSE} | {
        f"energy_{c}_j" for c in summary["energy_by_component_j"]}


def test_chunks_are_independent():
    configs = [HardwareConfig(rows=r, cols=c, dataflow_dw=d) for r in (4, 16) for c in (8, 32) for d in ("os", "is")]
    work = [TraceWork.of(small_trace())]
    whole = price_points(work, HardwarePoints.of(configs))[0].columns()
    halves = [price_points(work, HardwarePoints.of(part))[0].columns() for part in (configs[:3], configs[3:])]
    for name, column in whole.items():
        assert column.tolist() == np.concatenate([h[name] for h in halves]).tolist()


def test_a_gemm_beyond_the_fold_bound_is_named_before_pricing():
    # OS on a 1 x 64 array: S_R = m = 2^11 row folds per group, 2^11 + 1 groups: past the 2^22 folds
    # simulate prices; on the 32 x 64 WS array the same GEMM takes one fold per group
    hw_ok, hw_over = HardwareConfig(rows=32, cols=64), HardwareConfig(rows=1, cols=64, dataflow_fwd="os")
    trace = Trace(TraceHeader("big", "m", 1, (), ()),
                  (OpRecord(0, "aten.mm.default", "fc", "fwd", GemmWork(2**11, 64, 1, groups=2**11 + 1), (), ()),))
    points = HardwarePoints.of([hw_ok, hw_over])
    assert within_fold_bound([TraceWork.of(trace)], points).tolist() == [True, False]
    assert gemm_folds(trace.ops[0].work, hw_over) == 2**11 * (2**11 + 1) > MAX_FOLDS_PER_OP
    with pytest.raises(GemmTooLargeError, match=r"hardware point 1: GEMM m=2048 n=64 k=1 groups=2049 \(fwd\) takes "
                                                r"4,196,352 folds on a 1 x 64 array \(os\)"):
        price_points([TraceWork.of(trace)], points)


@pytest.mark.slow
def test_captured_mobilenetv2_steps_on_random_points():
    """A real autograd graph (MobileNetV2 FedAvg and SphereFed steps at batch 4, 1.5 k ops each)
    on random points of every dataflow, mapping, memory model and word size."""
    import random

    import torch

    from workloads.cost.step import method_step_trace

    torch.set_num_threads(1)
    steps = [method_step_trace("mobilenetv2", method, batch_size=4) for method in ("fedavg", "spherefed")]
    rng = random.Random(24)
    configs = [HardwareConfig(rows=rng.choice([8, 16, 32]), cols=rng.choice([16, 32, 64, 128]),
                              word_bytes=rng.choice([1, 2, 4]),
                              a_buffer_bytes=rng.choice([16384, 262144, 1572864]),
                              b_buffer_bytes=rng.choice([16384, 1572864]), out_buffer_bytes=rng.choice([8192, 1048576]),
                              dram_peak_bytes_per_s=rng.choice([3.2e9, 12.8e9, 51.2e9]),
                              dataflow_fwd=rng.choice(list(DATAFLOWS)), dataflow_dx=rng.choice(list(DATAFLOWS)),
                              dataflow_dw=rng.choice(list(DATAFLOWS)),
                              grouped_mapping=rng.choice(["per_group", "block_diagonal"]),
                              memory_model="scalesim_v3" if i % 4 == 3 else "on_chip_accumulation")
               for i in range(12)]
    costs = price_points([TraceWork.of(t) for t in steps], HardwarePoints.of(configs))
    for trace, per_trace in zip(steps, costs):
        assert_equals_simulate(trace, configs, per_trace)

"""The memory system and per-op pricing: hand-computed traffic and timing on a 4 x 4 array."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from accel_sim.hardware import HardwareConfig, SpecialUnit
from accel_sim.memory import gemm_fold_schedule, pipelined_cycles, streaming_cycles
from accel_sim.pricing import packing_factor, price_work
from accel_sim.simulate import simulate
from accel_sim.systolic import gemm_cycles
from accel_sim.trace_schema import GemmWork, LinalgWork, NoWork, UnsupportedWork, VectorWork
from tests.accel_traces import small_trace

BIG = 1 << 30


def sched(m, n, k, dataflow, a=BIG, b=BIG, out=BIG):
    hw = HardwareConfig(rows=4, cols=4, word_bytes=4, a_buffer_bytes=a, b_buffer_bytes=b, out_buffer_bytes=out)
    return gemm_fold_schedule(m, n, k, hw=hw, dataflow=dataflow)


def test_ws_single_fold():
    # WS m=8, n=4, k=4 on 4 x 4: (S_R, S_C, T) = (4, 4, 8), one fold of 2*4 + 4 + 8 - 2 = 18 cycles.
    # loads: stationary B 4*4 = 16 words + streamed A^T 4*8 = 32 words = 48 words = 192 B;
    # stores: the 4 x 8 outputs = 32 words = 128 B.
    s = sched(8, 4, 4, "ws")
    assert (s.compute_cycles.tolist(), s.dram_read_units.tolist(), s.dram_write_units.tolist()) == ([18], [192], [128])
    # 16 B/cycle, latency 5: 5 + 192/16 (12) + max(18, 0) + 128/16 (8) = 43 -> stall 25
    t = pipelined_cycles(s, bytes_per_cycle=16, latency_cycles=5)
    assert (t.compute_cycles, t.stall_cycles, t.total_cycles, t.dram_read_bytes, t.dram_write_bytes) == (18, 25, 43, 192, 128)


def test_ws_partial_sums_on_chip_vs_spilled():
    # WS m=8, n=4, k=8: two row folds (K = 8 = 2 x 4) accumulate into the same 4 x 8 outputs.
    # On chip: loads 48 words per fold (192 B); only the last fold stores the 32 words (128 B).
    s = sched(8, 4, 8, "ws")
    assert s.dram_read_units.tolist() == [192, 192] and s.dram_write_units.tolist() == [0, 128]
    # 5 + 12 + max(18, load_1 192/16 = 12) + max(18, store_0 0) + 128/16 = 5 + 12 + 18 + 18 + 8 = 61
    assert pipelined_cycles(s, bytes_per_cycle=16, latency_cycles=5).total_cycles == 61
    # Output buffer of 64 B (32 B active < 4 x 8 x 4 = 128 B): every fold stores its partial sums
    # and the second fold reads them back: loads [192, 192 + 128], stores [128, 128].
    s = sched(8, 4, 8, "ws", out=64)
    assert s.dram_read_units.tolist() == [192, 320] and s.dram_write_units.tolist() == [128, 128]
    # 5 + 12 + max(18, 320/16 = 20) + max(18, 128/16 = 8) + 8 = 5 + 12 + 20 + 18 + 8 = 63
    t = pipelined_cycles(s, bytes_per_cycle=16, latency_cycles=5)
    assert (t.total_cycles, t.stall_cycles, t.dram_read_bytes, t.dram_write_bytes) == (63, 27, 512, 256)


def test_os_operand_reuse():
    # OS m=8, n=8, k=3 on 4 x 4: 2 x 2 folds in the order (fc0 fr0), (fc0 fr1), (fc1 fr0), (fc1 fr1).
    # A fits its buffer: A blocks (4 x 3 = 12 words) only in column fold 0: [12, 12, 0, 0];
    # B blocks (3 x 4 = 12 words) once per column fold: [12, 0, 12, 0]; outputs 16 words per fold.
    s = sched(8, 8, 3, "os")
    assert (s.dram_read_units // 4).tolist() == [24, 12, 12, 0]
    assert (s.dram_write_units // 4).tolist() == [16] * 4
    # every element of A (24 words) and B (24 words) read exactly once
    assert s.dram_read_units.sum() == (8 * 3 + 3 * 8) * 4
    # A buffer too small (A = 96 B > 32 B active): A re-read in every column fold
    s = sched(8, 8, 3, "os", a=64)
    assert (s.dram_read_units // 4).tolist() == [24, 12, 24, 12]


@settings(max_examples=100, deadline=None)
@given(m=st.integers(1, 300), n=st.integers(1, 300), k=st.integers(1, 300), dataflow=st.sampled_from(["os", "ws", "is"]))
def test_big_buffers_move_each_word_once(m, n, k, dataflow):
    # with buffers that hold everything, DRAM traffic is the compulsory traffic: A and B read
    # once, the outputs written once; compute is SCALE-Sim's cycles
    s = sched(m, n, k, dataflow)
    assert s.dram_read_units.sum() == (m * k + k * n) * 4
    assert s.dram_write_units.sum() == m * n * 4
    assert s.compute_cycles.sum() == gemm_cycles(m, n, k, rows=4, cols=4, dataflow=dataflow)


@settings(max_examples=100, deadline=None)
@given(
    m=st.integers(1, 300), n=st.integers(1, 300), k=st.integers(1, 300), dataflow=st.sampled_from(["os", "ws", "is"]),
    buf=st.integers(16, 4096), bw=st.floats(0.5, 256), latency=st.integers(0, 50),
)
def test_time_bounds(m, n, k, dataflow, buf, bw, latency):
    # total >= compute, total >= all traffic / bandwidth, and <= doing everything serially
    s = sched(m, n, k, dataflow, a=buf, b=buf, out=buf)
    t = pipelined_cycles(s, bytes_per_cycle=bw, latency_cycles=latency)
    moved = t.dram_read_bytes + t.dram_write_bytes
    assert t.total_cycles >= t.compute_cycles
    assert t.total_cycles >= math.floor(moved / bw)
    assert t.total_cycles <= latency + t.compute_cycles + math.ceil(moved / bw) + 1


def test_streaming_op():
    # 1000 loss elements at 16/cycle: ceil(62.5) = 63 compute cycles; 8,000 B at 89.6 B/cycle =
    # 89.29 cycles of transfer; total = 20 + 89.29 -> 110 cycles, stall 47
    hw = HardwareConfig()
    cost = price_work(VectorWork("loss", 1000), hw, dram_read_bytes=4000, dram_write_bytes=4000)
    t = cost.timing
    assert (t.compute_cycles, t.total_cycles, t.stall_cycles, t.dram_read_bytes, t.dram_write_bytes) == (63, 110, 47, 4000, 4000)
    # a fast bus makes it compute-bound: 20 + max(63, 8000/8960) = 83
    fast = hw.with_(dram_peak_bytes_per_s=12.8e12)
    assert price_work(VectorWork("loss", 1000), fast, 4000, 4000).timing.total_cycles == 83
    # nothing moved, no latency
    assert streaming_cycles(7, 0, 0, bytes_per_cycle=1.0, latency_cycles=20).total_cycles == 7


def test_special_unit_kinds_use_their_throughput():
    hw = HardwareConfig(special_unit=SpecialUnit(norm=2.0, activation=8.0))
    assert price_work(VectorWork("norm", 100), hw).timing.compute_cycles == 50
    assert price_work(VectorWork("activation", 100), hw).timing.compute_cycles == 13  # ceil(12.5)


def test_linalg():
    # 1,000,000 MACs at 2048 x 0.5 = 1024 MACs/cycle: ceil(976.56) = 977 cycles
    cost = price_work(LinalgWork("cholesky", 100, 0, 1_000_000), HardwareConfig())
    assert (cost.timing.compute_cycles, cost.macs) == (977, 1_000_000)


def test_none_and_unsupported():
    assert price_work(NoWork(), HardwareConfig()).timing.total_cycles == 0
    cost = price_work(UnsupportedWork(), HardwareConfig())
    assert (cost.priced, cost.timing.total_cycles) == (False, 0)


def test_gemm_roles_use_their_dataflow():
    hw = HardwareConfig(rows=4, cols=4, dataflow_fwd="os", dataflow_dx="ws", dataflow_dw="is")
    for role, dataflow in (("fwd", "os"), ("dx", "ws"), ("dw", "is")):
        cost = price_work(GemmWork(10, 6, 5, role=role), hw)
        assert cost.dataflow == dataflow
        assert cost.timing.compute_cycles == gemm_cycles(10, 6, 5, rows=4, cols=4, dataflow=dataflow)
        assert cost.macs == 300


def test_grouped_mappings():
    # depthwise-like: 5 groups of m=8, n=1, k=2 on 4 x 4, WS
    hw = HardwareConfig(rows=4, cols=4, dataflow_fwd="ws")
    work = GemmWork(8, 1, 2, groups=5)
    # per group: 5 x gemm(8, 1, 2) = 5 x (1 fold of 8 + 4 + 8 - 2 = 18) = 90
    assert price_work(work, hw).timing.compute_cycles == 90
    # block diagonal: p = min(4 // 2, 4 // 1) = 2 groups per pack: 2 packs of gemm(8, 2, 4)
    # (1 fold, 18 cycles) + 1 pack of the last group gemm(8, 1, 2) (18) = 54
    assert packing_factor(1, 2, 5, rows=4, cols=4, dataflow="ws") == 2
    packed = price_work(work, hw.with_(grouped_mapping="block_diagonal"))
    assert packed.timing.compute_cycles == 54
    assert packed.macs == 8 * 1 * 2 * 5  # useful MACs only
    # the zero blocks of the packed B are not moved: with buffers that hold everything, both
    # mappings read A (8 x 2 x 5 = 80 words) and B (2 x 1 x 5 = 10 words) once = 360 B and write
    # the 8 x 1 x 5 = 40 output words once = 160 B
    for cost in (price_work(work, hw), packed):
        assert (cost.timing.dram_read_bytes, cost.timing.dram_write_bytes) == (360, 160)
    # OS packs along columns only: p = 4 // 1 = 4; IS along rows only: p = 4 // 2 = 2
    assert packing_factor(1, 2, 5, rows=4, cols=4, dataflow="os") == 4
    assert packing_factor(1, 2, 5, rows=4, cols=4, dataflow="is") == 2
    # never more than the groups, never less than 1
    assert packing_factor(1, 2, 3, rows=64, cols=64, dataflow="os") == 3
    assert packing_factor(9, 9, 3, rows=4, cols=4, dataflow="ws") == 1


def test_grouped_traffic_adds_up():
    # per group, every group moves its own operands: 3 groups = 3 x one group's bytes
    hw = HardwareConfig(rows=4, cols=4)
    one = price_work(GemmWork(8, 4, 4), hw).timing
    three = price_work(GemmWork(8, 4, 4, groups=3), hw).timing
    assert (three.dram_read_bytes, three.dram_write_bytes) == (3 * one.dram_read_bytes, 3 * one.dram_write_bytes)
    assert three.compute_cycles == 3 * one.compute_cycles
    # back to back in one pipeline: a group's loads overlap the previous group's compute
    assert three.compute_cycles <= three.total_cycles <= 3 * one.total_cycles


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 80), st.integers(1, 80), st.integers(1, 80), st.integers(1, 9), st.integers(1, 9),
       st.sampled_from(["os", "ws", "is"]), st.sampled_from([16, 1 << 30]))
def test_on_chip_traffic_closed_forms(m, n, k, rows, cols, dataflow, buffers):
    # docs/scalesim.md: with Rf row folds and Cf column folds of (S_R, S_C, T), the array reads
    # A: os M K Cf, ws M K Cf, is K M; B: os K N Rf, ws K N, is K N Cf; writes M N (os) or M N Rf
    # (ws / is) and reads back M N (Rf - 1) partial sums (ws / is); whatever the buffer sizes.
    hw = HardwareConfig(rows=rows, cols=cols, word_bytes=1, a_buffer_bytes=buffers, b_buffer_bytes=buffers,
                        out_buffer_bytes=buffers)
    s = gemm_fold_schedule(m, n, k, hw=hw, dataflow=dataflow)
    s_r, s_c = {"os": (m, n), "ws": (k, n), "is": (k, m)}[dataflow]
    rf, cf = math.ceil(s_r / rows), math.ceil(s_c / cols)
    a, b, out, psum = {"os": (m * k * cf, k * n * rf, m * n, 0),
                       "ws": (m * k * cf, k * n, m * n * rf, m * n * (rf - 1)),
                       "is": (k * m, k * n * cf, m * n * rf, m * n * (rf - 1))}[dataflow]
    assert (s.sram_a_read_units.sum(), s.sram_b_read_units.sum()) == (a, b)
    assert (s.sram_out_write_units.sum(), s.sram_psum_read_units.sum()) == (out, psum)


def test_scalesim_memory_model_prices_gemms_and_their_energy():
    """``memory_model = "scalesim_v3"``: DRAM bytes and time from ``accel_sim.memory_scalesim``
    (words x word_bytes), on-chip buffer bytes from the fold schedule as under ``on_chip_accumulation``."""
    # 4 x 4 array, 4-byte words, 1 KiB buffers = 256 words, 3.2e9 B/s / 100 MHz x 0.5 = 16 B =
    # 4 words per cycle. WS 8 x 4 x 6: (S_R, S_C, T) = (6, 4, 8), Rf = 2, Cf = 1; A image M x Rf R =
    # 8 x 8 = 64 words, B image K x Cf C = 6 x 4 = 24 (both fit 128): 88 words read = 352 B;
    # written M N Rf = 8 x 4 x 2 = 64 words = 256 B; 2 folds x (2*4 + 4 + 8 - 2) = 36 cycles, no stall.
    hw = HardwareConfig(rows=4, cols=4, a_buffer_bytes=1024, b_buffer_bytes=1024, out_buffer_bytes=1024,
                        dram_peak_bytes_per_s=3.2e9, dram_efficiency=0.5, memory_model="scalesim_v3")
    assert hw.scalesim_bandwidth_words_per_cycle == 4
    cost = price_work(GemmWork(8, 4, 6), hw)
    assert (cost.timing.dram_read_bytes, cost.timing.dram_write_bytes) == (352, 256)
    assert (cost.timing.compute_cycles, cost.timing.stall_cycles, cost.timing.total_cycles) == (36, 0, 36)
    ours = price_work(GemmWork(8, 4, 6), hw.with_(memory_model="on_chip_accumulation"))
    assert (cost.sram_read_bytes, cost.sram_write_bytes) == (ours.sram_read_bytes, ours.sram_write_bytes)
    assert (ours.timing.dram_read_bytes, ours.timing.dram_write_bytes) == (4 * (48 + 24), 4 * 32)  # M K + K N, M N
    # three groups, per_group: three SCALE-Sim layers back to back
    three = price_work(GemmWork(8, 4, 6, groups=3), hw).timing
    assert (three.dram_read_bytes, three.dram_write_bytes, three.total_cycles) == (3 * 352, 3 * 256, 3 * 36)
    # the energy model charges the DRAM bytes of each op's timing: SCALE-Sim's under this model
    for model in ("on_chip_accumulation", "scalesim_v3"):
        report = simulate(small_trace(), hw.with_(memory_model=model))
        dram_bytes = report.totals.dram_read_bytes + report.totals.dram_write_bytes
        assert math.isclose(report.energy.dram_j, hw.energy.dram_pj_per_byte * dram_bytes * 1e-12)
        assert report.summary()["memory_model"] == model


@settings(max_examples=60, deadline=None)
@given(m=st.integers(0, 200), n=st.integers(0, 200), k=st.integers(0, 200), groups=st.integers(1, 12),
       rows=st.integers(1, 9), cols=st.integers(1, 9), dataflow=st.sampled_from(["os", "ws", "is"]),
       mapping=st.sampled_from(["per_group", "block_diagonal"]))
def test_gemm_folds_counts_the_schedule(m, n, k, groups, rows, cols, dataflow, mapping):
    """``gemm_folds`` (what the size check counts, without building anything) is the length of the
    fold schedule the pricing builds."""
    from accel_sim.pricing import gemm_folds, gemm_schedule

    hw = HardwareConfig(rows=rows, cols=cols, dataflow_fwd=dataflow, grouped_mapping=mapping)
    work = GemmWork(m, n, k, groups=groups)
    assert gemm_folds(work, hw) == gemm_schedule(work, hw, dataflow).compute_cycles.size


def test_gemm_beyond_the_fold_model_is_refused_before_pricing():
    import pytest

    from accel_sim.memory import MAX_FOLDS_PER_OP
    from accel_sim.pricing import GemmTooLargeError, gemm_folds, price_gemm
    from accel_sim.trace_schema import OpRecord, Trace

    hw = HardwareConfig()  # 32 x 64, WS forward: (S_R, S_C) = (k, n)
    at_bound = GemmWork(1, 64 * 2**11, 32 * 2**11)  # 2^11 x 2^11 = 2^22 folds: allowed
    assert gemm_folds(at_bound, hw) == MAX_FOLDS_PER_OP
    over = GemmWork(1, 64 * 2**11, 32 * 2**11 + 1)  # 2^11 + 1 row folds
    assert gemm_folds(over, hw) == MAX_FOLDS_PER_OP + 2**11
    with pytest.raises(GemmTooLargeError, match="takes 4,196,352 folds on a 32 x 64 array"):
        price_gemm(over, hw)
    with pytest.raises(GemmTooLargeError, match="dimensions must be at most 2\\^40"):
        price_gemm(GemmWork(10**30, 1, 1), hw)  # built in Python, not read from a file
    trace = small_trace()
    bad = Trace(trace.header, trace.ops[:3] + (OpRecord(3, "aten.mm.default", "big", "fwd", over),))
    with pytest.raises(GemmTooLargeError, match="^op 3 \\(aten.mm.default, layer 'big'\\): GEMM"):
        simulate(bad, hw)

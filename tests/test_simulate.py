"""simulate(trace, hw) -> CostReport: per-op costs, totals, queries, unpriced ops."""

import random

import pandas as pd
import pytest

from accel_sim.hardware import HardwareConfig
from accel_sim.pricing import price_work
from accel_sim.simulate import simulate
from accel_sim.systolic import gemm_cycles
from accel_sim.trace_schema import OpRecord, StorageInfo, TensorInfo, Trace, TraceHeader, VectorWork
from tests.accel_traces import small_trace

HW = HardwareConfig(rows=4, cols=4)


def test_per_op_costs():
    report = simulate(small_trace(), HW)
    ops = report.ops
    # forward GEMM: WS (the default forward dataflow), 2 x 5 x 3 -> (S_R, S_C, T) = (3, 5, 2):
    # folds 1 x 2, fold = 8 + 4 + 2 - 2 = 12 -> 24 compute cycles
    assert (ops[0].dataflow, ops[0].compute_cycles, ops[0].macs) == ("ws", 24, 30)
    assert ops[0].compute_cycles == gemm_cycles(2, 5, 3, rows=4, cols=4, dataflow="ws")
    # dW GEMM under OS (the default weight-gradient dataflow)
    assert ops[5].dataflow == "os"
    assert ops[5].compute_cycles == gemm_cycles(5, 3, 2, rows=4, cols=4, dataflow="os")
    # relu streams its input (40 B) and output (40 B): 80 B at 89.6 B/cycle + 20 latency ->
    # ceil(20.89) = 21 cycles; compute ceil(10 / 64) = 1
    assert (ops[1].dram_read_bytes, ops[1].dram_write_bytes, ops[1].compute_cycles, ops[1].total_cycles) == (40, 40, 1, 21)
    # the update reads W and dW (60 + 60 B) and writes W (60 B)
    assert (ops[6].dram_read_bytes, ops[6].dram_write_bytes) == (120, 60)
    assert (ops[2].total_cycles, ops[2].priced) == (0, True)  # a view is free
    assert (ops[8].total_cycles, ops[8].priced) == (0, False)
    assert report.unsupported_ops() == {"aten.fancy_new_op.default": 1}
    for cost, op in zip(ops, small_trace().ops):
        reads = sum(t.bytes for t in small_trace().header.tensors if t.id in op.inputs)
        writes = sum(t.bytes for t in small_trace().header.tensors if t.id in op.outputs)
        expected = price_work(op.work, HW, reads, writes)
        assert cost.total_cycles == expected.timing.total_cycles
        assert cost.total_cycles == cost.compute_cycles + cost.stall_cycles


def test_totals_and_queries_add_up():
    report = simulate(small_trace(), HW)
    total = report.total_cycles
    assert total == sum(c.total_cycles for c in report.ops)
    assert sum(t.total_cycles for t in report.by_layer().values()) == total
    assert sum(t.total_cycles for t in report.by_phase().values()) == total
    assert sum(t.total_cycles for t in report.by_work().values()) == total
    assert list(report.by_phase()) == ["fwd", "bwd", "update", "calibration"]
    assert report.by_layer()["fc"].ops == 3
    assert report.macs == 30 + 30 + 18
    assert report.latency_s == pytest.approx(total / 100e6)
    assert report.utilization() == pytest.approx(report.macs / (total * 16))
    frame = pd.DataFrame(report.rows())
    assert len(frame) == 9 and frame["total_cycles"].sum() == total
    assert {"idx", "layer", "phase", "compute_cycles", "stall_cycles", "dram_read_bytes", "utilization"} <= set(frame.columns)


def test_peak_memory_in_report():
    report = simulate(small_trace(), HW)
    # live: W 60 + x 24 always; during op 4: y 40 + loss 4 + dy 40 -> 168; during op 5: + dW 60,
    # loss freed after op 4 -> 60 + 24 + 40 + 40 + 60 = 224; later ops: W, x, dW, solve 36 = 180
    assert (report.peak_memory_bytes, report.peak.at_op) == (224, 5)
    assert report.peak.by_kind_bytes["gradient"] == 60


def test_hardware_changes_the_price_not_the_work():
    slow = simulate(small_trace(), HW.with_(dram_peak_bytes_per_s=1e8))
    fast = simulate(small_trace(), HW)
    assert slow.macs == fast.macs and slow.peak_memory_bytes == fast.peak_memory_bytes
    assert slow.total_cycles > fast.total_cycles
    assert sum(c.compute_cycles for c in slow.ops) == sum(c.compute_cycles for c in fast.ops)


def test_renumbering_tensor_and_storage_ids_changes_nothing():
    trace = small_trace()
    rnd = random.Random(3)
    t_ids = rnd.sample(range(100, 200), len(trace.header.tensors))
    s_ids = rnd.sample(range(500, 600), len(trace.header.storages))
    tmap = {t.id: new for t, new in zip(trace.header.tensors, t_ids)}
    smap = {s.id: new for s, new in zip(trace.header.storages, s_ids)}
    header = TraceHeader(
        "tiny", "fedavg", 2,
        tuple(StorageInfo(smap[s.id], s.bytes, s.kind, s.live_at_start) for s in reversed(trace.header.storages)),
        tuple(TensorInfo(tmap[t.id], smap[t.storage], t.shape, t.dtype, t.bytes, t.kind) for t in trace.header.tensors),
    )
    ops = tuple(
        OpRecord(o.idx, o.aten, o.layer, o.phase, o.work, tuple(tmap[i] for i in o.inputs), tuple(tmap[i] for i in o.outputs),
                 tuple(smap[i] for i in o.allocs), tuple(smap[i] for i in o.frees))
        for o in trace.ops
    )
    a, b = simulate(trace, HW), simulate(Trace(header, ops), HW)
    assert a.ops == b.ops
    assert (a.peak_memory_bytes, a.peak.at_op, a.peak.by_kind_bytes) == (b.peak_memory_bytes, b.peak.at_op, b.peak.by_kind_bytes)


def test_default_hardware_is_the_paper():
    assert simulate(small_trace()).hw == HardwareConfig()


def _with_ops(trace: Trace, tensors: tuple, storages: tuple, ops: tuple) -> Trace:
    h = trace.header
    header = TraceHeader(h.model, h.method, h.batch_size, h.storages + storages, h.tensors + tensors)
    return Trace(header, trace.ops + ops)


def _byte_figures(report) -> list:
    """Every byte figure of a report: per op DRAM and on-chip traffic, peak and its breakdown."""
    per_op = [(c.dram_read_bytes, c.dram_write_bytes, c.sram_read_bytes, c.sram_write_bytes) for c in report.ops]
    return [*per_op, report.peak_memory_bytes, dict(report.peak.by_kind_bytes), report.peak.live_bytes_per_op]


def _halved(figures):
    if isinstance(figures, dict):
        return {k: v // 2 for k, v in figures.items()}
    if isinstance(figures, (tuple, list)):
        return type(figures)(_halved(f) for f in figures)
    return figures // 2


def _with_index_add(trace: Trace) -> Trace:
    """small_trace plus an index_add-like op that states its bytes (48 read, 16 written) on a
    float32 accumulator (storage 8, 40 B)."""
    return _with_ops(trace, (TensorInfo(8, 8, (2, 5), "float32", 40, "workspace"),),
                     (StorageInfo(8, 40, "workspace"),),
                     (OpRecord(9, "aten.index_add_.default", "", "calibration",
                               VectorWork("elementwise", 4, read_bytes=48, write_bytes=16), (8, 6), (8,),
                               allocs=(8,)),))


def test_a_wider_word_scales_every_byte_figure_of_a_float32_trace():
    # at 8-byte words every floating-point value is 8 bytes: every byte figure doubles
    trace = _with_index_add(small_trace())
    hw4 = HW.with_(a_buffer_bytes=1 << 20, b_buffer_bytes=1 << 20, out_buffer_bytes=1 << 20)
    at4, at8 = simulate(trace, hw4), simulate(trace, hw4.with_(word_bytes=8))
    # peak during op 5 (224 B); during op 9: W 60 + x 24 + dW 60 + solve 36 + accumulator 40 = 220
    assert (at4.peak_memory_bytes, at4.peak.live_bytes_per_op[9]) == (224, 220)
    assert _halved(_byte_figures(at8)) == _byte_figures(at4)
    assert at8.ops[9].dram_read_bytes == 96 and at8.macs == at4.macs


def test_a_narrow_format_stores_gemm_operands_in_it_and_keeps_the_rest_fp32():
    # small_trace at 2-byte words (docs: accel_sim/words.py). GEMMs read W (storage 0, a weight, by
    # the forward mm), x (1: forward and dW mm) and dy (5: dW mm); everything else stays FP32.
    trace = _with_index_add(small_trace())
    hw4 = HW.with_(a_buffer_bytes=1 << 20, b_buffer_bytes=1 << 20, out_buffer_bytes=1 << 20)
    at4, at2 = simulate(trace, hw4), simulate(trace, hw4.with_(word_bytes=2))
    ops4, ops2 = _byte_figures(at4)[:10], _byte_figures(at2)[:10]
    assert ops2[0] == _halved(ops4[0]) and ops2[5] == _halved(ops4[5])  # the GEMMs: words of 2 bytes
    assert ops2[1] == ops4[1] == (40, 40, 40, 40)  # relu: y and relu(y) FP32, 10 values x 4 B
    # mse backward: reads loss 4 + y 40, writes dy in the format: 10 values x 2 B = 20
    assert (at2.ops[4].dram_read_bytes, at2.ops[4].dram_write_bytes) == (44, 20)
    # the SGD update reads W's FP32 master (60) and dW (60) and writes the master (60) and W's
    # copy in the format (15 x 2 = 30)
    assert (at2.ops[6].dram_read_bytes, at2.ops[6].dram_write_bytes) == (120, 90)
    assert at2.ops[7].dram_read_bytes == 60  # the solve reads the FP32 master
    assert at2.ops[9].dram_read_bytes == 48  # the stated bytes of FP32 tensors stay as stated
    # live at op 5: W 60 + 30, x 12, y 40, dy 20, dW 60 = 222 (FP32 224); at op 9, now the peak:
    # W 90, x 12, dW 60, solve 36, accumulator 40 = 238 (FP32 220)
    assert (at2.peak.live_bytes_per_op[5], at2.peak_memory_bytes) == (222, 238)
    assert {k: v for k, v in at2.peak.by_kind_bytes.items() if v} == {"weight": 90, "input": 12, "gradient": 60,
                                                                       "workspace": 76}
    # values rounded into the format: dy's 10 by op 4, W's 15 by the update; priced only with a
    # rounding figure (stochastic rounding's random bits), 0 by default
    assert [c.rounded_values for c in at2.ops] == [0, 0, 0, 0, 10, 0, 15, 0, 0, 0]
    assert at4.summary()["rounded_values"] == 0
    sr = simulate(trace, hw4.with_(word_bytes=2, energy=hw4.energy.__class__(rounding_pj_per_value=0.5)))
    assert sr.summary()["energy_j"] - at2.summary()["energy_j"] == pytest.approx(25 * 0.5e-12, rel=1e-9)


def test_block_formats_store_an_operand_once_per_role_and_mx_its_scales():
    # operand_copies = per_role: x is read by the forward and the dW GEMM, so it is held twice
    # (2 x 12 = 24); W and dy by one role each. Scales of 0.25 bit per value (MX): x's 6 values
    # take ceil(6 x 0.25 / 8) = 1 byte per copy, W's 15 values 1, dy's 10 values 1.
    trace = small_trace()
    hw = HW.with_(a_buffer_bytes=1 << 20, b_buffer_bytes=1 << 20, out_buffer_bytes=1 << 20, word_bytes=1)
    one = simulate(trace, hw)
    per_role = simulate(trace, hw.with_(operand_copies="per_role"))
    mx = simulate(trace, hw.with_(scale_bits_per_value=0.25))
    # peak at op 5, 1-byte words: W 60 + 15, x 6, y 40, dy 10, dW 60 = 191
    assert one.peak_memory_bytes == 191
    assert per_role.peak_memory_bytes == 191 + 6
    assert mx.peak_memory_bytes == 191 + 1 + 1 + 1
    assert per_role.ops[4].dram_write_bytes == one.ops[4].dram_write_bytes == 10  # dy: one role, one copy
    assert mx.ops[4].dram_write_bytes == 11 and mx.ops[6].dram_write_bytes == 60 + 15 + 1


def test_word_size_keeps_integer_tensors():
    # a gather-like op: reads an int64 index (8 B) and 2 float32 values (8 B) of W, writes 8 B float32
    trace = _with_ops(small_trace(), (TensorInfo(8, 8, (1,), "int64", 8, "input"),
                                      TensorInfo(9, 9, (2,), "float32", 8, "workspace")),
                      (StorageInfo(8, 8, "input", True), StorageInfo(9, 8, "workspace")),
                      (OpRecord(9, "aten.index.Tensor", "", "calibration",
                                VectorWork("copy", 2, read_bytes=16, write_bytes=8), (0, 8), (9,), allocs=(9,)),))
    at2 = simulate(trace, HW.with_(word_bytes=2))
    # read: 8 B of index kept + 8 B of W's FP32 master; write: 8 B of an FP32 workspace
    assert (at2.ops[9].dram_read_bytes, at2.ops[9].dram_write_bytes) == (16, 8)
    at8 = simulate(trace, HW.with_(word_bytes=8))
    # at 8-byte words: the index kept, the floating-point part doubled: 8 + 16 read, 16 written
    assert (at8.ops[9].dram_read_bytes, at8.ops[9].dram_write_bytes) == (24, 16)
    # at op 5: 222 as in the narrow test above + the int64 index, live from the start: 8
    assert at2.peak.live_bytes_per_op[5] == 230

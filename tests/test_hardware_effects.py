"""Adding a buffer-like hardware field touches three places, and both evaluations follow.

The walkthrough of docs/architecture.md ("Adding a hardware field"), done in a test: a separate
partial-sum buffer, ``psum_buffer_bytes``, is (1) declared on a test-local ``HardwareConfig``
subclass, (2) read by the one residency formula it changes (``accel_sim.effects.partial_sums_fit``)
and (3) charged its resources (``accel_sim.resources.BUFFER_LANES``). Nothing else is edited:
not ``accel_sim.memory`` (simulate's fold-by-fold path), not ``accel_sim.memory_batch`` /
``accel_sim.batch`` (the vectorized path, which must also tell points apart by the new field),
not ``accel_sim.points``. The new field then changes the scalar and the vectorized price
identically, by the hand-counted amount.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_sim import effects, resources
from accel_sim.batch import TraceWork, price_points
from accel_sim.elementwise import minimum
from accel_sim.hardware import HardwareConfig, HardwareConfigError
from accel_sim.points import HardwarePoints
from accel_sim.pricing import price_gemm
from accel_sim.resources import fpga_resources, load_device, sram_area_um2
from accel_sim.simulate import simulate
from accel_sim.trace_schema import GemmWork, OpRecord, StorageInfo, TensorInfo, Trace, TraceHeader
from iokit import checks
from tests.test_batch import assert_equals_simulate, hardware, traces


@dataclass(frozen=True)
class WithPsumBuffer(HardwareConfig):
    """(1) The declaration: the paper's accelerator with a buffer of its own for WS / IS partial
    sums, double buffered as the others."""

    psum_buffer_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        super().__post_init__()
        checks.integer_in(self.psum_buffer_bytes, 1, 2**40, name="psum_buffer_bytes", error=HardwareConfigError)


def psum_buffer_fits(g, hw):
    """(2) The formula that uses it: the partial sums stay on chip when ``cols x T`` words fit the
    partial-sum buffer's active half (instead of the output buffer's)."""
    return minimum(g.cols, g.s_c) * g.t * g.word_bits <= 8 * effects.active_half_bytes(hw.psum_buffer_bytes)


@pytest.fixture
def psum_buffer(monkeypatch):
    monkeypatch.setattr(effects, "partial_sums_fit", psum_buffer_fits)
    monkeypatch.setitem(resources.BUFFER_LANES, "psum_buffer_bytes", lambda points: points["cols"])  # (3) its cost


def with_psum_buffer(hw: HardwareConfig, psum_buffer_bytes: int) -> WithPsumBuffer:
    return WithPsumBuffer(**{f.name: getattr(hw, f.name) for f in fields(HardwareConfig)},
                          psum_buffer_bytes=psum_buffer_bytes)


def one_gemm_trace(work: GemmWork) -> Trace:
    storages = (StorageInfo(0, 4, "activation"),)
    tensors = (TensorInfo(0, 0, (1,), "float32", 4, "activation"),)
    return Trace(TraceHeader("one GEMM", "method", 8, storages, tensors),
                 (OpRecord(0, "aten.mm.default", "fc", "fwd", work, (0,), (0,)),))


def test_the_new_field_moves_both_paths_by_the_hand_counted_amount(psum_buffer):
    # WS m=8, n=4, k=8 on a 4 x 4 array (tests/test_pricing.py): (S_R, S_C, T) = (8, 4, 8), two
    # row folds; each loads B's 4 x 4 block (64 B) and A^T's 4 x 8 block (128 B): 384 B read. The
    # partial sums are cols x T = 4 x 8 words = 128 B. A 256-byte psum buffer (active half 128 B)
    # keeps them: 128 B written once. A 254-byte one (half 127 B) spills: both folds store them
    # (256 B written), the second reads them back (+128 B read: 512 B). The output buffer is one
    # byte in both: under the base model the partial sums would always spill.
    base = HardwareConfig(rows=4, cols=4, dataflow_fwd="ws", out_buffer_bytes=1, dram_peak_bytes_per_s=1.6e9,
                          dram_efficiency=1.0, dram_latency_cycles=5)
    work = GemmWork(8, 4, 8)
    keeps, spills = with_psum_buffer(base, 256), with_psum_buffer(base, 254)
    expected = {keeps: (384, 128), spills: (512, 256)}
    for hw, (read, written) in expected.items():
        t = price_gemm(work, hw).timing
        assert (t.dram_read_bytes, t.dram_write_bytes) == (read, written)
    trace = one_gemm_trace(work)
    points = HardwarePoints.of([keeps, spills])  # differ in the new field only: priced apart
    costs = price_points([TraceWork.of(trace)], points)[0]
    assert [costs.row(i)["dram_read_bytes"] for i in range(2)] == [384, 512]
    assert [costs.row(i)["dram_write_bytes"] for i in range(2)] == [128, 256]
    assert_equals_simulate(trace, [keeps, spills], costs)
    assert points.config(1) == spills


# the fixture only installs the formula and the cost, the same for every example
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(traces(), min_size=1, max_size=2),
       st.lists(st.builds(with_psum_buffer, hardware(), st.sampled_from([1, 16, 100, 256, 4096, 1 << 20])),
                min_size=1, max_size=4))
def test_scalar_equals_vectorized_with_the_new_field(psum_buffer, trace_list, configs):
    costs = price_points([TraceWork.of(t) for t in trace_list], HardwarePoints.of(configs))
    for trace, cost in zip(trace_list, costs):
        assert_equals_simulate(trace, configs, cost)


def test_the_new_buffer_is_charged_its_resources(psum_buffer, monkeypatch):
    # A 1 MiB psum buffer on the paper's array (64 columns, 4-byte words) on the VC707 device file:
    # each half of 512 KiB takes ceil(524,288 / 4,096) = 128 BRAM36 (its width, 64 x 4 B through
    # 8-byte ports, only 32): 2 x 128 = 256 blocks more; area 2^20 x 8 bits x 0.346 um2 / 0.5.
    device = load_device("configs/devices/xc7vx485t.toml")
    hw = with_psum_buffer(HardwareConfig(), 1 << 20)
    with_buffer = fpga_resources(HardwarePoints.of([hw]), "fp32", device)
    monkeypatch.delitem(resources.BUFFER_LANES, "psum_buffer_bytes")
    without = fpga_resources(HardwarePoints.of([hw]), "fp32", device)
    assert int(with_buffer.bram36_blocks[0]) - int(without.bram36_blocks[0]) == 256
    assert with_buffer.asic_area_mm2[0] - without.asic_area_mm2[0] == pytest.approx(sram_area_um2(1 << 20) / 1e6)
    assert sram_area_um2(1 << 20) == pytest.approx(2**20 * 8 * 0.346 / 0.5)

"""Energy on the modeled accelerator (accel_sim.energy): hand-worked ops, exact identities on a
real captured trace, linearity in the per-event figures."""

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_sim.energy import COMPONENTS, energy_of
from accel_sim.hardware import EnergyCosts, HardwareConfig, load_hardware_config
from accel_sim.pricing import price_work
from accel_sim.simulate import simulate
from accel_sim.trace_schema import GemmWork
from tests.accel_traces import small_trace
from workloads import capture as wt
from workloads.cost.step import method_setup

SMALL_TOML = """\
rows = 4
cols = 4
[energy]
mac_pj = 2.0
sram_pj_per_byte = 0.5
dram_pj_per_byte = 10.0
special_unit_pj_per_element = 3.0
static_w = 0.001
"""


@pytest.fixture(scope="module")
def small_hw(tmp_path_factory):
    path = tmp_path_factory.mktemp("hw") / "hw.toml"
    path.write_text(SMALL_TOML)
    return load_hardware_config(path)


def test_gemm_energy_by_hand(small_hw):
    op = simulate(small_trace(), small_hw).ops[0]
    # Forward GEMM x[2 x 3] . W^T -> y[2 x 5], WS on 4 x 4: (S_R, S_C, T) = (K, N, M) = (3, 5, 2);
    # 1 row fold x 2 column folds, r = 3 rows, c = 4 then 1 columns, 4-byte words.
    # SRAM reads: stationary B r*c = 12 + 3 = 15 words (60 B), streamed A^T r*T = 6 + 6 = 12 words
    #   (48 B), no partial-sum read-back (one row fold): 108 B. Writes: outputs c*T = 8 + 2 = 10 words = 40 B.
    assert (op.sram_read_bytes, op.sram_write_bytes) == (108, 40)
    # DRAM: B once (60 B), A^T once (24 B, it fits the A buffer), outputs once (40 B) = 124 B
    assert op.dram_read_bytes + op.dram_write_bytes == 124
    # Time: 20 latency + first loads 72 B / 89.6 + 2 folds x 12 cycles + last store 8 B / 89.6
    #   = 44.89 -> 45 cycles = 450 ns at 100 MHz
    assert op.total_cycles == 45
    # mac 30 x 2 pJ = 60 pJ; sram 148 B x 0.5 = 74 pJ; dram 124 B x 10 = 1240 pJ; special unit 0;
    # static 0.001 W x 450e-9 s = 450 pJ; total 1824 pJ
    e = op.energy
    assert (e.mac_j, e.sram_j, e.dram_j, e.special_unit_j, e.static_j) == pytest.approx(
        (60e-12, 74e-12, 1240e-12, 0.0, 450e-12), rel=1e-12)
    assert op.energy_j == pytest.approx(1824e-12, rel=1e-12)


def test_vector_energy_by_hand(small_hw):
    op = simulate(small_trace(), small_hw).ops[1]
    # relu over 10 elements: reads y (40 B), writes relu(y) (40 B), once each in SRAM and DRAM;
    # 20 latency + 80 B / 89.6 B/cycle = 20.89 -> 21 cycles = 210 ns.
    assert (op.sram_read_bytes, op.sram_write_bytes, op.special_unit_elements, op.total_cycles) == (40, 40, 10, 21)
    # sram 80 x 0.5 = 40 pJ; dram 80 x 10 = 800 pJ; special unit 10 x 3 = 30 pJ;
    # static 0.001 W x 210e-9 s = 210 pJ; total 1080 pJ
    e = op.energy
    assert (e.mac_j, e.sram_j, e.dram_j, e.special_unit_j, e.static_j) == pytest.approx(
        (0.0, 40e-12, 800e-12, 30e-12, 210e-12), rel=1e-12)
    assert op.energy_j == pytest.approx(1080e-12, rel=1e-12)


def test_linalg_and_free_ops(small_hw):
    report = simulate(small_trace(), small_hw)
    view, solve, unknown = report.ops[2], report.ops[7], report.ops[8]
    assert view.energy_j == 0.0 and unknown.energy_j == 0.0
    # the solve: 18 MACs on the array, its operands once through the buffers (W 60 B in, 36 B out)
    assert (solve.sram_read_bytes, solve.sram_write_bytes, solve.special_unit_elements) == (60, 36, 0)
    assert solve.energy.mac_j == pytest.approx(18 * 2e-12)
    assert solve.energy.sram_j == pytest.approx(96 * 0.5e-12)


def test_totals_are_sums_of_ops(small_hw):
    report = simulate(small_trace(), small_hw)
    total = report.energy_j
    assert total == pytest.approx(sum(c.energy_j for c in report.ops), rel=1e-12)
    for groups in (report.by_phase(), report.by_layer(), report.by_work()):
        assert sum(t.energy_j for t in groups.values()) == pytest.approx(total, rel=1e-12)
    parts = report.energy.by_component_j()
    assert list(parts) == list(COMPONENTS)
    assert sum(parts.values()) == pytest.approx(total, rel=1e-12)
    summary = report.summary()
    assert summary["energy_j"] == total and summary["energy_by_component_j"] == parts
    assert set(summary["by_phase"]["fwd"]) >= {"energy_j", "energy_by_component_j", "sram_read_bytes"}
    row = report.rows()[0]
    assert row["energy_j"] == report.ops[0].energy_j
    assert {f"energy_{c}_j" for c in COMPONENTS} <= set(row)


@pytest.fixture(scope="module")
def captured_report_inputs():
    """A real captured training step (ConvNet, batch 2) and its trace."""
    model, loss_fn = method_setup("fedavg", "convnet", num_classes=10, image_size=32, norm="bn")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    x, y = torch.zeros(2, 3, 32, 32), torch.arange(2)
    return wt.capture_training_step(model, x, y, loss_fn=loss_fn, optimizer=optimizer, model_name="convnet",
                                    method="fedavg")


ZERO = EnergyCosts(mac_pj=0.0, sram_pj_per_byte=0.0, dram_pj_per_byte=0.0, special_unit_pj_per_element=0.0,
                   static_w=0.0)


def test_mac_only_energy_is_macs_times_a_picojoule(captured_report_inputs):
    report = simulate(captured_report_inputs, HardwareConfig(energy=replace(ZERO, mac_pj=1.0)))
    assert report.macs > 0
    assert report.energy_j == report.macs * 1e-12


def test_static_only_energy_is_latency(captured_report_inputs):
    report = simulate(captured_report_inputs, HardwareConfig(energy=replace(ZERO, static_w=1.0)))
    assert report.latency_s > 0
    assert report.energy_j == report.latency_s


def test_default_energy_splits_on_a_captured_step(captured_report_inputs):
    report = simulate(captured_report_inputs)
    parts = report.energy.by_component_j()
    assert all(v > 0 for v in parts.values())
    # the parts are the counts times the default per-event figures
    t, costs = report.totals, HardwareConfig().energy
    assert parts["dram"] == pytest.approx((t.dram_read_bytes + t.dram_write_bytes) * costs.dram_pj_per_byte * 1e-12)
    assert parts["static"] == pytest.approx(report.latency_s * costs.static_w)


positive = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=30, deadline=None)
@given(positive, positive, positive, positive, positive)
def test_doubling_every_figure_doubles_energy(mac, sram, dram, unit, static):
    costs = EnergyCosts(mac, sram, dram, unit, static)
    doubled = EnergyCosts(2 * mac, 2 * sram, 2 * dram, 2 * unit, 2 * static)
    one = simulate(small_trace(), HardwareConfig(rows=4, cols=4, energy=costs))
    two = simulate(small_trace(), HardwareConfig(rows=4, cols=4, energy=doubled))
    # doubling is exact in binary floating point, so the totals are exactly twice
    assert two.energy_j == 2 * one.energy_j
    assert [c.energy_j for c in two.ops] == [2 * c.energy_j for c in one.ops]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**12), st.integers(0, 10**12), st.integers(0, 10**12), st.integers(0, 10**12),
       st.integers(0, 10**12), st.floats(0, 10, allow_nan=False))
def test_energy_is_linear_in_the_counts(macs, sram, dram, elements, rounded, seconds):
    costs = replace(HardwareConfig().energy, rounding_pj_per_value=0.05)
    e = energy_of(costs, macs=macs, sram_bytes=sram, dram_bytes=dram, special_unit_elements=elements,
                  rounded_values=rounded, latency_s=seconds)
    expected = (costs.mac_pj * macs + costs.sram_pj_per_byte * sram + costs.dram_pj_per_byte * dram
                + costs.special_unit_pj_per_element * elements + 0.05 * rounded) * 1e-12 + costs.static_w * seconds
    assert math.isclose(e.energy_j, expected, rel_tol=1e-12, abs_tol=1e-300)


def test_block_diagonal_packing_charges_useful_macs_only():
    # 8 depthwise groups of out[16 x 1] = A[16 x 9] . B[9 x 1] (3x3 kernel, 4x4 output), forward WS on
    # 32 x 64: block_diagonal packs p = min(32 // 9, 64 // 1) = 3 groups per GEMM (16 x 3 x 27 with a
    # block-diagonal B), 2 packs of 3 + 1 of 2. The padded zero MACs (2/3 of each pack's) are gated:
    # MAC energy counts the 16 x 9 x 8 = 1,152 useful MACs under both mappings. Each group fits one
    # fold, so the array reads and writes the same on-chip bytes either way: A 16 x 9 words per group,
    # B's 9 non-zero words per group (zeros are fed, not read), 16 outputs per group.
    work = GemmWork(16, 1, 9, role="fwd", groups=8)
    costs = {mapping: price_work(work, HardwareConfig(grouped_mapping=mapping)) for mapping in
             ("per_group", "block_diagonal")}
    for cost in costs.values():
        assert cost.macs == 1152
        assert (cost.sram_read_bytes, cost.sram_write_bytes) == ((16 * 9 + 9) * 8 * 4, 16 * 8 * 4)
    # fewer folds: fewer cycles, so less static energy
    assert costs["block_diagonal"].timing.total_cycles < costs["per_group"].timing.total_cycles

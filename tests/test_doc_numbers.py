"""Numbers the docs quote from a recording or from the model are read back from the docs and
compared with their source, so that a doc cannot go stale silently (issue 15, point 8)."""

import json
import re
from pathlib import Path

import pytest

from accel_sim.simulate import simulate
from bench.lib.paper import saving_pct
from workloads.cost.step import method_step_trace

ROOT = Path(__file__).resolve().parent.parent
TIMING = json.loads((ROOT / "tests/data/scalesim/mobilenetv2_fwd_timing.json").read_text())


def text(relative: str) -> str:
    """A doc with its line breaks and indentation folded into single spaces."""
    return " ".join((ROOT / relative).read_text(encoding="utf-8").split())


def test_scalesim_timing_is_quoted_as_recorded():
    layers, gemms, wall_s = TIMING["num_layers"], TIMING["num_scalesim_gemms"], TIMING["wall_s"]
    accel = text("docs/accel_sim.md")
    assert f"the {layers} layers / {gemms:,} SCALE-Sim GEMMs of the MobileNetV2 forward pass" in accel
    assert (f"({layers} layers = {gemms:,} SCALE-Sim GEMMs, {TIMING['cycle_count_sum']:,} cycles, batch 1, "
            f"{TIMING['dataflow']};") in accel
    assert f"against SCALE-Sim's {wall_s} s" in accel
    speed = text("docs/speed.md")
    assert f"({layers} layers, {gemms:,} SCALE-Sim GEMMs)" in speed and f"vs {wall_s} s" in speed
    assert f"{layers} layers = {gemms:,} SCALE-Sim layers" in text("docs/scalesim.md")
    assert f"{wall_s} s wall" in text("docs/scalesim.md")


@pytest.fixture(scope="module")
def mobilenetv2_traces():
    """The step docs/accel_sim.md describes: MobileNetV2, CIFAR-100 shapes, batch 64."""
    return {m: method_step_trace("mobilenetv2", m, batch_size=64) for m in ("fedavg", "spherefed")}


@pytest.fixture(scope="module")
def mobilenetv2_steps(mobilenetv2_traces):
    """Those steps priced on the default hardware."""
    return {m: simulate(t) for m, t in mobilenetv2_traces.items()}


def _number(s: str) -> float:
    return float(s.replace(",", ""))


def test_accel_sim_step_table_matches_the_model(mobilenetv2_steps):
    fedavg, spherefed = mobilenetv2_steps["fedavg"], mobilenetv2_steps["spherefed"]
    doc = text("docs/accel_sim.md")
    latency = re.search(r"\| latency \| ([\d,]+) cycles = ([\d,.]+) ms \| ([\d,]+) cycles = ([\d,.]+) ms \|", doc)
    assert latency, "docs/accel_sim.md: the step table's latency row is missing"
    assert [_number(g) for g in latency.groups()[::2]] == [fedavg.total_cycles, spherefed.total_cycles]
    assert [_number(g) for g in latency.groups()[1::2]] == [round(r.latency_s * 1e3, 1) for r in (fedavg, spherefed)]
    peak = re.search(r"\| peak memory \| ([\d,]+) B \| ([\d,]+) B \((-?[\d.]+)%\) \|", doc)
    assert peak, "docs/accel_sim.md: the step table's peak memory row is missing"
    assert [_number(g) for g in peak.groups()[:2]] == [fedavg.peak_memory_bytes, spherefed.peak_memory_bytes]
    assert float(peak.group(3)) == round(-saving_pct(fedavg.peak_memory_bytes, spherefed.peak_memory_bytes), 2)
    energy = re.search(r"\| energy \(default `\[energy\]`\) \| ([\d,.]+) mJ \| ([\d,.]+) mJ", doc)
    assert energy, "docs/accel_sim.md: the step table's energy row is missing"
    assert [_number(g) for g in energy.groups()] == [round(r.energy_j * 1e3, 1) for r in (fedavg, spherefed)]


def test_paper_savings_match_the_model(mobilenetv2_steps):
    fedavg, spherefed = mobilenetv2_steps["fedavg"], mobilenetv2_steps["spherefed"]
    paper = text("docs/paper.md")
    memory = saving_pct(fedavg.peak_memory_bytes, spherefed.peak_memory_bytes)
    latency = saving_pct(fedavg.total_cycles, spherefed.total_cycles)  # a round is steps x the step
    assert f"| 10.5 % | {memory:.2f} % (MobileNetV2)" in paper
    assert f"| 13.6 % | {latency:.2f} % (MobileNetV2)".replace("-", "\N{MINUS SIGN}") in paper
    # the classifier's gradient and momentum buffer: 2 x 1280 x 100 x 4 B
    assert fedavg.peak_memory_bytes - spherefed.peak_memory_bytes == 2 * 1280 * 100 * 4
    assert f"({2 * 1280 * 100 * 4:,} B) only" in paper
    # SphereFed drops the classifier's dW GEMM, l.C.B MACs, of the FedAvg step's MACs
    dropped = fedavg.by_work()["gemm:dw"].macs - spherefed.by_work()["gemm:dw"].macs
    assert dropped == 1280 * 100 * 64 and f"{dropped:,} MACs of {fedavg.macs / 1e9:.1f} G" in paper
    activations = fedavg.peak.by_kind_bytes["activation"]
    assert f"saved activations ({activations / 1e6:.0f} of {fedavg.peak_memory_bytes / 1e6:.0f} MB)" in paper


def test_accel_sim_step_shares_match_the_model(mobilenetv2_traces, mobilenetv2_steps):
    from accel_sim.hardware import HardwareConfig

    fedavg = mobilenetv2_steps["fedavg"]
    doc = text("docs/accel_sim.md")
    stall_pct = 100 * fedavg.totals.stall_cycles / fedavg.total_cycles
    assert f"Memory stalls are ~{stall_pct:.0f}% of the cycles and the array's utilization is " \
           f"{100 * fedavg.utilization():.1f}%" in doc
    trace = mobilenetv2_traces["fedavg"]
    hw = HardwareConfig()
    packed = simulate(trace, hw.with_(grouped_mapping="block_diagonal"))
    fast = simulate(trace, hw.with_(dram_peak_bytes_per_s=10 * hw.dram_peak_bytes_per_s))
    assert f'`grouped_mapping = "block_diagonal"` the step takes {packed.latency_s * 1e3:,.0f} ms' in doc
    assert f"stalls {100 * packed.totals.stall_cycles / packed.total_cycles:.0f}%" in doc
    assert f"10x the DRAM bandwidth, {fast.latency_s * 1e3:,.0f} ms (stalls " \
           f"{100 * fast.totals.stall_cycles / fast.total_cycles:.1f}%" in doc


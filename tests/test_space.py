"""Design spaces (``accel_sim.space``): axes as lists and ranges over any field, sub-tables and the
number format, constraints in the small expression language, chunks, one point from its index;
and the fail-fast rules, each naming the axis and the fix."""

from dataclasses import replace

import numpy as np
import pytest

from accel_sim.batch import TraceWork, price_points
from accel_sim.hardware import EnergyCosts, HardwareConfig
from accel_sim.mac_energy import format_mac_pj, hardware_in_format
from accel_sim.pareto import pareto_front
from accel_sim.simulate import simulate
from accel_sim.space import SpaceError, space_from_dict
from tests.accel_traces import small_trace

SPACE = {
    "axes": {
        "rows": [8, 16, 32],
        "cols": {"start": 16, "stop": 128, "factor": 2},               # 16, 32, 64, 128
        "special_unit": {"norm": {"start": 8.0, "stop": 32.0, "step": 12.0}},  # 8, 20, 32 (a TOML sub-table)
        "energy.dram_pj_per_byte": [100.0, 162.5],
        "dataflow_dw": ["os", "ws"],
        "a_buffer_bytes": [65536, 1572864],
        "b_buffer_bytes": [65536, 1572864],
    },
    "constraints": ["rows * cols <= 2048", "a_buffer_bytes == b_buffer_bytes", "not (dataflow_dw == 'ws' and rows == 8)"],
}


def test_axes_constraints_and_chunks():
    space = space_from_dict(SPACE)
    assert [a.path for a in space.axes] == ["rows", "cols", "special_unit.norm", "energy.dram_pj_per_byte",
                                            "dataflow_dw", "a_buffer_bytes", "b_buffer_bytes"]
    assert space.axes[1].values == (16, 32, 64, 128) and space.axes[2].values == (8.0, 20.0, 32.0)
    assert space.grid_size == 3 * 4 * 3 * 2 * 2 * 2 * 2
    # rows x cols <= 2048 keeps 8 x (16..128) = 4, 16 x (16..128) = 4, 32 x (16..64) = 3 shapes: 11;
    # x 3 norms x 2 energies x 2 buffers kept of 4 (equal A and B) x dataflows (ws excluded at 8 rows:
    # 4 shapes x 1 + 7 shapes x 2 = 18 of 22): 18 x 3 x 2 x 2 = 216
    assert space.size == 216
    chunks = list(space.chunks(chunk_points=50))
    assert sum(len(c) for c in chunks) == 216 and max(len(c) for c in chunks) <= 50
    whole = next(iter(space.chunks(chunk_points=10**6)))
    assert np.concatenate([c.index for c in chunks]).tolist() == whole.index.tolist()
    p = whole.points
    assert np.all(p["rows"] * p["cols"] <= 2048) and np.all(p["a_buffer_bytes"] == p["b_buffer_bytes"])
    assert not np.any((p["dataflow_dw"] == "ws") & (p["rows"] == 8))
    assert set(p["special_unit.norm"].tolist()) == {8.0, 20.0, 32.0}
    assert np.all(p["clock_hz"] == 100e6) and np.all(whole.number_formats == "fp32")  # base values; 4-byte words
    # one point from its index, as the chunk holds it
    i = 37
    hw, fmt = space.point(int(whole.index[i]))
    assert hw == p.config(i) and fmt.name == "fp32"
    assert space.describe()["points"] == 216


def test_the_number_format_sets_the_word_size():
    space = space_from_dict({"axes": {"number_format": ["fp32", "bf16", "bfp_m4_g16"]}})
    chunk = next(iter(space.chunks()))
    assert chunk.number_formats.tolist() == ["fp32", "bf16", "bfp_m4_g16"]
    assert chunk.points["word_bytes"].tolist() == [4, 2, 1]
    assert space.point(2)[0].word_bytes == 1
    # without a number_format axis, 2-byte words are BF16
    assert next(iter(space_from_dict({"axes": {"word_bytes": [2]}}).chunks())).number_formats.tolist() == ["bf16"]


def test_the_number_format_sets_the_mac_energy():
    # each point's energy.mac_pj is its format's figure under the point's cost table
    # (tests/test_mac_energy.py: fp16 2.0, e4m3 0.582, bfp_m4_g16 0.163 pJ under horowitz45); an fp32
    # point keeps the base's, here another technology's 10 pJ
    base = HardwareConfig(energy=replace(EnergyCosts(), mac_pj=10.0))
    space = space_from_dict({"axes": {"number_format": ["fp32", "fp16", "e4m3", "bfp_m4_g16"]}}, base)
    chunk = next(iter(space.chunks()))
    figures = [10.0, format_mac_pj("fp16"), format_mac_pj("e4m3"), format_mac_pj("bfp_m4_g16")]
    assert chunk.points["energy.mac_pj"].tolist() == figures
    assert space.point(3)[0] == hardware_in_format(base, "bfp_m4_g16")
    # a constraint sees the resolved figure; 2-byte words without a format axis are BF16 and priced so
    only_cheap = space_from_dict({"axes": {"number_format": ["fp32", "e4m3"]}, "constraints": ["energy.mac_pj < 2"]})
    assert next(iter(only_cheap.chunks())).number_formats.tolist() == ["e4m3"]
    words = next(iter(space_from_dict({"axes": {"word_bytes": [4, 2]}}).chunks())).points
    assert words["energy.mac_pj"].tolist() == [4.6, format_mac_pj("bf16")]
    # priced: each point's MAC energy is its MACs x its format's figure, and equals simulate's on
    # hardware_in_format of the base
    costs = price_points([TraceWork.of(small_trace())], chunk.points)[0]
    expected = [costs.macs[0] * pj * 1e-12 for pj in figures]
    assert costs.energy_mac_j.tolist() == pytest.approx(expected, rel=1e-12)
    assert costs.energy_j[3] == pytest.approx(simulate(small_trace(), hardware_in_format(base, "bfp_m4_g16")).energy_j,
                                              rel=1e-12)
    # an energy.mac_pj axis is fine while every point is fp32
    assert space_from_dict({"axes": {"energy.mac_pj": [1.0, 4.6]}}).size == 2
    # the base's cost table prices each format, and a cost_table axis prices each point under its own
    epfl = next(iter(space_from_dict({"axes": {"number_format": ["bfp_m4_g16"]}},
                                     HardwareConfig(cost_table="epfl28")).chunks())).points
    assert epfl["energy.mac_pj"].tolist() == [format_mac_pj("bfp_m4_g16", "epfl28")]
    both = next(iter(space_from_dict({"axes": {"cost_table": ["horowitz45", "aladdin40"],
                                               "number_format": ["bfp_m4_g16"]}}).chunks())).points
    assert both["energy.mac_pj"].tolist() == [format_mac_pj("bfp_m4_g16"), format_mac_pj("bfp_m4_g16", "aladdin40")]


def test_priced_space_rows_equal_simulate_and_a_front():
    space = space_from_dict(SPACE)
    work = TraceWork.of(small_trace())
    for chunk in space.chunks(chunk_points=100):
        costs = price_points([work], chunk.points)[0]
        for i in (0, len(chunk) - 1):
            hw, _ = space.point(int(chunk.index[i]))
            assert costs.row(i)["total_cycles"] == simulate(small_trace(), hw).total_cycles
        front = pareto_front(np.stack([costs.latency_s, costs.energy_j], axis=1))
        assert front.any()


@pytest.mark.parametrize("data, names", [
    ({"axes": {"rowz": [8]}}, ["'rowz'", "unknown field", "did you mean 'rows'"]),
    ({"axes": {"special_unit.softmax": [8.0]}}, ["'special_unit.softmax'", "unknown field"]),
    ({"axes": {"rows": []}}, ["'rows'", "is empty", "at least one value"]),
    ({"axes": {"rows": [0, 8]}}, ["'rows'", "value 0", "[1, 65,536]"]),
    ({"axes": {"rows": [8.5]}}, ["'rows'", "value 8.5", "integer"]),
    ({"axes": {"rows": ["32"]}}, ["'rows'", "'32'", "integer"]),
    ({"axes": {"dram_efficiency": [0.5, 1.5]}}, ["'dram_efficiency'", "value 1.5", "[0.001, 1]"]),
    ({"axes": {"energy.mac_pj": [-1.0]}}, ["'energy.mac_pj'", "[0, 1e+06]"]),
    ({"axes": {"dataflow_fwd": ["ws", "rs"]}}, ["'dataflow_fwd'", "'rs'", "os, ws, is"]),
    ({"axes": {"memory_model": ["ours"]}}, ["'memory_model'", "use 'on_chip_accumulation'"]),
    ({"axes": {"dataflow_fwd": {"start": 1, "stop": 2, "step": 1}}}, ["'dataflow_fwd'", "list of names"]),
    ({"axes": {"rows": {"start": 8, "stop": 64}}}, ["'rows'", "{start, stop, step} or {start, stop, factor}"]),
    ({"axes": {"rows": {"start": 8, "stop": 64, "step": 0}}}, ["'rows'", "step must be positive"]),
    ({"axes": {"rows": {"start": 64, "stop": 8, "step": 8}}}, ["'rows'", "stop >= start"]),
    ({"axes": {"rows": {"start": 8, "stop": 64, "factor": 1}}}, ["'rows'", "factor > 1"]),
    ({"axes": {"rows": [8, 8]}}, ["'rows'", "more than once"]),
    ({"axes": {"rows": 8}}, ["'rows'", "give a list of values"]),
    ({"axes": {"number_format": ["fp64"]}}, ["'number_format'", "fp32, bf16, fp16, e4m3, e5m2, a scaled FP8 (e4m3_cs"]),
    ({"axes": {"number_format": ["bfp_m4_g16"], "word_bytes": [1]}}, ["'number_format' and 'word_bytes'",
                                                                      "drop the word_bytes axis"]),
    ({"axes": {"word_bytes": [1, 4]}}, ["'word_bytes'", "add a number_format axis"]),
    ({"axes": {"number_format": ["fp32", "bfp_m4_g16"], "energy.mac_pj": [1.0]}},
     ["'energy.mac_pj'", "bfp_m4_g16 costs its format's MAC figure", "drop it"]),
    ({"axes": {"word_bytes": [2], "energy.mac_pj": [1.0]}}, ["'energy.mac_pj'", "bf16 costs"]),
    ({"axes": {"rows": [8, 16]}, "constraints": ["rows > 64"]}, ["rows > 64", "keep none of the 2 points", "loosen"]),
    ({"axes": {"rows": [8]}, "constraints": ["rows * colz <= 4"]}, ["unknown field 'colz'", "did you mean 'cols'"]),
    ({"axes": {"rows": [8]}, "constraints": ["__import__('os').system('true')"]}, ["is not allowed", "comparisons"]),
    ({"axes": {"rows": [8]}, "constraints": ["rows * cols"]}, ["'rows * cols' is not a condition"]),
    ({"axes": {"rows": [8]}, "constraints": ["rows <="]}, ["'rows <='", "is not an expression"]),
    ({"axes": {"rows": [8]}, "limits": 3}, ["unknown key(s) limits"]),
])
def test_bad_spaces_fail_naming_the_axis_and_the_fix(data, names):
    with pytest.raises(SpaceError) as raised:
        space_from_dict(data)
    message = str(raised.value)
    assert "\n" not in message
    for name in names:
        assert name in message, (name, message)


def test_a_space_over_the_limit_needs_streaming():
    data = {"axes": {"rows": {"start": 1, "stop": 100, "step": 1}, "cols": {"start": 1, "stop": 100, "step": 1}}}
    with pytest.raises(SpaceError, match=r"10,000 points, over the limit of 5,000: narrow an axis, or stream"):
        space_from_dict(data, max_points=5000)
    assert space_from_dict(data, max_points=5000, stream=True).size == 10_000
    # the limit counts the points the constraints keep
    assert space_from_dict({**data, "constraints": ["rows * cols <= 64"]}, max_points=5000).size < 5000


def test_points_outside_the_space_are_named():
    space = space_from_dict({"axes": {"rows": [8, 16]}, "constraints": ["rows > 8"]})
    assert space.point(1)[0] == HardwareConfig(rows=16)
    with pytest.raises(SpaceError, match="point 0 is excluded by the space's constraints"):
        space.point(0)
    with pytest.raises(SpaceError, match=r"no point 2 in this space: give an index in \[0, 1\]"):
        space.point(2)

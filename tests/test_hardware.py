"""HardwareConfig: the paper's defaults, the shipped TOML, and errors naming the field."""

from dataclasses import fields
from pathlib import Path

import pytest

from accel_sim.hardware import EnergyCosts, HardwareConfig, HardwareConfigError, SpecialUnit, load_hardware_config

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_are_the_papers_array():
    hw = HardwareConfig()
    # SphereFed appendix 0.E: 32 x 64 array, 100 MHz
    assert (hw.rows, hw.cols, hw.clock_hz, hw.word_bytes) == (32, 64, 100e6, 4)
    assert hw.macs_per_cycle == 2048
    # 12.8e9 B/s / 100e6 Hz = 128 B/cycle peak; x 0.7 = 89.6 B/cycle sustained
    assert hw.dram_bytes_per_cycle == pytest.approx(89.6)
    assert (hw.dataflow("fwd"), hw.dataflow("dx"), hw.dataflow("dw")) == ("ws", "ws", "os")


def test_shipped_toml_is_the_default():
    assert load_hardware_config(ROOT / "configs/hw/paper_default.toml") == HardwareConfig()


def test_energy_table_keys_and_defaults(tmp_path):
    # exactly these keys; Horowitz (ISSCC 2014) 45 nm figures: FP32 mult 3.7 + add 0.9 pJ, 8 KB SRAM
    # 10 pJ / 64 bit, DRAM 1.3 nJ / 64 bit
    assert [f.name for f in fields(EnergyCosts)] == [
        "mac_pj", "sram_pj_per_byte", "dram_pj_per_byte", "special_unit_pj_per_element", "static_w",
        "rounding_pj_per_value"]
    e = HardwareConfig().energy
    assert (e.mac_pj, e.sram_pj_per_byte, e.dram_pj_per_byte) == pytest.approx((3.7 + 0.9, 10 / 8, 1300 / 8))
    path = tmp_path / "hw.toml"
    path.write_text("[energy]\nstatic_w = 0\nmac_pj = 1\n")
    hw = load_hardware_config(path)
    assert (hw.energy.static_w, hw.energy.mac_pj, hw.energy.dram_pj_per_byte) == (0, 1, e.dram_pj_per_byte)


def test_partial_toml_keeps_defaults(tmp_path):
    path = tmp_path / "hw.toml"
    path.write_text('rows = 16\ndataflow_dw = "ws"\n[special_unit]\nnorm = 8\n')
    hw = load_hardware_config(path)
    assert (hw.rows, hw.cols, hw.dataflow_dw, hw.special_unit.norm, hw.special_unit.loss) == (16, 64, "ws", 8, 16.0)


@pytest.mark.parametrize(
    "text, message",
    [
        ("rowz = 4\n", "unknown hardware field(s) rowz"),
        ("rows = 0\n", "rows = 0 is out of range; give an integer in [1, 65,536]"),
        ("rows = 2.5\n", "rows = 2.5 must be an integer in [1, 65,536]"),
        ("rows = true\n", "rows = True must be an integer in [1, 65,536]"),
        ('rows = "32"\n', "rows = '32' must be an integer in [1, 65,536]"),
        # beyond what the model represents (issue 14: OverflowError in accel_sim/memory.py, "inf ms")
        ("rows = 9223372036854775807\n", "rows = 9223372036854775807 is out of range; give an integer in [1, 65,536]"),
        ("cols = 100000000000000000000\n", "cols = 100000000000000000000 is out of range; give an integer in [1, 65,536]"),
        ("clock_hz = 1e-300\n", "clock_hz = 1e-300 is out of range; give a number in [1000, 1e+11]"),
        ("clock_hz = 1e12\n", "clock_hz = 1000000000000.0 is out of range; give a number in [1000, 1e+11]"),
        ("word_bytes = 32\n", "word_bytes = 32 is out of range; give an integer in [1, 16]"),
        ("a_buffer_bytes = 1099511627777\n", "a_buffer_bytes = 1099511627777 is out of range; give an integer in [1, 1,099,511,627,776]"),
        ("dram_peak_bytes_per_s = -1.0\n", "dram_peak_bytes_per_s = -1.0 is out of range; give a number in [1000, 1e+15]"),
        ("dram_efficiency = 1.5\n", "dram_efficiency = 1.5 is out of range; give a number in [0.001, 1]"),
        ("linalg_efficiency = 1e-9\n", "linalg_efficiency = 1e-09 is out of range; give a number in [0.001, 1]"),
        ("dram_latency_cycles = -3\n", "dram_latency_cycles = -3 is out of range; give an integer in [0, 1,073,741,824]"),
        ('dataflow_fwd = "rs"\n', "dataflow_fwd = 'rs' is not known; choose one of os, ws, is"),
        ('grouped_mapping = "packed"\n', "grouped_mapping = 'packed' is not known; choose one of per_group, block_diagonal"),
        ('memory_model = "SCALE-Sim"\n', "memory_model = 'SCALE-Sim' is not known; choose one of on_chip_accumulation, scalesim_v3"),
        ("memory_model = 1\n", "memory_model = 1 is not known; choose one of on_chip_accumulation, scalesim_v3"),
        # the names before results format 4 are refused with the new name (issue 25)
        ('memory_model = "ours"\n', "'memory_model' = 'ours' was renamed: use 'on_chip_accumulation'"),
        ('memory_model = "scalesim"\n', "'memory_model' = 'scalesim' was renamed: use 'scalesim_v3'"),
        ("dataflow_dw = [1]\n", "dataflow_dw = [1] is not known; choose one of os, ws, is"),
        ("[special_unit]\nnorm = 0\n", "special_unit.norm = 0 is out of range; give a number in [0.001, 1e+06]"),
        ("[special_unit]\nnorm = 1e308\n", "special_unit.norm = 1e+308 is out of range; give a number in [0.001, 1e+06]"),
        ("[special_unit]\nsoftmax = 4\n", "unknown field(s) special_unit.softmax"),
        ("special_unit = 3\n", "'special_unit' must be a table"),
        ("[energy]\nmac_pJ = 1.0\n", "unknown field(s) energy.mac_pJ"),
        ("[energy]\ndram_pj_per_byte = -1.0\n", "energy.dram_pj_per_byte = -1.0 is out of range; give a number in [0, 1e+06]"),
        ("[energy]\nstatic_w = inf\n", "energy.static_w = inf is out of range; give a number in [0, 1e+06]"),
        ("[energy]\nsram_pj_per_byte = nan\n", "energy.sram_pj_per_byte = nan is out of range; give a number in [0, 1e+06]"),
        ("[energy]\nmac_pj = true\n", "energy.mac_pj = True must be a number in [0, 1e+06]"),
        ('[energy]\nspecial_unit_pj_per_element = "4"\n', "energy.special_unit_pj_per_element = '4' must be a number in [0, 1e+06]"),
        ("energy = 3\n", "'energy' must be a table"),
        ("rows = \n", "not valid TOML"),
    ],
)
def test_bad_configs_name_the_field(tmp_path, text, message):
    path = tmp_path / "hw.toml"
    path.write_text(text)
    with pytest.raises(HardwareConfigError) as err:
        load_hardware_config(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(HardwareConfigError, match="no such hardware config file"):
        load_hardware_config(tmp_path / "nope.toml")


def test_direct_construction_is_validated():
    with pytest.raises(HardwareConfigError, match=r"^cols = -4 is out of range; give an integer in \[1, 65,536\]$"):
        HardwareConfig(cols=-4)
    with pytest.raises(HardwareConfigError, match="^special_unit.loss = nan is out of range"):
        SpecialUnit(loss=float("nan"))
    with pytest.raises(HardwareConfigError, match="^linalg_efficiency = 0.0 is out of range"):
        HardwareConfig().with_(linalg_efficiency=0.0)
    with pytest.raises(HardwareConfigError, match="^energy.mac_pj = -1.0 is out of range"):
        EnergyCosts(mac_pj=-1.0)
    with pytest.raises(HardwareConfigError, match="'energy'"):
        HardwareConfig(energy={"mac_pj": 1.0})


def test_binary_hardware_file_is_one_clear_error(tmp_path):
    from accel_sim.hardware import HardwareConfigError, load_hardware_config

    path = tmp_path / "hw.toml"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(HardwareConfigError, match=r"hw\.toml: not valid TOML"):
        load_hardware_config(path)

"""bench.sweep on the small ConvNet at tiny batches (the properties do not depend on the size)."""

import json

import pandas as pd
import pytest

from accel_sim.hardware import HardwareConfig
import bench.sweep.__main__ as sweep_cli
from bench import sweep
from bench.lib.paper import saving_pct
from bench.lib.results import FORMAT_VERSION


@pytest.fixture(scope="module")
def frame():
    return sweep.sweep(["convnet"], HardwareConfig(), batch_size=4, batch_sizes=(2, 4))


def test_saving_pct_hand_case():
    # 1 - 150 / 200 = 0.25 -> 25 %
    assert saving_pct(200, 150) == pytest.approx(25.0)
    assert saving_pct(200, 220) == pytest.approx(-10.0)


def test_one_base_value_per_parameter(frame):
    assert set(frame["parameter"]) == set(sweep.HW_PARAMETERS) | {"batch_size"}
    assert (frame.groupby("parameter")["is_base"].sum() == 1).all()
    assert frame[["fedavg_cycles", "spherefed_cycles", "fedavg_peak_memory_bytes"]].gt(0).all().all()


def test_hardware_cannot_change_liveness(frame):
    # Peak memory comes from tensor lifetimes: only batch size and word size change it.
    hw_rows = frame[~frame["parameter"].isin(["batch_size", "word_bytes"])]
    assert hw_rows["fedavg_peak_memory_bytes"].nunique() == 1
    assert hw_rows["spherefed_peak_memory_bytes"].nunique() == 1
    # 2-byte words (accel_sim.words): what GEMMs read halves, weights keep their FP32 master beside
    # a 2-byte copy (6 bytes per value), everything else stays 4 bytes, integers keep their size; so
    # every storage is between half and 1.5 x its FP32 size, and so is the peak. ConvNet at batch 4
    # holds more weight than activations: its peak rises.
    words = frame[frame["parameter"] == "word_bytes"].set_index("value")
    for method in ("fedavg", "spherefed"):
        p2, p4 = words.loc["2", f"{method}_peak_memory_bytes"], words.loc["4", f"{method}_peak_memory_bytes"]
        assert p4 / 2 <= p2 <= 1.5 * p4 and p2 != p4


def test_more_dram_bandwidth_never_slows_a_step(frame):
    dram = frame[frame["parameter"] == "dram_gbps"].assign(gbps=lambda f: f["value"].astype(float)).sort_values("gbps")
    for column in ("fedavg_cycles", "spherefed_cycles"):
        assert dram[column].is_monotonic_decreasing


def test_spherefed_never_needs_more_memory_than_fedavg(frame):
    # its classifier has no gradient and no momentum buffer
    assert (frame["spherefed_peak_memory_bytes"] < frame["fedavg_peak_memory_bytes"]).all()


@pytest.mark.slow
def test_cli_writes_csv_json_png(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["--models", "convnet", "--batch-size", "2", "--batch-sizes", "2", "--out", str(out)]
    assert sweep_cli.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "sweep.csv", "sweep.json", "sweep.png"]
    table = pd.read_csv(out / "sweep.csv")
    assert list(table.columns) == list(sweep.SWEEP_COLUMNS) and table.notna().all().all()
    # results format version 3 spellings, unchanged in 4 (docs/results.md): peak memory, the hardware field swept
    assert {"fedavg_peak_memory_bytes", "spherefed_peak_memory_bytes"} <= set(table.columns)
    assert not any("peak_bytes" in c for c in table.columns)
    assert "grouped_mapping" in set(table["parameter"]) and "depthwise_mapping" not in set(table["parameter"])
    assert json.loads((out / "sweep.json").read_text())["version"] == FORMAT_VERSION == 4
    assert sweep_cli.main(argv) == 2  # refuses to mix with the existing folder
    assert "--overwrite" in capsys.readouterr().err


def test_cli_rejects_bad_input_before_work(tmp_path, capsys):
    assert sweep_cli.main(["--models", "lenet", "--out", str(tmp_path / "a")]) == 2
    assert "unknown model" in capsys.readouterr().err
    bad = tmp_path / "hw.toml"
    bad.write_text("rows = 0\n")
    assert sweep_cli.main(["--hw", str(bad), "--out", str(tmp_path / "b")]) == 2
    assert "rows" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_energy_figures_move_energy_only(frame):
    energy = frame[frame["parameter"] == "energy"].set_index("value")
    assert list(energy.index) == ["default"] + [f"{name} x{f}" for name in (
        "mac_pj", "sram_pj_per_byte", "dram_pj_per_byte", "special_unit_pj_per_element", "static_w")
        for f in ("0.5", "2")]
    # cycles and memory do not depend on the energy figures
    for column in ("fedavg_cycles", "spherefed_cycles", "fedavg_peak_memory_bytes"):
        assert energy[column].nunique() == 1
    # energy is linear in each figure: doubling one adds what halving it removes, twice over
    base = energy.loc["default"]
    for name in ("mac_pj", "dram_pj_per_byte", "static_w"):
        for method in ("fedavg", "spherefed"):
            up, down = energy.loc[f"{name} x2", f"{method}_energy_j"], energy.loc[f"{name} x0.5", f"{method}_energy_j"]
            assert up > base[f"{method}_energy_j"] > down
            assert up - base[f"{method}_energy_j"] == pytest.approx(2 * (base[f"{method}_energy_j"] - down))


def test_memory_model_is_swept(frame):
    """Both memory models price the same traces; the base config's (``on_chip_accumulation``) is the base row."""
    rows = frame[frame["parameter"] == "memory_model"].set_index("value")
    assert set(rows.index) == {"on_chip_accumulation", "scalesim_v3"}
    assert bool(rows.loc["on_chip_accumulation", "is_base"]) and not bool(rows.loc["scalesim_v3", "is_base"])
    assert rows["latency_saving_pct"].notna().all()

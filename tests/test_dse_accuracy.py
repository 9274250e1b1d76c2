"""bench.dse --study: every point priced to the target with its own number format's accuracy curve
(bench/dse/accuracy.py). The study is a stand-in's (tests/study_runners.py: accuracy falls by a
known amount per format, costs are fixed per round), so every figure can be worked out by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from accel_sim.batch import price_points
from accel_sim.hardware import HardwareConfig
from accel_sim.mac_energy import hardware_in_format
from accel_sim.points import HardwarePoints
from bench.dse import accuracy
from bench.dse.__main__ import main
from bench.dse.spec import DseError
from bench.lib.results import FORMAT_VERSION
from bench.study import phases, report
from bench.lib.study.study_file import parse_study
from iokit import outputs
from tests.test_study import OPPOSITE, study_doc

SPACE = """
[dse]
models = ["convnet"]
methods = ["fedavg", "spherefed", "ccvr"]
batch_size = 32
classes = 10
image_size = 16

[space.axes]
rows = [32, 64]
number_format = ["fp32", "bfp_m2_g16", "fp16"]
"""


@pytest.fixture(scope="module")
def priced(tmp_path_factory):
    """A stand-in study in fp32 and bfp_m2_g16, and the exploration priced with it."""
    root = tmp_path_factory.mktemp("dse-study")
    study = parse_study(study_doc(number_formats=["fp32", "bfp_m2_g16"], targets={"accuracy_pct": [60.0]}), "test")
    run = phases.run_study(study, root / "study", runner=OPPOSITE)
    files = report.write_report(root / "study", study, run, command="test", started_unix_s=0.0, commit="test")
    outputs.Manifest(phases.COMMAND, phases.folder_hash(study), FORMAT_VERSION, "complete", tuple(files),
                     (phases.GRID_FOLDER,)).write(root / "study")  # as bench.study finishes it
    space = root / "space.toml"
    space.write_text(SPACE)
    assert main([str(space), "--study", str(root / "study"), "--out", str(root / "dse")]) == 0
    return root, pd.read_csv(root / "dse" / "tta_study.csv"), pd.read_csv(root / "dse" / "points.csv")


def test_on_the_studys_own_hardware_and_fp32_the_price_is_the_studys(priced):
    root, tta, points = priced
    # the stand-in's test accuracy of fedavg at lr 0.2 (the FP32 choice), seed s, round t of 6:
    # 0.1 + (0.8 - 0.2 + 0.001 s) t / 6; mean over seeds 0..2: 0.1 + 0.601 t / 6 >= 0.6 first at t = 5
    # (0.6008); the stand-in's device time is 1 s per round: 5 s on the study's own hardware
    own = points[(points["number_format"] == "fp32") & (points["rows"] == HardwareConfig().rows)]
    row = tta[(tta["method"] == "fedavg") & (tta["point"] == int(own["point"].iloc[0]))].iloc[0]
    assert row["round"] == 5 and row["device_s_to_target"] == pytest.approx(5.0, rel=1e-12)
    assert row["energy_j_to_target"] == pytest.approx(10.0, rel=1e-12)  # 2 J per round
    assert row["bytes_to_target"] == 5000.0


def test_a_point_in_another_format_uses_that_formats_curve_and_price(priced):
    root, tta, points = priced
    # bfp_m2_g16 loses 0.05: 0.05 + 0.601 t / 6 >= 0.6 first at t = 6 (0.651; t = 5: 0.5508)
    mine = tta[(tta["method"] == "fedavg") & (tta["number_format"] == "bfp_m2_g16")]
    assert set(mine["round"]) == {6}
    # device time: 6 s on the study's hardware in bfp_m2_g16, scaled by the step's latency ratio
    row = mine.iloc[0]
    point = points[(points["point"] == row["point"]) & (points["method"] == "fedavg")].iloc[0]
    hw = hardware_in_format(HardwareConfig(), "bfp_m2_g16")
    from bench.dse.traces import method_trace
    from accel_sim.batch import TraceWork

    work = TraceWork.of(method_trace("convnet", "fedavg", batch_size=32, num_classes=10, image_size=16))
    base = price_points([work], HardwarePoints.of([hw]))[0]
    assert row["device_s_to_target"] == pytest.approx(6.0 * point["step_latency_s"] / base.latency_s[0], rel=1e-9)


def test_an_unstudied_format_is_marked_not_priced(priced):
    root, tta, _ = priced
    fp16 = tta[tta["number_format"] == "fp16"]
    assert len(fp16) and not fp16["measured"].any() and fp16["device_s_to_target"].isna().all()
    assert tta[tta["number_format"] != "fp16"]["measured"].all()


def test_a_calibrated_method_adds_its_calibration_priced_at_its_own_ratio(priced):
    root, tta, _ = priced
    # fedavg+ccvr reaches 60 % in FP32 at round 5 of training, before its calibration row (round 7):
    # the same price as fedavg's
    a = tta[(tta["method"] == "fedavg") & (tta["number_format"] == "fp32")].set_index("point")
    b = tta[(tta["method"] == "fedavg+ccvr") & (tta["number_format"] == "fp32")].set_index("point")
    assert (a["device_s_to_target"] == b["device_s_to_target"]).all()


def test_bad_study_inputs_are_one_line(tmp_path, priced):
    root, _, _ = priced
    space = tmp_path / "space.toml"
    space.write_text(SPACE.replace("batch_size = 32", "batch_size = 64"))
    assert main([str(space), "--study", str(root / "study"), "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
    from bench.dse.spec import load_dse

    with pytest.raises(DseError, match="trained at batch 32, 16x16 inputs; the space prices batch 64"):
        accuracy.load_study(root / "study", load_dse(space), None, None)
    with pytest.raises(DseError, match="not a finished bench.study folder"):
        accuracy.load_study(tmp_path, load_dse(root / "space.toml"), None, None)
    with pytest.raises(DseError, match="--setting iid: the study has alpha=0.5"):
        accuracy.load_study(root / "study", load_dse(root / "space.toml"), None, "iid")


def test_printout_names_the_best_design_and_the_unmeasured(priced):
    root, tta, _ = priced
    study = accuracy.StudyCurves(root / "study", "convnet", "alpha=0.5", HardwareConfig(), 60.0,
                                 pd.DataFrame(), 3, ("fp32", "bfp_m2_g16"))
    text = "\n".join(accuracy.printout(study, tta))
    assert "not priced (no accuracy measured in the format): fp16" in text
    assert "fedavg: round reaching the target per format: fp32 5, bfp_m2_g16 6" in text
    assert not math.isnan(tta["energy_j_to_target"].min())


def test_the_main_job_names_the_studied_formats_and_the_cheapest_design(priced):
    from bench.lib.run import formats

    root, tta, points = priced
    fig = formats.figures(["mobilenetv2", "convnet"], "fp32", root)
    assert fig["models_not_studied"] == ["mobilenetv2"] and [e["model"] for e in fig["explorations"]] == ["convnet"]
    line = formats.format_line(fig)
    ok = tta[(tta["method"] == "fedavg") & tta["fits"] & tta["reached"]]
    best = ok.sort_values(["energy_j_to_target", "point"]).iloc[0]
    rows = int(points[points["point"] == best["point"]]["rows"].iloc[0])
    assert line.startswith("number formats: this run trains in fp32 (--number-format); mobilenetv2 not studied")
    assert "(convnet trained in fp32, bfp_m2_g16, 3 seeds, alpha=0.5); least energy to 60 %" in line
    # cols is not an axis of the test's space: the array is named by its rows only where both are axes
    assert f"a {best['number_format']} array ({best['energy_j_to_target']:.3g} J, round " in line
    assert rows in (32, 64)


def test_the_main_jobs_line_gives_one_studys_explorations_under_several_cost_tables_as_one_clause():
    # two explorations of one study, priced in two cost tables: fedavg's design is the same in both
    # (energy 10.0 and 12.5 J: the range "10-12.5"), spherefed's differs (each table named)
    from bench.lib.run import formats

    def exploration(table, folder, fedavg_j, spherefed_rows):
        design = lambda rows, fmt: f"rows={rows} cols=64 number_format={fmt}"  # noqa: E731
        return {"study_folder": "results/reference/s", "folder": folder, "cost_table": table, "model": "convnet",
                "formats": ["fp32", "bf16"], "seeds": 3, "setting": "alpha=0.1", "target_accuracy_pct": 90.0,
                "best": {"fedavg": {"design": design(32, "bf16"), "round": 4, "point": 7, "energy_j_to_target": fedavg_j},
                         "spherefed": {"design": design(spherefed_rows, "bf16"), "round": 3, "point": spherefed_rows,
                                       "energy_j_to_target": 5.0}}}

    fig = {"run_number_format": "fp32", "models_not_studied": [],
           "explorations": [exploration("horowitz45", "d", 10.0, 16), exploration("epfl28", "d-epfl28", 12.5, 32)]}
    line = formats.format_line(fig)
    assert "d and d-epfl28 price each design" in line and "priced in cost tables horowitz45, epfl28" in line
    assert "fedavg: a 32x64 bf16 array (10-12.5 J, round 4, point 7)" in line
    assert ("spherefed: horowitz45: a 16x64 bf16 array (5 J, round 3, point 16), "
            "epfl28: a 32x64 bf16 array (5 J, round 3, point 32)") in line
    # one exploration in the default table: no table named, as before cost tables
    one = formats.format_line({**fig, "explorations": fig["explorations"][:1]})
    assert "d prices each design" in one and "cost table" not in one and "(10 J, round 4, point 7)" in one

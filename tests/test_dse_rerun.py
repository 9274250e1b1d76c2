"""python -m bench.dse --run (issue 24 item 3; bench/dse/rerun.py): a run's accuracy curve re-priced
on every point of a space. On the run's own accelerator the figures are the run's own
time-to-accuracy; elsewhere each stage scales by its step's price ratio; bytes never move."""

from __future__ import annotations

import json
from dataclasses import asdict

import pandas as pd
import pytest

from bench.dse.__main__ import main
from bench.dse.spec import load_dse
from bench.lib.results import FORMAT_VERSION
from iokit import outputs
from workloads.cost.system import ROUNDS_COLUMNS

SPACE = """
[dse]
models = ["convnet"]
methods = ["fedavg", "spherefed", "ccvr"]
batch_size = 8
classes = 10
image_size = 16

[space.axes]
rows = [32, 16]
cols = [64, 32]
"""
# A bench.run-shaped folder (its rounds made up, every other field as bench.run writes it):
# fedavg and ccvr (trained as fedavg) reach 50 % in round 2: device 2.0 + 2.0 = 4.0 s of training,
# energy 3.0 + 3.0 = 6.0 J, bytes 200; only ccvr reaches 75 %, after its calibration row (round 4):
# training 3 x 2.0 = 6.0 s and 3 x 3.0 = 9.0 J, calibration 0.5 s and 0.25 J, bytes 3 x 100 + 40 = 340;
# spherefed never reaches 50 %.
ROUNDS = [("fedavg", 1, "train", 0.30, 2.0, 3.0, 100), ("fedavg", 2, "train", 0.55, 2.0, 3.0, 100),
          ("fedavg", 3, "train", 0.70, 2.0, 3.0, 100),
          ("spherefed", 1, "train", 0.10, 1.0, 1.0, 100), ("spherefed", 2, "train", 0.20, 1.0, 1.0, 100),
          ("spherefed", 3, "train", 0.30, 1.0, 1.0, 100),
          ("ccvr", 1, "train", 0.30, 2.0, 3.0, 100), ("ccvr", 2, "train", 0.55, 2.0, 3.0, 100),
          ("ccvr", 3, "train", 0.70, 2.0, 3.0, 100), ("ccvr", 4, "calibration", 0.80, 0.5, 0.25, 40)]


def run_folder(tmp_path, dse, target_pct):
    folder = tmp_path / "run"
    folder.mkdir()
    rows, cum = [], {}
    for method, round_, stage, accuracy, device_s, energy_j, nbytes in ROUNDS:
        d, e, b = cum.get(method, (0.0, 0.0, 0))
        cum[method] = (d + device_s, e + energy_j, b + nbytes)
        rows.append({"model": "convnet", "method": method, "round": round_, "stage": stage, "clients": 5,
                     "accuracy": accuracy, "round_wall_s": device_s, "server_s": 0.0, "round_device_s": device_s,
                     "round_energy_j": energy_j, "round_bytes": nbytes, "cum_wall_s": cum[method][0],
                     "cum_device_s": cum[method][0], "cum_energy_j": cum[method][1], "cum_bytes": cum[method][2]})
    pd.DataFrame(rows, columns=["model", *ROUNDS_COLUMNS]).to_csv(folder / "rounds.csv", index=False)
    (folder / "summary.json").write_text(json.dumps({
        "hardware": asdict(dse.base),
        "accuracy_setting": {"hparams": {"batch_size": 8}, "fl": {"image_size": 16}},
        "models": {"convnet": {"time_to_accuracy": {"target_accuracy_pct": target_pct}}}}))
    outputs.Manifest("bench.run", "test", FORMAT_VERSION, "complete", ("rounds.csv", "summary.json")).write(folder)
    return folder


@pytest.mark.slow  # three ConvNet captures: ~5 s
@pytest.mark.parametrize("target, expected", [  # method: (round, training s, J, calibration s, J, bytes)
    (50.0, {"fedavg": (2, 4.0, 6.0, 0.0, 0.0, 200), "ccvr": (2, 4.0, 6.0, 0.0, 0.0, 200)}),
    (75.0, {"ccvr": (4, 6.0, 9.0, 0.5, 0.25, 340)}),
])
def test_repricing_on_the_runs_own_hardware_gives_the_runs_tta(tmp_path, capsys, target, expected):
    space = tmp_path / "space.toml"
    space.write_text(SPACE)
    dse = load_dse(space)
    folder = run_folder(tmp_path, dse, target)
    assert main([str(space), "--run", str(folder), "--out", str(tmp_path / "out")]) == 0
    tta = pd.read_csv(tmp_path / "out" / "tta.csv")
    points = pd.read_csv(tmp_path / "out" / "points.csv").set_index(["method", "point"])
    price = points[["step_latency_s", "step_energy_j"]]
    assert set(tta["method"]) == set(expected)  # spherefed never reaches the target: no rows
    paper = int(points.loc["fedavg"].query("rows == 32 and cols == 64").index[0])  # the space's base: the run's hw
    for method, (round_, train_s, train_j, calib_s, calib_j, nbytes) in expected.items():
        mine = tta[tta["method"] == method].set_index("point")
        assert len(mine) == 4 and (mine["round"] == round_).all() and (mine["bytes_to_target"] == nbytes).all()
        assert mine.loc[paper, "device_s_to_target"] == pytest.approx(train_s + calib_s, rel=1e-12)
        assert mine.loc[paper, "energy_j_to_target"] == pytest.approx(train_j + calib_j, rel=1e-12)
        for point in mine.index:  # elsewhere each stage scales by its own step's ratio to the run's
            train = price.loc[("fedavg", point)] / price.loc[("fedavg", paper)]
            calib = price.loc[("ccvr", point)] / price.loc[("ccvr", paper)]
            assert mine.loc[point, "device_s_to_target"] == pytest.approx(
                train_s * train["step_latency_s"] + calib_s * calib["step_latency_s"], rel=1e-9)
            assert mine.loc[point, "energy_j_to_target"] == pytest.approx(
                train_j * train["step_energy_j"] + calib_j * calib["step_energy_j"], rel=1e-9)
    assert f"re-priced {folder}" in capsys.readouterr().out


@pytest.mark.parametrize("change, names", [
    ({"accuracy_setting": {"hparams": {"batch_size": 32}, "fl": {"image_size": 16}}}, ("batch 32", "batch_size = 32")),
    ({"models": {}}, ("--target",)),
    # issue 33, items 10 and 11: each was a traceback or a misleading line
    ({"accuracy_setting": {"fl": {"image_size": 16}}}, ("accuracy_setting lacks its hparams",)),
    ({"accuracy_setting": {"hparams": {"batch_size": 8}, "fl": {"image_size": None}}}, ("sets no image_size",)),
    ({"models": {"convnet": {"time_to_accuracy": {"target_accuracy_pct": "50"}}}}, ("'50'", "--target")),
    ({"models": ["convnet"]}, ("--target",)),
    ({"hardware": "paper"}, ("hardware config is a table", "summary.json")),
    ([1, 2], ("holds a JSON list",)),
    ("round_device_s", ("column round_device_s holds a value that is not a number",)),
])
def test_a_run_that_does_not_match_the_space_is_refused_before_capture(tmp_path, capsys, change, names):
    space = tmp_path / "space.toml"
    space.write_text(SPACE)
    folder = run_folder(tmp_path, load_dse(space), 50.0)
    summary = json.loads((folder / "summary.json").read_text())
    if isinstance(change, str):  # a column of rounds.csv with a word in it
        rounds = pd.read_csv(folder / "rounds.csv")
        rounds[change] = rounds[change].astype(object)
        rounds.loc[0, change] = "abc"
        rounds.to_csv(folder / "rounds.csv", index=False)
    else:
        (folder / "summary.json").write_text(json.dumps({**summary, **change} if isinstance(change, dict) else change))
    assert main([str(space), "--run", str(folder), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in names) and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()

"""bench.run: a smoke run of the small ConvNet into a temp dir, and bad input rejected before work."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from workloads.cost.system import ROUNDS_COLUMNS
import bench.plots.__main__ as plots_cli
import bench.run.__main__ as run
from bench.lib import results
from bench.lib.run import config, figures, study
from workloads.fl.methods import parse_method
from workloads.fl.presets import load_preset

ROOT = Path(__file__).resolve().parents[1]
# the smoke preset with a smaller test set, fewer virtual features and two rounds
TINY = (ROOT / "configs" / "presets" / "smoke.toml").read_text().replace(
    "max_test_samples = 100", "max_test_samples = 40").replace(
    "ccvr_virtual_per_class = 50", "ccvr_virtual_per_class = 5").replace("rounds = 1", "rounds = 2") + (
    "\n[targets]\naccuracy_pct = [20.0]\n")  # a time-to-accuracy target declared before the run


def _numbers(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield obj


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    preset = base / "tiny.toml"
    preset.write_text(TINY)
    out = base / "convnet"
    # --workers 1: the runs in this process (no worker start-up); tests/test_fl_jobs.py checks that side by side
    # in workers gives the same results
    rc = run.main(["--model", "convnet", "--batch-size", "8", "--preset", str(preset), "--workers", "1",
                   "--out", str(out)])
    return rc, out


@pytest.mark.slow
def test_smoke_run_writes_every_file(smoke):
    rc, out = smoke
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == ["breakdown.csv", "breakdown_convnet.png", "fig5.png",
                                                      "layers.csv", "manifest.json", "ops.csv", "rounds.csv",
                                                      "summary.json", "tta.png"]
    summary = results.load_summary(out)  # validates the layout, finite numbers
    assert all(math.isfinite(x) for x in _numbers(summary))
    m = summary["models"]["convnet"]
    assert set(m["training"]) == {"fedavg", "spherefed"} and set(m["calibration"]) == {"ccvr", "ffc"}
    assert set(m["communication"]) == set(m["accuracy"]) == set(config.DEFAULT_METHODS)
    assert all(0 <= v["accuracy_pct"] <= 100 for v in m["accuracy"].values())
    assert summary["git_commit"] and summary["command"].startswith("python -m bench.run")
    # the setting the accuracy run trained: the run's model and seed, not the preset's (issue 33, item 8)
    assert (summary["accuracy_setting"]["fl"]["model"], summary["accuracy_setting"]["fl"]["seed"]) == \
        ("convnet", summary["config"]["seed"])
    # no reference study covers the tiny preset: each run trains at the preset's rate, recorded with its source
    preset = load_preset(str(out.parent / "tiny.toml"))
    assert m["learning_rates"] == {
        "fedavg+ccvr": {"lr": preset.hp.lr, "from": "preset tiny [hparams] (--lr-from study, but no reference "
                                                    "study covers this run)"},
        "spherefed+ffc": {"lr": preset.hparams(parse_method("spherefed+ffc")).lr,
                          "from": "preset tiny [methods.spherefed] (--lr-from study, but no reference study covers "
                                  "this run)"}}


@pytest.mark.slow
def test_smoke_run_records_its_device(smoke):
    import json

    import torch

    doc = json.loads((smoke[1] / "summary.json").read_text())
    assert doc["config"]["device"] == "auto"  # as asked; resolved:
    assert doc["execution"]["device"] == ("cuda:0" if torch.cuda.is_available() else "cpu")


@pytest.mark.slow
def test_smoke_run_figures_hold_together(smoke):
    _, out = smoke
    m = results.load_summary(out)["models"]["convnet"]
    t = m["training"]
    # 10 local epochs x ceil(5,000 / 8) = 10 x 625 steps per round at batch 8
    assert t["fedavg"]["steps_per_round"] == 6250
    assert t["fedavg"]["round_latency_s"] == pytest.approx(6250 * t["fedavg"]["step_latency_s"])
    # SphereFed: no classifier gradient, so lower peak memory; breakdown sums to the peak
    assert t["spherefed"]["peak_memory_bytes"] < t["fedavg"]["peak_memory_bytes"]
    assert t["spherefed"]["peak_memory_by_kind_bytes"]["gradient"] < t["fedavg"]["peak_memory_by_kind_bytes"]["gradient"]
    for v in t.values():
        assert sum(v["peak_memory_by_kind_bytes"].values()) == v["peak_memory_bytes"]
        assert v["round_energy_j"] == pytest.approx(6250 * v["step_energy_j"])
        assert sum(v["step_energy_by_component_j"].values()) == pytest.approx(v["step_energy_j"])
        assert sum(v["step_energy_by_kind_j"].values()) == pytest.approx(v["step_energy_j"])
        assert {"array_fwd", "array_dx", "array_dw", "special_unit_update"} <= set(v["step_energy_by_kind_j"])
    for v in m["calibration"].values():
        assert v["energy_j"] == pytest.approx(v["client_energy_j"] + v["server_energy_j"]) and v["energy_j"] > 0
    # communication: SphereFed never sends the 1024 x 100 classifier: 2 x 100 rounds x 10 clients x 409,600 B less
    c = m["communication"]
    assert c["fedavg"]["total_bytes"] - c["spherefed"]["total_bytes"] == 2 * 100 * 10 * 1024 * 100 * 4
    assert c["fedavg"]["classifier_per_client_bytes_table1"] == 2 * 100 * 1024 * 100 * 4


@pytest.mark.slow
def test_ledger_agrees_with_closed_forms(smoke):
    _, out = smoke
    checks = results.load_summary(out)["ledger_check"]["convnet"]
    assert set(checks) == {"fedavg+ccvr", "spherefed+ffc"}
    for v in checks.values():
        assert v["ledger"]["total_bytes"] == v["closed_form"]["total_bytes"] > 0


@pytest.mark.slow
def test_csvs_match_the_summary(smoke):
    _, out = smoke
    ops = pd.read_csv(out / "ops.csv", keep_default_na=False)
    layers = pd.read_csv(out / "layers.csv", keep_default_na=False)
    blocks = pd.read_csv(out / "breakdown.csv", keep_default_na=False)
    t = results.load_summary(out)["models"]["convnet"]["training"]
    for method, step in t.items():
        for frame in (ops, layers, blocks):
            mine = frame[frame["method"] == method]
            assert mine["total_cycles"].sum() == step["step_total_cycles"]
            assert (mine["compute_cycles"] + mine["stall_cycles"] == mine["total_cycles"]).all()
            assert mine["energy_j"].sum() == pytest.approx(step["step_energy_j"], rel=1e-9)
            parts = [f"energy_{c}_j" for c in step["step_energy_by_component_j"]]
            assert mine[parts].sum(axis=1).to_numpy() == pytest.approx(mine["energy_j"].to_numpy(), rel=1e-9)
    # every block shown, the classifier among them; the frozen classifier has no array_dw work
    assert set(blocks["block"]) >= {"conv1", "classifier", "(outside modules)"}
    assert set(blocks[(blocks["block"] == "classifier") & (blocks["kind"] == "array_dw")]["method"]) == {"fedavg"}
    # the frozen classifier has no weight-gradient GEMM
    dw = ops[(ops["layer"] == "classifier") & (ops["work"] == "gemm:dw")]
    assert set(dw["method"]) == {"fedavg"}


@pytest.mark.slow
def test_plots_regenerate_from_the_run(smoke):
    _, out = smoke
    (out / "fig5.png").unlink()
    assert plots_cli.main([str(out)]) == 0 and (out / "fig5.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["no clock", "a word for a figure"])
def test_plots_of_a_damaged_summary_is_one_line_naming_it(smoke, tmp_path, capsys, damage):
    """Issue 33, item 10: bench.plots on a summary.json without hardware.clock_hz, or with a
    non-numeric figure, was a traceback."""
    import shutil

    _, out = smoke
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    summary = json.loads((copy / "summary.json").read_text())
    if damage == "no clock":
        del summary["hardware"]["clock_hz"]
    else:
        summary["models"]["convnet"]["training"]["fedavg"]["round_latency_s"] = "fast"
    (copy / "summary.json").write_text(json.dumps(summary))
    before = sorted(p.name for p in copy.iterdir())
    assert plots_cli.main([str(copy)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{copy}/summary.json" in err, err
    assert sorted(p.name for p in copy.iterdir()) == before


@pytest.mark.slow
def test_existing_out_is_refused_before_work(smoke, capsys):
    _, out = smoke
    before = (out / "summary.json").read_text()
    assert run.main(["--model", "convnet", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == before


@pytest.mark.parametrize("argv, message", [
    (["--model", "lenet"], "unknown model"),
    (["--model", "convnet", "--methods", "fedavg", "fedsgd"], "unknown method"),
    (["--model", "convnet", "--methods", "spherefed"], "include 'fedavg'"),
    (["--model", "convnet", "--methods", "fedavg", "fedprox+ffc"], "bench.run prices ffc after fedavg+spherefed only"),
    (["--model", "convnet", "--preset", "huge"], "preset 'huge' not found"),
    (["--model", "convnet", "--preset", "paper"], "give its folder with --data-dir DIR"),
    (["--model", "convnet", "--target", "0"], "--target"),
    (["--model", "convnet", "--target", "101"], "--target"),
    (["--model", "convnet", "--system", "/no/such/system.toml"], "no such system-model file"),
    (["--model", "convnet", "--preset", "paper", "--data-dir", "/no/such/dir"], "--data-dir /no/such/dir does not exist"),
    (["--model", "convnet", "--batch-size", "0"], "argument --batch-size: 0 is out of range"),
    (["--model", "convnet", "--device", "tpu"], "not a device"),
])
def test_bad_input_is_one_clear_error(tmp_path, argv, message, capsys):
    assert run.main([*argv, "--out", str(tmp_path / "r")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_bad_hardware_file(tmp_path, capsys):
    hw = tmp_path / "hw.toml"
    hw.write_text("clock_mhz = 100\n")
    assert run.main(["--model", "convnet", "--hw", str(hw), "--out", str(tmp_path / "r")]) == 2
    assert "clock_mhz" in capsys.readouterr().err


def test_paper_preset_with_an_empty_data_dir(tmp_path, capsys):
    assert run.main(["--model", "convnet", "--preset", "paper", "--data-dir", str(tmp_path),
                     "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.startswith("error:")
    assert not (tmp_path / "r").exists()


def test_paper_vs_model_rows():
    fake = {"a": {"training": {"fedavg": {"peak_memory_bytes": 100, "round_latency_s": 2.0},
                               "spherefed": {"peak_memory_bytes": 90, "round_latency_s": 1.5}},
                  "calibration": {"ccvr": {"latency_s": 10.0}, "ffc": {"latency_s": 9.0}}}}
    rows = {r["claim"][:20]: r for r in figures.paper_vs_model(fake)}
    # memory 1 - 90/100 = 10 %; latency 1 - 1.5/2 = 25 %; calibration 1 - 9/10 = 10 %
    assert [round(r["model_up_to_pct"], 6) for r in rows.values()] == [10.0, 25.0, 10.0]
    assert [r["paper_up_to_pct"] for r in rows.values()] == [10.5, 13.6, 9.1]


@pytest.mark.slow
def test_rounds_csv_joins_accuracy_and_cost(smoke):
    _, out = smoke
    rounds = pd.read_csv(out / "rounds.csv")
    assert tuple(rounds.columns) == ("model", *ROUNDS_COLUMNS)
    summary = results.load_summary(out)
    m = summary["models"]["convnet"]
    # the base methods show rounds 1..2, the calibrations a third (calibration) row after them
    assert rounds.groupby("method")["round"].max().to_dict() == {"fedavg": 2, "spherefed": 2, "ccvr": 3, "ffc": 3}
    for method, rows in rounds.groupby("method"):
        for key in ("cum_wall_s", "cum_device_s", "cum_energy_j", "cum_bytes"):
            assert rows[key].is_monotonic_increasing
        # the final accuracy of the ledger is the accuracy the summary reports
        assert 100 * rows["accuracy"].iloc[-1] == pytest.approx(m["accuracy"][method]["accuracy_pct"])
    # the runs' totals are the ledger's: ccvr (fedavg+ccvr) and ffc (spherefed+ffc) end on the run's total bytes
    checks = summary["ledger_check"]["convnet"]
    assert rounds[rounds["method"] == "ccvr"]["cum_bytes"].iloc[-1] == checks["fedavg+ccvr"]["ledger"]["total_bytes"]
    assert rounds[rounds["method"] == "ffc"]["cum_bytes"].iloc[-1] == checks["spherefed+ffc"]["ledger"]["total_bytes"]


@pytest.mark.slow
def test_time_to_accuracy_is_the_first_round_at_the_target(smoke):
    _, out = smoke
    summary = results.load_summary(out)
    tta = summary["models"]["convnet"]["time_to_accuracy"]
    rounds = pd.read_csv(out / "rounds.csv")
    # the preset's declared target, whatever the methods reach (no reference study covers this setting)
    assert (tta["target_accuracy_pct"], tta["rule"]) == (20.0, "declared in the preset ([targets] accuracy_pct)")
    assert summary["models"]["convnet"]["reference"] is None
    for method, v in tta["methods"].items():
        rows = rounds[rounds["method"] == method]
        hits = rows[100 * rows["accuracy"] >= tta["target_accuracy_pct"]]
        assert v["reached"] == (len(hits) > 0)
        if v["reached"]:
            first = hits.iloc[0]
            assert (v["round"], v["wall_s"], v["bytes"]) == (first["round"], pytest.approx(first["cum_wall_s"]),
                                                               first["cum_bytes"])


@pytest.mark.slow
def test_any_method_set_plots_what_it_has(tmp_path):
    # calibrations only: no training step to break down, Fig. 5 (a) still normalized to FedAvg's bytes
    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY)
    out = tmp_path / "cal"
    assert run.main(["--model", "convnet", "--batch-size", "8", "--preset", str(preset), "--methods", "ccvr", "ffc",
                     "--workers", "1", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*.png")) == ["fig5.png", "tta.png"]
    m = results.load_summary(out)["models"]["convnet"]
    assert m["training"] == {} and set(m["calibration"]) == {"ccvr", "ffc"}
    assert set(m["communication"]) == {"fedavg", "ccvr", "ffc"}


def test_grid_point_device_reaches_the_run(tmp_path):
    # a grid point's device goes through bench.run's flag (checked before any work)
    with pytest.raises(ValueError, match="'tpu' is not a device"):
        study.run_point({"model": "convnet", "device": "tpu"}, tmp_path)
    assert list(tmp_path.iterdir()) == []

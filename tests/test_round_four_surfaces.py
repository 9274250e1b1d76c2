"""Nothing lost, round four (issue 56, items 9 to 13): what re-pricing, a study's resume, the run
specification and the presets do with inputs a user gives them. Each test is named after its input.

* Item 9: ``--reprice`` after the study's hardware file changed rewrote a finished report with empty
  tables (every run read as another content's, so "missing"); now the runs are priced with the new
  file (accuracies byte for byte, costs the new hardware's), and what cannot be (a fleet's run whose
  files changed) is refused before anything is written.
* Item 10: an interrupted ``--reprice`` left the manifest ``running`` with no files; now it prices
  every run in memory first (interrupted there: the folder byte for byte as it was) and names
  ``--report-only`` when interrupted after the runs were replaced.
* Item 12: a finished run whose ``curve.csv`` was cut before its last round counted as finished.
* Items 11 and 13: the run specification and the presets (further below).

The re-pricing tests train one real tiny study (2 runs of 2 rounds on the smoke preset's digits) once
for the module; the others use the stand-in runner of tests/study_runners.py.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import shutil
from pathlib import Path

import pytest

import bench.study.__main__ as study_cli
from bench.study import phases
from tests.tiny_study import TINY_STUDY

ROOT = Path(__file__).resolve().parents[1]
STUDY = (TINY_STUDY.replace("tuning_seeds = [0]\n", 'tuning_seeds = [0]\nhw = "hw.toml"\n')
         .replace("lr = [0.05, 0.1]", "lr = [0.05]"))
COST = ("cum_wall_s", "cum_device_s", "cum_energy_j", "cum_bytes")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


@pytest.fixture(scope="module")
def trained_study(tmp_path_factory) -> Path:
    """The study above trained by the real runner, its hardware and system files copies of the shipped
    defaults."""
    root = tmp_path_factory.mktemp("study")
    (root / "s.toml").write_text(STUDY.replace('hw = "hw.toml"\n', 'hw = "hw.toml"\nsystem = "sys.toml"\n'))
    shutil.copy(ROOT / "configs" / "hw" / "paper_default.toml", root / "hw.toml")
    shutil.copy(ROOT / "configs" / "system" / "default.toml", root / "sys.toml")
    import os

    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert study_cli.main(["s.toml", "--out", "out"]) == 0
    finally:
        os.chdir(cwd)
    return root


@pytest.fixture
def study(trained_study, tmp_path, monkeypatch) -> Path:
    """A copy of the trained study to change, the working directory in it."""
    folder = Path(shutil.copytree(trained_study, tmp_path / "copy"))
    monkeypatch.chdir(folder)
    return folder


def stand_in(monkeypatch) -> None:
    """The study command on the stand-in runner (tests/study_runners.py ``opposite``), without the
    up-front preparation of one real run per setting and the projection (each loads data and builds
    models: seconds this file's stand-in studies do not need)."""
    monkeypatch.setattr(phases, "run_study", functools.partial(phases.run_study, runner="tests.study_runners:opposite"))
    monkeypatch.setattr(study_cli, "check_runs", lambda study, planned: None)
    monkeypatch.setattr(study_cli, "projection_lines", lambda *args: [])


def faster_clock(folder: Path) -> None:
    """The issue's change: ``clock_hz`` of the study's hardware file from 100 MHz to 200 MHz."""
    hw = folder / "hw.toml"
    text = hw.read_text()
    assert "clock_hz = 100e6" in text
    hw.write_text(text.replace("clock_hz = 100e6", "clock_hz = 200e6"))


# ----------------------------------------------------------------------------- item 9


@pytest.mark.slow  # the module's study: ~8 s on the 2-core machine, then ~3 s per re-pricing
def test_reprice_after_the_hw_files_clock_hz_changed_prices_with_the_new_file(study, capsys):
    before = rows(study / "out" / "curves.csv")
    faster_clock(study)
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 0, capsys.readouterr().err
    manifest = json.loads((study / "out" / "manifest.json").read_text())
    assert manifest["state"] == "complete" and "table.md" in manifest["files"]
    after = rows(study / "out" / "curves.csv")
    assert len(after) == len(before) == 4  # 2 evaluation seeds x 2 rounds: nothing lost
    kept = [c for c in before[0] if c not in COST]
    assert [[r[c] for c in kept] for r in after] == [[r[c] for c in kept] for r in before]  # accuracies byte for byte
    for b, a in zip(before, after):  # twice the clock: every GEMM's cycles take half the time, DRAM does not
        assert float(a["cum_device_s"]) < float(b["cum_device_s"])
        assert a["cum_bytes"] == b["cum_bytes"]  # the ledger does not follow the clock
    assert "—" not in (study / "out" / "table.md").read_text().split("## ")[1]  # no empty cell
    for point in (study / "out" / "grid" / "runs").glob("*/point.json"):  # the runs as priced: today's file
        record = json.loads(point.read_text())
        assert record["files"]["hw"]["sha256"] == __import__("hashlib").sha256((study / "hw.toml").read_bytes()).hexdigest()
    # the report read again (no pricing) is the re-priced one
    curves = (study / "out" / "curves.csv").read_bytes()
    assert study_cli.main(["s.toml", "--out", "out", "--report-only"]) == 0
    assert (study / "out" / "curves.csv").read_bytes() == curves


@pytest.mark.slow
def test_reprice_after_the_hw_file_changed_and_back_gives_the_trained_prices(study, capsys):
    """Re-priced with a changed file, then with the file restored: the cost columns as trained, byte
    for byte (re-pricing is a function of the run and the file, not of its history)."""
    trained = (study / "out" / "curves.csv").read_bytes()
    original = (study / "hw.toml").read_text()
    faster_clock(study)
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 0
    assert (study / "out" / "curves.csv").read_bytes() != trained
    (study / "hw.toml").write_text(original)
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 0
    assert (study / "out" / "curves.csv").read_bytes() == trained


@pytest.mark.slow
def test_reprice_after_the_system_files_uplink_halved_prices_the_new_links(study, capsys):
    """Found by the fuzz beside item 9: the system file is the other file a run without a fleet reads
    only to be priced; halving every client's uplink lengthens the modeled rounds and leaves the
    device time, energy, bytes and accuracies as they were."""
    before = rows(study / "out" / "curves.csv")
    system = study / "sys.toml"
    text = system.read_text()
    assert "uplink_bytes_per_s = 0.625e6" in text
    system.write_text(text.replace("uplink_bytes_per_s = 0.625e6", "uplink_bytes_per_s = 0.3125e6"))
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 0, capsys.readouterr().err
    after = rows(study / "out" / "curves.csv")
    for b, a in zip(before, after):
        assert float(a["cum_wall_s"]) > float(b["cum_wall_s"])  # the upload takes twice as long
        assert [a[c] for c in a if c != "cum_wall_s"] == [b[c] for c in b if c != "cum_wall_s"]


def fleet_study(folder: Path) -> None:
    """The stand-in study below on fleets ["none", "f.toml"], f.toml a copy of configs/fleets/mixed.toml."""
    shutil.copy(ROOT / "configs" / "fleets" / "mixed.toml", folder / "f.toml")
    text = STUDY.replace('hw = "hw.toml"\n', 'fleets = ["none", "f.toml"]\n')
    (folder / "s.toml").write_text(text)


def test_reprice_after_the_fleet_file_changed_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stand_in(monkeypatch)
    fleet_study(tmp_path)
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    fleet = tmp_path / "f.toml"
    fleet.write_text(fleet.read_text() + "\n# changed: any byte makes it another file's content\n")
    before = snapshot(tmp_path / "out")
    capsys.readouterr()
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: --reprice: runs/") and "fleet f.toml" in err, err
    assert "rerun the study without --reprice" in err
    assert snapshot(tmp_path / "out") == before


def test_reprice_of_a_study_with_a_cut_run_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """A run cut after it finished (item 12) is not done: --reprice would rebuild the report without it."""
    monkeypatch.chdir(tmp_path)
    stand_in(monkeypatch)
    (tmp_path / "s.toml").write_text(STUDY.replace('hw = "hw.toml"\n', ""))
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    cut_curve(tmp_path / "out")
    before = snapshot(tmp_path / "out")
    capsys.readouterr()
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not complete" in err and "without --reprice" in err, err
    assert snapshot(tmp_path / "out") == before


# ----------------------------------------------------------------------------- item 10


@pytest.mark.slow
def test_reprice_interrupted_while_pricing_leaves_the_study_byte_for_byte(study, monkeypatch, capsys):
    import bench.study.reprice as reprice

    faster_clock(study)
    before = snapshot(study / "out")
    calls = []

    def interrupted(folder, commit):
        calls.append(folder)
        if len(calls) == 2:  # the second run: the first was priced (in memory)
            raise KeyboardInterrupt
        return real(folder, commit)

    real = reprice.price_again
    monkeypatch.setattr(reprice, "price_again", interrupted)
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 130
    err = capsys.readouterr().err
    assert "interrupted while pricing: nothing in out was changed; run the same command again" in err
    assert snapshot(study / "out") == before  # the manifest still complete, every file as it was


@pytest.mark.slow
def test_reprice_interrupted_while_writing_the_report_names_report_only(study, monkeypatch, capsys):
    from bench.study import report

    faster_clock(study)
    files_before = json.loads((study / "out" / "manifest.json").read_text())["files"]
    real = report.write_report

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "write_report", interrupted)
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 130
    err = capsys.readouterr().err
    assert "--report-only rebuilds it from them (no pricing)" in err
    manifest = json.loads((study / "out" / "manifest.json").read_text())
    assert manifest["state"] == "running" and manifest["files"] == files_before  # its files still listed
    monkeypatch.setattr(report, "write_report", real)
    assert study_cli.main(["s.toml", "--out", "out", "--report-only"]) == 0  # the advice works
    assert json.loads((study / "out" / "manifest.json").read_text())["state"] == "complete"
    report_only = (study / "out" / "curves.csv").read_bytes()
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 0  # re-pricing again: the same prices
    assert (study / "out" / "curves.csv").read_bytes() == report_only


# ----------------------------------------------------------------------------- item 12


def cut_curve(out: Path) -> Path:
    """An evaluation run's curve.csv (seed 1: not a tuning seed) cut after its header and round 1."""
    curve = next(p.parent / "curve.csv" for p in (out / "grid" / "runs").glob("*/point.json")
                 if json.loads(p.read_text())["config"]["seed"] == 1)
    lines = curve.read_text().splitlines(keepends=True)
    curve.write_text("".join(lines[:2]))
    return curve


def test_a_finished_studys_curve_cut_before_its_last_round_is_run_again(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stand_in(monkeypatch)
    (tmp_path / "s.toml").write_text(STUDY.replace('hw = "hw.toml"\n', ""))
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    whole_report = rows(tmp_path / "out" / "curves.csv")
    curve = cut_curve(tmp_path / "out")
    capsys.readouterr()
    # the report alone: the cut run is missing (not used), the study not complete
    assert study_cli.main(["s.toml", "--out", "out", "--report-only"]) == 1
    err = capsys.readouterr().err
    assert f"runs/{curve.parent.name} is incomplete (curve.csv has fedavg's training rounds 1..1, not 1..2)" in err
    assert [r["seed"] for r in rows(tmp_path / "out" / "curves.csv")] == ["0", "0"]  # seed 1's rows are not used
    # the resume runs it again
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    err = capsys.readouterr().err
    assert f"warning: runs/{curve.parent.name} is incomplete" in err and "running it again" in err
    assert len(curve.read_text().splitlines()) == 3
    assert rows(tmp_path / "out" / "curves.csv") == whole_report


@pytest.mark.parametrize("cut", ["a calibration row", "its last training round", "a round twice"])
def test_a_calibrated_runs_curve_without_its_whole_rounds_is_incomplete(cut):
    from bench.lib.study.run_files import missing_rounds

    point = {"method": "fedavg+ccvr", "fl": {"rounds": 2}}
    curve = [{"method": m, "round": t, "stage": "train"} for m in ("fedavg", "fedavg+ccvr") for t in (1, 2)]
    curve.append({"method": "fedavg+ccvr", "round": 3, "stage": "calibration"})
    assert missing_rounds(point, curve) == ""
    if cut == "a calibration row":
        assert missing_rounds(point, curve[:-1]) == "curve.csv has fedavg+ccvr's calibration rounds none, not [3]"
    elif cut == "a round twice":
        assert "training rounds [1, 2, 2], not 1..2" in missing_rounds(point, [*curve[:2], curve[1], *curve[2:]])
    else:
        assert missing_rounds(point, curve[:3]) == "curve.csv has fedavg+ccvr's training rounds 1..1, not 1..2"


# ----------------------------------------------------------------------------- item 11


def test_number_formats_crossed_with_a_fleet_that_sets_every_format_is_one_setting(tmp_path, monkeypatch, capsys):
    """number_formats = ["fp32", "bfp_m2_g16"] x fleets = ["none", "mixed-formats"]: every class of
    mixed-formats sets its own format, so "bfp_m2_g16 on the fleet" trains exactly "fp32 on the
    fleet"; the study keeps it once (its FP32 setting), and the report compares nothing with itself."""
    from bench.lib.study.study_file import load_study

    monkeypatch.chdir(tmp_path)
    text = STUDY.replace('hw = "hw.toml"\n', 'number_formats = ["fp32", "bfp_m2_g16"]\nfleets = ["none", "mixed-formats"]\n')
    (tmp_path / "s.toml").write_text(text)
    assert [s.label for s in load_study("s.toml").settings] == [
        "alpha=0.5", "alpha=0.5 fleet=mixed-formats", "alpha=0.5 bfp_m2_g16"]
    stand_in(monkeypatch)
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    settings = {r["setting"] for r in rows(tmp_path / "out" / "runs.csv")}
    assert settings == {"alpha=0.5", "alpha=0.5 fleet=mixed-formats", "alpha=0.5 bfp_m2_g16"}, settings
    points = [json.loads(p.read_text())["config"] for p in (tmp_path / "out" / "grid" / "runs").glob("*/point.json")]
    assert not [p for p in points if p.get("fleet") and p["execution"].get("number_format", "fp32") != "fp32"]


def test_a_fleet_that_leaves_a_class_in_the_runs_format_keeps_every_format(tmp_path):
    """The collapse applies only where no client computes in the run's format: mixed.toml's classes
    set none, so bfp_m2_g16 on it is a setting of its own."""
    from bench.lib.study.study_file import load_study

    (tmp_path / "s.toml").write_text(STUDY.replace('hw = "hw.toml"\n', 'number_formats = ["fp32", "bfp_m2_g16"]\n'
                                                                      'fleets = ["none", "mixed"]\n'))
    assert len(load_study(tmp_path / "s.toml").settings) == 4


@pytest.mark.parametrize("formats, both", [
    ('["fp32", "fast", "1:bfp_m2_g16_sr,2:bfp_m4_g16_sr"]', ("'fast' and '1:bfp_m2_g16_sr,2:bfp_m4_g16_sr'",
                                                            "1:bfp_m2_g16_sr,2:bfp_m4_g16_sr")),  # the issue's
    ('["fp32", "bf16", "1:bf16"]', ("'bf16' and '1:bf16'", "bf16")),  # a schedule of one format is the format
    ('["fp32", "1:bf16,2:bf16", "bf16"]', ("'1:bf16,2:bf16' and 'bf16'", "bf16")),  # a step that changes nothing
    ('["fp32", "1:fp32", "e4m3"]', ("'fp32' and '1:fp32'", "fp32")),  # FP32 as a schedule
])
def test_number_formats_that_train_the_same_rounds_are_refused_naming_both(tmp_path, monkeypatch, capsys, formats,
                                                                          both):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(STUDY.replace('hw = "hw.toml"\n', f"number_formats = {formats}\n"))
    assert study_cli.main(["s.toml", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{both[0]} are given twice (both are {both[1]})" in err and "give each once" in err, err
    assert not (tmp_path / "out").exists()


def test_fast_and_its_steps_over_other_rounds_are_two_settings(tmp_path):
    """Over 4 rounds ``fast`` switches at round 3: "1:bfp_m2_g16_sr,2:bfp_m4_g16_sr" is another schedule."""
    from bench.lib.study.study_file import load_study

    text = STUDY.replace("rounds = 2", "rounds = 4").replace(
        'hw = "hw.toml"\n', 'number_formats = ["fp32", "fast", "1:bfp_m2_g16_sr,2:bfp_m4_g16_sr"]\n')
    (tmp_path / "s.toml").write_text(text)
    assert len(load_study(tmp_path / "s.toml").settings) == 3


@pytest.mark.parametrize("methods, both", [
    (["workloads.fl.methods.scaffold:Scaffold", "scaffold"], "'workloads.fl.methods.scaffold:Scaffold' and 'scaffold'"),
    (["scaffold", "workloads.fl.methods.scaffold:Scaffold"], "'scaffold' and 'workloads.fl.methods.scaffold:Scaffold'"),
    (["fedavg", "workloads.fl.methods.base:FedAvg+spherefed", "spherefed"],
     "'workloads.fl.methods.base:FedAvg+spherefed' and 'spherefed'"),
    (["workloads.fl.methods.ccvr:CCVR", "fedavg+ccvr"], "'workloads.fl.methods.ccvr:CCVR' and 'fedavg+ccvr'"),
])
def test_bench_fl_methods_naming_one_method_twice_by_its_path_is_refused(tmp_path, capsys, methods, both):
    from bench.fl.__main__ import main

    assert main(["--preset", "smoke", "--model", "convnet", "--methods", *methods, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--methods: {both} are given twice" in err, err
    assert not (tmp_path / "o").exists()


class ScaffoldCopy(__import__("workloads.fl.methods.scaffold", fromlist=["Scaffold"]).Scaffold):
    """A class of yours that subclasses SCAFFOLD and changes nothing."""


def test_a_subclass_of_a_built_in_method_is_another_method():
    """A class of yours that subclasses SCAFFOLD is yours, even unchanged: not the built-in's spelling."""
    from workloads.fl.methods import distinct_methods

    mine = "tests.test_round_four_surfaces:ScaffoldCopy"
    assert distinct_methods(["scaffold", mine], name="--methods") == ["scaffold", mine]


@pytest.mark.parametrize("where", ["a study file", "a preset's [run] methods", "bench.run --methods"])
def test_one_method_under_two_spellings_is_refused_in_every_list_of_methods(tmp_path, monkeypatch, capsys, where):
    monkeypatch.chdir(tmp_path)
    path = "workloads.fl.methods.fedprox:FedProx"
    if where == "a study file":
        (tmp_path / "s.toml").write_text(STUDY.replace('hw = "hw.toml"\n', "").replace(
            'methods = ["fedavg"]', f'methods = ["fedavg", "fedprox", "{path}"]'))
        assert study_cli.main(["s.toml", "--out", "out"]) == 2
    elif where == "a preset's [run] methods":
        from bench.fl.__main__ import main

        (tmp_path / "p.toml").write_text(f'[run]\ndataset = "digits"\nmodel = "convnet"\nmethods = ["fedprox", "{path}"]\n')
        assert main(["--preset", "p.toml", "--out", "out"]) == 2
    else:
        from bench.run.__main__ import main

        assert main(["--model", "convnet", "--preset", "smoke", "--methods", "fedavg", "fedprox", path,
                     "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"'fedprox' and '{path}' are given twice (both are fedprox)" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, given", [
    (["--number-format", "bf16"], "--number-format bf16"),  # the issue's
    (["--precision-schedule", "1:bf16,2:bfp_m4_g16"], "--precision-schedule 1:bf16,2:bfp_m4_g16"),
])
def test_a_run_format_beside_a_fleet_that_sets_every_format_is_refused(tmp_path, capsys, flags, given):
    from bench.fl.__main__ import main

    assert main(["--preset", "smoke", "--model", "convnet", "--rounds", "2", "--fleet", "mixed-formats", *flags, "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {given}: every class of fleet 'mixed-formats' sets its own number format "
                          "(fpga bfp_m4_g16_sr, edge_server mxfp8_e4m3, phone bf16, iot fp32)"), err
    assert not (tmp_path / "o").exists()


def test_a_presets_format_beside_a_fleet_that_sets_every_format_names_the_preset(tmp_path, capsys):
    from bench.fl.__main__ import main

    preset = tmp_path / "p.toml"
    preset.write_text((ROOT / "configs" / "presets" / "smoke.toml").read_text() + '\n[execution]\nnumber_format = "bf16"\n')
    assert main(["--preset", str(preset), "--model", "convnet", "--fleet", "mixed-formats", "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the preset's [execution] number_format bf16: every class of fleet"), err
    # FP32, the default, beside the same fleet: every client in its class's format, as always
    from bench.lib.resolve import resolve
    from bench.lib.spec import RunSpec

    run = resolve(RunSpec(preset="smoke", fleet_path="mixed-formats", number_format="fp32"))
    assert run.execution.number_format == "fp32" and set(run.execution.client_formats) <= {
        "bfp_m4_g16_sr", "mxfp8_e4m3", "bf16", "fp32"}


# ----------------------------------------------------------------------------- item 13

PRESET = """[run]
dataset = "digits"
image_size = 16
model = "convnet"
num_clients = 2
rounds = 1
partition = "iid"
max_train_samples = 60
max_test_samples = 20
methods = ["fedavg"]
[hparams]
local_epochs = 1
"""


@pytest.mark.parametrize("table, knob, value, method", [
    ("[methods.moon]", "moon_mu", 2.5, "moon"),  # the issue's
    ("[methods.moon]", "moon_tau", 0.25, "moon"),
    ("[methods.feddyn]", "feddyn_alpha", 0.05, "feddyn"),
    ("[hparams]", "moon_mu", 2.5, "moon"),  # the common table, for the method that owns the knob
    ("[methods.moon]", "moon_mu", 2.5, "moon+ccvr"),  # a calibrated moon reads its algorithm's table
])
def test_a_presets_method_knob_with_methods_on_the_command_line_is_used(tmp_path, table, knob, value, method):
    from bench.lib.resolve import resolve
    from bench.lib.spec import RunSpec

    preset = tmp_path / "p.toml"
    text = PRESET + f"{knob} = {value}\n" if table == "[hparams]" else PRESET + f"{table}\n{knob} = {value}\n"
    preset.write_text(text)
    run = resolve(RunSpec(preset=str(preset), methods=(method,)))
    assert getattr(run.hparams[method], knob) == value
    if method == "moon+ccvr":
        assert run.hparams[method].ccvr_epochs == 10  # the calibration's own knobs, at their defaults


def test_a_presets_method_knob_trains_moon_with_it(tmp_path, capsys):
    """bench.fl --methods moon on a preset whose [methods.moon] sets moon_mu: trains, and results.json
    records the preset's value (the issue's input failed "unknown key 'moon_mu'")."""
    from bench.fl.__main__ import main

    preset = tmp_path / "p.toml"
    preset.write_text(PRESET + "[methods.moon]\nmoon_mu = 2.5\n")
    assert main(["--preset", str(preset), "--methods", "moon", "--out", str(tmp_path / "o")]) == 0
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert doc["hparams"]["moon"]["moon_mu"] == 2.5 and "moon_mu" not in doc["hparams"].get("fedavg", {})


@pytest.mark.parametrize("text, methods, message", [
    ("[hparams]\nmoon_mu = 2.5\n", ("fedavg",),  # [hparams] sets a knob no method of the run reads
     "[hparams]: moon_mu is a knob of moon, which this run does not train (methods: fedavg); set it in "
     "[methods.moon] (used when moon trains) or train moon"),
    ("[methods.moon]\nlr = 0.1\nmoon_muu = 2.5\n", ("moon",),
     "[methods.moon]: unknown key 'moon_muu' (did you mean 'moon_mu'?)"),
    ("[methods.moon]\nprox_mu = 0.1\n", ("moon",),  # FedProx's knob in moon's table: it belongs to fedprox
     "[methods.moon]: prox_mu is a knob of fedprox, not of this table's method; set it in [methods.fedprox]"),
    ("[methods.moon]\nfeddyn_alpha = 0.1\n", ("moon",),  # another method's knob in moon's table
     "[methods.moon]: feddyn_alpha is a knob of feddyn, not of this table's method; set it in [methods.feddyn]"),
    ("[methods.moon]\nmoon_mu = -1.0\n", ("moon",), "[methods.moon]: hyper-parameter moon_mu must be >= 0, got -1.0"),
    ("[hparams]\nmoon_mu = -1.0\n", ("moon",), "[hparams]: hyper-parameter moon_mu must be >= 0, got -1.0"),
])
def test_a_presets_method_knob_that_cannot_be_used_is_one_line(tmp_path, capsys, text, methods, message):
    from bench.fl.__main__ import main

    preset = tmp_path / "p.toml"
    preset.write_text(PRESET.replace("[hparams]\n", "[hparams]\n" + text.split("\n", 1)[1])
                      if text.startswith("[hparams]") else PRESET + text)
    assert main(["--preset", str(preset), "--methods", *methods, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and str(preset) in err, err
    assert not (tmp_path / "o").exists()


def test_a_presets_knob_for_a_method_the_study_does_not_train_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text(PRESET + "moon_mu = 2.5\n")
    (tmp_path / "s.toml").write_text(STUDY.replace('hw = "hw.toml"\n', "").replace('preset = "smoke"', 'preset = "p.toml"'))
    assert study_cli.main(["s.toml", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert "s.toml: preset: p.toml [hparams]: moon_mu is a knob of moon, which this run does not train" in err, err


def test_a_presets_moon_table_leaves_other_methods_hparams_as_they_were(tmp_path):
    """[methods.moon] is moon's: FedAvg beside it declares and records the knobs it did before (its
    study points, and so their ids, unchanged)."""
    from bench.lib.resolve import resolve
    from bench.lib.spec import RunSpec

    plain = tmp_path / "plain.toml"
    plain.write_text(PRESET)
    with_moon = tmp_path / "moon.toml"
    with_moon.write_text(PRESET + "[methods.moon]\nmoon_mu = 2.5\n")
    a = resolve(RunSpec(preset=str(plain), methods=("fedavg",))).hparams["fedavg"]
    b = resolve(RunSpec(preset=str(with_moon), methods=("fedavg", "moon"))).hparams["fedavg"]
    assert a.as_dict() == b.as_dict() and "moon_mu" not in a.as_dict()


CURVE_HEAD = "method,round,stage,lr,mean_loss,accuracy,val_accuracy,cum_wall_s,cum_device_s,cum_energy_j,cum_bytes\n"


@pytest.mark.parametrize("body, why", [  # found by the fuzz beside item 12: a finished run's curve edited after it
    ("fedavg,1,train,0.05,2.3,0.5,0.4,1,1,1,10\nfedavg,2,train,0.05,2.0,0.6,0.5,2,2,2,20\n", ""),  # whole
    ("fedavg,1,train,0.05,2.3,0.5,0.4,1,1,1,10\nfedavg,2,train,0.05,2.0,nan,0.5,2,2,2,20\n",
     "curve.csv has accuracy = nan in fedavg's round 2"),
    ("fedavg,1,train,0.05,2.3,0.5,0.4,1,1,1,10\nfedavg,2,train,0.05,2.0,0.6,60.0,2,2,2,20\n",  # a percentage
     "curve.csv has val_accuracy = 60.0 in fedavg's round 2"),
    ("fedavg,1,train,0.05,2.3,0.5,0.4,1,1,1,10\nfedavg,2,train,0.05,2.0,0.6,0.5,2,2,2,20\n"
     "fedavg,3,train,0.05,2.0,0.6,0.5,3,3,3,30\n", "curve.csv has fedavg's training rounds 1..3, not 1..2"),
    ("fedavg,1,train,0.05,2.3,0.5,0.4,1,1,1,10\nfedavg,2,train,0.05,2.0,0.6,0.5,2,2\n",  # a row cut mid-line
     "TypeError"),
    ("fedavg,1,train,0.05,2.3,0.5,0.4,1,1,1,10\nfedavg,2,train,0.05,2.0,0.6,0.5,2,2,2,20\nfedavg,2,tr",
     "TypeError"),  # a third line cut in its stage: its cells missing
])
def test_a_finished_runs_curve_that_no_run_writes_is_incomplete(tmp_path, body, why):
    from bench.lib.study.runner import incomplete_run

    (tmp_path / "curve.csv").write_text(CURVE_HEAD + body)
    (tmp_path / "run.json").write_text("{}")
    found = incomplete_run({"method": "fedavg", "fl": {"rounds": 2}}, tmp_path)
    assert (found == "") if not why else why in found, found


@pytest.mark.slow
def test_reprice_interrupted_while_the_runs_are_replaced_replaces_them_all_first(study, monkeypatch, capsys):
    """Ctrl-C while the re-priced runs' files are written (found by the fuzz): held until the last
    run is in place, then the command stops with the advice that fits (--report-only), never with
    some runs re-priced and others not."""
    import signal

    from bench.lib.study.reprice import PRICED_KEY, Repriced

    faster_clock(study)
    real = Repriced.write
    calls = []

    def interrupted(self):
        calls.append(self.run_id)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)  # as a terminal's Ctrl-C, while the first run is written
        real(self)

    monkeypatch.setattr(Repriced, "write", interrupted)
    assert study_cli.main(["s.toml", "--out", "out", "--reprice"]) == 130
    assert "--report-only rebuilds it from them (no pricing)" in capsys.readouterr().err
    runs = list((study / "out" / "grid" / "runs").glob("*/run.json"))
    assert len(calls) == len(runs) == 2
    assert all(PRICED_KEY in json.loads(r.read_text()) for r in runs)  # both re-priced, none left behind


def test_a_study_base_named_by_its_class_path_is_refused_naming_the_methods_spelling(tmp_path, capsys):
    """Found by the fuzz beside item 11: base = the path of FedAvg's class beside methods = ["fedavg"]
    said "is not one of the methods", as if it were another method."""
    (tmp_path / "s.toml").write_text(STUDY.replace('hw = "hw.toml"\n', "").replace(
        'base = "fedavg"', 'base = "workloads.fl.methods.base:FedAvg"'))
    assert study_cli.main([str(tmp_path / "s.toml"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("base = 'workloads.fl.methods.base:FedAvg' is the method 'fedavg' of methods under another "
                        "spelling; write base = 'fedavg'"), err


def test_a_presets_moon_table_serves_moon_named_by_its_class_path(tmp_path):
    """Found by the fuzz beside items 11 and 13: --methods workloads.fl.methods.moon:MOON trains MOON,
    and the preset's [methods.moon] table was silently not applied to it (keyed by the path)."""
    from bench.lib.resolve import resolve
    from bench.lib.spec import RunSpec

    preset = tmp_path / "p.toml"
    preset.write_text(PRESET + "[methods.moon]\nmoon_mu = 2.5\n")
    path = "workloads.fl.methods.moon:MOON"
    assert resolve(RunSpec(preset=str(preset), methods=(path,))).hparams[path].moon_mu == 2.5


def test_a_presets_table_named_by_a_built_in_class_path_is_refused_with_its_name(tmp_path, capsys):
    """[methods."workloads.fl.methods.moon:MOON"] is moon's table under another spelling: refused in
    one line naming the table to write (it was silently unused when moon trained)."""
    from bench.fl.__main__ import main

    preset = tmp_path / "p.toml"
    preset.write_text(PRESET + '[methods."workloads.fl.methods.moon:MOON"]\nmoon_mu = 2.5\n')
    assert main(["--preset", str(preset), "--methods", "moon", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("[methods.workloads.fl.methods.moon:MOON]: write the method as 'moon' (its canonical name), "
                        "so that it matches the run's method"), err


def test_a_design_space_naming_fedavg_twice_by_its_class_path_is_refused(tmp_path, capsys):
    """Found by the fuzz beside item 11: bench.dse priced FedAvg twice, under two labels."""
    from bench.dse.__main__ import main

    space = tmp_path / "space.toml"
    space.write_text('[dse]\nmodels = ["convnet"]\nmethods = ["fedavg", "workloads.fl.methods.base:FedAvg"]\n'
                     'batch_size = 4\n[space.axes]\nrows = [8, 16]\n')
    assert main([str(space), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "[dse] methods: 'fedavg' and 'workloads.fl.methods.base:FedAvg' are given twice (both are fedavg)" in err
    assert not (tmp_path / "o").exists()


def test_report_only_interrupted_while_writing_keeps_the_reports_files_listed(tmp_path, monkeypatch, capsys):
    """Found by the fuzz beside item 10: --report-only (and a resume) wrote the manifest `running` with
    no files before rebuilding the report, so an interrupt there left a finished study's folder
    listing nothing (bench.dse --study refuses it); its files stay listed until the report is rebuilt."""
    from bench.study import report

    monkeypatch.chdir(tmp_path)
    stand_in(monkeypatch)
    (tmp_path / "s.toml").write_text(STUDY.replace('hw = "hw.toml"\n', ""))
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    files = json.loads((tmp_path / "out" / "manifest.json").read_text())["files"]
    assert "table.md" in files

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "write_report", interrupted)
    assert study_cli.main(["s.toml", "--out", "out", "--report-only"]) == 130
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["state"] == "running" and manifest["files"] == files

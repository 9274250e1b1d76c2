"""Nothing lost, round three (issue 46): every check complete before any training.

A fleet or a study that cannot run is one line and exit 2 before anything trains or any folder
exists: case 6 (an availability of ``period_rounds = 0`` recorded as "always"; ``--fleet`` with the
default ``--system`` file typed out), case 8 (a study's ``deadlines_s = [1e308]`` and a fleet whose
``assignment`` lists 3 clients of a 5-client preset passed the study's checks: its tuning and
every-client runs trained, then each fleet run failed). The study's check prepares a run of every
setting, its fleet's included (``bench.study.__main__.check_runs``); an input no case names: a
deadline below the fleet's bound, and an availability pattern in a study's fleet."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

import bench.fl.__main__ as fl_cli
import bench.study.__main__ as study_cli
from bench.study import phases
from tests.test_no_data_loss_identity import study_text
from workloads.cost.fleet import FleetError, availability_of

ROOT = Path(__file__).resolve().parents[1]


def fleet_file(folder: Path, old: str = "", new: str = "") -> str:
    text = (ROOT / "configs/fleets/mixed.toml").read_text()
    assert old in text
    (folder / "f.toml").write_text(text.replace(old, new, 1))
    return "f.toml"


AVAILABILITY = {
    "period_rounds = 0, online_rounds = 0 (case 6)": "{ period_rounds = 0, online_rounds = 0 }",
    "period_rounds = 0, online_rounds = 3 (case 6)": "{ period_rounds = 0, online_rounds = 3 }",
}


@pytest.mark.parametrize("name", AVAILABILITY)
def test_an_availability_pattern_of_no_period_is_refused(tmp_path, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    fleet = fleet_file(tmp_path, "{ period_rounds = 4, online_rounds = 2 }", AVAILABILITY[name])
    assert fl_cli.main(["--preset", "smoke", "--fleet", fleet, "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "[classes.phone].availability period_rounds = 0" in err, err
    assert not (tmp_path / "out").exists()


def test_the_availability_of_a_pattern_is_never_always():
    """Each pattern given is a pattern (hand-picked: 2 of 4 rounds) or refused; only "always" is always."""
    assert availability_of({"period_rounds": 4, "online_rounds": 2}, "f").label == "online 2 of every 4 rounds"
    assert availability_of("always", "f").label == "always"
    with pytest.raises(FleetError, match="period_rounds = 0"):
        availability_of({"period_rounds": 0, "online_rounds": 0}, "f")


def test_a_fleet_with_the_default_system_file_typed_out_is_refused(tmp_path, monkeypatch, capsys):
    """Case 6: the docs say a fleet and a system file are not combined; the default file typed out
    (relative or absolute) is a system file given."""
    monkeypatch.chdir(ROOT)
    for system in ("configs/system/default.toml", str(ROOT / "configs/system/default.toml")):
        assert fl_cli.main(["--preset", "smoke", "--fleet", "mixed", "--system", system,
                            "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"--fleet mixed and --system {system}" in err, err
    assert not (tmp_path / "out").exists()


@pytest.fixture
def study_folder(tmp_path, monkeypatch):
    """A study on the stand-in runner (no training), its checks real (they load the data)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(phases, "run_study", functools.partial(phases.run_study, runner="tests.study_runners:opposite"))
    return tmp_path


STUDIES = {  # the input -> (the fleet file's edit, the study's extra keys, what the line says)
    "deadlines_s = [1e308] (case 8)": (("", ""), {"deadlines_s": "[1e308]"}, "deadlines_s = 1e+308 is out of range"),
    "assignment of 3 clients for 5 (case 8)": (
        ("[round]", 'assignment = ["fpga", "phone", "iot"]\n[round]'), {},
        "lists 3 client(s) in 'assignment' but the run has 5"),
    "deadlines_s = [1e-12] (no case names it)": (("", ""), {"deadlines_s": "[1e-12]"},
                                                  "deadlines_s = 1e-12 is out of range"),
    "a study's fleet with period_rounds = 0 (no case names it)": (
        ("{ period_rounds = 4, online_rounds = 2 }", "{ period_rounds = 0, online_rounds = 0 }"), {},
        "availability period_rounds = 0"),
}


@pytest.mark.parametrize("name", STUDIES)
def test_a_study_whose_fleet_cannot_run_is_refused_before_any_training(study_folder, capsys, name):
    (old, new), keys, said = STUDIES[name]
    fleet_file(study_folder, old, new)
    if "assignment" in new:  # a listed fleet gives no shares
        text = (study_folder / "f.toml").read_text()
        (study_folder / "f.toml").write_text("\n".join(line for line in text.splitlines()
                                                       if not line.startswith("share")))
    (study_folder / "s.toml").write_text(study_text(fleets='["none", "f.toml"]', **keys))
    assert study_cli.main(["s.toml", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err, err
    assert not (study_folder / "out").exists()

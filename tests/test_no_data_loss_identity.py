"""Nothing lost, round three (issue 46): what a run and a value ARE (iokit.identity).

Two mechanisms, each a matrix named after its inputs:

* a run is the content of everything it reads: a study rerun after a file it reads was edited
  runs the affected runs again instead of skipping them (case 1: a fleet file's ``deadline_s``, a
  hardware file's ``clock_hz``; an input no case names: the study's ``system`` file, and a
  hardware file a fleet class names);
* each value once, by what it resolves to: the same fleet by name and by path (case 2), and the
  same fleet by two paths (no case names it).

The studies run on the stand-in runner of tests/study_runners.py (a formula instead of training),
which reads what a study run reads (``bench.lib.study.runner.files_read``)."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest

import bench.study.__main__ as study_cli
from bench.study import phases
from iokit import identity

ROOT = Path(__file__).resolve().parents[1]


def study_text(**keys: str) -> str:
    body = ('name = "s"\npreset = "quick"\nmodels = ["convnet"]\nmethods = ["fedavg"]\nbase = "fedavg"\n'
            'alphas = [0.5]\nrounds = 2\nseeds = [0, 1]\ntuning_seeds = [0]\n')
    body += "".join(f"{k} = {v}\n" for k, v in keys.items())
    return body + ('[search.fedavg]\nlr = [0.05]\n[tuning]\nlast_rounds = 1\n[convergence]\nlast_rounds = 1\n'
                   '[targets]\naccuracy_pct = [50.0]\n')


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(phases, "run_study", functools.partial(phases.run_study, runner="tests.study_runners:opposite"))
    monkeypatch.setattr(study_cli, "check_runs", lambda study, planned: None)  # loads data: seconds, and not
    monkeypatch.setattr(study_cli, "projection_lines", lambda *args: [])  # what these tests are about
    shutil.copy(ROOT / "configs/fleets/mixed.toml", tmp_path / "f.toml")
    shutil.copy(ROOT / "configs/hw/paper_default.toml", tmp_path / "copy.toml")
    shutil.copy(ROOT / "configs/system/default.toml", tmp_path / "system.toml")
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def recorded_files(out: Path) -> list[dict]:
    return [json.loads(p.read_text())["files"] for p in sorted((out / "grid/runs").glob("*/point.json"))]


# the study's extra keys, the file edited and its role, the edit, and the rerun's runs done (those
# that read the file) and skipped. The study's distinct runs: tuning seed 0 and evaluation seeds 0
# (the same run) and 1 without a fleet, and with a fleet its two evaluation seeds.
EDITED = {
    "fleet deadline_s 60 -> 0.5 (case 1)": ({"fleets": '["none", "f.toml"]'}, "fleet f.toml",
                                            ("deadline_s = 60.0", "deadline_s = 0.5"), 2, 3),
    "hw clock_hz (case 1)": ({"hw": '"copy.toml"'}, "hw copy.toml", ("clock_hz = 100e6", "clock_hz = 50e6"), 2, 1),
    "system file (no case names it)": ({"system": '"system.toml"'}, "system system.toml",
                                       ("latency_s = 0.05", "latency_s = 0.07"), 2, 1),
}


@pytest.mark.parametrize("name", EDITED)
def test_a_study_rerun_after_a_file_it_reads_changed_runs_again(stand_in, capsys, name):
    keys, file, (old, new), done, skipped = EDITED[name]
    (stand_in / "s.toml").write_text(study_text(**keys))
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    capsys.readouterr()
    edit(stand_in / file.split()[1], old, new)
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    err = capsys.readouterr().err
    assert err.count(f"was run with other content of {file};") == done, err
    assert err.count(": done") == done and err.count(": skipped") == skipped, err
    sha = identity.file_sha256(stand_in / file.split()[1])
    assert sum(any(e["sha256"] == sha for e in files.values()) for files in recorded_files(stand_in / "out")) == done


def test_a_hardware_file_a_fleet_class_names_is_read_too(stand_in, capsys):
    """No case names it: the fleet file is unchanged, one of its classes' hardware files is not."""
    edit(stand_in / "f.toml", 'hw = "paper_default"', 'hw = "copy.toml"')
    (stand_in / "s.toml").write_text(study_text(fleets='["none", "f.toml"]'))
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    capsys.readouterr()
    edit(stand_in / "copy.toml", "clock_hz = 100e6", "clock_hz = 50e6")
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    err = capsys.readouterr().err
    assert err.count("other content of fleet class fpga hw copy.toml;") == 2 and err.count(": skipped") == 3, err


def test_a_report_never_shows_a_run_of_other_content(stand_in, capsys):
    """--report-only after the edit: the fleet's runs are missing (not the old numbers), and the
    study says it is not complete."""
    (stand_in / "s.toml").write_text(study_text(fleets='["none", "f.toml"]'))
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    edit(stand_in / "f.toml", "deadline_s = 60.0", "deadline_s = 0.5")
    capsys.readouterr()
    assert study_cli.main(["s.toml", "--out", "out", "--report-only"]) == 1
    err = capsys.readouterr().err
    assert "2 evaluation run(s) missing" in err and "read other content of fleet f.toml" in err, err


# ---------------------------------------------------------------------------------- each value once

SAME_VALUE = {
    "fleet by name and by path (case 2)": ('["none", "mixed", "MIXED_PATH"]', "'mixed' and"),
    "fleet by two paths (no case names it)": ('["none", "f.toml", "./f.toml"]', "'f.toml' and './f.toml'"),
}


@pytest.mark.parametrize("name", SAME_VALUE)
def test_one_value_spelled_twice_is_refused_before_any_work(stand_in, capsys, name):
    fleets, said = SAME_VALUE[name]
    fleets = fleets.replace("MIXED_PATH", str(ROOT / "configs/fleets/mixed.toml"))
    (stand_in / "s.toml").write_text(study_text(fleets=fleets))
    assert study_cli.main(["s.toml", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and "given twice" in err, err
    assert not (stand_in / "out").exists()


def test_distinct_resolved_names_both_spellings():
    assert identity.distinct_resolved(["a", "b"], str.lower, name="k") == ["a", "b"]
    with pytest.raises(ValueError, match=r"k: 'a' and 'A' are given twice \(both are a\)"):
        identity.distinct_resolved(["a", "A"], str.lower, name="k")


def test_one_hardware_file_given_twice_to_bench_run_is_refused(tmp_path, monkeypatch):
    """No case names it: ``bench.run --hw a.toml ./a.toml`` compares a file with itself."""
    from bench.lib.run.compare_hw import load_hardware_set

    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "configs/hw/paper_default.toml", tmp_path / "a.toml")
    with pytest.raises(ValueError, match=r"--hw: 'a.toml' and './a.toml' are given twice"):
        load_hardware_set(["a.toml", "./a.toml"])
    assert list(load_hardware_set(["a.toml", str(ROOT / "configs/hw/tpu_v1_like.toml")])) == ["a", "tpu_v1_like"]

"""A study is complete only when it did the work it declared (issue 33, item 3), and what would make
every run fail is refused before any run.

* Every tuning trial failing (a diverging rate; here the stand-in runner ``tests.study_fails``) left
  no evaluation runs, and "every evaluation run done" held of nothing (``all([])``): the study
  exited 0, its manifest "complete", a table of dashes. Now: exit 1, one line naming the cell and
  the error, the manifest "running" (a rerun resumes).
* A hold-out that leaves fewer samples than clients, a malformed hardware file, a standard-library
  "model": one line naming the study file, exit 2, no folder (each failed every trial before)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

import bench.study.__main__ as study_cli
from bench.study import phases
from tests.tiny_study import TINY_STUDY

STUDY = TINY_STUDY


def test_a_study_whose_every_trial_failed_is_not_complete(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(phases, "run_study", functools.partial(phases.run_study, runner="tests.study_runners:fails"))
    (tmp_path / "s.toml").write_text(STUDY)
    assert study_cli.main(["s.toml", "--out", "out"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == ["error: study s (s.toml) is not complete: every tuning trial of convnet alpha=0.5 fedavg failed "
                      "(e.g. FloatingPointError: non-finite loss in round 1 (stand-in, lr=0.05)); rerun the same "
                      "command to resume (--retry-failed runs the failed runs again)"]
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["state"] == "running"


def test_a_study_that_did_its_work_is_complete(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(phases, "run_study", functools.partial(phases.run_study, runner="tests.study_runners:opposite"))
    (tmp_path / "s.toml").write_text(STUDY)
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    assert "error" not in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["state"] == "complete"


@pytest.mark.parametrize("change, message", [
    ({"top": 'holdout_fraction = 0.95\n'}, "s.toml: convnet, alpha=0.5: num_clients=10 exceeds the 7 samples"),
    ({"top": 'hw = "bad_hw.toml"\n'}, "s.toml: convnet, alpha=0.5: bad_hw.toml: rows = 'x' must be an integer"),
    ({"models": '["os:getcwd"]'}, "s.toml: os:getcwd, alpha=0.5: model 'os:getcwd': os is part of Python's standard "
                                  "library, not a model factory"),
])
def test_inputs_that_fail_every_run_are_refused_before_any(tmp_path, monkeypatch, capsys, change, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad_hw.toml").write_text('rows = "x"\n')
    text = change.get("top", "") + STUDY
    if "models" in change:
        text = text.replace('models = ["convnet"]', f'models = {change["models"]}')
    Path("s.toml").write_text(text)
    assert study_cli.main(["s.toml", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {message}"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("old, new, message", [
    ("alphas = [0.5]", "alphas = [1, 1.0]", "alphas lists 1.0 (= 1) twice"),
    ("lr = [0.05, 0.1]", "lr = [0.1, 1e-1]", "lr lists 0.1 twice"),
    ("seeds = [0, 1]", "seeds = [0, 1, 0]", "seeds lists 0 twice"),
    ("lr = [0.05, 0.1]", 'lr = ["0.1"]', "lr = '0.1' must be a number"),
])
def test_study_values_are_distinct_by_value_and_typed(tmp_path, monkeypatch, capsys, old, new, message):
    """Issue 33, item 5: 1 and 1.0 were two values (two alpha columns, the same trial trained twice
    with both rows "chosen"); item 10: lr = ["0.1"] was a traceback."""
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(STUDY.replace(old, new))
    assert study_cli.main(["s.toml", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "s.toml" in err, err
    assert not (tmp_path / "out").exists()


def test_grid_axis_values_are_distinct_by_value():
    from bench.lib.grid.engine import parse_grid
    from bench.lib.grid.point import GridError

    with pytest.raises(GridError, match=r"axis 'lr' lists 1.0 \(= 1\) twice"):
        parse_grid({"name": "g", "runner": "tests.grid_runners:train_tiny", "axes": {"lr": [1, 1.0]}})
    with pytest.raises(GridError, match=r"axis 'x' lists \{'a': 1.0\} \(= \{'a': 1\}\) twice"):
        parse_grid({"name": "g", "runner": "tests.grid_runners:train_tiny", "axes": {"x": [{"a": 1}, {"a": 1.0}]}})
    parse_grid({"name": "g", "runner": "tests.grid_runners:train_tiny", "axes": {"x": [True, 1, "1"]}})  # 3 values


def test_a_study_resumed_after_a_runs_curve_was_deleted_runs_it_again(tmp_path, monkeypatch, capsys):
    """Issue 33, item 10: resuming after a finished run's curve.csv was deleted was a traceback; since
    issue 56 (item 12) a run whose files are not whole is not finished: the resume names its folder
    and runs it again."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(phases, "run_study", functools.partial(phases.run_study, runner="tests.study_runners:opposite"))
    Path("s.toml").write_text(STUDY)
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    curve = next(p.parent / "curve.csv" for p in (tmp_path / "out" / "grid" / "runs").glob("*/point.json")
                 if json.loads(p.read_text())["config"]["seed"] == 1)  # an evaluation run (seed 1 is not tuned)
    text = curve.read_text()
    curve.unlink()
    capsys.readouterr()
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    err = capsys.readouterr().err
    assert f"warning: runs/{curve.parent.name} is incomplete (FileNotFoundError" in err, err
    assert curve.read_text() == text  # the stand-in's curve again
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["state"] == "complete"


@pytest.mark.parametrize("old, new, message", [
    ("rounds = 2", "rounds = 0", "s.toml: rounds = 0 is out of range"),
    ("seeds = [0, 1]", "seeds = [0, -1]", "s.toml: seeds = -1 is out of range"),
    ('name = "s"', 'name = "s"\ndevice = "tpu"', "s.toml: device = 'tpu' is not a device: use auto, cpu, cuda"),
])
def test_every_study_error_names_the_study_file_and_its_key(tmp_path, monkeypatch, capsys, old, new, message):
    """Issue 33, item 11: the shared checks' messages did not name the study file, and the device key
    was called "the flag --device"."""
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(STUDY.replace(old, new))
    assert study_cli.main(["s.toml", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {message}") and "--device" not in err, err


def test_a_one_value_search_is_reported_as_given_not_tuned(tmp_path, monkeypatch, capsys):
    """Issue 33, item 11: a search of one value was reported as "tuned"."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(phases, "run_study", functools.partial(phases.run_study, runner="tests.study_runners:opposite"))
    Path("s.toml").write_text(STUDY.replace("lr = [0.05, 0.1]", "lr = [0.05]"))
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    err = capsys.readouterr().err
    assert "given (one value searched, not tuned) convnet alpha=0.5 fedavg: lr=0.05" in err and "\ntuned " not in err

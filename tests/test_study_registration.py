"""A plan that binds (issue 53): the plan is registered as the first evaluation run starts, a later change of
it is refused unless the study file declares it as a deviation, and a reference study is not trained from
uncommitted code."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

import bench.study.__main__ as study_cli
from bench.lib.study import registration
from bench.lib.study.spec import StudyError
from bench.lib.study.study_file import parse_study
from bench.study import phases
from iokit import outputs
from tests.tiny_study import TINY_STUDY

STUDY = TINY_STUDY.replace('methods = ["fedavg"]', 'methods = ["fedavg", "fedavg+ccvr"]')
DEVIATION = """
[[deviations]]
keys = ["seeds"]
what = "a third evaluation seed, added after the first two ran"
reason = "the test says so"
"""


@pytest.fixture
def study_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(phases, "run_study", functools.partial(phases.run_study, runner="tests.study_runners:opposite"))
    (tmp_path / "s.toml").write_text(STUDY)
    return tmp_path


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_the_plan_is_registered_and_an_undeclared_change_is_refused_before_anything_is_written(study_dir, capsys):
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    reg = json.loads((study_dir / "out/registration.json").read_text())
    assert reg["planned"]["seeds"] == [0, 1] and reg["planned"]["primary_test"] == "permutation"
    assert reg["sha256"] == registration.sha256(reg["planned"]) and reg["note"] == \
        "registered as the first evaluation run started"
    summary = (study_dir / "out/summary.json").read_text()
    assert json.loads(summary)["registration"] == reg
    capsys.readouterr()
    # a third seed, undeclared: one line naming the key, both values and the fix; exit 2; nothing rewritten
    (study_dir / "s.toml").write_text(STUDY.replace("seeds = [0, 1]", "seeds = [0, 1, 2]"))
    assert study_cli.main(["s.toml", "--out", "out"]) == 2
    assert _errors(capsys) == [
        "error: s.toml: seeds changed since the plan registered in out/registration.json (commit "
        f"{reg['git_commit']}): registered [0, 1], now [0, 1, 2]; restore it, or declare it in the study file: "
        "[[deviations]] keys = [\"seeds\"], what = \"what changed, with the facts\", reason = \"why\""]
    assert (study_dir / "out/summary.json").read_text() == summary
    # report-only too: a report is a later invocation, and the plan binds it
    assert study_cli.main(["s.toml", "--out", "out", "--report-only"]) == 2
    assert "seeds changed since the plan registered" in _errors(capsys)[0]
    # declared: it runs, the registration is unchanged, the report prints the deviation
    (study_dir / "s.toml").write_text(STUDY.replace("seeds = [0, 1]", "seeds = [0, 1, 2]") + DEVIATION)
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    assert json.loads((study_dir / "out/registration.json").read_text()) == reg
    table = (study_dir / "out/table.md").read_text()
    assert "* seeds: a third evaluation seed, added after the first two ran Reason: the test says so" in table
    # another planned key, the margin, is still bound: the seeds' deviation does not cover it
    (study_dir / "s.toml").write_text(STUDY.replace("seeds = [0, 1]", "seeds = [0, 1, 2]\nequivalence_margin_pts = 2.0")
                                      + DEVIATION)
    assert study_cli.main(["s.toml", "--out", "out"]) == 2
    assert "equivalence_margin_pts changed since the plan registered" in _errors(capsys)[0]


@pytest.mark.slow
def test_a_study_evaluated_before_plans_were_registered_is_registered_from_its_last_report(study_dir, capsys):
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    (study_dir / "out/registration.json").unlink()  # a folder from before registrations
    last = json.loads((study_dir / "out/summary.json").read_text())
    last["study"]["verdicts"].pop("primary_test")  # reports before registrations recorded no primary test
    (study_dir / "out/summary.json").write_text(json.dumps(last))
    # its words then followed the t-test: the study file's default (the permutation test) is a change to declare
    assert study_cli.main(["s.toml", "--out", "out", "--report-only"]) == 2
    assert 'primary_test changed since the plan registered' in _errors(capsys)[0]
    assert not (study_dir / "out/registration.json").exists()  # refused: nothing written
    (study_dir / "s.toml").write_text(STUDY + '\n[[deviations]]\nkeys = ["primary_test"]\nwhat = "t to permutation"\n'
                                      'reason = "issue 53"\n')
    assert study_cli.main(["s.toml", "--out", "out", "--report-only"]) == 0
    reg = json.loads((study_dir / "out/registration.json").read_text())
    assert reg["planned"]["primary_test"] == "t" and reg["note"].startswith("registered retroactively from the report")


@pytest.mark.slow
def test_a_reference_study_is_not_trained_from_uncommitted_code(study_dir, monkeypatch, capsys):
    monkeypatch.setattr(study_cli, "git_commit", lambda: "abc123-dirty")
    monkeypatch.setattr(outputs, "CHECKOUT_ROOT", study_dir)
    out = Path("results/reference/s")
    assert study_cli.main(["s.toml", "--out", str(out)]) == 2
    assert _errors(capsys) == [f"error: --out {out}: a reference study trains only from committed code, and the "
                               "working tree has changes (abc123-dirty); commit them first (git commit), then run it"]
    assert not (study_dir / out).exists()
    assert study_cli.main(["s.toml", "--out", "elsewhere"]) == 0  # not a reference study: it runs, and records -dirty


@pytest.mark.parametrize("deviations, message", [
    ([{"keys": ["lr"], "what": "x", "reason": "y"}], r"keys = \['lr'\]: name the planned keys it changes, of seeds"),
    ([{"keys": ["seeds"], "what": "x"}], r"\[\[deviations\]\] 1: no reason"),
    ([{"keys": ["seeds"], "what": " ", "reason": "y"}], r"\[\[deviations\]\] 1: no what"),
    ({"keys": ["seeds"]}, r"deviations = .*: add \[\[deviations\]\] tables"),
])
def test_a_deviation_without_its_keys_facts_or_reason_is_one_line(deviations, message):
    import tomllib

    doc = tomllib.loads(STUDY)
    with pytest.raises(StudyError, match=message):
        parse_study({**doc, "deviations": deviations}, "s.toml")

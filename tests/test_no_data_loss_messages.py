"""Nothing lost, round three (issue 46, case 9): a refusal names what the user wrote, where they
wrote it, and what they could write instead.

The rule: the flag or key the value came from (``--number-format`` or ``--comm-format``; a
preset's ``[execution]`` key is not blamed as a flag), the name as typed (``bfp``, not
``bfp_m0_g0``), numbers unrounded where rounding hides the fault (shares summing to 0.9999999 are
not "1, not 1"), the shipped choices where a name is unknown (fleets), our words where Python's
would leak (a relative module path). No case names: a study file's ``number_formats`` key. Each
refusal: exit 2, one line, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import bench.fl.__main__ as fl_cli
from bench.lib.study.spec import StudyError
from bench.lib.study.study_file import parse_study
from tests.test_no_data_loss_identity import study_text
from iokit.toml import read_toml

ROOT = Path(__file__).resolve().parents[1]


def preset_with_bf16(folder: Path) -> str:
    text = (ROOT / "configs/presets/smoke.toml").read_text()
    (folder / "p.toml").write_text(text + ("\n[execution]\nbf16 = true\n" if "[execution]" not in text else ""))
    return "p.toml"


def fleet_with_shares(folder: Path) -> str:
    text = (ROOT / "configs/fleets/mixed.toml").read_text().replace("share = 0.25", "share = 0.2499999", 1)
    (folder / "f.toml").write_text(text)
    return "f.toml"


CASES = {  # the input -> (argv after bench.fl, what the line must say, what it must not)
    "--number-format bfp (case 9)": (["--number-format", "bfp"], "--number-format: number format 'bfp': expected", "bfp_m0"),
    "--comm-format bfp_m4_g16_sr_sr (case 9)": (["--comm-format", "bfp_m4_g16_sr_sr"],
                                       "--comm-format: number format 'bfp_m4_g16_sr_sr'", "'bfp_m4_g16_sr'"),
    "--number-format _sr (case 9)": (["--number-format", "_sr"], "--number-format: number format '_sr'", "''"),
    "a preset's bf16 with --number-format (case 9)": (["--preset", "PRESET", "--number-format", "bfp_m4_g16"],
                                             "the preset's [execution] bf16 (autocast) and --number-format bfp_m4_g16",
                                             "--bf16"),
    "shares summing to 0.9999999 (case 9)": (["--fleet", "FLEET"], "shares sum to 0.9999999, not 1", "sum to 1, not 1"),
    "an unknown fleet name (case 9)": (["--fleet", "mixd"], "(did you mean 'mixed'?); give a fleet file's path or one of mixed",
                              "no such fleet file"),
    "a relative module path (case 9)": (["--model", ".mymodels:net"], "a relative module path", "package' argument"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_refusal_names_what_was_typed_where(tmp_path, monkeypatch, capsys, name):
    argv, said, unsaid = CASES[name]
    monkeypatch.chdir(tmp_path)
    argv = [preset_with_bf16(tmp_path) if a == "PRESET" else fleet_with_shares(tmp_path) if a == "FLEET" else a
            for a in argv]
    if "--preset" not in argv:
        argv = ["--preset", "smoke", *argv]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert fl_cli.main([*argv, "--out", "out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and unsaid not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_study_files_number_format_is_named_as_typed(tmp_path):
    """No case names it: the study file's key, the name as typed."""
    (tmp_path / "s.toml").write_text(study_text(number_formats='["fp32", "bfp_m4_g16_sr_sr"]'))
    with pytest.raises(StudyError, match=r"number_formats: number format 'bfp_m4_g16_sr_sr': expected"):
        parse_study(read_toml(tmp_path / "s.toml", StudyError, "study"), "s.toml")


def test_a_valid_format_and_fleet_still_pass(tmp_path):
    """The control: the names the messages suggest are accepted."""
    from accel_sim.formats import NumberFormat
    from workloads.cost.fleet import load_fleet

    assert [NumberFormat.parse(n).name for n in ("bfp_m4_g16_sr", "e4m3", "bf16_sr")] == \
        ["bfp_m4_g16_sr", "e4m3", "bf16_sr"]
    assert load_fleet("mixed").name == "mixed"
    shutil.copy(ROOT / "configs/fleets/mixed.toml", tmp_path / "m.toml")
    assert load_fleet(tmp_path / "m.toml").deadline_s == 60.0

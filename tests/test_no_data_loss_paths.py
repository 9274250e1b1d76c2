"""Nothing lost, round three (issue 46): one rule for path-valued options (``iokit.cli.Parser``).

An empty string is an error naming the flag, never "not given" (case 4: ``--study ""`` and
``--run ""`` were taken as absent, so ``--study "" --target 50`` passed the rule that ``--target``
needs ``--run``; ``--fleet ""`` was read as the folder ``.``). The same rule holds for options no
case names (``--data-dir ""``, ``--hw ""``, ``--system ""``, a study named ``""``): exit 2, one line,
nothing written."""

from __future__ import annotations

import pytest

import bench.dse.__main__ as dse_cli
import bench.fl.__main__ as fl_cli
import bench.run.__main__ as run_cli
import bench.study.__main__ as study_cli

SPACE = "configs/dse/paper.toml"
CASES = {  # the input -> (main, argv, the flag the line names)
    '--study "" (case 4)': (dse_cli.main, [SPACE, "--study", ""], "--study"),
    '--run "" (case 4)': (dse_cli.main, [SPACE, "--run", ""], "--run"),
    '--study "" --target 50 (case 4)': (dse_cli.main, [SPACE, "--study", "", "--target", "50"], "--study"),
    '--fleet "" (case 4)': (fl_cli.main, ["--preset", "smoke", "--fleet", ""], "--fleet"),
    'bench.fl --data-dir ""': (fl_cli.main, ["--preset", "smoke", "--data-dir", ""], "--data-dir"),
    'bench.run --hw " "': (run_cli.main, ["--model", "convnet", "--hw", " "], "--hw"),
    'bench.fl --system ""': (fl_cli.main, ["--preset", "smoke", "--system", ""], "--system"),
    'bench.study ""': (study_cli.main, [""], "study"),
}


@pytest.mark.parametrize("name", CASES)
def test_an_empty_path_is_an_error_naming_its_flag(tmp_path, monkeypatch, capsys, name):
    main, argv, flag = CASES[name]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {flag} is empty; give "), err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_a_value_that_is_not_empty_is_untouched():
    """The rule refuses only empty values: the same parser takes a real one as before."""
    args = dse_cli.parser().parse_args([SPACE, "--study", "results/reference/digits-formats"])
    assert args.study == "results/reference/digits-formats"

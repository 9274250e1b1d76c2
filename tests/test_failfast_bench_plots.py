"""python -m bench.lib.plots.fig5 on bad inputs: every input file is read and checked before the first
figure is written, so a truncated, empty or binary file gives one line naming it, exit 2, and the
folder's figures stay as they were (tests/failfast.py)."""

import shutil
from pathlib import Path

import pytest

import bench.plots.__main__ as plots
from tests.failfast import assert_fails_clean

FIXTURE = Path(__file__).parent / "data" / "results_small"


@pytest.fixture
def run_dir(tmp_path):
    run = Path(shutil.copytree(FIXTURE, tmp_path / "run"))
    (run / "fig5.png").write_bytes(b"old figure")  # must survive every failed call unchanged
    return run


def truncate(name, keep):
    def edit(run):
        path = run / name
        path.write_bytes(path.read_bytes()[:keep(path.stat().st_size)])
    return edit


CASES = [
    ("breakdown-empty", lambda run: (run / "breakdown.csv").write_text(""), "breakdown.csv cannot be read"),
    ("breakdown-header-only", truncate("breakdown.csv", lambda n: 60), "breakdown.csv"),
    ("breakdown-cut-mid-row", truncate("breakdown.csv", lambda n: n - 7), "breakdown.csv: column"),
    ("breakdown-binary", lambda run: (run / "breakdown.csv").write_bytes(b"\xff\xfe\x00\x01" * 8), "breakdown.csv"),
    ("summary-binary", lambda run: (run / "summary.json").write_bytes(b"\xff\xfe\x00\x01"), "summary.json is not valid JSON"),
    ("summary-truncated", truncate("summary.json", lambda n: n // 2), "summary.json is not valid JSON"),
    ("rounds-empty", lambda run: (run / "rounds.csv").write_text(""), "rounds.csv cannot be read"),
    ("rounds-cut-mid-row", truncate("rounds.csv", lambda n: n - 5), "rounds.csv: column"),
    ("run-dir-missing", lambda run: shutil.rmtree(run), "is not a folder"),
]


@pytest.mark.parametrize("case, edit, names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_writes_nothing(run_dir, capsys, case, edit, names):
    edit(run_dir)
    assert_fails_clean(plots.main, [str(run_dir)], capsys, run_dir.parent, names)
    if run_dir.exists():
        assert (run_dir / "fig5.png").read_bytes() == b"old figure"


def test_run_dir_under_a_file(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert_fails_clean(plots.main, [str(tmp_path / "afile" / "run")], capsys, tmp_path, "is not a folder")

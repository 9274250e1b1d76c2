"""Nothing lost, round three (issue 46, case 10): an interrupted ``bench.study --workers 2`` leaves
nothing behind.

Ctrl-C goes to the whole process group (the terminal sends it to every process of the command):
the study's workers are born ignoring it (``bench.lib.grid.backends.run_local``), so none prints a
traceback while it starts; the main process stops them, reaps them and removes their point locks
and temporary run folders; the command exits 130 with its one line. Interrupted while the workers
start and while they run (case 10), and by SIGTERM to the group (no case names it: exit 143). The
study runs on a stand-in that sleeps 30 s with torch loaded (tests/study_runners.py ``slow``),
in a process of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iokit import outputs
from tests.test_no_data_loss_identity import study_text

ROOT = Path(__file__).resolve().parents[1]
DRIVER = f"""
import functools, sys
sys.path.insert(0, {str(ROOT)!r})
import bench.study.__main__ as study_cli
from bench.study import phases
if __name__ == "__main__":
    phases.run_study = functools.partial(phases.run_study, runner="tests.study_runners:slow")
    study_cli.check_runs = lambda study, planned: None
    study_cli.projection_lines = lambda *args: []
    sys.exit(study_cli.main(["s.toml", "--out", "out", "--workers", "2"]))
"""


def interrupted_study(folder: Path, signum: int, when: str) -> tuple[int, str]:
    (folder / "s.toml").write_text(study_text().replace("tuning_seeds = [0]", "tuning_seeds = [5, 6]"))
    (folder / "driver.py").write_text(DRIVER)
    process = subprocess.Popen([sys.executable, "driver.py"], cwd=folder, start_new_session=True, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's
    grid, start = folder / "out" / "grid", time.monotonic()
    while time.monotonic() - start < 60 and not (grid.exists() if when == "starting"
                                                 else len(list(grid.glob("runs/.tmp-*"))) == 2):
        time.sleep(0.05)
    time.sleep(0.2)
    os.killpg(process.pid, signum)
    output, _ = process.communicate(timeout=60)
    return process.returncode, output


@pytest.mark.slow
@pytest.mark.parametrize("signum, when, code", [
    (signal.SIGINT, "starting", 130),  # case 10: Ctrl-C while the workers import
    (signal.SIGINT, "running", 130),  # case 10: Ctrl-C while both run a point
    (signal.SIGTERM, "running", 143),  # no case names it
], ids=["Ctrl-C while the workers start", "Ctrl-C while they run", "SIGTERM while they run"])
def test_an_interrupted_study_with_two_workers_leaves_nothing_behind(tmp_path, signum, when, code):
    returncode, output = interrupted_study(tmp_path, signum, when)
    assert returncode == code, output
    assert output.strip().splitlines()[-1].startswith("interrupted; finished runs are kept"), output
    assert "Traceback" not in output and "leaked" not in output, output
    grid = tmp_path / "out" / "grid"
    assert not list(grid.glob("locks/*.lock")) and not list(grid.glob("runs/.tmp-*"))
    assert not outputs.lock_path((tmp_path / "out").absolute()).exists()  # the study's own lock too

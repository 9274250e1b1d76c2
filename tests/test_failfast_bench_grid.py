"""python -m bench.grid on bad input (one line naming it, exit 2, nothing written:
tests/failfast.py), a bad point failing alone, unreadable records redone, and Ctrl-C / SIGTERM
giving one line and exit 130. Runners: tests/grid_runners.py (a few ms each)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bench.grid.__main__ as grid
from bench.lib.grid import backends
from bench.lib.grid.engine import parse_grid, run_grid
from tests.failfast import as_in_a_terminal, assert_fails_clean

ROOT = Path(__file__).resolve().parent.parent
RUNNER = "tests.grid_runners:train_tiny"


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.toml").write_text(f'name = "ok"\nrunner = "{RUNNER}"\n[axes]\nseed = [0]\n')
    (tmp_path / "binary.toml").write_bytes(b"\x00\xff\xfe\x80 = 1\n")
    (tmp_path / "evil.toml").write_text(f'name = "../evil"\nrunner = "{RUNNER}"\n[axes]\nseed = [0]\n')
    (tmp_path / "afile").write_text("x")
    return tmp_path


CASES = [
    ("grid-binary", ["binary.toml"], "binary.toml: not valid TOML"),
    ("grid-missing", ["nope.toml"], "nope.toml: no such grid file"),
    ("name-unsafe", ["evil.toml"], "name = '../evil' must be a file-name-safe word"),
    ("cpus-nan", ["ok.toml", "--resources-per-run", "cpus=nan"], "--resources-per-run: cpus=nan must be a finite number"),
    ("cpus-inf", ["ok.toml", "--resources-per-run", "cpus=inf"], "--resources-per-run: cpus=inf must be a finite number"),
    ("gpus-text", ["ok.toml", "--resources-per-run", "gpus=x"], "--resources-per-run: gpus='x' is not a number"),
    ("out-is-file", ["ok.toml", "--out", "afile"], "--out afile exists and is not a folder"),
    ("out-under-file", ["ok.toml", "--out", "afile/grid"], "--out afile/grid is under the file afile"),
    ("address-without-ray", ["ok.toml", "--address", "127.0.0.1:1"], "--address is only used with --backend ray"),
    ("gpus-on-local", ["ok.toml", "--resources-per-run", "cpus=1,gpus=0.5"], ("gpus=0.5", "a GPU share per run is Ray's",
                                                                             "--workers N")),
    ("workers-on-ray", ["ok.toml", "--backend", "ray", "--workers", "2"], "--workers is for the local backend"),
    ("workers-zero", ["ok.toml", "--workers", "0"], "--workers"),
    ("address-malformed", ["ok.toml", "--backend", "ray", "--address", "nohost"], "--address 'nohost': give HOST:PORT"),
    ("address-unreachable", ["ok.toml", "--backend", "ray", "--address", "127.0.0.1:1"],
     "--address 127.0.0.1:1: no Ray cluster answers within 10 s"),
    ("backend-unknown", ["ok.toml", "--backend", "slurm"], "argument --backend: invalid choice: 'slurm'"),
]


@pytest.mark.parametrize("case, argv, names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_before_any_point(ws, capsys, case, argv, names):
    start = time.perf_counter()
    assert_fails_clean(grid.main, argv, capsys, ws, names)
    assert time.perf_counter() - start < backends.RAY_CONNECT_TIMEOUT_S  # a refused port answers at once


def test_a_bad_point_fails_alone_and_is_recorded(tmp_path):
    """batch_size = ["x", 8]: the "x" point fails at argument parsing (it used to exit the whole
    grid with bench.run's usage), is recorded under failed/, and the 8 point finishes."""
    spec = parse_grid({"runner": "tests.grid_runners:parse_then_train", "fixed": {"seed": 0},
                       "axes": {"batch_size": ["x", 8]}})
    report = run_grid(spec, tmp_path)
    assert (report.count("failed"), report.count("done")) == (1, 1)
    [record] = [json.loads(p.read_text()) for p in (tmp_path / "failed").glob("*.json")]
    assert record["config"]["batch_size"] == "x"
    assert record["error"].startswith("UsageError: argument --batch-size: 'x' is not an integer")
    assert [json.loads(p.read_text())["config"]["batch_size"] for p in tmp_path.glob("runs/*/point.json")] == [8]


@pytest.mark.parametrize("record", ["point", "failed"])
def test_an_unreadable_record_means_not_done(tmp_path, capsys, record):
    """A point.json (or failed/<id>.json) cut short by a crash: one line names it, the point runs
    again and the grid finishes (it used to stop with a JSONDecodeError naming no file)."""
    spec = parse_grid({"runner": RUNNER, "axes": {"seed": [0, 1]}})
    assert run_grid(spec, tmp_path).count("done") == 2
    target = sorted(tmp_path.glob("runs/*/point.json"))[0]
    if record == "failed":  # a failure record of a point that has no finished run
        (tmp_path / "failed").mkdir()
        rid = target.parent.name
        shutil.rmtree(target.parent)
        target = tmp_path / "failed" / f"{rid}.json"
        target.write_text('{"run_id": "' + rid + '", "err')
    else:
        target.write_text(target.read_text()[:25])
    capsys.readouterr()
    again = run_grid(spec, tmp_path)
    assert (again.count("done"), again.count("skipped")) == (1, 1)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "cannot be read" in line]
    assert len(warnings) == 1 and str(target) in warnings[0]
    assert len(list(tmp_path.glob("runs/*/point.json"))) == 2
    assert not (tmp_path / "failed").exists() or not list((tmp_path / "failed").iterdir())


def _grid_file(tmp_path: Path) -> Path:
    path = tmp_path / "slow.toml"
    path.write_text(f'runner = "{RUNNER}"\n[fixed]\nsleep_s = 30\n[axes]\nseed = [0, 1]\n')
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_is_one_line_and_exit_130_or_143(tmp_path, sig):
    """Ctrl-C or SIGTERM while a point runs: one line saying what was kept, exit 130 / 143, no traceback,
    no lock or temporary run folder left (the next run resumes)."""
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "bench.grid", str(_grid_file(tmp_path)), "--out", str(out)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=as_in_a_terminal)
    deadline = time.time() + 60
    while not list(out.glob("runs/.tmp-*")) and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        "interrupted; finished points are kept under --out: rerun the same command to resume"]
    assert not list(out.glob("runs/.tmp-*")) and not list(out.glob("locks/*.lock"))

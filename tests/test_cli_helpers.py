"""workloads/cli.py and iokit.files.atomic_write_dir: the pieces every command uses to fail
fast and clean (bounds, the write probe, one-line errors, interruption, temporary folders)."""

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iokit import checks, cli, outputs
from iokit.files import atomic_write_dir, remove_stale_partials
from tests.failfast import as_in_a_terminal

ROOT = Path(__file__).resolve().parent.parent


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("text, ok", [("0", True), ("7", True), ("-1", False), ("8", False), ("x", False),
                                      ("2.0", False), (str(2**64), False)])
def test_int_in_bounds(text, ok):
    parse = cli.int_in(0, 7)
    if ok:
        assert parse(text) == int(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=r"\[0, 7\]"):
            parse(text)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "0", "-1", "x"])
def test_finite_positive_float_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cli.finite_float(positive=True)(text)


def test_parser_errors_are_one_line_usage_errors():
    p = cli.Parser(prog="python -m demo")
    p.add_argument("--seed", type=cli.int_in(0, checks.SEED_MAX))
    with pytest.raises(cli.UsageError) as err:
        p.parse_args(["--seed", "-1"])
    assert str(err.value) == ("argument --seed: -1 is out of range; give an integer in [0, 2,147,483,647] "
                              "(python -m demo --help lists the options)")


def test_check_writable(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder").mkdir()
    outputs.check_writable(tmp_path / "new" / "deeper")  # a new folder under an existing one: fine
    outputs.check_writable(tmp_path / "new.jsonl", folder=False)
    with pytest.raises(outputs.OutputError, match="is under the file"):
        outputs.check_writable(tmp_path / "afile" / "x")
    with pytest.raises(outputs.OutputError, match="is an existing file"):
        outputs.check_writable(tmp_path / "afile")
    with pytest.raises(outputs.OutputError, match="is an existing folder"):
        outputs.check_writable(tmp_path / "folder", folder=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "folder"]  # the probes left nothing


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_check_writable_read_only(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    with pytest.raises(outputs.OutputError, match="cannot write in"):
        outputs.check_writable(ro / "out")


def test_atomic_write_dir_mode_and_stale_partials(tmp_path):
    """Stale temporary folders of the same output (a dead pid's) are removed before the write; one of
    a live process is kept, and so is anything not of exactly that form (a pid-less name: the suite
    removes only what it wrote); the new folder has the umask's mode."""
    dead_pid = 2**22 + 12345  # above Linux's default pid_max (2**22): no such process
    stale = [tmp_path / f".run.pid{dead_pid}-abcd1234.partial"]
    foreign = tmp_path / ".run.x7_k2m9q.partial"
    live = tmp_path / f".run.pid{os.getpid()}-live0000.partial"
    other = tmp_path / f".other.pid{dead_pid}-abcd1234.partial"  # another output's: not ours to remove
    for folder in (*stale, live, other, foreign):
        folder.mkdir()
    out = atomic_write_dir(tmp_path / "run", lambda tmp: (tmp / "a.txt").write_text("a"))
    assert (out / "a.txt").read_text() == "a"
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask()
    assert not any(p.exists() for p in stale) and live.exists() and other.exists() and foreign.exists()
    assert remove_stale_partials(tmp_path / "run") == []


def test_a_failed_build_leaves_nothing(tmp_path):
    def build(tmp):
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic_write_dir(tmp_path / "run", build)
    assert list(tmp_path.iterdir()) == []


SCRIPT = """
import sys, time
from pathlib import Path
from iokit import cli
from iokit.files import atomic_write_dir

@cli.command("interrupted; nothing written")
def main(argv=None):
    def build(tmp):
        (tmp / "half.txt").write_text("half")
        (Path(sys.argv[1]) / "started").write_text("")
        time.sleep(60)
    atomic_write_dir(Path(sys.argv[1]) / "run", build)
    return 0

sys.exit(main())
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_while_writing(tmp_path, sig):
    """Ctrl-C or SIGTERM while a results folder is being written: one line, exit 130 (SIGINT) or 143
    (SIGTERM), no ``.partial`` folder left (SIGTERM used to leave one that no rerun removed)."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=as_in_a_terminal)
    deadline = time.time() + 30
    while not (tmp_path / "started").exists() and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == {signal.SIGINT: cli.EXIT_INTERRUPTED, signal.SIGTERM: cli.EXIT_TERMINATED}[sig]
    assert cli.EXIT_INTERRUPTED == 130 and cli.EXIT_TERMINATED == 143  # 128 + the signal, as shells report it
    assert stderr.strip().splitlines() == ["interrupted; nothing written"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["started"]

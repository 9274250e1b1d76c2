"""python -m workloads.cost.step on bad input: one line naming the input, exit 2, nothing written
(tests/failfast.py). The numbers are bounded before any tensor is made: --batch-size 10^9 or
--classes 10^11 used to allocate CPU memory and crash."""

import pytest

from tests.failfast import assert_fails_clean
from iokit import checks
from bench.capture.__main__ import main


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder").mkdir()
    return tmp_path


BASE = ["--model", "convnet", "--method", "fedavg"]
CASES = [
    # conflicts and typos are named, never silently resolved
    ("size-and-shape", ["--image-size", "16", "--input-shape", "3,64,64", "--out", "t.jsonl"],
     "give either --image-size 16 or --input-shape 3,64,64"),
    ("classifier-of-a-paper-model", ["--classifier", "nofc", "--out", "t.jsonl"], "--classifier nofc"),
    ("batch-huge", ["--batch-size", "1000000000", "--out", "t.jsonl"], ("argument --batch-size", "out of range")),
    ("classes-huge", ["--classes", "100000000000", "--out", "t.jsonl"], ("argument --classes", f"give an integer in [1, {checks.CLASSES_MAX:,}]")),
    ("lr-nan", ["--lr", "nan", "--out", "t.jsonl"], ("argument --lr", "finite number")),
    ("lr-negative", ["--lr", "-0.1", "--out", "t.jsonl"], "argument --lr"),
    ("batch-text", ["--batch-size", "x", "--out", "t.jsonl"], ("argument --batch-size", "not an integer")),
    ("method-unknown", ["--method", "fedprx", "--out", "t.jsonl"], "unknown method name(s) ['fedprx']"),
    ("method-calibration", ["--method", "ccvr", "--out", "t.jsonl"], "--method ccvr: a calibration has no training step"),
    ("input-shape-text", ["--input-shape", "3,a,32", "--out", "t.jsonl"], "3,a,32"),
    ("out-folder", ["--out", "folder"], "--out folder is an existing folder; give a file path"),
    ("out-under-file", ["--out", "afile/t.jsonl"], "--out afile/t.jsonl is under the file afile"),
    ("model-unknown", ["--model", "resnet99", "--out", "t.jsonl"], "unknown model 'resnet99'"),
]


@pytest.mark.parametrize("case, argv, names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_before_any_work(ws, capsys, case, argv, names):
    assert_fails_clean(main, [*BASE, *argv], capsys, ws, names)


@pytest.mark.slow
def test_the_capture_engine_imports_nothing_of_fl():
    """workloads.capture (the capture engine) must not import workloads.fl (issue 15 point 5); checked
    in a fresh interpreter so this session's earlier imports do not hide one."""
    import subprocess
    import sys

    code = ("import sys, workloads.capture; "
            "bad = sorted(m for m in sys.modules if m.startswith('workloads.fl')); print(bad); sys.exit(bool(bad))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr

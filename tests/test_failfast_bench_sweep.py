"""python -m bench.sweep on bad input: one line naming the input, exit 2, nothing written
(tests/failfast.py); all found before the first trace is captured."""

import pytest

import bench.sweep.__main__ as sweep
from tests.failfast import assert_fails_clean, workspace


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return workspace(tmp_path)


CASES = [
    ("batch-zero", ["--batch-size", "0"], ("argument --batch-size", "out of range")),
    ("batch-huge", ["--batch-size", "1000000000"], ("argument --batch-size", "out of range")),
    ("batch-sizes-text", ["--batch-sizes", "8", "x"], ("argument --batch-sizes", "not an integer")),
    ("model-unknown", ["--models", "resnet99"], "unknown model 'resnet99'"),
    ("hw-binary", ["--hw", "binary.toml"], "binary.toml: not valid TOML"),
    ("hw-missing", ["--hw", "nope.toml"], "nope.toml"),
    ("out-under-file", ["--out", "afile/sweep"], "--out afile/sweep is under the file afile"),
    ("out-is-file", ["--out", "afile"], "--out afile exists and is not a folder"),
    ("out-exists", ["--out", "existing"], "existing already exists; choose another --out or pass --overwrite"),
    ("unknown-flag", ["--modle", "convnet"], "unrecognized arguments: --modle convnet"),
]


@pytest.mark.parametrize("case, argv, names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_before_any_work(ws, capsys, case, argv, names):
    args = argv if "--out" in argv else [*argv, "--out", "out"]
    assert_fails_clean(sweep.main, ["--models", "convnet", *args] if "--models" not in argv else args, capsys, ws,
                       names)

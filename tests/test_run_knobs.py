"""A run carries only its own method's knobs (issue 52): its hyper-parameters, its study point (so
its id), ``bench.fl``'s run hash; a knob that no method of the run has is refused with one line;
and the one-time migration of the shipped run ids (``scripts/migrate_run_ids.py``) gives the ids
today's code plans, changing no result."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
import tarfile
from pathlib import Path

import pytest

from bench.lib.grid.point import run_id
from bench.lib.resolve import resolve
from bench.lib.spec import RunSpec
from bench.lib.study.runner import make_point, parse_point
from tests.tiny_study import TINY_STUDY
from workloads.fl.knob import LOCAL_TRAINING

ROOT = Path(__file__).resolve().parents[1]
BEFORE = ROOT / "tests" / "data" / "migrate_run_ids" / "before.tar.xz"
LOCAL = [k.name for k in LOCAL_TRAINING]  # lr, momentum, weight_decay, local_epochs, batch_size, lr_min
CCVR = ["ccvr_virtual_per_class", "ccvr_lr", "ccvr_epochs", "ccvr_batch_size", "ccvr_cov_eps"]
QUICK = (ROOT / "configs" / "presets" / "quick.toml").read_text()


def migrate_script():
    spec = importlib.util.spec_from_file_location("migrate_run_ids", ROOT / "scripts" / "migrate_run_ids.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_fedavg_run_records_no_other_methods_knob():
    """On main before issue 52 a FedAvg run declared 19 knobs, 13 of them other methods'."""
    run = resolve(RunSpec(preset="quick", methods=("fedavg", "fedprox", "fedavg+ccvr", "spherefed+ffc")))
    hp = run.hparams
    assert list(hp["fedavg"].as_dict()) == LOCAL
    assert list(hp["fedprox"].as_dict()) == [*LOCAL, "prox_mu"]
    assert list(hp["fedavg+ccvr"].as_dict()) == [*LOCAL, *CCVR]
    assert list(hp["fedavg+spherefed+ffc"].as_dict()) == [*LOCAL, "ffc_ridge", "ffc_stats_dtype"]
    # the quick preset's [methods.ccvr] and [methods.ffc] values reach the methods that have them
    assert (hp["fedavg+ccvr"].ccvr_virtual_per_class, hp["fedavg+spherefed+ffc"].ffc_ridge) == (50, 1e-3)
    point = make_point("convnet", "fedavg", 0, run.fl, hp["fedavg"], run.execution)
    assert list(point["hparams"]) == LOCAL  # the study point, hashed into the run's id
    assert list(run.identity()["hparams"]["fedavg"]) == LOCAL  # bench.fl's run hash and results.json


def test_a_knob_no_method_of_the_run_has_is_one_line(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text(QUICK.replace("[hparams]\n", "[hparams]\nprox_mu = 0.01\n"))
    with pytest.raises(ValueError) as err:  # main: accepted, and recorded in FedAvg's point
        resolve(RunSpec(preset=str(preset), methods=("fedavg",)))
    assert str(err.value) == (f"{preset} [hparams]: prox_mu is a knob of fedprox, which this run does not train "
                              "(methods: fedavg); set it in [methods.fedprox] (used when fedprox trains) or train fedprox")
    hp = resolve(RunSpec(preset=str(preset), methods=("fedavg", "fedprox"))).hparams  # a run that trains it
    assert hp["fedprox"].prox_mu == 0.01 and "prox_mu" not in hp["fedavg"].names()


def test_a_methods_table_applies_its_knob_to_that_method_only(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text(QUICK + "\n[methods.fedprox]\nprox_mu = 0.01\n")
    hp = resolve(RunSpec(preset=str(preset), methods=("fedavg", "fedprox", "fedprox+spherefed"))).hparams
    assert (hp["fedprox"].prox_mu, hp["fedprox+spherefed"].prox_mu) == (0.01, 0.01)
    assert "prox_mu" not in hp["fedavg"].names()


def test_a_study_searching_another_methods_knob_is_refused(tmp_path):
    from bench.lib.study.spec import StudyError
    from bench.lib.study.study_file import load_study

    study = tmp_path / "s.toml"
    study.write_text(TINY_STUDY.replace("lr = [0.05, 0.1]\n", "lr = [0.05, 0.1]\nprox_mu = [0.01]\n"))
    with pytest.raises(StudyError) as err:  # main: FedAvg "searched" a knob it never reads
        load_study(study)
    assert str(err.value).endswith("[search.fedavg] prox_mu is a knob of fedprox, which fedavg does not have; "
                                   "search it in [search.fedprox] (a study that trains fedprox)"), err.value


@pytest.fixture
def before(tmp_path) -> Path:
    """The shipped folders as they were before the migration (tests/data/migrate_run_ids/README.md)."""
    with tarfile.open(BEFORE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_migration_gives_the_ids_todays_code_plans(before):
    from bench.lib.study.study_file import load_study
    from bench.study.phases import RUNNER, run_study

    folder = before / "digits-quick-formats"
    study = load_study(ROOT / "configs" / "studies" / "digits-quick-formats.toml")
    planned = run_study(study, folder, execute=False)
    assert {o.status for o in planned.tuning} == {"missing"}  # today's code does not find the old ids
    script = migrate_script()
    assert script.main([str(folder), "--check"]) == 1  # something to migrate; nothing written
    assert script.main([str(folder), "--write"]) == 0
    found = run_study(study, folder, execute=False)
    outcomes = (*found.tuning, *found.evaluation)
    assert len(outcomes) == 22 and {o.status for o in outcomes} == {"done"}  # 2 tuning + 20 evaluation runs
    for run in (folder / "grid" / "runs").iterdir():
        config = json.loads((run / "point.json").read_text())["config"]
        assert run.name == run_id(RUNNER, parse_point(config).point())  # today's make_point and run_id
        assert list(config["hparams"]) == sorted([*LOCAL, *({"fedavg+ccvr": CCVR}.get(config["method"],
                                                                                   ["ffc_ridge", "ffc_stats_dtype"]))])


def test_the_migration_changes_no_result(before):
    from bench.lib.study import recheck

    folder = before / "digits-quick-formats"
    old = files_of(folder)
    script = migrate_script()
    ids = script.plan_folder(folder).ids
    assert len(ids) == 22
    script.main([str(folder), "--write"])
    new = files_of(folder)
    for a, b in ids.items():  # every run's curve and record: byte for byte
        for name in ("curve.csv", "run.json"):
            assert new[f"grid/runs/{b}/{name}"] == old[f"grid/runs/{a}/{name}"]
        was, now = (json.loads(files[f"grid/runs/{r}/point.json"]) for files, r in ((old, a), (new, b)))
        kept = {k: v for k, v in was["config"]["hparams"].items() if k in now["config"]["hparams"]}
        assert now == {**was, "run_id": b, "config": {**was["config"], "hparams": kept}}
    for table in ("runs.csv", "tuning.csv", "tta.csv", "curves.csv"):
        was_rows = list(csv.DictReader(old[table].decode().splitlines()))
        assert rows(folder / table) == [{**r, **({"run_id": ids[r["run_id"]]} if "run_id" in r else {})}
                                        for r in was_rows], table  # every accuracy, wall time and energy
    summary = json.loads((folder / "summary.json").read_text())
    assert recheck.recheck(folder, "digits-quick-formats", summary) == []  # its statistics, from the runs
    untouched = set(old) - {f for f in old if f.startswith("grid/runs/")} - {
        "runs.csv", "summary.json", "grid/runs.csv", "grid/table_mean_std.csv"}
    assert {f: new[f] for f in untouched} == {f: old[f] for f in untouched}


def test_migrating_twice_changes_nothing(before):
    folder = before / "digits-quick-formats"
    script = migrate_script()
    assert script.main([str(folder), str(before / "fl_small_comparison"), "--write"]) == 0
    once = files_of(before)
    assert script.main([str(folder), str(before / "fl_small_comparison"), "--check"]) == 0
    assert script.main([str(folder), str(before / "fl_small_comparison"), "--write"]) == 0
    assert files_of(before) == once


def test_a_bench_fl_folder_keeps_each_methods_own_knobs(before):
    path = before / "fl_small_comparison" / "results.json"
    old = json.loads(path.read_text())
    migrate_script().main([str(path.parent), "--write"])
    new = json.loads(path.read_text())
    assert list(new["hparams"]["fedavg"]) == LOCAL  # was 19 knobs
    assert list(new["hparams"]["fedprox+spherefed+ffc"]) == [*LOCAL, "prox_mu", "ffc_ridge", "ffc_stats_dtype"]
    assert new["hparams"]["fedprox+spherefed+ffc"]["prox_mu"] == old["hparams"]["fedprox+spherefed+ffc"]["prox_mu"]
    assert {k: v for k, v in new.items() if k != "hparams"} == {k: v for k, v in old.items() if k != "hparams"}


def test_a_folder_it_does_not_understand_is_refused_before_anything_is_written(before, tmp_path, capsys):
    folder = before / "digits-quick-formats"
    old = files_of(folder)
    (tmp_path / "other").mkdir()
    assert migrate_script().main([str(folder), str(tmp_path / "other"), "--write"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {tmp_path / 'other'}: neither a study's results folder (grid/runs/), a bench.fl results "
                   "folder (results.json) nor a bench.dse folder; give one of those")
    assert files_of(folder) == old
    (folder / "grid" / "runs" / ".tmp-abc").mkdir()
    assert migrate_script().main([str(folder)]) == 2
    assert "grid/runs/.tmp-abc is an unfinished run" in capsys.readouterr().err

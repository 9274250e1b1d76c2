"""The rule above all: the suite deletes or replaces only what it wrote (iokit.outputs).

For every command that writes a folder: ``--out`` pointing at a folder of the user's (a sentinel
file in it, and one in a sub-folder the suite also uses, ``checkpoints/``), with ``--overwrite``
and ``--resume`` where offered: the command refuses before any work (exit 2), and every file
survives byte for byte. ``--out .``, ``..``, the home folder and the checkout's root are refused
up front. A results folder of the suite is replaced only while it holds nothing else."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import bench.dse.__main__ as dse_cli
import bench.fl.__main__ as fl_cli
import bench.grid.__main__ as grid_cli
import bench.run.__main__ as run_cli
import bench.study.__main__ as study_cli
import bench.sweep.__main__ as sweep_cli
from iokit import outputs

ROOT = Path(__file__).resolve().parents[1]
SENTINELS = {"src/thesis.tex": b"\\section{Mine}\n", "checkpoints/resnet_epoch10.pt": b"\x00\x01weights",
             "notes.txt": b"keep me"}


def user_folder(root: Path) -> Path:
    folder = root / "project"
    for rel, data in SENTINELS.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


def unchanged(folder: Path) -> bool:
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    return files == SENTINELS


def tiny_preset(root: Path) -> str:
    path = root / "tiny.toml"
    path.write_text('[run]\ndataset = "digits"\nimage_size = 16\nmodel = "convnet"\nnum_clients = 2\nrounds = 1\n'
                    'partition = "iid"\nmethods = ["fedavg"]\n[hparams]\nlocal_epochs = 1\n')
    return str(path)


def grid_file(root: Path) -> str:
    path = root / "g.toml"
    path.write_text('name = "g"\nrunner = "tests.grid_runners:train_tiny"\n[axes]\nseed = [0]\n')
    return str(path)


def space_file(root: Path) -> str:
    path = root / "space.toml"
    path.write_text('[dse]\nmodels = ["convnet"]\nmethods = ["fedavg"]\nbatch_size = 4\n[space.axes]\nrows = [8, 16]\n')
    return str(path)


def study_file(root: Path) -> str:
    path = root / "study.toml"
    path.write_text('name = "s"\npreset = "quick"\nmodels = ["convnet"]\nmethods = ["fedavg"]\nbase = "fedavg"\n'
                    'alphas = [0.5]\nrounds = 2\nseeds = [0, 1]\ntuning_seeds = [0]\n[search.fedavg]\nlr = [0.05]\n'
                    '[tuning]\nlast_rounds = 1\n[convergence]\nlast_rounds = 1\n[targets]\naccuracy_pct = [50.0]\n')
    return str(path)


COMMANDS = {  # command -> (main, argv before --out, the modes it offers)
    "bench.run": (run_cli.main, lambda root: ["--model", "convnet", "--preset", tiny_preset(root)], ("--overwrite",)),
    "bench.fl": (fl_cli.main, lambda root: ["--preset", tiny_preset(root)], ("--overwrite", "--resume")),
    "bench.sweep": (sweep_cli.main, lambda root: ["--models", "convnet"], ("--overwrite",)),
    "bench.grid": (grid_cli.main, lambda root: [grid_file(root)], ()),
    "bench.dse": (dse_cli.main, lambda root: [space_file(root)], ("--overwrite",)),
    "bench.study": (study_cli.main, lambda root: [study_file(root)], ()),
}
CASES = [(name, mode) for name, (_, _, modes) in COMMANDS.items() for mode in (None, *modes)]


@pytest.mark.parametrize("name, mode", CASES, ids=[f"{n}{' ' + m if m else ''}" for n, m in CASES])
def test_a_folder_of_the_users_survives_every_command(tmp_path, monkeypatch, capsys, name, mode):
    monkeypatch.chdir(tmp_path)
    main, argv, _ = COMMANDS[name]
    folder = user_folder(tmp_path)
    code = main([*argv(tmp_path), "--out", str(folder), *([mode] if mode else [])])
    err = capsys.readouterr().err
    assert code == 2, err
    assert unchanged(folder), f"{name} {mode} changed the user's folder"
    assert len([line for line in err.splitlines() if line.strip()]) == 1 and str(folder) in err


@pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="Flower is not installed: the .[flower] extra")
@pytest.mark.parametrize("mode", [None, "--overwrite"])
def test_the_flower_command_leaves_a_users_folder_alone(tmp_path, capsys, mode):
    from bench.flower.__main__ import main

    folder = user_folder(tmp_path)
    assert main(["--clients", "2", "--rounds", "1", "--out", str(folder), *([mode] if mode else [])]) == 2
    assert unchanged(folder) and str(folder) in capsys.readouterr().err


@pytest.mark.parametrize("out", [".", "..", "~", str(ROOT), "/"])
def test_places_that_hold_other_things_are_never_an_out(tmp_path, monkeypatch, capsys, out):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    before = sorted(p.name for p in work.parent.iterdir())
    assert run_cli.main(["--model", "convnet", "--out", out, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "give a new folder" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in work.parent.iterdir()) == before


def test_an_ancestor_of_the_current_folder_is_refused(tmp_path, monkeypatch):
    (tmp_path / "x" / "y").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "x" / "y")
    with pytest.raises(outputs.OutputError, match="holds the current folder"):
        outputs.check_out(tmp_path, command="bench.run", overwrite=True)


def test_a_results_folder_is_replaced_only_while_it_holds_only_what_the_suite_wrote(tmp_path):
    out = tmp_path / "run"
    outputs.write_results_dir(out, lambda tmp: (tmp / "a.csv").write_text("1"), command="bench.x",
                              config_sha256="abc", version=4, replace=False)
    assert outputs.Manifest.read(out).files == ("a.csv",)
    outputs.check_out(out, command="bench.x", overwrite=True)  # all of it is the suite's
    (out / "mine.txt").write_text("mine")
    with pytest.raises(outputs.OutputError, match="mine.txt, which this suite did not write"):
        outputs.check_out(out, command="bench.x", overwrite=True)
    # a file that appears while the run works: the old folder stays, the new results beside it
    with pytest.raises(outputs.OutputError, match="appeared while the run worked"):
        outputs.write_results_dir(out, lambda tmp: (tmp / "b.csv").write_text("2"), command="bench.x",
                                  config_sha256="abc", version=4, replace=True)
    assert (out / "mine.txt").read_text() == "mine" and (out / "a.csv").read_text() == "1"
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("run.new-")]
    assert len(kept) == 1 and (kept[0] / "b.csv").read_text() == "2"


def test_a_failed_build_leaves_nothing_and_the_old_folder_untouched(tmp_path):
    out = tmp_path / "run"
    outputs.write_results_dir(out, lambda tmp: (tmp / "a.csv").write_text("1"), command="bench.x",
                              config_sha256="abc", version=4, replace=False)

    def failing(tmp):
        (tmp / "half.csv").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        outputs.write_results_dir(out, failing, command="bench.x", config_sha256="abc", version=4, replace=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(p.name for p in out.iterdir()) == ["a.csv", "manifest.json"]


def test_resume_needs_the_same_command_and_config(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    outputs.Manifest("bench.fl", "hash-a", 4, "running", (), ("checkpoints",)).write(out)
    outputs.check_out(out, command="bench.fl", resume_hash="hash-a")
    with pytest.raises(outputs.OutputError, match="another config"):
        outputs.check_out(out, command="bench.fl", resume_hash="hash-b")
    with pytest.raises(outputs.OutputError, match="not a bench.run results folder"):
        outputs.check_out(out, command="bench.run", resume_hash="hash-a")


def test_a_second_writer_of_the_same_out_stops_at_once(tmp_path):
    out = tmp_path / "run"
    with outputs.claim(out):
        assert outputs.lock_path(out.absolute()).exists()
        with pytest.raises(outputs.OutputError, match="being written by another process"):
            with outputs.claim(out):
                pass
    assert not outputs.lock_path(out.absolute()).exists()
    # a lock whose process is gone is stale and taken over
    outputs.lock_path(out.absolute()).write_text('{"pid": 4206969, "host": "%s"}' % __import__("socket").gethostname())
    with outputs.claim(out):
        pass
    assert list(tmp_path.iterdir()) == []  # nothing left, not even the lock


def test_bench_run_refuses_a_folder_another_run_is_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r"
    with outputs.claim(out):
        assert run_cli.main(["--model", "convnet", "--preset", tiny_preset(tmp_path), "--out", str(out)]) == 2
    assert "being written by another process" in capsys.readouterr().err
    assert not out.exists()

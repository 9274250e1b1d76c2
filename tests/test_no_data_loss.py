"""The rule above all: the suite deletes or replaces only what it wrote (iokit.outputs).

For every command that writes a folder: ``--out`` pointing at a folder of the user's (a sentinel
file in it, and one in a sub-folder the suite also uses, ``checkpoints/``), with ``--overwrite``
and ``--resume`` where offered: the command refuses before any work (exit 2), and every file
survives byte for byte. ``--out .``, ``..``, the home folder and the checkout's root are refused
up front. A results folder of the suite is replaced only while it holds nothing else.

Ownership is per file and per command: every command with ``--overwrite`` or ``--resume`` (and
the two that resume by rerunning, grid and study) meets a folder of every command, its own
included, with a file of the user's in a sub-folder the suite also uses; each is refused before
any work, in one line naming the command that owns the folder or the user's file, and the folder
stays byte for byte as it was, nothing left beside it. A real study folder (the command itself, on
the stand-in runner of tests/study_runners.py) meets ``bench.dse``, ``bench.run`` and ``bench.fl``
as issue 33 reproduced it."""

from __future__ import annotations

import functools
import importlib.util
import json
import socket
import time
from pathlib import Path

import pytest
from dataclasses import dataclass

import bench.dse.__main__ as dse_cli
import bench.fl.__main__ as fl_cli
import bench.grid.__main__ as grid_cli
import bench.run.__main__ as run_cli
import bench.study.__main__ as study_cli
import bench.sweep.__main__ as sweep_cli
from bench.lib.grid.engine import grid_hash, load_grid
from bench.study import phases
from bench.lib.study.study_file import load_study
from iokit import locks, outputs

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
    with pytest.raises(outputs.OutputError, match="mine.txt, which bench.x did not write"):
        outputs.check_out(out, command="bench.x", overwrite=True)
    # a file that appears while the run works: the old folder stays, the new results beside it
    with pytest.raises(outputs.OutputError, match="changed while the run worked"):
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
    with pytest.raises(outputs.OutputError, match="not a bench.run results folder .it is a bench.fl results folder"):
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


# ----------------------------------------------------------------------------- every command meets every folder

USER_FILE = b"my analysis\n\x00bytes"
FLOWER = importlib.util.find_spec("flwr") is not None


@dataclass(frozen=True)
class Kind:
    """A results folder of one command as the suite writes it: its files and the sub-folder the
    user's file goes into (one the suite itself uses where the command has one)."""

    command: str
    files: tuple[str, ...]
    user_file: str  # relative to the folder
    state: str = "complete"
    own_hash: bool = False  # the manifest names the config the actor of the same command runs


KINDS = {
    "run": Kind("bench.run", ("summary.json", "ops.csv", "fig5.png"), "figures/my_analysis.txt"),
    "fl": Kind("bench.fl", ("results.json", "rounds.csv"), "analysis/my_analysis.txt", own_hash=True),
    "fl-running": Kind("bench.fl", ("checkpoints/fedavg.pt",), "checkpoints/my_notes.txt", "running", own_hash=True),
    "sweep": Kind("bench.sweep", ("sweep.csv", "sweep.json"), "plots/my_analysis.txt"),
    "dse": Kind("bench.dse", ("points.csv", "pareto.csv", "summary.json"), "plots/my_analysis.txt"),
    "flower": Kind("bench.flower", ("rounds.csv", "summary.json"), "logs/my_analysis.txt"),
    "grid": Kind("bench.grid", ("grid.json", "runs.csv", "runs/0123456789ab/point.json"), "runs/my_notes.txt",
                 "running"),  # another grid's (its name differs)
    "study": Kind("bench.study", ("runs.csv", "table.md"), "grid/my_analysis.txt"),  # another study's
}


def fl_hash(root: Path) -> str:
    """The config hash ``bench.fl --preset <tiny>`` gives its folder (``bench.fl``'s own resolve)."""
    return outputs.config_hash(fl_cli.run_of(fl_cli.parser().parse_args(["--preset", tiny_preset(root)])).identity())


def make_folder(root: Path, kind: Kind) -> Path:
    """``kind``'s folder under ``root``, its manifest written by the library, the user's file in it."""
    folder = root / "target"
    for rel in kind.files:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(b"written by the suite")
    sha = fl_hash(root) if kind.own_hash else "0" * 64
    outputs.Manifest(kind.command, sha, 4, kind.state, kind.files,
                     tuple(sorted({Path(f).parent.as_posix() for f in kind.files} - {"."}))).write(folder)
    (folder / kind.user_file).parent.mkdir(parents=True, exist_ok=True)
    (folder / kind.user_file).write_bytes(USER_FILE)
    return folder


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``, the entries beside the folder included."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


ACTORS = {  # name -> (main, argv before --out, mode)
    "bench.run --overwrite": (run_cli.main, lambda root: ["--model", "convnet", "--preset", tiny_preset(root)],
                              "--overwrite"),
    "bench.fl --overwrite": (fl_cli.main, lambda root: ["--preset", tiny_preset(root)], "--overwrite"),
    "bench.fl --resume": (fl_cli.main, lambda root: ["--preset", tiny_preset(root)], "--resume"),
    "bench.sweep --overwrite": (sweep_cli.main, lambda root: ["--models", "convnet"], "--overwrite"),
    "bench.dse --overwrite": (dse_cli.main, lambda root: [space_file(root)], "--overwrite"),
    "bench.grid": (grid_cli.main, lambda root: [grid_file(root)], None),
    "bench.study": (study_cli.main, lambda root: [study_file(root)], None),
    "bench.flower --overwrite": (lambda argv: __import__("bench.flower.__main__", fromlist=["main"]).main(argv),
                                 lambda root: ["--clients", "2", "--rounds", "1"], "--overwrite"),
}
MATRIX = [(actor, kind) for actor in ACTORS for kind in KINDS]


@pytest.mark.parametrize("actor, kind", MATRIX, ids=[f"{a} onto {k}" for a, k in MATRIX])
def test_every_command_leaves_a_users_file_in_a_sub_folder_of_every_results_folder(tmp_path, monkeypatch, capsys,
                                                                                   actor, kind):
    if actor.startswith("bench.flower") and not FLOWER:
        pytest.skip("Flower is not installed: the .[flower] extra")
    monkeypatch.chdir(tmp_path)
    main, argv, mode = ACTORS[actor]
    k = KINDS[kind]
    args = argv(tmp_path)  # writes the config files the actor reads, before the snapshot
    folder = make_folder(tmp_path, k)
    before = snapshot(tmp_path)
    code = main([*args, "--out", str(folder), *([mode] if mode else [])])
    err = capsys.readouterr().err
    assert code == 2, err
    assert snapshot(tmp_path) == before, f"{actor} changed {kind}'s folder or left something beside it"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(folder) in lines[0], err
    own = actor.split()[0] == k.command
    if not own:  # the folder's command is named ...
        assert f"{k.command} results folder" in lines[0], err
    elif k.own_hash or mode == "--overwrite":  # ... or, in the command's own folder, the user's file
        assert k.user_file in lines[0], err
    else:  # a grid or study of another name
        assert "holds another" in lines[0], err


def test_a_grid_resumed_in_its_own_folder_keeps_a_users_file_under_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = grid_file(tmp_path)
    out = tmp_path / "target"
    assert grid_cli.main([grid, "--out", str(out)]) == 0
    (out / "runs" / "my_notes.txt").write_bytes(USER_FILE)
    (out / "analysis").mkdir()
    (out / "analysis" / "mine.txt").write_bytes(USER_FILE)
    assert outputs.Manifest.read(out).config_sha256 == grid_hash(load_grid(grid))
    assert grid_cli.main([grid, "--out", str(out)]) == 0  # resumes: the point is skipped
    assert "1 skipped" in capsys.readouterr().out
    assert (out / "runs" / "my_notes.txt").read_bytes() == USER_FILE == (out / "analysis" / "mine.txt").read_bytes()


@pytest.fixture
def real_study(tmp_path, monkeypatch):
    """A study folder written by ``bench.study`` itself (its grid, manifests, tables), its runs by the
    stand-in runner (milliseconds instead of training), then a user's files inside its ``grid/``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(phases, "run_study", functools.partial(phases.run_study, runner="tests.study_runners:opposite"))
    study = study_file(tmp_path)
    out = tmp_path / "study"
    assert study_cli.main([study, "--out", str(out)]) == 0
    assert outputs.Manifest.read(out).config_sha256 == phases.folder_hash(load_study(study))
    for rel in ("grid/my_analysis.txt", "grid/runs/my_notes.txt"):
        (out / rel).write_bytes(USER_FILE)
    return study, out


@pytest.mark.parametrize("actor", ["bench.dse --overwrite", "bench.run --overwrite", "bench.fl --overwrite",
                                   "bench.fl --resume"])
def test_a_real_study_is_never_replaced_by_another_command(real_study, tmp_path, capsys, actor):
    """Issue 33, item 1 as reproduced: bench.dse --overwrite deleted grid/my_analysis.txt and
    grid/runs/my_notes.txt of a study; bench.fl --overwrite rewrote the study's manifest, trained and
    left a .new-PID folder."""
    _, out = real_study
    main, argv, mode = ACTORS[actor]
    args = argv(tmp_path)
    capsys.readouterr()
    before = snapshot(tmp_path)
    assert main([*args, "--out", str(out), mode]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{out} is not a bench.fl results folder" in err if mode == "--resume" \
        else f"it is a bench.study results folder, and {actor.split()[0]} --overwrite" in err, err
    assert snapshot(tmp_path) == before


def test_a_real_study_rerun_resumes_and_keeps_the_users_files(real_study, capsys):
    study, out = real_study
    assert study_cli.main([study, "--out", str(out)]) == 0
    assert (out / "grid" / "my_analysis.txt").read_bytes() == USER_FILE == (out / "grid/runs/my_notes.txt").read_bytes()
    assert outputs.Manifest.read(out).state == "complete"


def test_overwrite_is_per_file_not_per_folder(tmp_path):
    """A folder the manifest names is no licence for its content; a manifest that cannot be read
    refuses (never a deletion on a guess); a manifest of another command refuses."""
    out = tmp_path / "run"
    outputs.write_results_dir(out, lambda tmp: ((tmp / "sub").mkdir(), (tmp / "sub" / "a.csv").write_text("1")),
                              command="bench.x", config_sha256="abc", version=4, replace=False)
    manifest = outputs.Manifest.read(out)
    assert manifest.files == ("sub/a.csv",) and manifest.folders == ("sub",)
    assert outputs.overwrite_refusal(out, "bench.x") is None
    assert "it is a bench.x results folder" in outputs.overwrite_refusal(out, "bench.y")
    (out / "sub" / "deeper").mkdir()
    (out / "sub" / "deeper" / "mine.txt").write_text("mine")
    assert f"would delete {out / 'sub' / 'deeper' / 'mine.txt'}" in outputs.overwrite_refusal(out, "bench.x")
    (out / "sub" / "deeper" / "mine.txt").unlink()
    (out / "manifest.json").write_text('{"format": "fl-accel-bench-results", "comm')  # truncated
    assert "cannot be read" in outputs.overwrite_refusal(out, "bench.x")
    (out / "manifest.json").write_text(json.dumps({"format": "fl-accel-bench-results", "files": ["sub/a.csv"]}))
    assert "not a complete manifest" in outputs.overwrite_refusal(out, "bench.x")


def test_a_shipped_reference_study_is_its_commands_and_refused_to_every_overwrite():
    for folder in sorted((ROOT / "results" / "reference").glob("*/manifest.json")):
        manifest = outputs.Manifest.load(folder.parent)
        assert manifest.command in ("bench.study", "bench.dse") and manifest.state == "complete"
        for command in {"bench.run", "bench.fl", "bench.dse", "bench.sweep", "bench.flower"} - {manifest.command}:
            assert f"it is a {manifest.command} results folder" in outputs.overwrite_refusal(folder.parent, command)


def test_resume_of_a_complete_run_says_so_and_does_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "fl"
    out.mkdir()
    (out / "results.json").write_text("{}")
    outputs.Manifest("bench.fl", fl_hash(tmp_path), 4, "complete", ("results.json",)).write(out)
    before = snapshot(tmp_path)
    assert fl_cli.main(["--preset", tiny_preset(tmp_path), "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err.strip()
    assert err == (f"--resume: {out} holds a complete bench.fl run of this config: nothing to resume (its results: "
                   f"{out}/results.json; --overwrite runs it again)")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("main, argv", [(run_cli.main, ["--model", "convnet"]), (fl_cli.main, ["--preset", "smoke"]),
                                        (sweep_cli.main, []), (grid_cli.main, None), (study_cli.main, None),
                                        (dse_cli.main, None)])
def test_an_empty_out_is_refused(tmp_path, monkeypatch, capsys, main, argv):
    monkeypatch.chdir(tmp_path)
    if argv is None:
        argv = {grid_cli.main: [grid_file(tmp_path)], study_cli.main: [study_file(tmp_path)],
                dse_cli.main: [space_file(tmp_path)]}[main]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([*argv, "--out", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--out is empty" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("content, stale", [
    ("", True), ('{"pid": 12', True),  # empty or half-written, older than the grace period
    ("[1, 2]", True), ('{"pid": "abc", "host": "h"}', True), ('{"pid": 99999999999999999999, "host": "h"}', True),
    ('{"pid": 4206969, "host": "HOST"}', True),  # its process is gone
    ('{"pid": PID, "host": "HOST"}', False),  # alive: this one (PID and HOST filled in by the test: the
                                              # ids stay the same in every process that collects them)
    ('{"pid": 1, "host": "another-host"}', False),  # another host's: cannot be checked
])
def test_every_partial_or_garbage_lock_is_stale_and_a_live_one_held(tmp_path, capsys, content, stale):
    content = content.replace("PID", str(__import__("os").getpid())).replace("HOST", socket.gethostname())
    lock = tmp_path / "x.lock"
    lock.write_text(content)
    old = time.time() - 2 * locks.LOCK_GRACE_S
    __import__("os").utime(lock, (old, old))
    holder = locks.take(lock)
    assert (holder is None) == stale, holder
    if stale:
        assert "took over the stale lock" in capsys.readouterr().err
        assert json.loads(lock.read_text())["pid"] == __import__("os").getpid()
        locks.release(lock)
        assert not lock.exists()
    else:
        assert lock.read_text() == content  # untouched


def test_a_fresh_empty_lock_is_being_written_and_not_taken(tmp_path):
    lock = tmp_path / "x.lock"
    lock.write_text("")
    holder = locks.take(lock)
    assert holder is not None and "right now" in holder and lock.read_text() == ""


def test_an_empty_sub_folder_of_the_users_stops_overwrite_too(tmp_path):
    out = tmp_path / "run"
    outputs.write_results_dir(out, lambda tmp: (tmp / "a.csv").write_text("1"), command="bench.x",
                              config_sha256="abc", version=4, replace=False)
    (out / "drafts").mkdir()
    assert f"would delete {out / 'drafts'}" in outputs.overwrite_refusal(out, "bench.x")


def test_a_folder_the_suite_made_empty_is_its_own(tmp_path):
    """Every sub-folder a build made is in the manifest (an empty one too), so --overwrite replaces it."""
    out = tmp_path / "run"
    outputs.write_results_dir(out, lambda tmp: ((tmp / "logs" / "empty").mkdir(parents=True),
                                                (tmp / "a.csv").write_text("1")),
                              command="bench.x", config_sha256="abc", version=4, replace=False)
    assert outputs.Manifest.read(out).folders == ("logs", "logs/empty")
    assert outputs.overwrite_refusal(out, "bench.x") is None

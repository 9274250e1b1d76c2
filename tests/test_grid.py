"""bench.lib.grid.engine: ids, resumability, failure isolation, concurrency safety, local vs Ray backends."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.lib.grid.engine import load_grid, parse_grid, run_grid
from bench.lib.grid.tables import collect
from bench.lib.grid.backends import BACKENDS, Resources, parse_resources
from bench.lib.grid.point import GridError, run_id
from bench.lib.results import FORMAT_VERSION, ResultsError
from tests.failfast import as_in_a_terminal
from iokit.provenance import git_commit

ROOT = Path(__file__).resolve().parent.parent
RUNNER = "tests.grid_runners:train_tiny"


def _spec(**fixed):
    return parse_grid({"name": "t", "runner": RUNNER, "fixed": fixed, "axes": {"seed": [0, 1, 2], "lr": [0.1, 0.05]}})


def _weights(out: Path) -> dict[str, str]:
    return {p.parent.name: p.read_text() for p in out.glob("runs/*/weights.json")}


def test_points_and_ids_are_stable():
    spec = _spec()
    points = spec.points()
    assert len(points) == 6  # 3 seeds x 2 learning rates
    assert points[0] == {"seed": 0, "lr": 0.1} and points[1] == {"seed": 0, "lr": 0.05}
    # the id depends on the config only, not on key order
    assert run_id(RUNNER, {"seed": 0, "lr": 0.1}) == run_id(RUNNER, {"lr": 0.1, "seed": 0})
    assert len({run_id(RUNNER, p) for p in points}) == 6
    # ... and on the runner: the same point of another runner is another run
    assert run_id(RUNNER, points[0]) != run_id("tests.grid_runners:parse_then_train", points[0])


@pytest.mark.parametrize(
    "data, message",
    [
        ({"axes": {}}, "empty"),
        ({"axes": {"seed": []}}, "non-empty list"),
        ({"axes": {"seed": [1, 1]}}, "twice"),
        ({"axes": {"seed": [1]}, "fixed": {"seed": 2}}, "both"),
        ({"axes": {"seed": [1]}, "colour": 1}, "unknown key"),
        ({"axes": {"seed": [1]}, "runner": ""}, "registered runner"),
    ],
)
def test_bad_grid_files(data, message):
    with pytest.raises(GridError, match=message):
        parse_grid(data)


def test_bad_resources_and_missing_file(tmp_path):
    assert parse_resources("cpus=2,gpus=0.5") == Resources(cpus=2, gpus=0.5)
    with pytest.raises(GridError, match="unknown resource"):
        parse_resources("tpus=1")
    with pytest.raises(GridError, match="no such grid file"):
        load_grid(tmp_path / "nope.toml")


def test_rerun_skips_finished_runs(tmp_path):
    log = tmp_path / "executions.log"
    spec = _spec(log=str(log))
    first = run_grid(spec, tmp_path / "out")
    assert first.count("done") == 6
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("runs/*/point.json")}
    second = run_grid(spec, tmp_path / "out")
    assert second.count("skipped") == 6 and second.count("done") == 0
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("runs/*/point.json")} == mtimes
    assert len(log.read_text().split()) == 6  # six executions in all, none on the rerun
    rows = (tmp_path / "out" / "runs.csv").read_text().splitlines()
    assert len(rows) == 1 + 6
    table = (tmp_path / "out" / "table_mean_std.csv").read_text().splitlines()
    assert len(table) == 1 + 2  # one row per learning rate, aggregated over the three seeds


def test_point_json_times_the_run_itself(tmp_path):
    spec = parse_grid({"runner": RUNNER, "fixed": {"sleep_s": 0.2}, "axes": {"seed": [0, 1]}})
    before = time.time()
    run_grid(spec, tmp_path)
    after = time.time()
    points = [json.loads(p.read_text()) for p in tmp_path.glob("runs/*/point.json")]
    assert len(points) == 2
    for p in points:
        # the runner sleeps 0.2 s, so its own time is at least that; start and end are wall-clock
        # times inside the command, one after the other, and their difference is `elapsed_s`
        assert p["elapsed_s"] >= 0.2 and "seconds" not in p and p["version"] == FORMAT_VERSION == 4
        assert before <= p["start_unix_s"] < p["end_unix_s"] <= after
        assert p["end_unix_s"] - p["start_unix_s"] == pytest.approx(p["elapsed_s"], abs=1e-6)
    first, second = sorted(points, key=lambda p: p["start_unix_s"])
    assert first["end_unix_s"] <= second["start_unix_s"]  # the local backend runs one after another
    assert all("elapsed_s" in row and "seconds" not in row for row in collect(tmp_path))


def test_each_run_records_the_commit_that_ran_it(tmp_path):
    spec = parse_grid({"runner": RUNNER, "fixed": {"sleep_s": 0.0}, "axes": {"seed": [0, 1]}})
    run_grid(spec, tmp_path)
    commit = git_commit()  # this checkout: a sha (with -dirty while the tree has changes)
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", commit)
    assert [json.loads(p.read_text())["git_commit"] for p in tmp_path.glob("runs/*/point.json")] == [commit] * 2
    assert [row["git_commit"] for row in collect(tmp_path)] == [commit] * 2
    # a run recorded before runs recorded their commit reads as "" (not a guess)
    point = next(tmp_path.glob("runs/*/point.json"))
    record = json.loads(point.read_text())
    del record["git_commit"]
    point.write_text(json.dumps(record))
    assert sorted(row["git_commit"] for row in collect(tmp_path)) == ["", commit]
    # a caller that wrote into a tracked folder before the grid (bench.study's manifest) passes the
    # commit it took before writing: the runs record that one, not a tree its own outputs made dirty
    run_grid(parse_grid({"runner": RUNNER, "fixed": {"sleep_s": 0.0}, "axes": {"seed": [2]}}), tmp_path / "b",
             commit="0" * 40)
    assert [row["git_commit"] for row in collect(tmp_path / "b")] == ["0" * 40]


def test_collect_refuses_a_point_of_another_format_version(tmp_path):
    point = tmp_path / "runs" / "abc" / "point.json"
    point.parent.mkdir(parents=True)
    point.write_text(json.dumps({"run_id": "abc", "config": {}, "metrics": {}, "seconds": 1.0}))  # version 2
    with pytest.raises(ResultsError, match="version None.*reads 4"):
        collect(tmp_path)


def test_the_benchmark_grid_is_the_small_grid_with_six_seeds():
    # benchmarks/grid_small_x2.toml is documented (docs/speed.md, docs/grid.md) as the small grid with six
    # seeds instead of three: it must not drift from configs/grids/small.toml
    small = load_grid(ROOT / "configs" / "grids" / "small.toml")
    x2 = load_grid(ROOT / "benchmarks" / "grid_small_x2.toml")
    assert (x2.runner, x2.fixed) == (small.runner, small.fixed)
    assert {k: v for k, v in x2.axes.items() if k != "seed"} == {k: v for k, v in small.axes.items() if k != "seed"}
    assert small.axes["seed"] == [0, 1, 2] and x2.axes["seed"] == [0, 1, 2, 3, 4, 5]
    assert len(x2.points()) == 2 * len(small.points()) == 24


def test_a_failing_run_is_reported_and_the_others_finish(tmp_path):
    spec = parse_grid({"runner": RUNNER, "axes": {"seed": [0, 1, 2], "fail": [False, True]}})
    report = run_grid(spec, tmp_path)
    assert report.count("done") == 3 and report.count("failed") == 3
    failures = list((tmp_path / "failed").glob("*.json"))
    assert len(failures) == 3
    assert "planned failure" in json.loads(failures[0].read_text())["error"]
    assert not list((tmp_path / "runs").glob(".tmp-*"))  # nothing half-written left behind
    again = run_grid(spec, tmp_path)
    assert again.count("failed-earlier") == 3 and again.count("skipped") == 3
    retried = run_grid(spec, tmp_path, retry_failed=True)
    assert retried.count("failed") == 3  # retried, and the planned failure fails again


def _grid_file(tmp_path: Path, **fixed) -> Path:
    lines = [f'runner = "{RUNNER}"', "[fixed]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in fixed.items()]
    lines += ["[axes]", "seed = [0, 1, 2, 3]"]
    path = tmp_path / "grid.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _start(grid: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "bench.grid", str(grid), "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_interrupt_and_resume_completes_the_grid(tmp_path):
    log = tmp_path / "executions.log"
    grid = _grid_file(tmp_path, sleep_s=1.0, log=str(log))
    out = tmp_path / "out"
    proc = _start(grid, out)
    deadline = time.time() + 60
    while not list(out.glob("runs/*/point.json")) and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # the hardest interruption: no cleanup code runs
    proc.wait()
    finished = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("runs/*/point.json")}
    assert 1 <= len(finished) < 4
    resumed = _start(grid, out)
    stdout, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    done = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("runs/*/point.json")}
    assert len(done) == 4
    assert all(done[k] == v for k, v in finished.items())  # finished runs were not redone
    assert not list(out.glob("runs/.tmp-*")) and not list(out.glob("locks/*.lock"))


@pytest.mark.slow
def test_two_grids_on_one_folder_run_each_point_once(tmp_path):
    log = tmp_path / "executions.log"
    grid = _grid_file(tmp_path, sleep_s=0.5, log=str(log))
    out = tmp_path / "out"
    a, b = _start(grid, out), _start(grid, out)
    for proc in (a, b):
        proc.communicate(timeout=120)
    # "busy" points are left to the other grid; a third pass finds everything finished
    third = _start(grid, out)
    third.communicate(timeout=120)
    assert third.returncode == 0
    executions = log.read_text().split()
    assert sorted(executions) == ["0", "1", "2", "3"]  # every point ran exactly once
    assert len(list(out.glob("runs/*/point.json"))) == 4


@pytest.mark.slow
def test_local_and_ray_backends_give_identical_results(tmp_path):
    pytest.importorskip("ray", reason="the Ray backend is an optional extra: pip install -e '.[ray]'")
    spec = _spec()
    local = run_grid(spec, tmp_path / "local")
    ray_report = run_grid(spec, tmp_path / "ray", backend="ray", resources=Resources(cpus=1))
    assert local.count("done") == ray_report.count("done") == 6
    assert _weights(tmp_path / "local") == _weights(tmp_path / "ray")  # bitwise, same run ids
    pids = {json.loads(p.read_text())["metrics"]["pid"] for p in (tmp_path / "ray").glob("runs/*/point.json")}
    assert os.getpid() not in pids  # the Ray runs really ran in worker processes


@pytest.mark.slow
def test_a_grid_of_bench_runs_end_to_end(tmp_path):
    """The registered runner bench.run end to end: each point is a whole study (traces priced on the
    accelerator model + a federated accuracy run), on configs/grids/small.toml's setting, one model,
    one data setting and two seeds (benchmarks/bench_grid.py times the whole grid on both backends;
    that the backends give identical results is test_local_and_ray_backends_give_identical_results)."""
    small = load_grid(ROOT / "configs" / "grids" / "small.toml")
    spec = parse_grid({"name": "small2", "runner": small.runner, "fixed": small.fixed,
                       "axes": {"model": ["convnet"], "alpha": [0.1], "seed": [0, 1]}})
    out = tmp_path / "local"
    assert run_grid(spec, out).count("done") == len(spec.points()) == 2  # 2 seeds
    for m in (json.loads(p.read_text())["metrics"] for p in out.glob("runs/*/point.json")):
        assert m["convnet.fedavg.peak_memory_bytes"] > m["convnet.spherefed.peak_memory_bytes"] > 0
    for name in ("summary.json", "ops.csv", "layers.csv"):
        assert len(list(out.glob(f"runs/*/{name}"))) == 2
    table2 = (out / "table2.md").read_text()
    assert "### accuracy_pct" in table2 and "| convnet | ffc |" in table2
    assert "(n=2)" in table2 and "(n=1)" not in table2
    rows = (out / "table2.csv").read_text().splitlines()
    # 5 figures: accuracy x4 methods, round latency x2, peak x2, calibration x2, communication x4 = 14
    # rows per model and data setting; one model, one setting (alpha 0.1)
    assert len(rows) == 1 + 14


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("runner, message", [
    ("tests.grid_runners:no_such_runner", "has no attribute 'no_such_runner'"),  # the module's names listed
    ("tests.grid_runners:not_a_runner", "is not a grid runner"),  # the right shape, never registered
    ("no_such_package.runners:run", "cannot import 'no_such_package.runners'"),
    ("os:fork", "standard library"),  # configs are code, but not the standard library's
    ("shutil:rmtree", "standard library"),
    ("builtins:exit", "standard library"),
    ("nocolon", "not a registered runner"),
])
def test_a_bad_runner_fails_before_any_run(tmp_path, backend, runner, message):
    spec = parse_grid({"runner": runner, "axes": {"seed": [0]}})
    with pytest.raises(GridError, match=message):
        run_grid(spec, tmp_path / "out", backend=backend)
    assert not (tmp_path / "out").exists()  # nothing written, Ray not started


def test_a_grid_with_another_runner_reuses_no_point(tmp_path):
    log = tmp_path / "executions.log"
    first = parse_grid({"name": "g", "runner": RUNNER, "fixed": {"log": str(log)}, "axes": {"seed": [0]}})
    run_grid(first, tmp_path / "out")
    other = parse_grid({"name": "g", "runner": "tests.grid_runners:parse_then_train",
                        "fixed": {"log": str(log)}, "axes": {"seed": [0]}})
    with pytest.raises(GridError, match="holds another grid"):  # the folder is the first grid's
        run_grid(other, tmp_path / "out")
    assert len(log.read_text().split()) == 1


def test_an_empty_point_lock_left_by_a_crash_is_taken_over(tmp_path, capsys):
    """Issue 33, item 6: a crash between creating a point's lock and writing it leaves it empty; once
    older than ``iokit.locks.LOCK_GRACE_S`` it is stale, taken over with a note, and the point runs
    (it was reported "busy" on every rerun, the grid exiting 0 without it)."""
    from bench.lib.grid.engine import COMMAND, grid_hash
    from iokit.locks import LOCK_GRACE_S
    from iokit.outputs import Manifest

    spec = parse_grid({"name": "t", "runner": RUNNER, "axes": {"seed": [0]}})
    Manifest(COMMAND, grid_hash(spec), FORMAT_VERSION, "running").write(tmp_path)  # the grid's, interrupted
    lock = tmp_path / "locks" / f"{run_id(RUNNER, {'seed': 0})}.lock"
    lock.parent.mkdir()
    lock.write_text("")
    old = time.time() - 2 * LOCK_GRACE_S
    os.utime(lock, (old, old))
    report = run_grid(spec, tmp_path)
    assert [r.status for r in report.results] == ["done"] and not lock.exists()
    assert f"took over the stale lock {lock}: empty for" in capsys.readouterr().err


@pytest.mark.parametrize("reply, accepted", [
    (b"HTTP/1.0 400 Bad request\r\n\r\n", False),  # a web server: issue 33 waited ~20 s, then left --out behind
    (b"", False),  # closes at once
    (bytes([0, 0, 0x18, 4, 0, 0, 0, 0, 0]), True),  # a gRPC server's SETTINGS frame (what Ray's GCS sends)
])
def test_a_ray_address_must_answer_as_a_ray_head(reply, accepted):
    import socket
    import threading

    from bench.lib.grid.backends import check_ray_address

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer():
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            conn.sendall(reply)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        if accepted:
            check_ray_address(f"127.0.0.1:{port}", timeout_s=5)
        else:
            with pytest.raises(GridError, match="something answers there, but not a Ray head"):
                check_ray_address(f"127.0.0.1:{port}", timeout_s=5)
    finally:
        thread.join(timeout=5)
        server.close()


@pytest.mark.slow
def test_an_interrupted_two_worker_grid_leaves_no_lock_or_temporary_folder(tmp_path):
    """Issue 33, item 11: Ctrl-C of a grid run by 2 worker processes left their points' locks and
    .tmp-* folders (a resume cleaned them); the parent now removes what its terminated workers left."""
    grid = _grid_file(tmp_path, sleep_s=30.0)
    out = tmp_path / "out"
    script = ("import sys; from bench.lib.grid.engine import load_grid, run_grid\n"
              "try:\n    run_grid(load_grid(sys.argv[1]), sys.argv[2], workers=2)\n"
              "except KeyboardInterrupt:\n    print('interrupted', file=sys.stderr)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(grid), str(out)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_in_a_terminal)  # SIGINT at its default, even under a background shell
    deadline = time.time() + 120
    while len(list(out.glob("runs/.tmp-*"))) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert len(list(out.glob("locks/*.lock"))) == 2  # both workers are inside a point
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert "interrupted" in stderr
    assert not list(out.glob("runs/.tmp-*")) and not list(out.glob("locks/*.lock")), sorted(out.rglob("*"))

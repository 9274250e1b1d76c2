"""Experiment grids: many independent runs, locally by default, on Ray when one machine is not enough.

    python -m bench.grid grid.toml [--out DIR] [--backend local|ray] [--workers N] [--address ADDR]
                                   [--resources-per-run cpus=1,gpus=0] [--retry-failed]

A grid file (TOML) names a runner, the settings shared by every run, and the axes to sweep::

    name = "small"
    runner = "bench.run"                 # a registered runner (bench.lib.grid.runners)
    [fixed]
    preset = "smoke"
    [axes]
    model = ["convnet", "vgg13"]
    seed = [0, 1, 2]

Every point of the cartesian product of the axes (in file order), merged over ``fixed``, is one
run. Its id is a hash of the runner's name and the point's resolved config, so the same point of
the same runner always lands in the same folder, and a grid with another runner never reuses it:

    DIR/runs/<run_id>/      the runner's files plus point.json (config, metrics, elapsed_s, start/end time,
                            the git commit of the code that ran it)
    DIR/failed/<run_id>.json  the error and traceback of a run that raised
    DIR/locks/<run_id>.lock   held while a run is in progress (pid and host inside)
    DIR/runs.csv, DIR/table_*.csv   the aggregated tables (see ``aggregate``)

Safety. A run writes into ``runs/.tmp-<run_id>-<random>`` and is renamed to ``runs/<run_id>`` only
when the runner returned, so a folder under ``runs/`` is always a finished run. A lock file created
with O_EXCL keeps two grids (or two workers) from running the same point; a lock whose process is
gone (same host) is stale and is taken over, so an interrupted grid resumes where it stopped.
Finished runs are skipped on rerun while the files they read (the runner's ``reads``: a fleet,
a hardware file) hold the content they recorded, run again when one changed (``iokit.identity``:
a run is the content of what it reads, not the path); failed runs are reported and retried only
with ``--retry-failed``. A point that fails, bad settings included (``batch_size = "x"`` in an axis),
fails alone: its error is recorded in ``failed/<run_id>.json`` and the other points run. A
``point.json`` or ``failed/<run_id>.json`` that cannot be read (truncated by a crash) means the
point is not done: one line says so and the point runs again.

Checked before any point runs: the grid file (TOML text; ``name`` a file-name-safe word: letters,
digits, ``.``, ``_``, ``-``), the runner (registered), every point (the runner's ``validate``: a
typo in ``[fixed]`` is one line naming it, before a results folder exists), ``--resources-per-run``
(finite numbers), ``--out`` (a new folder, or this grid's own: the folder's manifest names the
grid and its runner; any other folder is refused), and with ``--address`` that the Ray head's port
answers, as a gRPC server, within ``RAY_CONNECT_TIMEOUT_S`` (10 s; Ray itself would retry for
minutes). Ctrl-C or
SIGTERM stop the grid with one line; finished points stay, and the next run resumes. The tables
are built from the points of the grid as it is now (points of an earlier version of the file that
are no longer in it are kept on disk but left out).

Determinism. Each run sets torch's thread count to its CPU share (``cpus``, default 1) on both
backends, so the same point gives bitwise the same results locally and on Ray.

Devices. The local backend's ``workers`` processes are started by ``WORKER_START_METHOD``
(spawn), so each opens the device its point names afresh, however far this process went with
CUDA; its runs share this machine's devices, and a GPU share per run is refused there
(``check_backend``). On Ray a run holds ``gpus`` of a GPU, a fraction packing several on one, and
sees only the GPU Ray gave it, as ``cuda:0`` (``check_device``: docs/grid.md, "Grids on GPUs").
"""

from __future__ import annotations

import itertools
import math
import json
import os
import re
import shutil
import socket
import sys
import time
import traceback
import uuid
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from bench.lib.grid.runners import RunnerError, resolve_runner
from bench.lib.results import FORMAT_VERSION, ResultsError
from iokit import checks, locks, outputs
from iokit.files import atomic_write, atomic_write_text
from iokit.identity import changed
from iokit.provenance import git_commit
from iokit.toml import read_toml

GRID_KEYS = {"name", "runner", "fixed", "axes"}
RECORD_COLUMNS = ("run_id", "elapsed_s", "git_commit")  # a runs.csv row's columns that are neither config nor metric
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")  # a grid's name, used in a folder name
RAY_CONNECT_TIMEOUT_S = 10.0  # --address: how long to wait for the cluster's port to answer
DEFAULT_RUNNER = "bench.run"
COMMAND = "bench.grid"
OWNED_FOLDERS = ("runs", "failed", "locks")
TABLES = ("grid.json", "runs.csv", "table_mean_std.csv", "table2.csv", "table2.md")


WORKER_START_METHOD = "spawn"
"""How the local backend starts its worker processes: a fresh interpreter each. A child forked from
a process that initialised CUDA cannot use CUDA ("Cannot re-initialize CUDA in forked
subprocess": PyTorch's notes on multiprocessing with CUDA), and the command's own process does
initialise it on a GPU (resolving ``auto``, checking the runs, projecting their time); a fork would
also copy torch's thread pools."""


class GridError(ValueError):
    """A grid file or grid option that cannot be used. The message says what to fix."""


@dataclass(frozen=True)
class GridSpec:
    name: str
    runner: str
    fixed: dict[str, Any]
    axes: dict[str, list[Any]]

    def points(self) -> list[dict[str, Any]]:
        """Resolved configs, one per point of the cartesian product of the axes, in file order."""
        names = list(self.axes)
        return [{**self.fixed, **dict(zip(names, values))} for values in itertools.product(*self.axes.values())]


@dataclass(frozen=True)
class Resources:
    cpus: float = 1.0
    gpus: float = 0.0


@dataclass(frozen=True)
class PointResult:
    run_id: str
    status: str  # "done" (ran now), "skipped" (finished earlier), "failed", "failed-earlier", "busy"
    config: dict[str, Any]
    elapsed_s: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class GridReport:
    results: tuple[PointResult, ...] = field(default_factory=tuple)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)


# ----------------------------------------------------------------------------- grid files


def parse_grid(data: dict[str, Any], source: str = "<grid>") -> GridSpec:
    unknown = set(data) - GRID_KEYS
    if unknown:
        raise GridError(f"{source}: unknown key(s) {sorted(unknown)}; a grid file has {sorted(GRID_KEYS)}")
    fixed = data.get("fixed", {})
    axes = data.get("axes", {})
    if not isinstance(fixed, dict) or not isinstance(axes, dict):
        raise GridError(f"{source}: [fixed] and [axes] must be tables")
    if not axes:
        raise GridError(f"{source}: [axes] is empty: name at least one axis, e.g. seed = [0, 1, 2]")
    for name, values in axes.items():
        if not isinstance(values, list) or not values:
            raise GridError(f"{source}: axis '{name}' must be a non-empty list, got {values!r}")
        checks.distinct(values, name=f"{source}: axis '{name}'", error=GridError)  # by value: 1 and 1.0 are one
    both = set(fixed) & set(axes)
    if both:
        raise GridError(f"{source}: {sorted(both)} appear both in [fixed] and in [axes]; keep each in one place")
    runner = data.get("runner", DEFAULT_RUNNER)
    if not isinstance(runner, str) or not runner.strip():
        raise GridError(f"{source}: runner = {runner!r}: give a registered runner's name, e.g. runner = \"bench.run\"")
    name = data.get("name", re.sub(r"[^A-Za-z0-9._-]", "_", Path(source).stem).lstrip(".") or "grid")
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise GridError(f"{source}: name = {name!r} must be a file-name-safe word (letters, digits, '.', '_', '-', "
                        "not starting with '.'): it names the results folder results/grid-<name>")
    return GridSpec(name=name, runner=runner, fixed=fixed, axes=axes)


def load_grid(path: str | Path) -> GridSpec:
    path = Path(path)
    if not path.is_file():
        raise GridError(f"{path}: no such grid file (see configs/grids/ for examples)")
    return parse_grid(read_toml(path, GridError, "grid"), str(path))


def run_id(runner: str, config: dict[str, Any]) -> str:
    """12 hex digits of the SHA-256 of the runner's name and the config as canonical JSON (sorted keys)."""
    text = json.dumps({"runner": runner, "config": config}, sort_keys=True, separators=(",", ":"))
    return sha256(text.encode()).hexdigest()[:12]


def validate_points(spec: GridSpec) -> None:
    """Every point checked by the runner's ``validate`` before any runs; GridError naming the first bad one."""
    try:
        runner = resolve_runner(spec.runner)
    except RunnerError as e:
        raise GridError(str(e)) from None
    if runner.validate is None:
        return
    for i, point in enumerate(spec.points(), 1):
        try:
            runner.validate(point)
        except (ValueError, SystemExit) as e:
            axes = {k: point[k] for k in spec.axes}
            raise GridError(f"grid {spec.name!r}, point {i} {axes}: {e}") from None


# ----------------------------------------------------------------------------- one point


def _set_threads(cpus: float) -> int | None:
    """Give torch ``cpus`` threads; returns the previous count (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(cpus)))
    return previous


def execute_point(runner_spec: str, config: dict[str, Any], out_root: str, cpus: float = 1.0,
                  retry_failed: bool = False, commit: str = "unknown") -> PointResult:
    """Run one grid point unless it is finished, failed earlier (and no retry) or running elsewhere;
    ``commit`` (the code's git commit, taken before the grid wrote anything) goes into its record.

    Pure with respect to its arguments so it can be shipped to a Ray worker as it is."""
    root = Path(out_root)
    rid = run_id(runner_spec, config)
    final = root / "runs" / rid
    failed = root / "failed" / f"{rid}.json"
    runner_of = resolve_runner(runner_spec)
    files = runner_of.files(config)
    whole = lambda quiet: _finished(final, files, quiet=quiet) and not runner_of.incomplete(config, final)  # noqa: E731
    if whole(False):
        return PointResult(rid, "skipped", config)
    earlier = of_files(failed, files)[0] if failed.is_file() else None
    if earlier is not None and not retry_failed:
        return PointResult(rid, "failed-earlier", config, error=str(earlier.get("error", "")))
    lock = root / "locks" / f"{rid}.lock"
    if locks.take(lock) is not None:
        return PointResult(rid, "busy", config)
    tmp = root / "runs" / f".tmp-{rid}-{uuid.uuid4().hex[:8]}"
    try:
        if whole(True):  # finished by another grid while we waited
            return PointResult(rid, "skipped", config)
        stale = of_files(final / "point.json", files, quiet=True)[1]
        if stale:
            print(f"warning: runs/{rid} was run with other content of {', '.join(stale)}; running it again",
                  file=sys.stderr, flush=True)
        elif _finished(final, files, quiet=True):  # its record is there, its files are not whole
            print(f"warning: runs/{rid} is incomplete ({runner_of.incomplete(config, final)}); running it again",
                  file=sys.stderr, flush=True)
        for leftover in (root / "runs").glob(f".tmp-{rid}-*"):
            shutil.rmtree(leftover, ignore_errors=True)  # from an interrupted attempt
        if final.exists():  # a run folder without a readable point.json, or of other files: redone
            shutil.rmtree(final, ignore_errors=True)
        tmp.mkdir(parents=True)
        previous_threads = _set_threads(cpus)
        try:
            runner = resolve_runner(runner_spec).run  # imported before the clock starts: a worker's
            start_unix_s, start = time.time(), time.perf_counter()  # first run does not count it
            metrics = runner(dict(config), tmp)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - one failing run (even one that exits) must not stop the grid
            failed.parent.mkdir(parents=True, exist_ok=True)
            record = {"run_id": rid, "config": config, "files": files, "error": f"{type(e).__name__}: {e}",
                      "traceback": traceback.format_exc()}
            _write_json(failed, record)
            return PointResult(rid, "failed", config, error=record["error"])
        finally:
            if previous_threads is not None:
                _set_threads(previous_threads)
        elapsed_s = time.perf_counter() - start
        _write_json(tmp / "point.json", {"version": FORMAT_VERSION, "run_id": rid, "runner": runner_spec,
                                         "git_commit": commit, "config": config, "files": files,
                                         "metrics": metrics or {},
                                         "elapsed_s": elapsed_s, "start_unix_s": start_unix_s,
                                         "end_unix_s": start_unix_s + elapsed_s})
        tmp.rename(final)
        failed.unlink(missing_ok=True)
        return PointResult(rid, "done", config, elapsed_s=elapsed_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        locks.release(lock)


def read_record(path: Path, *, quiet: bool = False) -> dict[str, Any] | None:
    """A grid record (``runs/<id>/point.json``, ``failed/<id>.json``), or None when it cannot be read
    (truncated by a crash, not JSON, not an object): the point is then not done and is run again;
    one line on stderr says so."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        if not quiet:
            print(f"warning: {path} cannot be read ({type(e).__name__}); treating the point as not done and "
                  "running it again", file=sys.stderr, flush=True)
        return None
    if not isinstance(data, dict) or "run_id" not in data:
        if not quiet:
            print(f"warning: {path} is not a grid record; treating the point as not done and running it again",
                  file=sys.stderr, flush=True)
        return None
    return data


def of_files(path: Path, files: Mapping[str, Mapping[str, str]], *, quiet: bool = False
             ) -> tuple[dict[str, Any] | None, list[str]]:
    """(the record at ``path``, []) when it was written reading the content ``files`` (the runner's
    ``files(point)``, ``iokit.identity``): the same run; (None, the files whose content differs)
    when not: another run, whatever its point says; (None, []) when there is no readable record."""
    record = read_record(path, quiet=quiet)
    if record is None:
        return None, []
    stale = changed(record.get("files"), files)
    return (None, stale) if stale else (record, [])


def _finished(run_dir: Path, files: Mapping[str, Mapping[str, str]], *, quiet: bool = False) -> bool:
    return (run_dir / "point.json").is_file() and of_files(run_dir / "point.json", files, quiet=quiet)[0] is not None


def _write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


# ----------------------------------------------------------------------------- backends


def run_local(spec: GridSpec, out: Path, resources: Resources, retry_failed: bool, commit: str,
              workers: int = 1) -> Iterator[PointResult]:
    """The points in this process, one after another; with ``workers`` > 1, side by side in that
    many processes started afresh (``WORKER_START_METHOD``; each point still gets ``resources.cpus``
    torch threads, and opens the device its point names: several share one GPU), in order of
    completion. An interrupt stops the workers; their points resume on the next run (stale locks
    of dead processes are taken over, their temporary folders removed)."""
    if workers <= 1:
        for config in spec.points():
            yield execute_point(spec.runner, config, str(out), resources.cpus, retry_failed, commit)
        return
    import multiprocessing
    import signal
    import threading
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(WORKER_START_METHOD))
    try:
        # The workers are born ignoring Ctrl-C (a disposition a spawned interpreter keeps from its
        # start, so one interrupted while it imports prints no traceback): the main process stops them.
        in_main = threading.current_thread() is threading.main_thread()  # where signal handlers are set
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
        try:
            futures = [pool.submit(execute_point, spec.runner, c, str(out), resources.cpus, retry_failed, commit)
                       for c in spec.points()]  # the pool starts its workers here
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous)
        for future in as_completed(futures):
            yield future.result()
    except BaseException:  # an interrupt or a crashed worker: stop the others now
        processes = list((getattr(pool, "_processes", None) or {}).values())
        for process in processes:
            process.terminate()
        for process in processes:  # reaped, so that their locks are seen to be stale below
            process.join(timeout=10)
        pool.shutdown(wait=True, cancel_futures=True)
        remove_leftovers(out)  # the terminated workers ran no clean-up of their own
        raise
    pool.shutdown()


def remove_leftovers(out: Path) -> None:
    """The point locks of processes that are gone (``iokit.locks``: stale) and the temporary run
    folders no live lock covers: what workers terminated in the middle of a point leave. A point
    another grid is running keeps its live lock and its folder."""
    for lock in sorted((out / "locks").glob("*.lock")):
        if locks.holder(lock)[1] is not None:
            lock.unlink(missing_ok=True)
    for tmp in sorted((out / "runs").glob(".tmp-*")):
        rid = tmp.name.removeprefix(".tmp-").rsplit("-", 1)[0]
        if not (out / "locks" / f"{rid}.lock").exists():
            shutil.rmtree(tmp, ignore_errors=True)


def run_ray(spec: GridSpec, out: Path, resources: Resources, retry_failed: bool, commit: str,
            address: str | None = None) -> Iterator[PointResult]:
    try:
        import ray
    except ImportError:
        raise GridError("--backend ray needs Ray: pip install -c constraints.txt -e '.[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        kwargs: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False}
        if address:  # an existing cluster: every node must have the project installed (pip install -e .)
            kwargs["address"] = address  # reachable: run_grid checked it (check_ray_address)
        else:  # a local Ray for this command: its workers inherit this environment, so the project
            kwargs["num_cpus"] = os.cpu_count()  # root on PYTHONPATH makes them import this checkout
            root = str(outputs.CHECKOUT_ROOT)
            paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
            os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
        ray.init(**kwargs)
    try:
        remote = ray.remote(num_cpus=resources.cpus, num_gpus=resources.gpus, max_retries=0)(execute_point)
        pending = [remote.remote(spec.runner, c, str(out.resolve()), resources.cpus, retry_failed, commit)
                   for c in spec.points()]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        if started_here:
            ray.shutdown()


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""An HTTP/2 client's connection preface and an empty SETTINGS frame (RFC 9113, Sec. 3.4 and 6.5):
a gRPC server, as Ray's head (GCS) and Ray Client server are, answers with a SETTINGS frame, whose
9-byte header has type 0x4 at byte 3."""


def check_ray_address(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """GridError unless ``host:port`` (optionally ``ray://host:port``) accepts a TCP connection
    and answers as a gRPC server does (``HTTP2_PREFACE``) within ``timeout_s``: ``ray.init``
    itself retries an unreachable address, or a port that answers but is not Ray's, for minutes
    without a word. ``auto`` (a cluster started on this machine) is left to Ray."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise GridError(f"--address {address!r}: give HOST:PORT of the Ray head (e.g. 10.0.0.5:6379) or 'auto'")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(HTTP2_PREFACE)
            head = b""
            while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
                head += chunk
    except socket.timeout:
        head = b""
    except OSError as e:
        raise GridError(f"--address {address}: no Ray cluster answers within {timeout_s:g} s ({e.strerror or e}); "
                        "start one with `ray start --head` or leave --address out for a local Ray") from None
    if len(head) < 9 or head[3] != 4:
        raise GridError(f"--address {address}: something answers there, but not a Ray head (no gRPC server: it "
                        f"replied {head[:20]!r}); give the port `ray start --head` printed (default 6379)")


BACKENDS = ("local", "ray")


def add_backend_flags(parser) -> None:
    """``--backend``, ``--address`` and ``--resources-per-run``, one spelling and help for every command
    that runs a grid (``bench.grid``, ``bench.study``; ``--workers`` is ``bench.lib.spec``'s)."""
    parser.add_argument("--backend", default="local", choices=BACKENDS,
                        help="local: this machine, --workers N runs side by side; ray: a Ray cluster")
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="HOST:PORT of an existing Ray cluster's head, or auto (--backend ray)")
    parser.add_argument("--resources-per-run", default="cpus=1,gpus=0", metavar="cpus=C,gpus=G",
                        help="per run: C torch threads (both backends), G of a GPU held on Ray (0.25: four runs share "
                             "one; --backend ray only)")


def check_backend(backend: str, *, address: str | None, workers: int, resources: Resources) -> None:
    """The backend's options agree (GridError naming the fix): ``--address`` is Ray's, ``--workers``
    the local backend's, and so is a GPU share per run Ray's (locally the runs use the device their
    points name, all of them side by side with ``--workers``)."""
    if address and backend != "ray":
        raise GridError("--address is only used with --backend ray")
    if workers > 1 and backend != "local":
        raise GridError("--workers is for the local backend; Ray runs as many as its cluster has cores "
                        "(--resources-per-run sets each run's share)")
    if resources.gpus and backend != "ray":
        raise GridError(f"--resources-per-run gpus={resources.gpus:g}: a GPU share per run is Ray's (--backend ray); "
                        "locally each run trains on the device its point names: run N side by side on one GPU "
                        "with --workers N and gpus=0")


def check_device(device: str, backend: str, resources: Resources) -> None:
    """Runs on ``device`` (resolved: ``cpu``, ``cuda:N``) on ``backend`` with ``resources`` each
    can train there (GridError naming the fix): on Ray, a CUDA run must hold a share of a GPU (Ray
    schedules none for a run that asks for none, and hides the machine's GPUs from it) and no more
    than one GPU (a run trains on one); it sees only the GPU Ray gave it, as ``cuda:0``; a run on the
    CPU holds no GPU."""
    if backend != "ray":
        return
    cuda = device.startswith("cuda")
    if cuda and not resources.gpus:
        raise GridError(f"device {device} on --backend ray: a run that asks Ray for no GPU gets none (Ray hides the "
                        "GPUs from it); give each run a share: --resources-per-run cpus=1,gpus=0.25 (four per GPU)")
    if cuda and resources.gpus > 1:
        raise GridError(f"--resources-per-run gpus={resources.gpus:g}: a run trains on one GPU; give gpus in (0, 1] "
                        "(0.5: two runs share one)")
    if cuda and device != "cuda:0":
        raise GridError(f"device {device} on --backend ray: a run sees only the GPU Ray gave it, as cuda:0; give "
                        "device cuda (or auto) and let Ray choose the GPU")
    if not cuda and resources.gpus:
        raise GridError(f"--resources-per-run gpus={resources.gpus:g} but the runs train on {device} (resolved on "
                        "this machine): set the device to cuda, and run the command where torch sees a GPU, or "
                        "give gpus=0")


def check_grid_out(spec: GridSpec, out: str | Path) -> None:
    """``--out`` of a grid: a new (or empty) folder, or this grid's own (its manifest names
    ``bench.grid`` and the same grid name and runner: rerunning resumes it). Anything else is
    refused, naming why: the suite never mixes a grid into another folder. Checked before any
    point runs (``iokit.outputs.check_own_folder``)."""
    outputs.check_own_folder(out, command=COMMAND, config_sha256=grid_hash(spec), error=GridError,
                             what=f"grid (its name or runner differs from {spec.name!r} / {spec.runner!r})")


def grid_hash(spec: GridSpec) -> str:
    """What a grid folder belongs to: the grid's name and runner (its axes may grow: the points are
    content-addressed)."""
    return outputs.config_hash({"name": spec.name, "runner": spec.runner})


def run_grid(spec: GridSpec, out: str | Path, *, backend: str = "local", resources: Resources = Resources(),
             retry_failed: bool = False, address: str | None = None,
             progress: Callable[[PointResult, int, int], None] | None = None, workers: int = 1,
             commit: str | None = None) -> GridReport:
    """Every point of ``spec`` into ``out`` (module doc). ``commit``: the code's git commit for the runs'
    records; by default taken here, before anything is written (a caller that wrote into a tracked
    folder first passes the one it took before)."""
    if backend not in BACKENDS:
        raise GridError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    validate_points(spec)  # the runner registered, every point resolvable: before any folder exists
    if backend == "ray" and address:
        check_ray_address(address)
    out = Path(out)
    check_grid_out(spec, out)
    commit = git_commit() if commit is None else commit
    (out / "runs").mkdir(parents=True, exist_ok=True)
    outputs.Manifest(COMMAND, grid_hash(spec), FORMAT_VERSION, "running", TABLES, OWNED_FOLDERS).write(out)
    _write_json(out / "grid.json", {"name": spec.name, "runner": spec.runner, "fixed": spec.fixed, "axes": spec.axes})
    total = len(spec.points())
    if backend == "local":
        stream = run_local(spec, out, resources, retry_failed, commit, workers)
    else:
        stream = run_ray(spec, out, resources, retry_failed, commit, address)
    results = []
    for result in stream:
        results.append(result)
        if progress:
            progress(result, len(results), total)
    aggregate(out, run_ids=[run_id(spec.runner, p) for p in spec.points()])
    return GridReport(tuple(results))


# ----------------------------------------------------------------------------- aggregation


def _flat(prefix: str, obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(f"{prefix}.{k}" if prefix else str(k), v))
        return out
    if isinstance(obj, list):
        return {prefix: json.dumps(obj)}
    return {prefix: obj}


def collect(out: str | Path, run_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """One flat row per finished run (of ``run_ids`` when given: the grid's current points): run_id,
    the config keys, ``metric.*`` columns, elapsed_s and git_commit (empty for a run recorded before
    runs recorded it)."""
    rows = []
    wanted = None if run_ids is None else set(run_ids)
    for point in sorted(Path(out).glob("runs/*/point.json")):
        if wanted is not None and point.parent.name not in wanted:
            continue
        data = read_record(point)
        if data is None:
            continue  # unreadable (said so): the point runs again on the next run of the grid
        if data.get("version") != FORMAT_VERSION:
            raise ResultsError(f"{point} has results format version {data.get('version')!r}; this code reads "
                               f"{FORMAT_VERSION} (docs/results.md): run the grid into a new --out")
        rows.append({"run_id": data["run_id"], **_flat("", data["config"]), **_flat("metric", data["metrics"]),
                     "elapsed_s": data["elapsed_s"], "git_commit": data.get("git_commit", "")})
    return rows


def aggregate(out: str | Path, *, across: str = "seed", run_ids: Iterable[str] | None = None) -> Path | None:
    """Write the grid's tables from every finished run:

    * ``runs.csv``: one row per run, config columns then ``metric.*`` columns;
    * ``table_mean_std.csv``: each metric's mean, std and count over ``across`` (the seeds) for
      each combination of the other config columns;
    * ``table2.csv`` / ``table2.md``: Table 2's layout for runners whose metrics are named
      ``<model>.<method>.<figure>`` (bench.run's): one row per model and method, one column per
      data setting (the remaining config columns), cells "mean ± std" over seeds; accuracy first,
      then the efficiency figures (latency, peak memory, communication) in the same layout."""
    import pandas as pd

    rows = collect(out, run_ids)
    if not rows:
        return None
    df = pd.DataFrame(rows)
    out = Path(out)
    _write_csv(df, out / "runs.csv")
    metrics = [c for c in df.columns if c.startswith("metric.") and pd.api.types.is_numeric_dtype(df[c])]
    group = [c for c in df.columns if c not in metrics and c not in (*RECORD_COLUMNS, across)]
    if metrics and group:
        table = df.groupby(group, dropna=False)[metrics].agg(["mean", "std", "count"])
        table.columns = [f"{m}.{stat}" for m, stat in table.columns]
        _write_csv(table.reset_index(), out / "table_mean_std.csv")
    long = table2_long(df, metrics, across)
    if long is not None:
        _write_csv(long, out / "table2.csv")
        atomic_write_text(out / "table2.md", table2_markdown(long))
    return out / "runs.csv"


TABLE2_FIGURES = ("accuracy_pct", "round_latency_s", "peak_memory_bytes", "calibration_latency_s",
                  "total_bytes")


def table2_long(df, metrics: list[str], across: str = "seed"):
    """Mean, std and count over seeds of every ``metric.<model>.<method>.<figure>`` column, in long
    form: (setting, model, method, figure, mean, std, n). None when no metric has that form."""
    import pandas as pd

    named = [c for c in metrics if len(c.split(".")) == 4 and c.split(".")[3] in TABLE2_FIGURES]
    if not named:
        return None
    setting_cols = [c for c in df.columns
                    if c not in metrics and c not in (*RECORD_COLUMNS, across, "model", "methods")
                    and not c.startswith("metric.")]
    records = []
    for _, row in df.iterrows():
        setting = ", ".join(f"{c}={row[c]}" for c in setting_cols) or "default"
        for c in named:
            if pd.notna(row[c]):
                _, model, method, figure = c.split(".")
                records.append({"setting": setting, "model": model, "method": method, "figure": figure,
                                "value": float(row[c])})
    long = pd.DataFrame(records)
    stats = long.groupby(["figure", "model", "method", "setting"], sort=False)["value"].agg(["mean", "std", "count"])
    return stats.reset_index().rename(columns={"count": "n"})


def table2_markdown(long) -> str:
    """One Markdown table per figure: rows model / method, columns data settings, "mean ± std"."""
    parts = []
    for figure in TABLE2_FIGURES:
        sub = long[long["figure"] == figure]
        if sub.empty:
            continue
        cells = sub.assign(cell=[f"{m:.4g} ± {0.0 if s != s else s:.2g} (n={n})"
                                 for m, s, n in zip(sub["mean"], sub["std"], sub["n"])])
        pivot = cells.pivot(index=["model", "method"], columns="setting", values="cell")
        header = "| model | method | " + " | ".join(pivot.columns) + " |"
        lines = [f"### {figure} (mean ± std over seeds)", "", header,
                 "|" + "---|" * (len(pivot.columns) + 2)]
        for (model, method), values in pivot.iterrows():
            lines.append(f"| {model} | {method} | " + " | ".join(str(v) for v in values) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _write_csv(df, path: Path) -> None:
    atomic_write(path, lambda tmp: df.to_csv(tmp, index=False))


def parse_resources(text: str) -> Resources:
    values: dict[str, float] = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in ("cpus", "gpus"):
            raise GridError(f"--resources-per-run: unknown resource {key!r}; use cpus=N,gpus=M")
        try:
            values[key] = float(value)
        except ValueError:
            raise GridError(f"--resources-per-run: {key}={value!r} is not a number") from None
        if not math.isfinite(values[key]):
            raise GridError(f"--resources-per-run: {key}={value} must be a finite number")
        if values[key] < 0 or (key == "cpus" and values[key] == 0):
            raise GridError(f"--resources-per-run: {key} must be positive, got {value}")
    return Resources(**values)

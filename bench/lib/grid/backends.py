"""Where a grid's points run: this process or worker processes (``run_local``), or a Ray cluster
(``run_ray``); the backend flags every command that runs a grid shares, and their checks.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from bench.lib.grid.point import GridError, PointResult, execute_point
from iokit import locks, outputs

if TYPE_CHECKING:
    from bench.lib.grid.engine import GridSpec


RAY_CONNECT_TIMEOUT_S = 10.0  # --address: how long to wait for the cluster's port to answer
WORKER_START_METHOD = "spawn"
"""How the local backend starts its worker processes: a fresh interpreter each. A child forked from
a process that initialised CUDA cannot use CUDA ("Cannot re-initialize CUDA in forked
subprocess": PyTorch's notes on multiprocessing with CUDA), and the command's own process does
initialise it on a GPU (resolving ``auto``, checking the runs, projecting their time); a fork would
also copy torch's thread pools."""


@dataclass(frozen=True)
class Resources:
    cpus: float = 1.0
    gpus: float = 0.0


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

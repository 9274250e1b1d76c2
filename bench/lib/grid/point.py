"""One point of a grid: its id (a hash of the runner and its resolved config), its run in a folder of its own
under a lock, its record (``point.json``, ``failed/<run_id>.json``); and the error a grid reports
(``GridError``). The module doc of ``bench.lib.grid.engine`` tells the layout and the safety rules.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
import traceback
import uuid
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from bench.lib.grid.runners import resolve_runner
from bench.lib.results import FORMAT_VERSION
from iokit import locks
from iokit.files import atomic_write_text
from iokit.identity import changed


class GridError(ValueError):
    """A grid file or grid option that cannot be used. The message says what to fix."""


@dataclass(frozen=True)
class PointResult:
    run_id: str
    status: str  # "done" (ran now), "skipped" (finished earlier), "failed", "failed-earlier", "busy"
    config: dict[str, Any]
    elapsed_s: float = 0.0
    error: str = ""


def run_id(runner: str, config: dict[str, Any]) -> str:
    """12 hex digits of the SHA-256 of the runner's name and the config as canonical JSON (sorted keys)."""
    text = json.dumps({"runner": runner, "config": config}, sort_keys=True, separators=(",", ":"))
    return sha256(text.encode()).hexdigest()[:12]


@contextlib.contextmanager
def torch_threads(cpus: float) -> Iterator[None]:
    """Torch's thread count set to a run's CPU share (``cpus``, at least 1) inside the block, and back
    after it (nothing without torch): what each run trains with, and what a projection of it times."""
    try:
        import torch
    except ImportError:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(cpus)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


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
        _clear_for_rerun(root, rid, files, lambda: runner_of.incomplete(config, final))
        tmp.mkdir(parents=True)
        try:
            with torch_threads(cpus):
                runner = resolve_runner(runner_spec).run  # imported before the clock starts: a worker's
                start_unix_s, start = time.time(), time.perf_counter()  # first run does not count it
                metrics = runner(dict(config), tmp)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - one failing run (even one that exits) must not stop the grid
            return _record_failure(failed, rid, config, files, e)
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


def _clear_for_rerun(root: Path, rid: str, files: Mapping[str, Mapping[str, str]],
                     incomplete: Callable[[], str]) -> None:
    """Before point ``rid`` runs (again): say why a folder of it is redone (other files' content, or
    ``incomplete()``: the runner's reason its files are not whole), and remove it and the temporary
    folders of interrupted attempts."""
    final = root / "runs" / rid
    stale = of_files(final / "point.json", files, quiet=True)[1]
    if stale:
        print(f"warning: runs/{rid} was run with other content of {', '.join(stale)}; running it again",
              file=sys.stderr, flush=True)
    elif _finished(final, files, quiet=True):  # its record is there, its files are not whole
        print(f"warning: runs/{rid} is incomplete ({incomplete()}); running it again", file=sys.stderr, flush=True)
    for leftover in (root / "runs").glob(f".tmp-{rid}-*"):
        shutil.rmtree(leftover, ignore_errors=True)  # from an interrupted attempt
    if final.exists():  # a run folder without a readable point.json, or of other files: redone
        shutil.rmtree(final, ignore_errors=True)


def _record_failure(failed: Path, rid: str, config: dict[str, Any], files: Mapping[str, Mapping[str, str]],
                    error: BaseException) -> PointResult:
    """``failed/<run_id>.json``: the error and traceback of a point whose runner raised (or exited)."""
    failed.parent.mkdir(parents=True, exist_ok=True)
    record = {"run_id": rid, "config": config, "files": files, "error": f"{type(error).__name__}: {error}",
              "traceback": traceback.format_exc()}
    _write_json(failed, record)
    return PointResult(rid, "failed", config, error=record["error"])


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

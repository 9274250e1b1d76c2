"""Results folders the suite owns, and the rules for ``--out``.

The rule above all: the suite deletes or replaces only what it wrote. Every results folder carries
a manifest (``manifest.json``): the command that wrote it, the hash of its resolved config, the
results format version, its state (``running`` while a resumable run keeps checkpoints in it,
``complete`` once written) and the files and folders the suite wrote there. Then, checked before
any work (``check_out``):

* ``--out`` may never be ``/``, the home folder, the checkout's root, the current folder or one of
  its ancestors (they hold other things; no results folder is one of them);
* an existing ``--out`` is refused unless the command was told what to do with it;
* ``--overwrite`` replaces only a folder that carries the suite's manifest and holds nothing else
  than what that manifest lists (or an empty folder); any other is refused, naming a file it would
  have lost;
* ``--resume`` continues only a folder whose manifest names the same command and the same resolved
  config (hash);
* ``claim(out)`` takes a lock beside ``--out`` (``.<name>.lock``, created exclusively, holding the
  pid and host): a second command writing the same ``--out`` at the same time stops at once; a
  lock whose process is gone (same host) is stale and taken over.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from iokit.files import _pid_alive, atomic_write_dir, atomic_write_text

MANIFEST = "manifest.json"
FORMAT_NAME = "fl-accel-bench-results"
STATES = ("running", "complete")
CHECKOUT_ROOT = Path(__file__).resolve().parents[1]


class OutputError(ValueError):
    """An output path that cannot be used: the message names it and says what to give instead."""


@dataclass(frozen=True)
class Manifest:
    """What the suite wrote into a results folder, and under which command and config."""

    command: str  # "bench.run", "bench.fl", "bench.grid", ...
    config_sha256: str  # config_hash of the resolved config
    version: int  # results format version of the files
    state: str = "complete"  # "running": a resumable run's checkpoints; "complete": the results
    files: tuple[str, ...] = ()  # paths relative to the folder, written by the suite
    folders: tuple[str, ...] = ()  # sub-folders whose whole content the suite wrote (checkpoints/, runs/)
    format: str = FORMAT_NAME

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "files": list(self.files), "folders": list(self.folders)}, indent=1) + "\n"

    @staticmethod
    def read(folder: Path) -> Manifest | None:
        """The manifest of ``folder``, or None when it has none or it is not the suite's."""
        try:
            data = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            return None
        try:
            return Manifest(command=str(data["command"]), config_sha256=str(data["config_sha256"]),
                            version=int(data["version"]), state=str(data.get("state", "complete")),
                            files=tuple(map(str, data.get("files", ()))),
                            folders=tuple(map(str, data.get("folders", ()))))
        except (KeyError, TypeError, ValueError):
            return None

    def write(self, folder: Path) -> None:
        atomic_write_text(Path(folder) / MANIFEST, self.to_json())


def config_hash(config: Any) -> str:
    """SHA-256 of ``config`` as canonical JSON (sorted keys; anything not JSON as its ``str``)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def forbidden_reason(out: str | Path) -> str | None:
    """Why ``out`` can never be a results folder, or None: ``/``, the home folder, the checkout's
    root, the current folder, or an ancestor of any of these."""
    target = Path(out).expanduser().resolve()
    guarded = {"the current folder": Path.cwd().resolve(), "the home folder": Path.home().resolve(),
               "the checkout's root": CHECKOUT_ROOT}
    for what, place in guarded.items():
        if target == place:
            return f"it is {what}"
        if target in place.parents:
            return f"it holds {what} ({place})"
    return None


def foreign_file(folder: Path, manifest: Manifest | None) -> Path | None:
    """A file (or link, or anything) under ``folder`` that the suite did not write according to
    ``manifest``, or None. An empty folder holds none."""
    files = set(manifest.files) | {MANIFEST} if manifest else set()
    folders = tuple(manifest.folders) if manifest else ()
    for root, dirs, names in os.walk(folder):
        for name in sorted(names) + sorted(d for d in dirs if os.path.islink(os.path.join(root, d))):
            rel = Path(root, name).relative_to(folder).as_posix()
            if rel in files or any(rel == f or rel.startswith(f + "/") for f in folders):
                continue
            return Path(root, name)
    return None


def check_out(out: str | Path, *, command: str, flag: str = "--out", overwrite: bool = False,
              resume_hash: str | None = None, error: type[ValueError] = OutputError) -> None:
    """The ``--out`` rules (module doc), checked before any work. ``resume_hash``: the resolved
    config's hash when the command was given ``--resume`` (the folder must be that run's)."""
    out = Path(out)
    if not str(out).strip():
        raise error(f"{flag} is empty; give a folder path")
    reason = forbidden_reason(out)
    if reason:
        raise error(f"{flag} {out}: {reason}; give a new folder for the results, e.g. results/<name>")
    if resume_hash is not None and not out.exists():
        raise error(f"--resume: {out} does not exist, so there is nothing to resume; check {flag}, or run "
                    "without --resume")
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise error(f"{flag} {out} exists and is not a folder; choose another {flag}")
        manifest = Manifest.read(out)
        if resume_hash is not None:
            if manifest is None or manifest.command != command:
                raise error(f"--resume: {out} is not a {command} results folder (no manifest of it); "
                            f"check {flag}, or run without --resume")
            if manifest.config_sha256 != resume_hash:
                raise error(f"--resume: {out} holds a {command} run of another config; give the same options "
                            f"as the interrupted run, or another {flag}")
        elif overwrite:
            lost = foreign_file(out, manifest)
            if lost is not None:
                raise error(f"{flag} {out}: --overwrite would delete {lost}, which this suite did not write; "
                            f"choose another {flag} (only results folders of this suite are replaced)")
        else:
            raise error(f"{out} already exists; choose another {flag} or pass --overwrite to replace it "
                        "(runs are never mixed into an existing folder)")
    check_writable(out.parent if out.is_dir() else out, flag, error=error)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")


def check_writable(path: str | Path, flag: str = "--out", *, folder: bool = True,
                   error: type[ValueError] = OutputError) -> None:
    """Raise ``error`` unless ``path`` (a folder, or a file when not ``folder``) can be created or
    replaced: its nearest existing ancestor must be a folder in which a temporary entry can be made
    (and is removed at once). An existing folder given for a file, or file given for a folder, is
    refused. Creates nothing that stays."""
    import tempfile

    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise error(f"{flag} {path} is an existing file; give a folder path")
    if not folder and path.is_dir():
        raise error(f"{flag} {path} is an existing folder; give a file path")
    where = path if folder and path.is_dir() else _nearest_existing(path.parent if not folder else path)
    if not where.is_dir():
        raise error(f"{flag} {path} is under the file {where}; give a path in a folder")
    try:
        probe = tempfile.mkdtemp(dir=where, prefix=".write-probe-")
        os.rmdir(probe)
    except OSError as err:
        raise error(f"{flag} {path}: cannot write in {where} ({err.strerror}); give a writable location") from None


def lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


@contextlib.contextmanager
def claim(out: str | Path, *, flag: str = "--out", error: type[ValueError] = OutputError) -> Iterator[None]:
    """Hold the lock of ``out`` (``.<name>.lock`` beside it) while the body runs; ``error`` at once
    when another live process holds it."""
    lock = lock_path(Path(out).absolute())
    made = [p for p in (lock.parent, *lock.parent.parents) if not p.exists()]
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = json.loads(lock.read_text() or "{}")
            except (OSError, ValueError):
                owner = {}
            if owner.get("host") == me["host"] and str(owner.get("pid", "")).isdigit() \
                    and not _pid_alive(int(owner["pid"])):
                lock.unlink(missing_ok=True)  # stale: its process is gone
                continue
            raise error(f"{flag} {out} is being written by another process ({owner or 'lock ' + str(lock)}); "
                        f"wait for it, or choose another {flag}") from None
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    else:
        raise error(f"{flag} {out}: cannot take the lock {lock}; remove it if no run is writing {out}")
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        for folder in made:  # the folders made for the lock, if the command left nothing in them
            try:
                folder.rmdir()
            except OSError:
                break


def written_files(folder: Path) -> tuple[str, ...]:
    """Every file under ``folder``, relative, sorted (what a build wrote)."""
    return tuple(sorted(Path(root, n).relative_to(folder).as_posix()
                        for root, _, names in os.walk(folder) for n in names))


def write_results_dir(out: str | Path, build: Callable[[Path], object], *, command: str, config_sha256: str,
                      version: int, replace: bool, folders: tuple[str, ...] = ()) -> Path:
    """``build(tmp)`` fills a temporary folder, a manifest listing what it wrote is added, and the
    folder is renamed to ``out`` (``iokit.files.atomic_write_dir``). An existing ``out`` is replaced
    only when ``replace`` (the caller checked it with ``check_out``: ``--overwrite`` or ``--resume``)
    and it still holds nothing the suite did not write (checked again right before the swap)."""
    out = Path(out)

    def fill(tmp: Path) -> None:
        build(tmp)
        files = tuple(f for f in written_files(tmp) if f != MANIFEST
                      and not any(f.startswith(d + "/") for d in folders))
        Manifest(command, config_sha256, version, "complete", files, folders).write(tmp)

    def replace_ok(old: Path) -> None:
        lost = foreign_file(old, Manifest.read(old)) if replace else old
        if lost is not None:
            raise OutputError(f"{out}: {lost} appeared while the run worked and was not written by this suite; "
                              f"the new results are in {out.name}.new-{os.getpid()} beside it")

    return atomic_write_dir(out, fill, replace_ok=replace_ok)

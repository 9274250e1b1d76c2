"""Results folders the suite owns, and the rules for ``--out``.

The rule above all: the suite deletes or replaces only what it wrote. Ownership is per file and per
command. Every results folder carries a manifest (``manifest.json``): the command that wrote it,
the hash of its resolved config, the results format version, its state (``running`` while a
resumable run keeps checkpoints in it, ``complete`` once written), every file the suite wrote there
(``files``: paths relative to the folder, sub-folders included) and the sub-folders it made
(``folders``: a listed folder's content is the suite's only file by file, as ``files`` lists it).
Then, checked before any work (``check_out``):

* ``--out`` may never be empty, ``/``, the home folder, the checkout's root, the current folder
  or one of its ancestors (they hold other things; no results folder is one of them);
* an existing ``--out`` is refused unless the command was told what to do with it;
* ``--overwrite`` replaces only an empty folder or one whose manifest names this command and lists
  every file in it, in every sub-folder (``overwrite_refusal``); any other is refused with one line
  naming the command that wrote it or a file it would have lost. A manifest of the suite that
  cannot be read refuses too (never a deletion on a guess);
* ``--resume`` continues only a folder whose manifest names the same command and the same resolved
  config (hash); the caller learns from the returned manifest whether that run is complete;
* a command that resumes by rerunning (``bench.grid``, ``bench.study``) writes only into a new or
  empty folder or its own (``check_own_folder``);
* ``claim(out)`` takes a lock beside ``--out`` (``.<name>.lock``, ``iokit.locks``): a second
  command writing the same ``--out`` at the same time stops at once; a stale lock (its process
  gone, empty for seconds, garbage) is taken over with a note.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from iokit import locks
from iokit.files import atomic_write_dir, atomic_write_text

MANIFEST = "manifest.json"
FORMAT_NAME = "fl-accel-bench-results"
STATES = ("running", "complete")
CHECKOUT_ROOT = Path(__file__).resolve().parents[1]


class OutputError(ValueError):
    """An output path that cannot be used: the message names it and says what to give instead."""


class ManifestError(OutputError):
    """A manifest of the suite that cannot be read: the message names the file."""


@dataclass(frozen=True)
class Manifest:
    """What the suite wrote into a results folder, and under which command and config."""

    command: str  # "bench.run", "bench.fl", "bench.grid", ...
    config_sha256: str  # config_hash of the resolved config
    version: int  # results format version of the files
    state: str = "complete"  # "running": a resumable run's checkpoints; "complete": the results
    files: tuple[str, ...] = ()  # every file the suite wrote, relative to the folder (sub-folders included)
    folders: tuple[str, ...] = ()  # sub-folders the suite made (checkpoints/, grid/); they own no content
    format: str = FORMAT_NAME

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "files": list(self.files), "folders": list(self.folders)}, indent=1) + "\n"

    @staticmethod
    def read(folder: Path) -> Manifest | None:
        """The manifest of ``folder``, or None when it has none, it cannot be read or it is not the
        suite's (``Manifest.load`` tells these apart)."""
        try:
            return Manifest.load(folder)
        except ManifestError:
            return None

    @staticmethod
    def load(folder: Path) -> Manifest | None:
        """The manifest of ``folder``; None when there is none or it is another program's (JSON
        without the suite's ``format``); ``ManifestError`` naming the file when it cannot be read
        (truncated, not UTF-8) or is the suite's with a field missing or of the wrong type."""
        path = Path(folder) / MANIFEST
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as err:
            raise ManifestError(f"{path} cannot be read ({type(err).__name__}: truncated, or not a manifest)") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            return None
        try:
            files, folders = data.get("files", []), data.get("folders", [])
            if not isinstance(files, list) or not isinstance(folders, list):
                raise TypeError("'files' and 'folders' must be lists")
            return Manifest(command=str(data["command"]), config_sha256=str(data["config_sha256"]),
                            version=int(data["version"]), state=str(data.get("state", "complete")),
                            files=tuple(map(str, files)), folders=tuple(map(str, folders)))
        except (KeyError, TypeError, ValueError) as err:
            raise ManifestError(f"{path} is not a complete manifest ({type(err).__name__}: {err})") from None

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
    """A file (or link, or anything) under ``folder``, in any sub-folder, that ``manifest`` does
    not list, or None. Per file: a folder the manifest names is no licence for its content; a
    sub-folder is the suite's only when the manifest names it or a listed file lies in it (an empty
    sub-folder of the user's counts too; in one that is not empty, what it holds is named). An
    empty folder holds none."""
    files = set(manifest.files) | {MANIFEST} if manifest else set()
    folders = {p.as_posix() for f in files for p in Path(f).parents} | set(manifest.folders if manifest else ())
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names) + sorted(dirs):
            path = Path(root, name)
            rel = path.relative_to(folder).as_posix()
            if name in dirs and not path.is_symlink():
                if rel in folders or _holds_something(path):
                    continue  # the suite's, or the user's with something in it, named when the walk gets there
                return path
            if rel not in files:
                return path
    return None


def _holds_something(folder: Path) -> bool:
    try:
        return any(folder.iterdir())
    except OSError:  # unreadable: named as it is
        return False


def overwrite_refusal(folder: Path, command: str) -> str | None:
    """Why ``command --overwrite`` may not replace ``folder`` (a line naming the command that wrote
    it, or a file it would lose), or None: the folder is empty, or its manifest names ``command``
    and lists every file under it."""
    try:
        manifest = Manifest.load(folder)
    except ManifestError as err:
        return f"{err}, so who wrote the folder is unknown and --overwrite does not replace it"
    if manifest is not None and manifest.command != command:
        return (f"it is a {manifest.command} results folder, and {command} --overwrite replaces only a folder "
                f"{command} wrote")
    lost = foreign_file(folder, manifest)
    if lost is not None:
        why = "its manifest does not list it" if manifest else "the folder has no manifest of this suite"
        return f"--overwrite would delete {lost}, which {command} did not write ({why})"
    return None


def out_folder(given: str | Path | None, default: str | Path, *, flag: str = "--out",
               error: type[ValueError] = OutputError) -> Path:
    """The ``--out`` a command was given (``given``; ``default`` when the flag was left out). An
    empty or blank ``--out ""`` is refused, never taken for the default or the current folder."""
    if given is None:
        return Path(default)
    if not str(given).strip():
        raise error(f"{flag} is empty; give a folder path, e.g. {flag} {default}")
    return Path(given)


def check_out(out: str | Path, *, command: str, flag: str = "--out", overwrite: bool = False,
              resume_hash: str | None = None, resume_files: tuple[str, ...] = (),
              error: type[ValueError] = OutputError) -> Manifest | None:
    """The ``--out`` rules (module doc), checked before any work. ``resume_hash``: the resolved
    config's hash when the command was given ``--resume`` (the folder must be that run's, and hold
    nothing but what its manifest or ``resume_files``, the files the resumed run writes there,
    list: a resumed run replaces the folder at its end). Returns the existing folder's manifest, if
    any (``--resume``: its ``state`` says whether the run is already complete)."""
    out = Path(out)
    if not str(out).strip():
        raise error(f"{flag} is empty; give a folder path")
    reason = forbidden_reason(out)
    if reason:
        raise error(f"{flag} {out}: {reason}; give a new folder for the results, e.g. results/<name>")
    if resume_hash is not None and not out.exists():
        raise error(f"--resume: {out} does not exist, so there is nothing to resume; check {flag}, or run "
                    "without --resume")
    manifest = None
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise error(f"{flag} {out} exists and is not a folder; choose another {flag}")
        if resume_hash is not None:
            try:
                manifest = Manifest.load(out)
            except ManifestError as err:
                raise error(f"--resume: {err}; check {flag}, or run without --resume") from None
            if manifest is None or manifest.command != command:
                what = "no manifest of this suite" if manifest is None else f"it is a {manifest.command} results folder"
                raise error(f"--resume: {out} is not a {command} results folder ({what}); check {flag}, or run "
                            "without --resume")
            if manifest.config_sha256 != resume_hash:
                raise error(f"--resume: {out} holds a {command} run of another config; give the same options "
                            f"as the interrupted run, or another {flag}")
            lost = foreign_file(out, Manifest(command, resume_hash, manifest.version,
                                              files=(*manifest.files, *resume_files)))
            if lost is not None:
                raise error(f"--resume: {out} holds {lost}, which {command} did not write, and a resumed run replaces "
                            f"the folder when it ends; move that file out of {out} first")
        elif overwrite:
            refusal = overwrite_refusal(out, command)
            if refusal is not None:
                raise error(f"{flag} {out}: {refusal}; choose another {flag}")
            manifest = Manifest.read(out)
        else:
            raise error(f"{out} already exists; choose another {flag} or pass --overwrite to replace it "
                        "(runs are never mixed into an existing folder)")
    check_writable(out.parent if out.is_dir() else out, flag, error=error)
    return manifest


def check_own_folder(out: str | Path, *, command: str, config_sha256: str, what: str,
                     error: type[ValueError] = OutputError) -> None:
    """``--out`` of a command that resumes by rerunning (``bench.grid``, ``bench.study``): a new or
    empty folder, or one whose manifest names ``command`` and ``config_sha256`` (``what`` names the
    thing the hash stands for, e.g. "grid (its name or runner differs)"). Anything else is refused
    before any work, naming why."""
    out = Path(out)
    reason = forbidden_reason(out)
    if reason:
        raise error(f"--out {out}: {reason}; give a new folder for the results, e.g. results/<name>")
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise error(f"--out {out} exists and is not a folder; choose another --out")
        try:
            manifest = Manifest.load(out)
        except ManifestError as err:
            raise error(f"--out {out}: {err}; choose another --out") from None
        if manifest is None:
            foreign = foreign_file(out, None)
            if foreign is not None:
                raise error(f"--out {out} holds files this suite did not write (e.g. {foreign}); choose another "
                            "--out")
        elif manifest.command != command:
            raise error(f"--out {out} is a {manifest.command} results folder, not a {command} one; choose another "
                        "--out")
        elif manifest.config_sha256 != config_sha256:
            raise error(f"--out {out} holds another {what}; choose another --out")
    check_writable(out, "--out", error=error)


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
    """Hold the lock of ``out`` (``.<name>.lock`` beside it, ``iokit.locks``) while the body runs;
    ``error`` at once when another live process holds it."""
    lock = lock_path(Path(out).absolute())
    made = [p for p in (lock.parent, *lock.parent.parents) if not p.exists()]
    holder = locks.take(lock)
    if holder is not None:
        raise error(f"{flag} {out} is being written by another process ({holder}); wait for it, or choose "
                    f"another {flag}")
    try:
        yield
    finally:
        locks.release(lock)
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
                      version: int, replace: bool) -> Path:
    """``build(tmp)`` fills a temporary folder, a manifest listing every file it wrote is added,
    and the folder is renamed to ``out`` (``iokit.files.atomic_write_dir``). An existing ``out`` is
    replaced only when ``replace`` (the caller checked it with ``check_out``: ``--overwrite`` or
    ``--resume``) and it still may be (``overwrite_refusal``, checked again right before the swap)."""
    out = Path(out)

    def fill(tmp: Path) -> None:
        build(tmp)
        files = tuple(f for f in written_files(tmp) if f != MANIFEST)
        folders = tuple(sorted(Path(root, d).relative_to(tmp).as_posix() for root, dirs, _ in os.walk(tmp) for d in dirs))
        Manifest(command, config_sha256, version, "complete", files, folders).write(tmp)

    def replace_ok(old: Path) -> None:
        refusal = overwrite_refusal(old, command) if replace else f"{old} appeared"
        if refusal is not None:
            raise OutputError(f"{out} changed while the run worked ({refusal}); the old folder is kept and the new "
                              f"results are in {out.name}.new-{os.getpid()} beside it")

    return atomic_write_dir(out, fill, replace_ok=replace_ok)

"""Files and folders read and written safely.

* ``existing_file``: the checks an input file gets before it is read (empty name, a folder, missing).
* ``atomic_write`` / ``atomic_write_text``: a temporary file beside the target, renamed over it once
  complete (``os.replace`` is atomic within a folder), so a reader never sees half a file. The
  temporary file comes from ``mkstemp`` (private, 0600); before the rename it gets the mode
  ``open()`` would have given (0666 less the process umask).
* ``atomic_write_dir``: a whole folder filled in a temporary sibling and renamed at the end.
  Whether an existing folder may be replaced is decided before any work by ``iokit.outputs``
  (the suite replaces only folders it wrote).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from iokit.locks import pid_alive


def existing_file(path: str | Path, error: type[Exception], what: str, *, empty_hint: str) -> Path:
    """``path`` as a ``Path`` when it names a readable regular file; raises ``error`` otherwise
    (``what`` names the kind of file, ``empty_hint`` says what to give when the name is empty)."""
    if not str(path).strip():
        raise error(f"the {what} file name is empty: {empty_hint}")
    path = Path(path)
    if path.is_dir():
        raise error(f"{path}: is a folder, not a {what} file")
    if not path.exists():
        raise error(f"{path}: no such {what} file")
    if not path.is_file():
        raise error(f"{path}: is not a regular file (a device or a pipe); give a {what} file")
    return path


def umask() -> int:
    """The process umask (``os.umask`` can only be read by setting it, so it is set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``path`` (same suffix), then rename it over
    ``path``. If ``write`` raises (or Ctrl-C interrupts it), nothing is left behind and ``path`` is
    untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=(path.suffix or "") + ".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """``atomic_write`` of UTF-8 text (newlines written as given)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8", newline=""))


def _partial_prefix(out: Path) -> str:
    return f".{out.name}."


def remove_stale_partials(out: str | Path) -> list[Path]:
    """Remove the temporary folders an interrupted ``atomic_write_dir`` of ``out`` left beside it
    (``.<name>.pid<N>-<random>.partial`` whose process is gone); returns them. Only folders of
    exactly that form are touched (the suite made them); one of a live process is kept."""
    out = Path(out)
    removed = []
    if not out.parent.is_dir():
        return removed
    for tmp in out.parent.glob(f"{_partial_prefix(out)}pid*.partial"):
        pid = tmp.name[len(_partial_prefix(out)) + 3:-len(".partial")].split("-")[0]
        if not tmp.is_dir() or not pid.isdigit() or pid_alive(int(pid)):
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def atomic_write_dir(out: str | Path, build: Callable[[Path], object], *,
                     replace_ok: Callable[[Path], None] | None = None) -> Path:
    """Call ``build(tmp)`` to fill a fresh temporary folder beside ``out``
    (``.<name>.pid<N>-<random>.partial``), then rename it to ``out``: a reader never sees half a
    folder. An existing ``out`` is replaced only when ``replace_ok`` is given; it is called on the
    old folder right before the swap (and raises if the folder may not be replaced, e.g. a file the
    suite did not write appeared meanwhile: the new folder is then kept beside it, named in the
    error). If ``build`` raises (or Ctrl-C / SIGTERM interrupts it) the temporary folder is
    removed. The folder gets the mode ``mkdir`` would give (0777 less the umask)."""
    out = Path(out)
    if out.exists() and replace_ok is None:
        raise FileExistsError(f"{out} already exists")
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(out)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f"{_partial_prefix(out)}pid{os.getpid()}-", suffix=".partial"))
    try:
        os.chmod(tmp, 0o777 & ~umask())
        build(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not out.exists():
        os.replace(tmp, out)
        return out
    try:
        replace_ok(out)
    except BaseException:
        kept = out.with_name(f"{out.name}.new-{os.getpid()}")
        os.replace(tmp, kept)
        raise
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old)
    return out

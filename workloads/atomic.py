"""Write files so that a reader never sees half of one: a temporary file beside the target, renamed
over it once complete (``os.replace`` is atomic within a folder).

The temporary file comes from ``mkstemp``, which creates it private (0600); before the rename it
gets the mode ``open()`` would have given (0666 less the process umask: 0644 usually).
``accel_sim.trace_schema.dump_trace`` does the same for traces on its own, since accel_sim imports
nothing of the project.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def _umask() -> int:
    """The process umask (``os.umask`` can only be read by setting it, so it is set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``path`` (same suffix), then rename it over
    ``path``. If ``write`` raises, nothing is left behind and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix or ".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """``atomic_write`` of UTF-8 text (newlines written as given)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8", newline=""))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _partial_prefix(out: Path) -> str:
    return f".{out.name}."


def remove_stale_partials(out: str | Path) -> list[Path]:
    """Remove the temporary folders an interrupted ``atomic_write_dir`` of ``out`` left beside it
    (``.<name>.pid<N>-<random>.partial`` whose process is gone, and any older
    ``.<name>.<random>.partial`` without a pid); returns them. A folder of a live process (another
    run writing the same output right now) is kept."""
    out = Path(out)
    removed = []
    if not out.parent.is_dir():
        return removed
    for tmp in out.parent.glob(f"{_partial_prefix(out)}*.partial"):
        middle = tmp.name[len(_partial_prefix(out)):-len(".partial")]
        pid = middle[3:].split("-")[0] if middle.startswith("pid") else ""
        if pid.isdigit() and _pid_alive(int(pid)):
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def atomic_write_dir(out: str | Path, build: Callable[[Path], object], *, overwrite: bool) -> Path:
    """Call ``build(tmp)`` to fill a fresh temporary folder beside ``out``
    (``.<name>.pid<N>-<random>.partial``), then rename it to ``out``: a reader never sees half a
    folder. An existing ``out`` is refused (FileExistsError) unless ``overwrite``, and is removed
    only after the new one is complete. If ``build`` raises (or Ctrl-C / SIGTERM interrupts it)
    the temporary folder is removed. The folder gets the mode ``mkdir`` would give (0777 less the
    umask), not ``mkdtemp``'s private 0700."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(out)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f"{_partial_prefix(out)}pid{os.getpid()}-", suffix=".partial"))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        build(tmp)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out

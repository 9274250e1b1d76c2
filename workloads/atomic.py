"""Write files so that a reader never sees half of one: a temporary file beside the target, renamed
over it once complete (``os.replace`` is atomic within a folder).

The temporary file comes from ``mkstemp``, which creates it private (0600); before the rename it
gets the mode ``open()`` would have given (0666 less the process umask: 0644 usually).
``accel_sim.trace_schema.dump_trace`` does the same for traces on its own, since accel_sim imports
nothing of the project.
"""

from __future__ import annotations

import os
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

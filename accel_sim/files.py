"""The checks every input file of accel_sim gets before it is read (TOML configs, traces): one
error, naming the file, for an empty name, a folder or a missing file."""

from __future__ import annotations

from pathlib import Path


def existing_file(path: str | Path, error: type[Exception], what: str, *, empty_hint: str) -> Path:
    """``path`` as a ``Path`` when it names a file; raises ``error`` otherwise (``what`` names the
    kind of file, ``empty_hint`` says what to give when the name is empty)."""
    if not str(path).strip():
        raise error(f"the {what} file name is empty: {empty_hint}")
    path = Path(path)
    if path.is_dir():
        raise error(f"{path}: is a folder, not a {what} file")
    if not path.is_file():
        raise error(f"{path}: no such {what} file")
    return path

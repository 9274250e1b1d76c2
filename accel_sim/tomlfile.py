"""Reading a TOML file of the project's (hardware config, system model): one error, naming the
file, for a missing file, bad TOML or bytes that are not text."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


def read_toml(path: str | Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The top-level table of the TOML file ``path``; raises ``error`` naming the file otherwise
    (``what`` names the kind of file: "hardware config", "system-model")."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: no such {what} file")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: not valid TOML ({e})") from None

"""Reading a TOML file of the project's (hardware config, system model, preset, grid, study, space):
one error, naming the file, for an empty name, a folder, a missing or unreadable file, bad TOML,
bytes that are not text, or nesting too deep for the parser."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from iokit.files import existing_file


def read_toml(path: str | Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The top-level table of the TOML file ``path``; raises ``error`` naming the file otherwise
    (``what`` names the kind of file: "hardware config", "system-model", "preset", ...)."""
    path = existing_file(path, error, what, empty_hint="give a TOML file, or leave the option out for the defaults")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"{path}: cannot read the {what} file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not valid TOML: byte {e.object[e.start]:#04x} at offset {e.start} is not UTF-8 text") from None
    if not text.strip():
        raise error(f"{path}: the {what} file is empty")
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise error(f"{path}: not a {what} file: nested too deeply") from None
    except (tomllib.TOMLDecodeError, ValueError) as e:  # ValueError: an integer too long to convert
        raise error(f"{path}: not valid TOML ({e})") from None

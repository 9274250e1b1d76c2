"""What a value *is*, as opposed to how it was spelled (issue 46).

Two rules, each used wherever the question comes up:

* **a run is the content of everything it reads**: a file a run reads (a fleet, a hardware or a
  system file) is identified by the SHA-256 of its bytes; its path is kept for display only.
  ``contents`` records them, ``changed`` says which of them differ from a record, so that a run
  recorded with one content is never taken for a run of another (``bench.fl --resume`` hashes the
  resolved config the same way; a study's finished runs are checked by ``bench.lib.grid.engine``);
* **each value once, by what it resolves to**: ``distinct_resolved`` refuses two spellings of one
  value (``"mixed"`` and ``"configs/fleets/mixed.toml"``; ``f.toml`` and ``./f.toml``), naming
  both spellings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def file_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of the bytes of the file at ``path``; "missing" when it cannot be read (a
    record of a file that is gone then differs from any file that exists)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def contents(files: Mapping[str, str | Path | None]) -> dict[str, dict[str, str]]:
    """``{role: {"path": path as given, "sha256": its content's hash}}`` for every role whose
    file is given (None: the run reads none)."""
    return {role: {"path": str(path), "sha256": file_sha256(path)} for role, path in files.items()
            if path is not None}


def changed(recorded: Any, current: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The files whose content differs between a record's ``contents`` and ``current``, in words
    (``fleet f.toml``), in role order; ``[]`` when they agree. A record written before runs recorded
    their files (``recorded`` None) is taken as it is: nothing to compare."""
    if recorded is None:
        return []
    if not isinstance(recorded, Mapping):
        return ["its record of the files it read"]
    roles = list(dict.fromkeys((*current, *recorded)))
    sha = lambda table, role: table[role].get("sha256") if isinstance(table.get(role), Mapping) else None  # noqa: E731
    path = lambda role: (current.get(role) or recorded.get(role) or {}).get("path", "?")  # noqa: E731
    return [f"{role} {path(role)}" for role in roles if sha(recorded, role) != sha(current, role)]

def distinct_resolved(values: Sequence[str], resolve: Callable[[str], Any], *, name: str,
                      error: type[Exception] = ValueError) -> list[str]:
    """``values`` unchanged when no two resolve to the same thing (``resolve(value)``: a resolved
    file path, a canonical name); else ``error`` naming both spellings."""
    seen: dict[Any, str] = {}
    for value in values:
        key = resolve(value)
        if key in seen:
            same = "is" if seen[key] == value else f"and {value!r} are"
            raise error(f"{name}: {seen[key]!r} {same} given twice (both are {key}); give each once")
        seen[key] = value
    return list(values)


def resolved_file(path: str | Path) -> str:
    """A file's identity for ``distinct_resolved``: its absolute, symlink-free path."""
    return str(Path(path).expanduser().resolve())

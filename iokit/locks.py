"""Lock files: one process at a time writes a thing (a results folder, a grid point).

A lock is a file created exclusively (``O_CREAT | O_EXCL``) that holds ``{"pid": N, "host": H}``
of the process holding it. Every partial state a crash can leave is handled:

* a lock whose process is gone (same host, ``os.kill(pid, 0)`` says no such process) is stale;
* a lock whose content is complete but names no valid owner (a JSON list, ``"pid": "abc"``, a pid
  outside 1 .. 2**31 - 1, no host) is stale: the suite never writes one;
* a lock that is empty or half-written (a crash between creating and writing it) is being written
  right now while it is younger than ``LOCK_GRACE_S``, and stale once older;
* a lock of a live process, or of another host (whose processes cannot be checked), is held.

A stale lock is removed and taken over with one line on stderr saying so. Two processes that find
the same stale lock at the same instant may both remove it; the exclusive create still lets only
one of them in, unless the second removes the first's fresh lock in the microseconds between: the
window is that of ``unlink`` after a read, accepted here (locks guard against a second command, not
an adversary).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

LOCK_GRACE_S = 5.0  # an empty or half-written lock younger than this may be being written
PID_MAX = 2**31 - 1  # pids are C ints; anything outside 1 .. PID_MAX names no process


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` (1 .. PID_MAX) exists on this host (one we may not signal counts)."""
    if not 1 <= pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(data: object) -> dict | None:
    """``{"pid": int, "host": str}`` of a lock's parsed content, or None when it names no valid owner."""
    if not isinstance(data, dict):
        return None
    pid, host = data.get("pid"), data.get("host")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 1 <= pid <= PID_MAX or not isinstance(host, str):
        return None
    return {"pid": pid, "host": host}


def _parsed(text: str) -> tuple[bool, object]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def holder(lock: Path) -> tuple[str, str | None]:
    """Who holds ``lock`` (a line for a message) and why it is stale (None while it is held).
    A lock that vanished meanwhile is stale ("gone")."""
    try:
        text = lock.read_text(encoding="utf-8", errors="replace")
        age_s = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return "nobody", "gone"
    except OSError as err:
        return f"unknown: the lock {lock} cannot be read ({err.strerror}): remove it if no run is writing", None
    complete, data = _parsed(text)
    owner = _owner(data)
    if owner is None:
        if complete:
            return "nobody", 'it names no valid process (not {"pid": N, "host": H})'
        if age_s >= LOCK_GRACE_S:
            return "nobody", f"{'empty' if not text.strip() else 'half-written'} for {age_s:.0f} s (left by a crash)"
        return (f"a process writing the lock {lock} right now (empty or half-written for {age_s:.1f} s: if no "
                f"run is writing, it is taken over once {LOCK_GRACE_S:g} s old)"), None
    if owner["host"] == socket.gethostname() and not pid_alive(owner["pid"]):
        return "nobody", f"its process {owner['pid']} is gone"
    where = "" if owner["host"] == socket.gethostname() else f" on host {owner['host']}"
    return f"process {owner['pid']}{where}; the lock {lock}: remove it if no run is writing", None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def take(lock: str | Path, *, say: Callable[[str], None] = _say) -> str | None:
    """Create ``lock`` holding this process's pid and host: None once taken, else who holds it (a
    line). A stale lock (module doc) is removed, ``say`` tells which and why, and taken over."""
    lock = Path(lock)
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            who, stale = holder(lock)
            if stale is None:
                return who
            lock.unlink(missing_ok=True)
            if stale != "gone":
                say(f"note: took over the stale lock {lock}: {stale}")
            continue
        with os.fdopen(fd, "w") as f:
            f.write(me)
        return None
    return f"a process that takes the lock {lock} again at every try"


def release(lock: str | Path) -> None:
    """Remove ``lock`` if this process holds it (a lock another process took over is left)."""
    lock = Path(lock)
    try:
        owner = _owner(_parsed(lock.read_text(encoding="utf-8"))[1])
    except OSError:
        return
    if owner is None or (owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()):
        lock.unlink(missing_ok=True)

"""The rule every command follows on bad input (issue: fail fast and clean), as one assertion the
per-command test tables share: non-zero exit, exactly one line on stderr naming the input, no
traceback, and no new (or changed) file or folder under the watched folder."""

from __future__ import annotations

import os
from pathlib import Path


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root``, with size and modification time (ns) for files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            # a folder's own mtime moves when the up-front write probe makes and removes an entry in it
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns) if name in filenames else (0, 0)
    return out


def assert_fails_clean(main, argv: list[str], capsys, watched: Path, names: str | tuple[str, ...], *,
                       code: int = 2) -> str:
    """Run ``main(argv)`` in-process; assert the rule and that the one stderr line holds each of
    ``names`` (the input it names, and the fix or the reason: not a whole sentence, so that a
    rewording breaks nothing that matters); return the line."""
    capsys.readouterr()
    before = snapshot(watched)
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    for name in (names,) if isinstance(names, str) else names:
        assert name in lines[0], (name, lines[0])
    assert snapshot(watched) == before, "the failed command left or changed files"
    return lines[0]


def workspace(root: Path, *, out_with: str | None = None) -> Path:
    """The inputs the command tables share, under ``root``: a binary TOML (``binary.toml``), a plain
    file (``afile``: an --out under it cannot be a folder) and a folder ``existing`` (holding
    ``out_with``, a results file of the command, when given)."""
    (root / "binary.toml").write_bytes(b"\x00\xff\xfe\x80 = 1\n")
    (root / "afile").write_text("x")
    (root / "existing").mkdir()
    if out_with:
        (root / "existing" / out_with).write_text("{}")
    return root


def as_in_a_terminal() -> None:
    """``preexec_fn`` of a command started to be interrupted: SIGINT at its default, as a command run
    in a terminal has it (a test run started in the background by a non-interactive shell passes
    SIGINT on ignored, and Python keeps an ignored SIGINT ignored: no KeyboardInterrupt to test)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)

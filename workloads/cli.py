"""What every command of the suite shares to fail fast and clean (docs/architecture.md, "Commands").

The rule: every input is checked before the work starts; a bad one gets one line on stderr that
names the input and the fix, a non-zero exit (2 for bad input), no traceback, and no file or folder
left behind. This module holds the pieces the commands share:

* :class:`Parser`: ``argparse`` whose errors are one line (``error: argument --seed: ...``) instead
  of the usage block, raised as :class:`UsageError` so that a grid point built from argv
  (``bench.run.run_point``) fails alone instead of exiting the whole grid;
* numeric flag types with documented bounds (:func:`int_in`, :func:`finite_float`) and the bounds
  themselves (``SEED_MAX``, ``BATCH_SIZE_MAX``, ``CLASSES_MAX``);
* output checks done before any work: :func:`check_writable` (probe the nearest existing folder by
  creating and removing a temporary entry) and :func:`check_out_dir` (the ``--overwrite`` rule);
* :func:`command`: a decorator for ``main(argv)`` that prints a :class:`UsageError` as one line
  (exit 2), turns SIGTERM into the same clean interruption as Ctrl-C and prints one line for it
  (exit 130, 128 + SIGINT as shells report it).

Nothing here imports torch or the FL code: ``bench`` and ``workloads`` both use it.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, Sequence

# Bounds of the numeric flags, each the largest value the suite can represent or afford:
SEED_MAX = 2**31 - 1  # numpy and torch take any seed up to 2**32 - 1; the code adds small offsets (seed + 1)
BATCH_SIZE_MAX = 65_536  # the priced step's inputs and targets are made on the CPU first: 65,536 x 3x32x32 fp32 = 805 MB
CLASSES_MAX = 25_000  # classifiers are built on the CPU first: 1,280 features x 25,000 classes fp32 = 128 MB; ImageNet-21k has 21,841
EXIT_USAGE = 2  # bad input (argparse's code)
EXIT_INTERRUPTED = 130  # 128 + SIGINT


class UsageError(ValueError):
    """A bad command-line argument; the message names it and says what to give instead."""


class OutputError(ValueError):
    """An output path that cannot be written, or that already exists without ``--overwrite``."""


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors raise :class:`UsageError` with one line (no usage
    block: ``--help`` shows it). ``--help`` itself still prints and exits 0."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise UsageError(f"{message} (python -m {self.prog.removeprefix('python -m ')} --help lists the options)")


def int_in(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer in [low, high] (argparse prefixes the flag's name to the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer; give one in [{low}, {high:,}]") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range; give an integer in [{low}, {high:,}]")
        return value

    parse.__name__ = "integer"
    return parse


def finite_float(*, positive: bool = False) -> Callable[[str], float]:
    """argparse type: a finite float (no nan or inf), > 0 when ``positive``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or (positive and not value > 0):
            raise argparse.ArgumentTypeError(f"{text!r}: give a finite number{' > 0' if positive else ''}")
        return value

    parse.__name__ = "number"
    return parse


def check_folder(path: str | Path, flag: str) -> Path:
    """An existing folder given by ``flag``; ValueError saying which of missing / a file it is."""
    path = Path(path).expanduser()
    if not path.exists():
        raise UsageError(f"{flag} {path} does not exist; give an existing folder")
    if not path.is_dir():
        raise UsageError(f"{flag} {path} is a file, not a folder; give the folder that holds the data")
    return path


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")


def check_writable(path: str | Path, flag: str = "--out", *, folder: bool = True) -> None:
    """Raise OutputError unless ``path`` (a folder, or a file when not ``folder``) can be created or
    replaced: its nearest existing ancestor must be a folder in which a temporary entry can be made
    (and is removed at once). An existing folder given for a file, or file given for a folder, is
    refused. Creates nothing that stays."""
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path} is an existing file; give a folder path")
    if not folder and path.is_dir():
        raise OutputError(f"{flag} {path} is an existing folder; give a file path")
    where = path if folder and path.is_dir() else _nearest_existing(path.parent if not folder else path)
    if not where.is_dir():
        raise OutputError(f"{flag} {path} is under the file {where}; give a path in a folder")
    try:
        probe = tempfile.mkdtemp(dir=where, prefix=".write-probe-")
        os.rmdir(probe)
    except OSError as err:
        raise OutputError(f"{flag} {path}: cannot write in {where} ({err.strerror}); "
                          "give a writable location") from None


def check_out_dir(out: str | Path, *, overwrite: bool, flag: str = "--out",
                  error: type[ValueError] = OutputError) -> None:
    """The ``--overwrite`` rule of every command that writes a results folder: an existing folder is
    only replaced with ``overwrite`` (runs are never mixed into one), and the location must be
    writable. Checked before any work."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise error(f"{flag} {out} exists and is not a folder; choose another {flag}")
    if out.exists() and not overwrite:
        raise error(f"{out} already exists; choose another {flag} or pass --overwrite to replace it "
                    "(runs are never mixed into an existing folder)")
    check_writable(out.parent if out.is_dir() else out, flag)  # the new folder is made beside the old one


def _raise_interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt


def command(interrupted: str = "interrupted; nothing written") -> Callable:
    """Decorator for a command's ``main(argv) -> int``: a :class:`UsageError` (or
    :class:`OutputError`) escaping it prints ``error: <message>`` as one line and returns 2; Ctrl-C
    or SIGTERM (handled like Ctrl-C while it runs) prints ``interrupted`` and returns 130. The
    command's temporary folders are removed by its own ``finally`` / ``except BaseException``."""

    def wrap(main: Callable[[Sequence[str] | None], int]) -> Callable[[Sequence[str] | None], int]:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            in_main_thread = threading.current_thread() is threading.main_thread()
            previous = signal.signal(signal.SIGTERM, _raise_interrupt) if in_main_thread else None
            try:
                return main(argv)
            except (UsageError, OutputError) as err:
                print(f"error: {err}", file=sys.stderr)
                return EXIT_USAGE
            except KeyboardInterrupt:
                print(interrupted, file=sys.stderr)
                return EXIT_INTERRUPTED
            finally:
                if in_main_thread:
                    signal.signal(signal.SIGTERM, previous)

        return run

    return wrap

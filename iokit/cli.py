"""What every command of the suite shares to fail fast and clean (docs/cli.md).

The rule: every input is checked before the work starts; a bad one gets one line on stderr that
names the input and the fix, exit 2, no traceback, and no file or folder left behind. Pieces:

* :class:`Parser`: ``argparse`` whose errors are one line instead of the usage block, raised as
  :class:`UsageError`; an empty value (``--study ""``) is one of them, for every option and
  argument: an empty string never means "not given" (:func:`empty_values`);
* flag types with bounds (:func:`int_in`, :func:`finite_float`, :func:`names`), built on
  ``iokit.checks`` so that a flag and a config key give the same message;
* :func:`check_folder` for input folders (``--data-dir``); ``iokit.outputs`` for ``--out``;
* :func:`bad_input` / :func:`run_failure`: the two phases of a command: while its inputs are
  checked, any ``ValueError`` (a library's one-line refusal) is bad input (exit 2); once the work
  runs, a ``ValueError`` or ``FloatingPointError`` (a diverged run) is a failed run (exit 1);
* :func:`command`: the decorator of every command's ``main(argv)``: a ``UsageError`` /
  ``OutputError`` escaping it prints ``error: <message>`` (exit 2), a ``RunFailed`` the same
  (exit 1); Ctrl-C
  prints the command's interruption line and exits 130 (128 + SIGINT), SIGTERM the same line and
  143 (128 + SIGTERM); the command's own ``finally`` blocks remove its temporary files first.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from iokit import checks
from iokit.outputs import OutputError

EXIT_USAGE = 2  # bad input (argparse's code)
EXIT_FAILED = 1  # the work itself failed (a run diverged, a results folder could not be written)
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


class UsageError(ValueError):
    """A bad command-line argument or input; the message names it and says what to give instead."""


class RunFailed(RuntimeError):
    """The work itself failed after its inputs were accepted (exit 1); the message says why."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be so that the same clean-up runs."""


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors raise :class:`UsageError` with one line (no usage
    block: ``--help`` shows it). ``--help`` itself still prints and exits 0."""

    def error(self, message: str):
        raise UsageError(f"{message} (python -m {self.prog.removeprefix('python -m ')} --help lists the options)")

    def parse_known_args(self, args=None, namespace=None):
        parsed, extra = super().parse_known_args(args, namespace)
        empty = empty_values(self, parsed)
        if empty:
            raise UsageError(empty[0])
        return parsed, extra


def empty_values(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> list[str]:
    """One line per option or argument of ``parser`` given an empty (or blank) string in ``parsed``:
    the one rule of every path-valued option (``--out ""``, ``--study ""``, ``--fleet ""``) and of
    every other text: an empty value is an error naming the flag, never "not given" (which would
    let ``--study "" --target 50`` pass the rule that ``--target`` needs ``--run``) and never the
    current folder (``Path("")`` is ``.``)."""
    lines = []
    for action in parser._actions:  # argparse keeps its actions there; no public accessor
        value = getattr(parsed, action.dest, None) if action.dest != argparse.SUPPRESS else None
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            flag = "/".join(action.option_strings) or action.dest
            said = (action.help or "").split(" (")[0].split(";")[0].split(":")[0].strip()  # its help's first words
            what = " ".join(filter(None, (said or "a value", f"({action.metavar})" if action.metavar else "")))
            lines.append(f"{flag} is empty; give {what}"
                         + (f", or drop {flag}" if action.option_strings and not action.required else ""))
    return lines


class Default(str):
    """A text flag's default (``default=Default(path)``), told apart from the same text typed:
    ``--system configs/system/default.toml`` beside ``--fleet`` is refused like any other system file,
    though it names the default one (``is_default``)."""


def is_default(value: object) -> bool:
    """True for a flag's ``Default`` value, False for anything the user gave."""
    return isinstance(value, Default)


def int_in(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer in [low, high] (argparse prefixes the flag's name to the message)."""

    def parse(text: str) -> int:
        return checks.parse_integer(text, low, high, error=argparse.ArgumentTypeError)

    parse.__name__ = "integer"
    return parse


def finite_float(*, positive: bool = False, low: float | None = None, high: float | None = None) -> Callable[[str], float]:
    """argparse type: a finite float (no nan or inf), > 0 when ``positive``, within [low, high]."""

    def parse(text: str) -> float:
        lo = 0.0 if positive else (-float("inf") if low is None else low)
        hi = float("inf") if high is None else high
        return checks.parse_number(text, lo, hi, error=argparse.ArgumentTypeError, low_open=positive)

    parse.__name__ = "number"
    return parse


def check_folder(path: str | Path, flag: str) -> Path:
    """An existing folder given by ``flag``; UsageError saying which of missing / a file it is."""
    path = Path(path).expanduser()
    if not str(path).strip():
        raise UsageError(f"{flag} is empty; give an existing folder")
    if not path.exists():
        raise UsageError(f"{flag} {path} does not exist; give an existing folder")
    if not path.is_dir():
        raise UsageError(f"{flag} {path} is a file, not a folder; give the folder that holds the data")
    return path


def distinct(values: Sequence, flag: str) -> list:
    """``values`` of a list flag, refused when one is given twice."""
    return checks.distinct(values, name=flag, error=UsageError)


@contextlib.contextmanager
def bad_input() -> Iterator[None]:
    """Inputs being checked: a ``ValueError`` (each library's one-line refusal, ``SystemExit`` of
    a user's model factory included where the library turns it into one) becomes a ``UsageError``."""
    try:
        yield
    except (UsageError, OutputError):
        raise
    except ValueError as err:
        raise UsageError(str(err)) from None


@contextlib.contextmanager
def run_failure() -> Iterator[None]:
    """The work running: a ``ValueError`` or ``FloatingPointError`` (a diverged run, a results
    folder another process took) becomes ``RunFailed`` (exit 1)."""
    try:
        yield
    except (ValueError, FloatingPointError) as err:
        raise RunFailed(str(err)) from None


def _terminate(signum, frame):
    raise Terminated


def command(interrupted: str = "interrupted; nothing written") -> Callable:
    """Decorator for a command's ``main(argv) -> int`` (module doc). ``interrupted`` is the line
    printed on Ctrl-C / SIGTERM: what was kept, or that nothing was written."""

    def wrap(main: Callable[[Sequence[str] | None], int]) -> Callable[[Sequence[str] | None], int]:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            in_main_thread = threading.current_thread() is threading.main_thread()
            previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
            try:
                return main(argv)
            except (UsageError, OutputError) as err:
                print(f"error: {err}", file=sys.stderr)
                return EXIT_USAGE
            except RunFailed as err:
                print(f"error: {err}", file=sys.stderr)
                return EXIT_FAILED
            except Terminated:
                print(interrupted, file=sys.stderr)
                return EXIT_TERMINATED
            except KeyboardInterrupt:
                print(interrupted, file=sys.stderr)
                return EXIT_INTERRUPTED
            finally:
                if in_main_thread:
                    signal.signal(signal.SIGTERM, previous)

        return run

    return wrap

"""One set of input checks for every command-line flag and config table of the suite.

Each check raises ``error`` (a ``ValueError`` subclass chosen by the caller, so a hardware file
raises ``HardwareConfigError`` and a flag ``UsageError``) with one line that names the input and
says what to give instead. The bounds of the suite's shared numbers live here, each the largest
value the suite can represent or afford.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from typing import Any

SEED_MAX = 2**31 - 1  # numpy and torch take any seed up to 2**32 - 1; the code adds small offsets (seed + 1)
BATCH_SIZE_MAX = 65_536  # the priced step's inputs are made on the CPU first: 65,536 x 3x32x32 fp32 = 805 MB
CLASSES_MAX = 25_000  # classifiers are built on the CPU first: 1,280 x 25,000 fp32 = 128 MB; ImageNet-21k has 21,841
ROUNDS_MAX = 100_000  # 1,000 times the paper's 100 (SphereFed appendix Tab. 16)
THREADS_MAX = 1_024
WORKERS_MAX = 1_024


def _named(name: str, value: Any) -> str:
    """``name = value`` for a config key; the value alone for a flag (argparse names the flag)."""
    return f"{name} = {value!r}" if name else repr(value)


def integer_in(value: Any, low: int, high: int, *, name: str = "", error: type[Exception] = ValueError) -> int:
    """``value`` if it is an integer (not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{_named(name, value)} must be an integer in [{low:,}, {high:,}]")
    if not low <= value <= high:
        raise error(f"{_named(name, value)} is out of range; give an integer in [{low:,}, {high:,}]")
    return value


def number_in(value: Any, low: float, high: float, *, name: str = "", error: type[Exception] = ValueError,
              low_open: bool = False) -> float:
    """``value`` if it is a finite number (not a bool) in ``[low, high]`` (``(low, high]`` when
    ``low_open``)."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{_named(name, value)} must be a number in {interval}")
    if not math.isfinite(value) or not (low < value if low_open else low <= value) or not value <= high:
        raise error(f"{_named(name, value)} is out of range; give a number in {interval}")
    return value


def parse_integer(text: str, low: int, high: int, *, name: str = "", error: type[Exception] = ValueError) -> int:
    """An integer written in ``text``, in ``[low, high]``."""
    try:
        value = int(text)
    except ValueError:
        raise error(f"{_named(name, text)} is not an integer; give one in [{low:,}, {high:,}]") from None
    return integer_in(value, low, high, name=name, error=error)


def parse_number(text: str, low: float = -math.inf, high: float = math.inf, *, name: str = "",
                 error: type[Exception] = ValueError, low_open: bool = False) -> float:
    """A finite number written in ``text``, in ``[low, high]``."""
    try:
        value = float(text)
    except ValueError:
        raise error(f"{_named(name, text)} is not a number") from None
    if not math.isfinite(value):
        raise error(f"{_named(name, text)}: give a finite number")
    return number_in(value, low, high, name=name, error=error, low_open=low_open)


def value_key(value: Any) -> Any:
    """A hashable key equal for equal values: numbers by value (``1`` and ``1.0`` are one value, as
    Python's ``==`` says; ``True`` is not the number 1), strings as themselves, lists and tables
    element by element (a table's keys in sorted order)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, Mapping):
        return ("table", tuple(sorted((str(k), value_key(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(value_key(v) for v in value))
    return ("repr", repr(value))


def distinct(values: Sequence[Any], *, name: str, error: type[Exception] = ValueError) -> list[Any]:
    """``values`` as a list when no value is given twice (by value: ``value_key``); else one line
    naming the repeated value."""
    seen: dict = {}
    for value in values:
        key = value_key(value)
        if key in seen:
            same = "" if repr(seen[key]) == repr(value) else f" (= {seen[key]!r})"
            raise error(f"{name} lists {value!r}{same} twice; give each value once")
        seen[key] = value
    return list(values)


def one_of(value: Any, choices: Iterable[str], *, name: str, error: type[Exception] = ValueError) -> str:
    """``value`` if it is one of ``choices``; else one line listing them (and the closest one)."""
    choices = list(choices)
    if isinstance(value, str) and value in choices:
        return value
    hint = closest(value, choices)
    raise error(f"{name} = {value!r} is not known; choose one of {', '.join(map(str, choices))}"
                + (f" (did you mean {hint!r}?)" if hint else ""))


def closest(value: Any, choices: Iterable[str]) -> str | None:
    """The choice ``value`` was most likely a typo of (difflib's ratio >= 0.75), or None."""
    import difflib

    if not isinstance(value, str):
        return None
    found = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.75)
    return found[0] if found else None


def unknown_keys(given: Iterable[str], known: Iterable[str], *, where: str,
                 error: type[Exception] = ValueError) -> None:
    """One line naming the first key of ``given`` that is not in ``known`` (with the likely typo)."""
    known = list(known)
    for key in given:
        if key not in known:
            hint = closest(key, known)
            raise error(f"{where}: unknown key {key!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                        + f"; known keys: {', '.join(sorted(known))}")


def _type_problem(name: str, annotation: str, value: Any) -> str | None:
    """Why ``value`` does not fit a field annotated ``annotation`` (a string such as ``"int | None"``),
    or None. TOML has no null, so an optional field given in a table must hold its type; a bool is
    not a number (and a number is not a bool); an integer is a valid float; a float must be finite."""
    kinds = [k.strip() for k in annotation.split("|") if k.strip() != "None"]
    if "bool" in kinds and isinstance(value, bool):
        return None
    if "int" in kinds and isinstance(value, int) and not isinstance(value, bool):
        return None
    if "float" in kinds and isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if math.isfinite(value) else f"{name} = {value!r} must be a finite number"
    if "str" in kinds and isinstance(value, str):
        return None
    names = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}
    want = " or ".join(names.get(k, k) for k in kinds)
    return f"{name} = {value!r} must be {want}"


def typed_table(cls: type, values: Mapping[str, Any], *, where: str, error: type[Exception] = ValueError) -> None:
    """Check a config table against the fields of the dataclass ``cls`` (annotations written as
    strings under ``from __future__ import annotations``): every key known, every value of its
    field's type. One line naming ``where`` (the file and table) and the key."""
    known = {f.name: str(f.type) for f in fields(cls)}
    unknown_keys(values, known, where=where, error=error)
    for name, value in values.items():
        problem = _type_problem(name, known[name], value)
        if problem:
            raise error(f"{where}: {problem}")


def from_table(cls: type, values: Mapping[str, Any], *, where: str, error: type[Exception] = ValueError) -> Any:
    """``cls(**values)`` after ``typed_table``; the dataclass's own range checks (``ValueError``)
    come back naming ``where``."""
    typed_table(cls, values, where=where, error=error)
    try:
        return cls(**dict(values))
    except ValueError as err:
        raise error(f"{where}: {err}") from None

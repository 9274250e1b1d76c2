"""The checks one key of a study file needs, each refusal a ``StudyError`` naming the key and the fix: a
non-empty list of distinct values, a sub-table of known keys, a sentence, a method name.
"""

from __future__ import annotations

from typing import Any, Mapping

from bench.lib.study.spec import StudyError
from iokit import checks
from workloads.fl.methods import MethodConfig, check_file_spelling, parse_method


def key_method(name: Any, *, key: str) -> MethodConfig:
    if not isinstance(name, str):
        raise StudyError(f"{key} = {name!r}: give a method name such as \"fedavg\" or \"spherefed+ffc\"")
    try:
        method = parse_method(name)
        check_file_spelling(name, where=key)
    except ValueError as err:
        raise StudyError(str(err) if str(err).startswith(key) else f"{key}: {err}") from None
    return method


def key_list(doc: Mapping, key: str, where: str, kind: type, *, low=None, high=None) -> list:
    value = doc[key]
    if not isinstance(value, list) or not value:
        raise StudyError(f"{where}: {key} = {value!r} must be a non-empty list")
    for v in value:
        if kind is int:
            checks.integer_in(v, low, high, name=key, error=StudyError)
        elif kind is float:
            checks.number_in(v, low, high, name=key, error=StudyError, low_open=True)
        elif not isinstance(v, str):
            raise StudyError(f"{where}: {key} = {value!r} must be a list of strings")
    return checks.distinct(value, name=f"{where}: {key}", error=StudyError)


def key_text(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    value = doc.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise StudyError(f"{where}: {key} = {value!r}: give a sentence (a string)")
    return value


def key_table(doc: Mapping, key: str, known: tuple[str, ...], where: str) -> Mapping[str, Any]:
    table = doc.get(key, {})
    if not isinstance(table, dict):
        raise StudyError(f"{where}: {key} must be a table ([{key}])")
    checks.unknown_keys(table, known, where=f"{where} [{key}]", error=StudyError)
    return table

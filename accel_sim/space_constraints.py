"""A design space's constraints (``accel_sim.space``'s module doc): a condition over field paths in a small
expression language, parsed with Python's ``ast`` module and checked once (``compile_constraint``),
evaluated on numpy columns with Python's exact arithmetic (``Constraint.evaluate``), never ``eval``;
and the error every check of a space raises (``SpaceError``).
"""

from __future__ import annotations

import ast
import difflib
import math
import operator
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from accel_sim.points import FIELD_PATHS


NUMBER_FORMAT = "number_format"
AXIS_NAMES = (*FIELD_PATHS, NUMBER_FORMAT)
EXACT_BELOW = 2**53
"""Integers of magnitude below this are exact in float64 too: a constraint whose every value stays
below it (interval bounds, ``Constraint.evaluate``) is evaluated on numpy's int64 / float64
columns, which then give Python's results exactly; otherwise on Python numbers."""


class SpaceError(ValueError):
    """A design space that cannot be explored; the one-line message names the axis and the fix."""


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}


LANGUAGE = "field names, numbers, quoted names, + - * / // %, comparisons, and, or, not, parentheses"


_PYTHON = {op: np.frompyfunc(fn, 2, 1) for op, fn in {**_BINARY, **_COMPARE}.items()}  # elementwise, Python's


_NOT, _NEG = np.frompyfunc(operator.not_, 1, 1), np.frompyfunc(operator.neg, 1, 1)


_CONDITIONS = (ast.Compare, ast.BoolOp)


@dataclass(frozen=True, eq=False)
class Constraint:
    """A condition over field paths (module docstring), parsed once."""

    text: str
    tree: ast.Expression
    names: frozenset

    def evaluate(self, columns: Mapping[str, np.ndarray], size: int) -> np.ndarray:
        """Which of ``size`` points satisfy it, from their ``columns`` (each name it uses), with
        Python's arithmetic exactly: on the numpy columns when interval bounds show every value of
        the expression below ``EXACT_BELOW`` in magnitude and no divisor's range holds 0 (int64 and
        float64 then agree with Python), else on Python numbers (object arrays). A division by zero,
        a name combined with a number, or a float overflow is a ``SpaceError`` naming the constraint."""
        if size == 0:
            return np.zeros(0, dtype=bool)
        try:
            try:
                _bounds(self.tree.body, {n: _column_bounds(columns[n]) for n in self.names})
                result = _evaluate(self.tree.body, columns)
            except _Inexact:
                exact = {n: np.array(columns[n].tolist() + [None], dtype=object)[:-1] for n in self.names}
                result = _evaluate(self.tree.body, exact, python=True)
        except ZeroDivisionError:
            raise SpaceError(f"space constraint {self.text!r} divides by zero at a point of the space: keep the "
                             f"divisor's axis away from 0 or multiply instead (e.g. rows <= 4 * cols)") from None
        except TypeError as e:
            raise SpaceError(f"space constraint {self.text!r} combines a name with a number ({e}); compare a name "
                             "only with == or != to a quoted name, e.g. dataflow_dw == 'ws'") from None
        except (OverflowError, RecursionError) as e:
            raise SpaceError(f"space constraint {self.text!r} cannot be evaluated ({type(e).__name__}: {e}); "
                             "use smaller numbers or a shorter expression") from None
        return np.broadcast_to(np.asarray(result).astype(bool), (size,))


class _Inexact(Exception):
    """numpy's fixed-width arithmetic might differ from Python's for this expression and these columns."""


def _column_bounds(column: np.ndarray) -> tuple | None:
    """(min, max) of a numeric column as Python numbers; None for names (strings)."""
    if column.dtype.kind in "iuf":
        return column.min().item(), column.max().item()
    return None


def _within(low, high) -> tuple:
    if not (-EXACT_BELOW < low and high < EXACT_BELOW):  # NaN fails too
        raise _Inexact
    return low, high


def _bounds(node: ast.AST, ranges: Mapping[str, tuple | None]) -> tuple | None:
    """(low, high) of ``node``'s values over the columns' ranges (None: a name, not a number);
    ``_Inexact`` where numpy's arithmetic might not be Python's: a bound at or beyond
    ``EXACT_BELOW``, a divisor whose range holds 0, a name in arithmetic or compared with a number."""
    path = _path(node)
    if path is not None:
        return None if ranges[path] is None else _within(*ranges[path])
    if isinstance(node, ast.Constant):
        return None if isinstance(node.value, str) else _within(node.value, node.value)
    if isinstance(node, ast.UnaryOp):
        inner = _bounds(node.operand, ranges)
        if inner is None:
            raise _Inexact
        return (0, 1) if isinstance(node.op, ast.Not) else (-inner[1], -inner[0]) if isinstance(node.op, ast.USub) \
            else inner
    if isinstance(node, ast.BinOp):
        (a, b), (c, d) = (_bounds(node.left, ranges) or _raise()), (_bounds(node.right, ranges) or _raise())
        op = type(node.op)
        if op in (ast.Div, ast.FloorDiv, ast.Mod) and c <= 0 <= d:
            raise _Inexact  # a zero divisor is possible: Python's evaluation raises where it happens
        if op is ast.Mod:
            top = max(abs(c), abs(d))
            return _within(-top, top)
        corners = [_BINARY[op](x, y) for x in (a, b) for y in (c, d)] if op in (ast.Mult, ast.Div, ast.FloorDiv) \
            else [a + c, b + d] if op is ast.Add else [a - d, b - c]
        return _within(min(corners), max(corners))
    if isinstance(node, ast.BoolOp):
        if any(_bounds(v, ranges) is None for v in node.values):
            raise _Inexact
        return 0, 1
    kinds = {_bounds(v, ranges) is None for v in (node.left, *node.comparators)}
    if len(kinds) > 1:
        raise _Inexact  # a name compared with a number
    return 0, 1


def _raise():
    raise _Inexact


def _path(node: ast.AST) -> str | None:
    """``special_unit.norm`` from the attribute chain it parses to; None for another node."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _path(node.value)
        return f"{inner}.{node.attr}" if inner is not None else None
    return None


def compile_constraint(text: str) -> Constraint:
    """Parse and check a constraint; ``SpaceError`` naming it for bad syntax, a construct outside
    the language, an unknown field, or an expression that is not a condition."""
    if not isinstance(text, str) or not text.strip():
        raise SpaceError(f"space constraint {text!r}: give a condition such as 'rows * cols <= 4096'")
    short = text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise SpaceError(f"space constraint {short!r} is not an expression ({e.msg}); use {LANGUAGE}") from None
    except (RecursionError, MemoryError):
        raise SpaceError(f"space constraint {short!r} is nested too deeply to parse: split it into "
                         "several constraints (each must hold)") from None
    names = set()

    def check(node: ast.AST) -> None:
        path = _path(node)
        if path is not None:
            if path not in AXIS_NAMES:
                close = difflib.get_close_matches(path, AXIS_NAMES, n=1)
                raise SpaceError(f"space constraint {short!r}: unknown field '{path}'"
                                 + (f" (did you mean '{close[0]}'?)" if close else ""))
            names.add(path)
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) and not isinstance(node.value, bool):
            if isinstance(node.value, float) and not math.isfinite(node.value):
                raise SpaceError(f"space constraint {short!r}: {node.value!r} is not a finite number")
            return
        allowed = (isinstance(node, ast.BinOp) and type(node.op) in _BINARY
                   or isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops)
                   or isinstance(node, ast.BoolOp)
                   or isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)))
        if not allowed:
            raise SpaceError(f"space constraint {short!r}: '{ast.unparse(node)[:60]}' is not allowed; use {LANGUAGE}")
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.operator, ast.cmpop, ast.boolop, ast.unaryop)):
                check(child)

    try:
        check(tree.body)
    except RecursionError:
        raise SpaceError(f"space constraint {short!r} is nested too deeply: split it into "
                         "several constraints (each must hold)") from None
    body = tree.body
    if not (isinstance(body, _CONDITIONS) or isinstance(body, ast.UnaryOp) and isinstance(body.op, ast.Not)):
        raise SpaceError(f"space constraint {short!r} is not a condition: compare it (e.g. rows * cols <= 4096)")
    return Constraint(text, tree, frozenset(names))


def _evaluate(node: ast.AST, columns: Mapping[str, np.ndarray], python: bool = False):
    """``node`` over ``columns``: numpy's operators, or with ``python`` Python's own, element by
    element (object arrays of Python numbers: exact integers, ZeroDivisionError, TypeError)."""
    path = _path(node)
    if path is not None:
        return columns[path]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, columns, python), _evaluate(node.right, columns, python)
        return (_PYTHON if python else _BINARY)[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, columns, python)
        if isinstance(node.op, ast.Not):
            return _NOT(value) if python else np.logical_not(value)
        return (_NEG(value) if python else -value) if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BoolOp):
        values = [np.asarray(_evaluate(v, columns, python)).astype(bool) for v in node.values]
        return (np.logical_and if isinstance(node.op, ast.And) else np.logical_or).reduce(values)
    left, result = _evaluate(node.left, columns, python), True
    for op, right_node in zip(node.ops, node.comparators):
        right = _evaluate(right_node, columns, python)
        result = np.logical_and(result, np.asarray((_PYTHON if python else _COMPARE)[type(op)](left, right)).astype(bool))
        left = right
    return np.asarray(result)

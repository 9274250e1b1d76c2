"""The package code's size (issue 52): files over 400 lines and functions over 50 lines in
``accel_sim/``, ``bench/`` and ``workloads/``.

    python scripts/code_size.py            # the counts, then every long file and function

A file's lines are its physical lines (``wc -l``); a function's run from its ``def`` line to its last
line, docstring and comments included, decorators not (``ast``: ``end_lineno - lineno + 1``); nested
functions and methods are counted on their own too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGES = ("accel_sim", "bench", "workloads")
FILE_LINES = 400
FUNCTION_LINES = 50


def sources(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    """Every ``.py`` file under the packages of ``root``, sorted."""
    return sorted(p for package in packages for p in (root / package).rglob("*.py"))


def long_files(root: Path, limit: int = FILE_LINES) -> list[tuple[str, int]]:
    """(path relative to ``root``, lines) of every package file of more than ``limit`` lines."""
    out = []
    for path in sources(root):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            out.append((path.relative_to(root).as_posix(), lines))
    return out


def long_functions(root: Path, limit: int = FUNCTION_LINES) -> list[tuple[str, str, int]]:
    """(path relative to ``root``, function name, lines) of every function (or method) of more
    than ``limit`` lines in the package files."""
    out = []
    for path in sources(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append((path.relative_to(root).as_posix(), node.name, lines))
    return out


def main(root: Path = Path(__file__).resolve().parents[1]) -> int:
    files, functions = long_files(root), long_functions(root)
    print(f"files over {FILE_LINES} lines: {len(files)}; functions over {FUNCTION_LINES} lines: {len(functions)}")
    for path, lines in sorted(files, key=lambda f: -f[1]):
        print(f"  {lines:5d}  {path}")
    for path, name, lines in sorted(functions, key=lambda f: -f[2]):
        print(f"  {lines:5d}  {path}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

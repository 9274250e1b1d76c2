"""Import what a dotted path ``package.module:attribute`` names: a user's model factory
(``workloads.model_spec``), FL method (``workloads.fl.methods``) or grid runner
(``bench.lib.grid.runners``).

The module is imported from the current directory or ``PYTHONPATH``; Python's standard library is
refused (it holds no model or method, and importing it by a config's say-so is never meant). Every
failure is one line (``error``) naming the path and the fix.
"""

from __future__ import annotations

import importlib
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def is_dotted(name: str) -> bool:
    """True for ``module:attribute`` names."""
    return ":" in name


@contextmanager
def cwd_on_path():
    """The current directory on ``sys.path`` while a user's module is imported."""
    cwd = str(Path.cwd())
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added:
            sys.path.remove(cwd)


def import_attribute(name: str, *, role: str, kind: str, form: str, wanted: str, error: type[Exception]) -> Any:
    """The object ``module:attr.sub`` names. ``role`` ("model", "method", "runner"), ``kind`` (what
    the object must be: "model factory", "method class", "grid runner"), ``form`` (how to write the
    path, with an example) and ``wanted`` (what to name instead of the standard library) word the
    errors."""
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise error(f"{role} {name!r}: write {form}")
    if module_name.startswith("."):
        raise error(f"{role} {name!r}: a relative module path; name the module from the folder you run in "
                    f"(or one on PYTHONPATH), e.g. {module_name.lstrip('.') or 'mymodule'}:{attr}")
    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "builtins":
        raise error(f"{role} {name!r}: {module_name} is part of Python's standard library, not a {kind}; "
                    f"name {wanted}")
    try:
        with cwd_on_path():
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise error(f"cannot import {module_name!r} for {role} {name!r} ({exc}); run from the folder "
                    f"that holds {top} or add that folder to PYTHONPATH") from None
    except (Exception, SystemExit) as exc:  # the user's module failed (or exited) while importing: its own error
        raise error(f"importing {module_name!r} for {role} {name!r} failed: {type(exc).__name__}: "
                    f"{first_line(exc)}") from None
    found = module
    for part in attr.split("."):
        if not hasattr(found, part):
            public = sorted(n for n in dir(module) if not n.startswith("_"))
            raise error(f"module {module_name!r} has no attribute {attr!r} ({role} {name!r}); "
                        f"it defines: {', '.join(public) or 'nothing public'}")
        found = getattr(found, part)
    return found


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

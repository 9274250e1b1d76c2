"""The layers and what each may import (docs/architecture.md), checked on the source itself:

* ``iokit`` imports nothing of the project (every layer may use it);
* ``accel_sim`` imports neither torch nor ``workloads`` nor ``bench`` (a trace captured anywhere is
  priced here, torch-free);
* ``workloads.fl`` (pure federated learning) imports no ``accel_sim``, no pricing
  (``workloads.cost``), no capture engine and no ``bench``;
* ``workloads.capture`` (PyTorch -> trace) imports nothing of ``workloads.fl``;
* ``workloads.numerics`` (training in a number format, used by ``workloads.fl``) imports only
  ``accel_sim.formats`` of ``accel_sim`` and nothing of the other rooms of ``workloads``;
* ``workloads`` imports nothing of ``bench``;
* no module imports a command (a ``__main__`` module).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("iokit", "accel_sim", "workloads", "bench")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


SOURCES = {module_name(p): imports_of(p) for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


RULES = [  # (modules, imports they may not make)
    ("iokit", ("accel_sim", "workloads", "bench", "torch", "numpy")),
    ("accel_sim", ("torch", "workloads", "bench")),
    ("workloads.fl", ("accel_sim", "workloads.cost", "workloads.capture", "workloads.flower", "bench")),
    ("workloads.numerics", ("workloads.fl", "workloads.cost", "workloads.capture", "workloads.flower", "bench")),
    ("workloads.capture", ("workloads.fl", "workloads.cost", "bench")),
    ("workloads", ("bench",)),
]


@pytest.mark.parametrize("layer, forbidden", RULES, ids=[r[0] for r in RULES])
def test_a_layer_imports_only_what_is_below_it(layer, forbidden):
    found = sorted(f"{module} imports {name}" for module, names in SOURCES.items() if under(module, layer)
                   for name in names if any(under(name, f) for f in forbidden))
    assert not found, found


def test_the_number_formats_are_the_only_door_from_training_to_accel_sim():
    # workloads.numerics (imported by the pure FL code) takes the format vocabulary from accel_sim,
    # and nothing else of it: the FL code still knows nothing of pricing
    found = sorted(f"{module} imports {name}" for module, names in SOURCES.items() if under(module, "workloads.numerics")
                   for name in names if under(name, "accel_sim") and not under(name, "accel_sim.formats"))
    assert not found, found


def test_no_module_imports_a_command():
    found = sorted(f"{module} imports {name}" for module, names in SOURCES.items() for name in names
                   if name.endswith(".__main__") or ".__main__." in name)
    assert not found, found


def test_the_rules_see_real_imports():
    # the checker itself: it finds what these modules are known to import
    assert "accel_sim.trace_schema" in SOURCES["workloads.capture.engine"]
    assert "workloads.fl.loop" in SOURCES["workloads.cost.rounds"] or \
        any(under(n, "workloads.fl") for n in SOURCES["workloads.cost.rounds"])
    assert any(under(n, "torch") for n in SOURCES["workloads.fl.loop"])


def test_accel_sim_runs_without_torch():
    # every accel_sim module imports with torch made unimportable
    modules = sorted(m for m in SOURCES if under(m, "accel_sim") and not m.endswith("__main__"))
    code = ("import sys; sys.modules['torch'] = None\n" + "".join(f"import {m}\n" for m in modules)
            + "assert not any(k == 'torch' or k.startswith('torch.') for k, v in sys.modules.items() if v)")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)

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
* no module imports a command (a ``__main__`` module);
* a command package (``bench/<name>/`` with a ``__main__.py``) is imported only by its own
  modules: no command package imports another, and ``bench.lib`` (the library floor the commands
  share) and ``bench.api`` import none. A planted violation shows the checker failing.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("iokit", "accel_sim", "workloads", "bench")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module_name(path, root) if path.name == "__init__.py" else module_name(path, root).rpartition(".")[0]
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


def sources_of(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """module -> the modules it imports, for every ``.py`` file of ``packages`` under ``root``."""
    return {module_name(p, root): imports_of(p, root) for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


SOURCES = sources_of(ROOT)


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def command_packages(root: Path) -> set[str]:
    """The command packages: ``bench.<name>`` for every ``bench/<name>/__main__.py`` under ``root``."""
    return {f"bench.{main.parent.name}" for main in (root / "bench").glob("*/__main__.py")}


def sideways_imports(sources: dict[str, set[str]], commands: set[str]) -> list[str]:
    """'module imports name' for every import of a command package from outside it: from another
    command package, from ``bench.lib`` or any other module (a command package is imported only by
    its own modules)."""
    return sorted(f"{module} imports {name}" for module, names in sources.items() for name in names
                  for command in commands if under(name, command) and not under(module, command))


RULES = [  # (modules, imports they may not make)
    ("iokit", ("accel_sim", "workloads", "bench", "torch", "numpy")),
    ("accel_sim", ("torch", "workloads", "bench")),
    ("workloads.fl", ("accel_sim", "workloads.cost", "workloads.capture", "workloads.flower", "bench")),
    ("workloads.numerics", ("workloads.fl", "workloads.cost", "workloads.capture", "workloads.flower", "bench")),
    ("workloads.capture", ("workloads.fl", "workloads.cost", "bench")),
    ("workloads", ("bench",)),
    ("bench.lib", ("bench.api",)),  # the library floor; its imports of command packages: sideways_imports
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


def test_no_command_package_imports_another():
    commands = command_packages(ROOT)
    assert {"bench.run", "bench.fl", "bench.study", "bench.grid", "bench.plots"} <= commands
    assert "bench.lib" not in commands  # the library floor is no command
    assert not sideways_imports(SOURCES, commands), sideways_imports(SOURCES, commands)


def test_the_command_rule_fails_on_a_planted_violation(tmp_path):
    # a synthetic tree: two commands and the library; bench.b's helper imports bench.a (sideways),
    # bench.lib imports bench.b (upwards), bench.a imports its own helper and the library (allowed)
    files = {
        "bench/__init__.py": "",
        "bench/a/__init__.py": "",
        "bench/a/__main__.py": "from bench.a import helper\nfrom bench.lib import shared\n",
        "bench/a/helper.py": "from . import __init__\n",
        "bench/b/__init__.py": "",
        "bench/b/__main__.py": "from .helper import x\n",
        "bench/b/helper.py": "import json\nfrom bench.a.helper import y\n",
        "bench/lib/__init__.py": "",
        "bench/lib/shared.py": "def f():\n    from bench.b import helper\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    sources = sources_of(tmp_path, ("bench",))
    assert command_packages(tmp_path) == {"bench.a", "bench.b"}
    assert sideways_imports(sources, command_packages(tmp_path)) == [
        "bench.b.helper imports bench.a.helper", "bench.b.helper imports bench.a.helper.y",
        "bench.lib.shared imports bench.b", "bench.lib.shared imports bench.b.helper"]


def test_one_lock_implementation():
    # the stale-lock takeover and the process check are written once (iokit.locks), used by the
    # results folders (iokit.outputs), the grid's point locks and the partial-folder sweep (iokit.files)
    exclusive, pid_checks = set(), set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr == "O_EXCL":
                    exclusive.add(module_name(path))
                if isinstance(node, ast.FunctionDef) and "pid_alive" in node.name:
                    pid_checks.add(module_name(path))
    assert exclusive == pid_checks == {"iokit.locks"}, (exclusive, pid_checks)
    assert all("iokit.locks" in SOURCES[m] for m in ("iokit.outputs", "bench.lib.grid.point"))
    assert "iokit.locks.pid_alive" in SOURCES["iokit.files"]


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

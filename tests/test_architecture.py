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

And docs/architecture.md against the code, so that the page cannot drift from it unseen:

* its tree lists every command package and each one's own modules (and docs/commands.md runs each
  command, the ``bench`` package docstring names each);
* every name it gives in backticks exists: paths, modules, functions, classes and their members,
  constants, flags (a planted page shows the check failing on renamed names);
* its import table's "may not import" column is what ``RULES`` forbids each layer.
"""

from __future__ import annotations

import ast
import re
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


# ------------------------------------------------------------------ docs/architecture.md against the code
DOC = ROOT / "docs" / "architecture.md"


def documented_commands(doc_text: str) -> dict[str, set[str]]:
    """The command packages the page's tree lists (the lines from ``bench/`` to ``lib/``), each with
    the modules it names in parentheses: ``study/ (phases; choices: the tuning choices; ...)``."""
    block = doc_text.split("\n bench/", 1)[1].split("\n   lib/", 1)[0].split("\n", 1)[1]
    block = " ".join(block.split())
    found, pos = {}, 0
    for match in re.finditer(r"(\w+)/(?: \(([^)]*)\))?", block):
        pieces = re.split(r"[;,]", match.group(2) or "")
        found[match.group(1)] = {p.strip().split(":")[0].split()[0] for p in pieces if p.strip()}
        pos = match.end()
    return found


def command_modules(root: Path) -> dict[str, set[str]]:
    """Every command package's name, with its modules but ``__init__`` and ``__main__``."""
    return {c.removeprefix("bench."): {p.stem for p in (root / "bench" / c.removeprefix("bench.")).glob("*.py")
                                       if p.stem not in ("__init__", "__main__")}
            for c in command_packages(root)}


def test_the_documented_command_list_is_the_command_packages():
    # the page's tree names every command package and each one's own modules, and nothing else;
    # docs/commands.md runs every command once; the package docstring of bench lists them all
    assert documented_commands(DOC.read_text(encoding="utf-8")) == command_modules(ROOT)
    commands = {c.removeprefix("bench.") for c in command_packages(ROOT)}
    run_lines = set(re.findall(r"python -m bench\.(\w+)", (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")))
    assert commands <= run_lines, sorted(commands - run_lines)
    listed = set(re.findall(r"bench\.(\w+)``", ast.get_docstring(ast.parse((ROOT / "bench" / "__init__.py").read_text()))))
    assert commands <= listed, sorted(commands - listed)


def test_the_command_list_check_fails_when_the_page_drifts(tmp_path):
    # a planted tree: a command the page misses, a module the page misses, a module the page invents
    for name in ("bench/__init__.py", "bench/a/__main__.py", "bench/a/helper.py", "bench/b/__main__.py",
                 "bench/lib/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    page = "```\n bench/          the commands\n   a/ (helper: its own; gone)  c/\n   lib/     the floor\n```\n"
    assert documented_commands(page) == {"a": {"helper", "gone"}, "c": set()}
    assert command_modules(tmp_path) == {"a": {"helper"}, "b": set()}


def defined_names(root: Path = ROOT) -> tuple[dict[str, set[str]], set[str], set[str]]:
    """(module -> the names it defines at top level, ``Class.member`` included, and for a module with
    a ``__getattr__`` the names it spells; every name defined anywhere, class members and test
    functions included; every ``"--flag"`` string of the packages)."""
    modules, anywhere, flags = {}, set(), set()
    for path in [p for pkg in (*PACKAGES, "tests") for p in (root / pkg).rglob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for member in node.body:
                    targets = (member.targets if isinstance(member, ast.Assign) else
                               [member.target] if isinstance(member, ast.AnnAssign) else [])
                    names |= {f"{node.name}.{t.id}" for t in targets if isinstance(t, ast.Name)}
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(f"{node.name}.{member.name}")
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                anywhere.add(node.name)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--") \
                    and path.parts[len(root.parts)] != "tests":
                flags.add(node.value.split("=")[0])
        if "__getattr__" in names:  # attributes made on first use (bench.price)
            names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                      and n.value.isidentifier()}
        modules[module_name(path, root)] = names
        anywhere |= {n.rpartition(".")[2] for n in names}
    return modules, anywhere, flags


def missing_names(doc_text: str, root: Path = ROOT) -> list[str]:
    """Every backticked name of ``doc_text`` that the code does not have: a path (or a ``*.py`` file
    of the packages), a dotted name under a package (``module.attr``, ``module.Class.member``), a
    module's or a class's member (``effects.fold_traffic``, ``Objective.batch_loss``), a constant,
    class or snake_case name defined nowhere, a flag no module spells."""
    modules, anywhere, flags = defined_names(root)
    stems = {}
    for module in modules:
        stems.setdefault(module.rpartition(".")[2], []).append(module)
    classes = {n.partition(".")[0] for names in modules.values() for n in names if "." in n}
    members = {n.partition(".")[2] for names in modules.values() for n in names if "." in n}
    py_files = {p.name for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}
    text = re.sub(r"```.*?```", "", doc_text, flags=re.S)
    missing = []
    for token in sorted(set(re.findall(r"`([^`\n]+)`", text))):
        name = re.split(r"[(\s]", token.lstrip("@"), maxsplit=1)[0]
        if "<" in token or name.startswith(("python", "__")) or re.fullmatch(r"[\w.-]+\.(csv|json)", name):
            continue
        if name in modules:
            found = True
        elif "/" in name or name.endswith((".toml", ".md")):
            found = (root / name).exists()
        elif name.endswith(".py"):
            found = name in py_files
        elif name.startswith("--"):
            found = name.split("=")[0] in flags
        elif not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            continue
        elif "." in name:
            head, _, rest = name.partition(".")
            if head in PACKAGES:
                parts = name.split(".")
                found = any(".".join(parts[:i]) in modules and ".".join(parts[i:]) in modules[".".join(parts[:i])] | {""}
                            for i in range(1, len(parts) + 1))
            elif head in stems:  # a module's member, or a key of a record it writes (hardware.weight_master)
                found = any(rest in modules[m] for m in stems[head]) or rest in members
            elif head in classes:
                found = any(name in names for names in modules.values())
            else:
                continue  # a value's path (hw.out_buffer_bytes, config.system_path): not a code name
        elif name.isupper() or name[0].isupper() or "_" in name:
            found = name in anywhere
        else:
            continue  # a plain word (fl, meta, none): too common to check
        if not found:
            missing.append(token)
    return missing


def test_every_name_the_architecture_page_gives_is_in_the_code():
    assert missing_names(DOC.read_text(encoding="utf-8")) == []


def test_the_name_check_fails_on_a_renamed_name():
    page = ("`workloads.fl.loop.train` `workloads.fl.loop.trains` `ways.choose` `ways.chosen` "
            "`Objective.batch_loss` `Objective.batch_losses` `ALGORITHMS` `ALGORITHMZ` `sgd_update` "
            "`sgd_updates` `accel_sim/effects.py` `accel_sim/effect.py` `quantize.py` `quantise.py` "
            "`--number-format` `--number-formats` `hw.anything` `fl`")
    assert missing_names(page) == ["--number-formats", "ALGORITHMZ", "Objective.batch_losses", "accel_sim/effect.py",
                                   "quantise.py", "sgd_updates", "ways.chosen", "workloads.fl.loop.trains"]


def documented_forbidden(doc_text: str) -> dict[str, set[str]]:
    """The import table's rows: layer -> the packages of its "may not import" column (``anything of
    the project``: the other packages; a command package and ``__main__`` are their own tests')."""
    rows = {}
    for line in doc_text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`[\w.]+`.*", cells[0]) and cells[0] != "`layer`":
            layer = re.match(r"`([\w.]+)`", cells[0]).group(1)
            names = set(re.findall(r"`([\w.]+)`", cells[2])) - {"__main__"}
            names |= {w for w in ("torch", "numpy") if re.search(rf"\b{w}\b", cells[2])}
            if "anything of the project" in cells[2]:
                names |= set(PACKAGES) - {layer}
            rows[layer] = names
    return rows


def test_the_import_table_is_the_rules_the_test_holds():
    # each row's "may not import" is what RULES forbid that layer and the layers it lies in, and
    # each rule is written in every row it governs
    rows = documented_forbidden(DOC.read_text(encoding="utf-8"))
    assert {"iokit", "accel_sim", "workloads.fl", "workloads.numerics", "workloads.capture", "bench.lib"} <= set(rows)
    for layer, names in rows.items():
        ruled = {f for rule_layer, forbidden in RULES if under(layer, rule_layer) for f in forbidden}
        assert names == ruled, (layer, sorted(names ^ ruled))

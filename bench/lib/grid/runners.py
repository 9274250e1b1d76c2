"""Grid runners: the functions a grid may run, registered by name.

A runner is ``runner(point: dict, out_dir: Path) -> dict[str, float]``: it runs one point of a grid
(its resolved settings), writes its files into ``out_dir`` and returns its headline metrics. A grid
file names its runner by the name it was registered under::

    runner = "bench.run"              # SphereFed's efficiency study for one model (bench/lib/run/study.py)
    runner = "bench.study"            # one training run of an accuracy study (bench/lib/study/runner.py)
    runner = "mypackage.grids:mine"   # a function of yours, decorated with @grid_runner("...")

Registering: decorate the function with ``@grid_runner(name, validate=..., reads=..., complete=...)``;
``validate(point)`` (optional) checks a point without running it and raises ``ValueError`` naming
what is wrong, so a grid refuses a typo in ``[fixed]`` before its first point runs; ``reads(point)``
(optional) names the files the point reads, role -> path (None: not read): a finished run is that
run only while those files hold the content it recorded (``iokit.identity``; the engine runs it
again when one changed, and says which); ``complete(point, folder)`` (optional) says why a
finished run's folder does not hold the whole run ("" when it does: a ``curve.csv`` cut before its
last round, a file deleted since): such a run is not finished, and the engine runs it again.

Trust: a grid file is as trusted as a Python script, since naming a module imports it (its
top-level code runs). What is refused is what cannot have been meant: the standard library and
builtins (``os:fork``, ``shutil:rmtree``) and any function not decorated as a runner, before it is
called (docs/grid.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from iokit.dotted import import_attribute
from iokit.identity import contents

Runner = Callable[[Mapping[str, Any], Any], Mapping[str, float]]
Validate = Callable[[Mapping[str, Any]], object]
Reads = Callable[[Mapping[str, Any]], Mapping[str, Any]]
Complete = Callable[[Mapping[str, Any], Any], str]

BUILT_IN = {"bench.run": "bench.lib.run.study", "bench.study": "bench.lib.study.runner"}
"""The suite's runners: name -> the module that registers it (imported when the name is used)."""
_REGISTRY: dict[str, "RegisteredRunner"] = {}


class RunnerError(ValueError):
    """A runner that cannot be used; the message says what to give instead."""


@dataclass(frozen=True)
class RegisteredRunner:
    name: str
    run: Runner
    validate: Validate | None = None
    reads: Reads | None = None
    complete: Complete | None = None

    def incomplete(self, point: Mapping[str, Any], folder: Any) -> str:
        """Why the finished run of ``point`` in ``folder`` is not whole ("" when it is, or when the
        runner declares no ``complete`` check)."""
        return self.complete(point, folder) if self.complete is not None else ""

    def files(self, point: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        """The content of the files ``point`` reads (``iokit.identity.contents``; none without ``reads``)."""
        return contents(self.reads(point)) if self.reads is not None else {}


def grid_runner(name: str, *, validate: Validate | None = None, reads: Reads | None = None,
                complete: Complete | None = None) -> Callable[[Runner], Runner]:
    """Register ``function`` as the grid runner ``name`` (module doc)."""

    def register(function: Runner) -> Runner:
        _REGISTRY[name] = RegisteredRunner(name, function, validate, reads, complete)
        function.__grid_runner__ = name
        return function

    return register


def resolve_runner(spec: str) -> RegisteredRunner:
    """The registered runner ``spec`` names: a built-in name (``BUILT_IN``) or
    ``module:function`` of a function decorated with ``@grid_runner``."""
    if not isinstance(spec, str) or not spec.strip():
        raise RunnerError(f"runner = {spec!r}: give a runner name ({', '.join(BUILT_IN)}) or 'module:function'")
    if spec in BUILT_IN:
        importlib.import_module(BUILT_IN[spec])
        return _REGISTRY[spec]
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise RunnerError(f"runner = {spec!r} is not a registered runner; give one of {', '.join(BUILT_IN)} or "
                          "'module:function' of a function decorated with @grid_runner (bench.lib.grid.runners)")
    func = import_attribute(spec, role="runner", kind="grid runner", form="'module:function' (e.g. mygrid:train)",
                            wanted="a function decorated with @grid_runner (bench.lib.grid.runners)", error=RunnerError)
    name = getattr(func, "__grid_runner__", None)
    if not callable(func) or name is None or name not in _REGISTRY:
        raise RunnerError(f"runner {spec!r}: {module_name}.{func_name} is not a grid runner; decorate it with "
                          "@grid_runner(\"name\") from bench.lib.grid.runners")
    return _REGISTRY[name]

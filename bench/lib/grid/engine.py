"""Experiment grids: many independent runs, locally by default, on Ray when one machine is not enough.

    python -m bench.grid grid.toml [--out DIR] [--backend local|ray] [--workers N] [--address ADDR]
                                   [--resources-per-run cpus=1,gpus=0] [--retry-failed]

A grid file (TOML) names a runner, the settings shared by every run, and the axes to sweep::

    name = "small"
    runner = "bench.run"                 # a registered runner (bench.lib.grid.runners)
    [fixed]
    preset = "smoke"
    [axes]
    model = ["convnet", "vgg13"]
    seed = [0, 1, 2]

Every point of the cartesian product of the axes (in file order), merged over ``fixed``, is one
run. Its id is a hash of the runner's name and the point's resolved config, so the same point of
the same runner always lands in the same folder, and a grid with another runner never reuses it:

    DIR/runs/<run_id>/      the runner's files plus point.json (config, metrics, elapsed_s, start/end time,
                            the git commit of the code that ran it)
    DIR/failed/<run_id>.json  the error and traceback of a run that raised
    DIR/locks/<run_id>.lock   held while a run is in progress (pid and host inside)
    DIR/runs.csv, DIR/table_*.csv   the aggregated tables (see ``aggregate``)

Safety. A run writes into ``runs/.tmp-<run_id>-<random>`` and is renamed to ``runs/<run_id>`` only
when the runner returned, so a folder under ``runs/`` is always a finished run. A lock file created
with O_EXCL keeps two grids (or two workers) from running the same point; a lock whose process is
gone (same host) is stale and is taken over, so an interrupted grid resumes where it stopped.
Finished runs are skipped on rerun while the files they read (the runner's ``reads``: a fleet,
a hardware file) hold the content they recorded, run again when one changed (``iokit.identity``:
a run is the content of what it reads, not the path); failed runs are reported and retried only
with ``--retry-failed``. A point that fails, bad settings included (``batch_size = "x"`` in an axis),
fails alone: its error is recorded in ``failed/<run_id>.json`` and the other points run. A
``point.json`` or ``failed/<run_id>.json`` that cannot be read (truncated by a crash) means the
point is not done: one line says so and the point runs again.

Checked before any point runs: the grid file (TOML text; ``name`` a file-name-safe word: letters,
digits, ``.``, ``_``, ``-``), the runner (registered), every point (the runner's ``validate``: a
typo in ``[fixed]`` is one line naming it, before a results folder exists), ``--resources-per-run``
(finite numbers), ``--out`` (a new folder, or this grid's own: the folder's manifest names the
grid and its runner; any other folder is refused), and with ``--address`` that the Ray head's port
answers, as a gRPC server, within ``RAY_CONNECT_TIMEOUT_S`` (10 s; Ray itself would retry for
minutes). Ctrl-C or
SIGTERM stop the grid with one line; finished points stay, and the next run resumes. The tables
are built from the points of the grid as it is now (points of an earlier version of the file that
are no longer in it are kept on disk but left out).

Determinism. Each run sets torch's thread count to its CPU share (``cpus``, default 1) on both
backends, so the same point gives bitwise the same results locally and on Ray.

Devices. The local backend's ``workers`` processes are started by ``WORKER_START_METHOD``
(spawn), so each opens the device its point names afresh, however far this process went with
CUDA; its runs share this machine's devices, and a GPU share per run is refused there
(``check_backend``). On Ray a run holds ``gpus`` of a GPU, a fraction packing several on one, and
sees only the GPU Ray gave it, as ``cuda:0`` (``check_device``: docs/grid.md, "Grids on GPUs").
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bench.lib.grid.runners import RunnerError, resolve_runner
from bench.lib.grid.backends import BACKENDS, Resources, check_ray_address, run_local, run_ray
from bench.lib.grid.point import GridError, PointResult, _write_json, run_id
from bench.lib.grid.tables import aggregate
from bench.lib.results import FORMAT_VERSION
from iokit import checks, outputs
from iokit.provenance import git_commit
from iokit.toml import read_toml

GRID_KEYS = {"name", "runner", "fixed", "axes"}
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")  # a grid's name, used in a folder name
DEFAULT_RUNNER = "bench.run"
COMMAND = "bench.grid"
OWNED_FOLDERS = ("runs", "failed", "locks")
TABLES = ("grid.json", "runs.csv", "table_mean_std.csv", "table2.csv", "table2.md")


@dataclass(frozen=True)
class GridSpec:
    name: str
    runner: str
    fixed: dict[str, Any]
    axes: dict[str, list[Any]]

    def points(self) -> list[dict[str, Any]]:
        """Resolved configs, one per point of the cartesian product of the axes, in file order."""
        names = list(self.axes)
        return [{**self.fixed, **dict(zip(names, values))} for values in itertools.product(*self.axes.values())]


@dataclass(frozen=True)
class GridReport:
    results: tuple[PointResult, ...] = field(default_factory=tuple)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)


# ----------------------------------------------------------------------------- grid files


def parse_grid(data: dict[str, Any], source: str = "<grid>") -> GridSpec:
    unknown = set(data) - GRID_KEYS
    if unknown:
        raise GridError(f"{source}: unknown key(s) {sorted(unknown)}; a grid file has {sorted(GRID_KEYS)}")
    fixed = data.get("fixed", {})
    axes = data.get("axes", {})
    if not isinstance(fixed, dict) or not isinstance(axes, dict):
        raise GridError(f"{source}: [fixed] and [axes] must be tables")
    if not axes:
        raise GridError(f"{source}: [axes] is empty: name at least one axis, e.g. seed = [0, 1, 2]")
    for name, values in axes.items():
        if not isinstance(values, list) or not values:
            raise GridError(f"{source}: axis '{name}' must be a non-empty list, got {values!r}")
        checks.distinct(values, name=f"{source}: axis '{name}'", error=GridError)  # by value: 1 and 1.0 are one
    both = set(fixed) & set(axes)
    if both:
        raise GridError(f"{source}: {sorted(both)} appear both in [fixed] and in [axes]; keep each in one place")
    runner = data.get("runner", DEFAULT_RUNNER)
    if not isinstance(runner, str) or not runner.strip():
        raise GridError(f"{source}: runner = {runner!r}: give a registered runner's name, e.g. runner = \"bench.run\"")
    name = data.get("name", re.sub(r"[^A-Za-z0-9._-]", "_", Path(source).stem).lstrip(".") or "grid")
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise GridError(f"{source}: name = {name!r} must be a file-name-safe word (letters, digits, '.', '_', '-', "
                        "not starting with '.'): it names the results folder results/grid-<name>")
    return GridSpec(name=name, runner=runner, fixed=fixed, axes=axes)


def load_grid(path: str | Path) -> GridSpec:
    path = Path(path)
    if not path.is_file():
        raise GridError(f"{path}: no such grid file (see configs/grids/ for examples)")
    return parse_grid(read_toml(path, GridError, "grid"), str(path))


def validate_points(spec: GridSpec) -> None:
    """Every point checked by the runner's ``validate`` before any runs; GridError naming the first bad one."""
    try:
        runner = resolve_runner(spec.runner)
    except RunnerError as e:
        raise GridError(str(e)) from None
    if runner.validate is None:
        return
    for i, point in enumerate(spec.points(), 1):
        try:
            runner.validate(point)
        except (ValueError, SystemExit) as e:
            axes = {k: point[k] for k in spec.axes}
            raise GridError(f"grid {spec.name!r}, point {i} {axes}: {e}") from None


def check_grid_out(spec: GridSpec, out: str | Path) -> None:
    """``--out`` of a grid: a new (or empty) folder, or this grid's own (its manifest names
    ``bench.grid`` and the same grid name and runner: rerunning resumes it). Anything else is
    refused, naming why: the suite never mixes a grid into another folder. Checked before any
    point runs (``iokit.outputs.check_own_folder``)."""
    outputs.check_own_folder(out, command=COMMAND, config_sha256=grid_hash(spec), error=GridError,
                             what=f"grid (its name or runner differs from {spec.name!r} / {spec.runner!r})")


def grid_hash(spec: GridSpec) -> str:
    """What a grid folder belongs to: the grid's name and runner (its axes may grow: the points are
    content-addressed)."""
    return outputs.config_hash({"name": spec.name, "runner": spec.runner})


def run_grid(spec: GridSpec, out: str | Path, *, backend: str = "local", resources: Resources = Resources(),
             retry_failed: bool = False, address: str | None = None,
             progress: Callable[[PointResult, int, int], None] | None = None, workers: int = 1,
             commit: str | None = None) -> GridReport:
    """Every point of ``spec`` into ``out`` (module doc). ``commit``: the code's git commit for the runs'
    records; by default taken here, before anything is written (a caller that wrote into a tracked
    folder first passes the one it took before)."""
    if backend not in BACKENDS:
        raise GridError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    validate_points(spec)  # the runner registered, every point resolvable: before any folder exists
    if backend == "ray" and address:
        check_ray_address(address)
    out = Path(out)
    check_grid_out(spec, out)
    commit = git_commit() if commit is None else commit
    (out / "runs").mkdir(parents=True, exist_ok=True)
    outputs.Manifest(COMMAND, grid_hash(spec), FORMAT_VERSION, "running", TABLES, OWNED_FOLDERS).write(out)
    _write_json(out / "grid.json", {"name": spec.name, "runner": spec.runner, "fixed": spec.fixed, "axes": spec.axes})
    total = len(spec.points())
    if backend == "local":
        stream = run_local(spec, out, resources, retry_failed, commit, workers)
    else:
        stream = run_ray(spec, out, resources, retry_failed, commit, address)
    results = []
    for result in stream:
        results.append(result)
        if progress:
            progress(result, len(results), total)
    aggregate(out, run_ids=[run_id(spec.runner, p) for p in spec.points()])
    return GridReport(tuple(results))


# ----------------------------------------------------------------------------- aggregation

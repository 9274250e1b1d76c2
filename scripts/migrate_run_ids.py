"""One-time migration of shipped results to the run ids of "a run carries only its own method's
knobs" (issue 52): before it, every run's point (``bench.lib.study.runner.make_point``) recorded the
knobs of ten methods (a FedAvg run 19, 13 of them other methods'), and its id
(``bench.lib.grid.point.run_id``) hashed them all.

    python scripts/migrate_run_ids.py FOLDER... [--check | --write]

A FOLDER is a study's results folder (``FOLDER/grid/runs/<run_id>/``, or a grid folder
``FOLDER/runs/<run_id>/`` of ``bench.study`` points), a ``bench.fl`` results folder (its
``results.json`` records each method's hyper-parameters) or a ``bench.dse`` folder (no runs:
nothing to migrate). For every run it keeps, of its point's ``hparams``, the local training's
knobs and its own method's (``MethodConfig.knobs``), checks that today's code makes that very point
(``bench.lib.study.runner.parse_point`` then ``Cell.point``), and recomputes its id with today's
``run_id``; then it renames the run's folder (and its ``failed/`` record and ``locks/`` file, where
there is one) and rewrites every file that names an old id (``runs.csv``, ``grid/runs.csv``,
``summary.json``, ``table.md``, ...) or records another method's knob (``point.json``,
``grid/runs.csv``, ``grid/table_mean_std.csv``, ``summary.json``'s chosen points, ``results.json``).
Nothing else changes: accuracies, curves and timings are left byte for byte; a list of ids that was
sorted is sorted again. A file it cannot write back byte for byte but for those changes is refused.

Without ``--write`` it changes nothing and says what it would do (``--check``: and exits 1 when
anything is left to migrate). Running it again after ``--write`` changes nothing. A folder it does
not understand is refused with one line (exit 2) before anything is written.
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file from anywhere: the repository's packages
    sys.path.insert(0, str(ROOT))

from bench.lib.grid.point import run_id  # noqa: E402
from iokit.files import atomic_write_text  # noqa: E402

RUNNER = "bench.study"
ID = re.compile(r"\b[0-9a-f]{12}\b")
ID_LIST = re.compile(r"\b[0-9a-f]{12}(?:, [0-9a-f]{12})+\b")  # table.md: "a, b, c" (sorted when written)
JSON_FORMATS: dict[str, Callable[[Any], str]] = {  # how each writer of this project dumps JSON
    "summary": lambda d: json.dumps(d, indent=2) + "\n",  # bench.lib.results.write_json
    "record": lambda d: json.dumps(d, indent=2, sort_keys=True, default=str),  # bench.lib.grid.point
    "results": lambda d: json.dumps(d, indent=1) + "\n",  # a bench.fl results.json before manifests
    "manifest": lambda d: json.dumps(d, indent=1) + "\n",
}


class MigrationError(ValueError):
    """A folder this script does not understand; the message is one line with the fix."""


@dataclass
class Plan:
    """What migrating one folder changes: ids (old -> new), files to write, folders and files to rename."""

    folder: Path
    kind: str  # "study", "bench.fl" or "bench.dse"
    ids: dict[str, str] = field(default_factory=dict)
    writes: dict[Path, str] = field(default_factory=dict)
    renames: list[tuple[Path, Path]] = field(default_factory=list)
    runs: int = 0  # run folders read (a bench.fl folder: methods)

    def empty(self) -> bool:
        return not (self.writes or self.renames)

    def describe(self) -> str:
        if self.kind == "bench.dse":
            return f"{self.folder}: a bench.dse folder (no runs): nothing to migrate"
        what = f"{self.runs} method(s) in results.json" if self.kind == "bench.fl" else f"{self.runs} run(s)"
        if self.empty():
            return f"{self.folder}: {what}, already migrated: nothing to do"
        if self.kind == "bench.fl":
            return f"{self.folder}: {what}: each method's hparams its own knobs; results.json rewritten"
        files = sorted(str(p.relative_to(self.folder)) for p in self.writes if p.name != "point.json")
        return (f"{self.folder}: {self.runs} run(s), {len(self.ids)} renamed (new id), "
                f"{sum(p.name == 'point.json' for p in self.writes)} point.json rewritten; files rewritten: "
                f"{', '.join(files) or 'none'}")


@functools.cache
def own_knob_names(method: str) -> tuple[str, ...]:
    """The knobs a run of ``method`` declares today: the local training's and its method's own."""
    from workloads.fl.hparams import Hparams
    from workloads.fl.methods import parse_method

    try:
        return Hparams(declared=parse_method(method).knobs).names()
    except ValueError as err:
        raise MigrationError(f"method {method!r}: {err}") from None


def own_hparams(hparams: Mapping[str, Any], method: str) -> dict[str, Any]:
    """``hparams`` without the knobs that are not ``method``'s (in their recorded order)."""
    names = own_knob_names(method)
    return {k: v for k, v in hparams.items() if k in names}


def migrated_point(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A ``bench.study`` point with only its own method's knobs, checked to be the point today's code
    makes of it (``parse_point`` then ``Cell.point``): MigrationError naming ``where`` otherwise."""
    from bench.lib.study.runner import parse_point

    new = {**config, "hparams": own_hparams(config["hparams"], config["method"])}
    try:
        remade = parse_point(new).point()
    except ValueError as err:
        raise MigrationError(f"{where}: today's code does not read this point ({err}); not a migration this "
                             "script can make") from None
    if remade != new:
        diff = sorted(k for k in {*remade, *new} if remade.get(k) != new.get(k))
        raise MigrationError(f"{where}: today's code makes another point of it (keys {', '.join(diff)} differ); "
                             "not a migration this script can make")
    return new


def dump_like(text: str, data: Any, where: Path) -> str:
    """``data`` dumped as the JSON ``text`` was (the writer whose dump of ``text``'s data is ``text``)."""
    old = json.loads(text)
    for dump in JSON_FORMATS.values():
        if dump(old) == text:
            return dump(data)
    raise MigrationError(f"{where}: its JSON is not laid out as this project writes it; cannot rewrite it byte "
                         "for byte (restore it from git)")


def grid_dir(folder: Path) -> Path | None:
    if (folder / "grid" / "runs").is_dir():
        return folder / "grid"
    if (folder / "runs").is_dir() and (folder / "grid.json").is_file():
        return folder
    return None


def plan_folder(folder: Path) -> Plan:
    """What migrating ``folder`` changes (module doc); MigrationError for a folder it does not understand."""
    if not folder.is_dir():
        raise MigrationError(f"{folder} is not a folder; give a study's, a bench.fl or a bench.dse results folder")
    grid = grid_dir(folder)
    if grid is not None:
        return plan_study(folder, grid)
    if (folder / "results.json").is_file():
        return plan_fl(folder)
    manifest = folder / "manifest.json"
    if manifest.is_file() and json.loads(manifest.read_text(encoding="utf-8")).get("command") == "bench.dse":
        return Plan(folder, "bench.dse")
    raise MigrationError(f"{folder}: neither a study's results folder (grid/runs/), a bench.fl results folder "
                         "(results.json) nor a bench.dse folder; give one of those")


def plan_study(folder: Path, grid: Path) -> Plan:
    """The runs' new points and ids, then every file of ``folder`` that names an old id."""
    plan = Plan(folder, "study")
    runs = sorted(p for p in (grid / "runs").iterdir() if p.is_dir())
    unfinished = [p.name for p in runs if p.name.startswith(".tmp-")]
    if unfinished:
        raise MigrationError(f"{folder}: {grid.name}/runs/{unfinished[0]} is an unfinished run; let its study "
                             "finish (or delete that folder) first")
    records = [(p / "point.json", p.name) for p in runs] + [(p, p.stem) for p in sorted(grid.glob("failed/*.json"))]
    for record, name in records:
        plan_record(plan, record, name)
    plan.runs = len(runs)
    taken = [new for new in plan.ids.values() if (grid / "runs" / new).exists()]
    if taken or len(set(plan.ids.values())) != len(plan.ids):
        raise MigrationError(f"{folder}: two runs would have one id ({taken[0] if taken else 'twice'}) after the "
                             "migration; not a migration this script can make")
    for lock in sorted(grid.glob("locks/*.lock")):
        if lock.stem in plan.ids:
            plan.renames.append((lock, lock.with_name(f"{plan.ids[lock.stem]}.lock")))
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not in_records(p, grid)):
        new = rewritten(path, plan.ids)
        if new is not None:
            plan.writes[path] = new
    return plan


def in_records(path: Path, grid: Path) -> bool:
    """Whether ``path`` is a run's own file or a failed / lock record (handled by ``plan_record``)."""
    return any(path.is_relative_to(grid / sub) for sub in ("runs", "failed", "locks"))


def plan_record(plan: Plan, record: Path, name: str) -> None:
    """One run's ``point.json`` (or ``failed/<id>.json``): its point with its own knobs, its new id,
    the record rewritten and the run's folder (or record) renamed to it."""
    where = str(record)
    if not record.is_file():
        raise MigrationError(f"{record.parent}: a run folder without point.json; delete it (its study runs it again)")
    text = record.read_text(encoding="utf-8")
    data = json.loads(text)
    runner = data.get("runner", RUNNER)  # a failed record names no runner: its grid's
    if runner != RUNNER:
        raise MigrationError(f"{where}: a point of the runner {runner!r}; this script migrates {RUNNER} points only")
    config = migrated_point(data["config"], where)
    new_id = run_id(runner, config)
    if data.get("run_id") not in (name, new_id):  # new_id: rewritten by an interrupted --write, not renamed yet
        raise MigrationError(f"{where}: records run {data.get('run_id')!r} in a folder named {name}; restore it")
    new = dump_like(text, {**data, "config": config, "run_id": new_id}, record)
    if new != text:
        plan.writes[record] = new
    if new_id != name:
        plan.ids[name] = new_id
        old = record.parent if record.name == "point.json" else record
        plan.renames.append((old, old.with_name(new_id if old.is_dir() else f"{new_id}.json")))


def rewritten(path: Path, ids: Mapping[str, str]) -> str | None:
    """The new text of one file of a study's folder (None: unchanged, or not text)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None  # a figure: it names no run
    if path.suffix == ".json":
        new = rewritten_json(text, ids, path)
    elif path.suffix == ".csv":
        new = rewritten_csv(text, ids, path)
    else:
        new = ID_LIST.sub(lambda m: renamed_list(m.group(0).split(", "), ids, ", "), text)
        new = ID.sub(lambda m: ids.get(m.group(0), m.group(0)), new)
    return None if new == text else new


def renamed_list(old: list[str], ids: Mapping[str, str], sep: str | None = None) -> Any:
    """``old`` ids renamed, sorted again when ``old`` was sorted (the report lists them so)."""
    new = [ids.get(i, i) for i in old]
    new = sorted(new) if old == sorted(old) and any(i in ids for i in old) else new
    return new if sep is None else sep.join(new)


def rewritten_json(text: str, ids: Mapping[str, str], path: Path) -> str:
    """A JSON file with old ids renamed and every recorded point's ``hparams`` its own method's."""
    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            out = {k: walk(v) for k, v in obj.items()}
            if isinstance(out.get("hparams"), dict) and isinstance(out.get("method"), str):
                out["hparams"] = own_hparams(out["hparams"], out["method"])  # summary.json's chosen points
            return out
        if isinstance(obj, list):
            if obj and all(isinstance(v, str) and ID.fullmatch(v) for v in obj):
                return renamed_list(obj, ids)
            return [walk(v) for v in obj]
        if isinstance(obj, str):
            return ID.sub(lambda m: ids.get(m.group(0), m.group(0)), obj)
        return obj

    data = json.loads(text)
    new = walk(data)
    return text if new == data else dump_like(text, new, path)


def rewritten_csv(text: str, ids: Mapping[str, str], path: Path) -> str:
    """A CSV with old ids renamed and, in a grid's tables (columns ``method`` and ``hparams.*``), the
    knobs that are not the row's method's emptied (a column left empty in every row dropped, as the
    grid's tables never hold one)."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows:
        return text
    head, body = rows[0], rows[1:]
    knobs = {i: c.removeprefix("hparams.") for i, c in enumerate(head) if c.startswith("hparams.")}
    if knobs and "method" in head:
        m = head.index("method")
        body = [[("" if i in knobs and knobs[i] not in own_knob_names(r[m]) else v) for i, v in enumerate(r)]
                for r in body]
        emptied = {i for i in knobs if not any(r[i] for r in body) and any(r[i] for r in rows[1:])}
        keep = [i for i in range(len(head)) if i not in emptied]
        head, body = [head[i] for i in keep], [[r[i] for i in keep] for r in body]
    out = [[ID.sub(lambda mm: ids.get(mm.group(0), mm.group(0)), v) for v in r] for r in [head, *body]]
    if out == rows:
        return text
    if write_csv(rows) != text:
        raise MigrationError(f"{path}: not laid out as this project writes CSV; cannot rewrite it byte for byte "
                             "(restore it from git)")
    return write_csv(out)


def write_csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def plan_fl(folder: Path) -> Plan:
    """A ``bench.fl`` folder: each method's recorded hyper-parameters its own method's knobs."""
    plan = Plan(folder, "bench.fl")
    manifest = folder / "manifest.json"
    if manifest.is_file():
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        if doc.get("command") != "bench.fl" or doc.get("state") != "complete":
            raise MigrationError(f"{folder}: results.json beside a manifest of {doc.get('command')!r} in state "
                                 f"{doc.get('state')!r}; this script migrates complete bench.fl folders only")
    path = folder / "results.json"
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    if not isinstance(doc.get("hparams"), dict) or not all(isinstance(v, dict) for v in doc["hparams"].values()):
        raise MigrationError(f"{path}: no per-method hparams table; not a bench.fl results.json")
    new = {**doc, "hparams": {m: own_hparams(hp, m) for m, hp in doc["hparams"].items()}}
    if new != doc:
        plan.writes[path] = dump_like(text, new, path)
    plan.runs = len(doc["hparams"])
    return plan


def apply(plan: Plan) -> None:
    """Files first, then the renames: an interrupted --write, run again, finishes the migration."""
    for path, text in plan.writes.items():
        atomic_write_text(path, text)
    for old, new in plan.renames:
        old.rename(new)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/migrate_run_ids.py", description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="study, bench.fl or bench.dse results folders")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is left to migrate")
    mode.add_argument("--write", action="store_true", help="migrate (default: say what would change, change nothing)")
    args = p.parse_args(argv)
    try:
        plans = [plan_folder(folder) for folder in args.folders]  # every folder understood before any write
    except MigrationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for plan in plans:
        print(("" if args.write or plan.empty() else "would migrate: ") + plan.describe())
        if args.write:
            apply(plan)
    return 1 if args.check and not all(plan.empty() for plan in plans) else 0


if __name__ == "__main__":
    sys.exit(main())

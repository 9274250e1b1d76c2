"""Compare two results folders file by file: every CSV cell and every JSON value, after renaming
keys and columns and leaving out what a rerun may change (times measured on this machine, the
command line, the git commit, output paths).

    python scripts/compare_results.py BEFORE AFTER [--rename OLD=NEW ...] [--ignore KEY ...] [--added KEY ...]

Used to show that a refactoring changed no result (docs/architecture.md, "Behaviour unchanged"):
run the same command on the commit before and after, then compare. Exit 0 when every shared file
agrees; files only in AFTER that BEFORE could not have (a manifest) are listed, not failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

VOLATILE = {"git_commit", "command", "wall_s", "pricing_wall_s", "projected_wall_s", "elapsed_s", "out",
            "start_unix_s", "end_unix_s"}
NEW_FILES = {"manifest.json"}  # written by the suite since results format version 4


def renamed(obj, renames: dict[str, str], ignore: set[str]):
    if isinstance(obj, dict):
        return {renames.get(k, k): renamed(v, renames, ignore) for k, v in obj.items() if k not in ignore}
    if isinstance(obj, list):
        return [renamed(v, renames, ignore) for v in obj]
    return obj


def diff(a, b, where: str = "", added: frozenset = frozenset()) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a:
                if k not in added:  # a key the newer format adds is not a difference of results
                    out.append(f"{where}.{k}: only after")
            elif k not in b:
                out.append(f"{where}.{k}: only before")
            else:
                out += diff(a[k], b[k], f"{where}.{k}", added)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{where}[{i}]", added)]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def read(path: Path, renames: dict[str, str], ignore: set[str]):
    if path.suffix == ".json":
        return renamed(json.loads(path.read_text()), renames, ignore)
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            rows = [renamed(r, renames, ignore) for r in csv.DictReader(f)]
        return rows
    return None  # pictures: drawn from the data compared above


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--rename", nargs="*", default=[], metavar="OLD=NEW", help="a key or column renamed between them")
    p.add_argument("--ignore", nargs="*", default=[], metavar="KEY", help="more keys to leave out")
    p.add_argument("--added", nargs="*", default=[], metavar="KEY",
                   help="keys the newer results add (present only in AFTER: not a difference)")
    a = p.parse_args(argv)
    renames = dict(r.split("=", 1) for r in a.rename)
    ignore = VOLATILE | set(a.ignore)
    before = {f.name for f in a.before.iterdir()}
    after = {f.name for f in a.after.iterdir()}
    problems = [f"{n}: only before" for n in sorted(before - after)]
    problems += [f"{n}: only after" for n in sorted(after - before - NEW_FILES)]
    for name in sorted(before & after):
        old, new = read(a.before / name, renames, ignore), read(a.after / name, renames, ignore)
        found = diff(old, new, name, frozenset(a.added))
        problems += found
        print(f"{name}: {'identical' if not found else f'{len(found)} difference(s)'}"
              + ("" if old is not None else " (not compared: a picture)"))
    for line in problems[:50]:
        print("  " + line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

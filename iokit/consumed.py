"""Reading a folder one command consumes from another (issue 46): never trusted, always checked.

``bench.dse --study DIR`` reads a study's folder, ``bench.dse --run DIR`` a run's: before a figure
is computed from them, the folder is checked as a whole and its tables value by value, each
refusal one line naming the flag, the folder and the fix:

* ``finished_folder``: the folder is the named command's (its manifest, ``iokit.outputs``), it
  finished (a study whose manifest still says "running" is not priced), and every file its
  manifest lists is there;
* ``finite_numbers``: every cell of the columns a reader uses is a finite number (a NaN accuracy
  is not "measured, not reached"; a round "x" is not a traceback after the pricing), whole
  numbers where the column counts (rounds, seeds);
* ``every_seed``: each group of rows (a format and method of a study) holds exactly the seeds the
  folder claims (a one-seed curve is never "the mean curve over 2 seeds").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from iokit.outputs import Manifest, ManifestError


def finished_folder(folder: str | Path, *, command: str, flag: str, error: type[Exception]) -> Manifest:
    """The manifest of ``folder``, a complete results folder of ``command`` whose listed files all
    exist; ``error`` naming ``flag`` and the fix otherwise (module doc)."""
    folder = Path(folder)
    writes = f"give a folder python -m {command} wrote"
    try:
        manifest = Manifest.load(folder)
    except ManifestError as err:
        raise error(f"{flag} {folder}: {err}; {writes}") from None
    if manifest is None:
        raise error(f"{flag} {folder}: not a {command} results folder (no manifest.json of the suite); {writes}")
    if manifest.command != command:
        raise error(f"{flag} {folder}: a {manifest.command} results folder, not a {command} one; {writes}")
    if manifest.state != "complete":
        raise error(f"{flag} {folder}: the {command} that writes it has not finished (its manifest says "
                    f"{manifest.state!r}); run its command again until it completes, then give the folder")
    missing = [name for name in manifest.files if not (folder / name).is_file()]
    if missing:
        raise error(f"{flag} {folder}: {missing[0]} is missing, though the folder's manifest lists it; run its "
                    f"command again to rewrite it")
    return manifest


def finite_numbers(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], *, where: str,
                   whole: Sequence[str] = (), error: type[Exception]) -> None:
    """Every row's ``columns`` hold finite numbers (``whole``: integral ones too); ``error`` naming
    ``where`` (the file), the row (1-based, after the header), the column and the value."""
    for i, row in enumerate(rows, 1):
        for column in columns:
            value = row.get(column)
            try:
                number = float(value)
            except (TypeError, ValueError):
                number = math.nan
            if not math.isfinite(number) or (column in whole and number != int(number)):
                kind = "a whole number" if column in whole else "a finite number"
                raise error(f"{where}: row {i}, {column} = {value!r} is not {kind}; the folder is damaged: run "
                            "its command again to rewrite it")


def every_seed(seeds_by_group: Mapping[str, Iterable[int]], claimed: Sequence[int], *, where: str,
               error: type[Exception]) -> None:
    """Each group (``"bfp_m4_g16 fedavg"``) holds exactly the ``claimed`` seeds; ``error`` naming the
    first group that does not, what it holds and what is claimed."""
    want = sorted(set(claimed))
    for group, seeds in seeds_by_group.items():
        have = sorted(set(seeds))
        if have != want:
            raise error(f"{where}: {group} has the runs of seed(s) {have}, but the folder claims seeds {want}: the "
                        "study is incomplete; rerun its command until every run is done (--retry-failed for "
                        "failed ones)")

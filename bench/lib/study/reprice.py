"""Re-pricing a finished study run with today's code and files, without training (``bench.study
--reprice``, docs/study.md): every column but the priced ones must come out as recorded.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from bench.lib.study.run_files import CURVE_COLUMNS, CURVE_CSV, RUN_JSON, curve_rows, curve_text, labels_of, run_json_text
from bench.lib.study.runner import files_read, prepare
from iokit.files import atomic_write_text
from workloads.cost.system import CUMULATIVE_COLUMNS


PRICED_KEY = "priced"  # run.json: {"git_commit": ...} of the code that re-priced the run (docs/study.md)


class RepriceError(ValueError):
    """A finished run that cannot be re-priced without training: the message names its folder and why."""


@dataclass(frozen=True)
class Repriced:
    """What re-pricing one finished run makes of it (``price_again``), before anything is written:
    ``texts``, file name -> its new text, are what ``write`` puts in ``folder``."""

    run_id: str
    changed: bool  # today's cost columns differ from the recorded ones
    written: bool  # curve.csv is (to be) rewritten when changed (False: left as recorded)
    old: tuple[dict[str, str], ...] = ()  # the recorded curve.csv rows (text)
    new: tuple[dict[str, str], ...] = ()  # today's (text; equal to ``old`` but in ``CUMULATIVE_COLUMNS``)
    note: str = ""
    folder: Path | None = None
    texts: Mapping[str, str] = field(default_factory=dict)  # in the order written: point.json last

    def write(self) -> None:
        """``texts`` into ``folder``, each file replaced atomically, ``point.json`` (the record of the
        files the run was priced with) last."""
        for name, text in self.texts.items():
            atomic_write_text(self.folder / name, text)


def _recorded_history(rows: Sequence[Mapping[str, str]], label: str) -> list[dict[str, Any]]:
    """The loop's history as a run's ``curve.csv`` recorded it: ``label``'s training rows, typed."""
    return [{"round": int(r["round"]), **{k: _number(r[k]) for k in ("lr", "mean_loss", "accuracy", "val_accuracy")}}
            for r in rows if r["method"] == label and r["stage"] == "train"]


def _number(text: str) -> float | None:
    return None if text == "" else float(text)


def reprice_run(folder: Path, commit: str) -> Repriced:
    """``price_again`` and write what it gives (``Repriced.write``)."""
    repriced = price_again(folder, commit)
    repriced.write()
    return repriced


def price_again(folder: Path, commit: str) -> Repriced:
    """A finished run of this runner in ``folder`` (``runs/<id>``) priced again by today's code and
    today's files, without training and without writing: the point prepared as ``run_point``
    prepares it (the data and partition from the seed, the model, the format, the hardware and
    system files as they are now, the fleet), the run's record rebuilt from its ``curve.csv``
    (``bench.lib.fl.jobs.reprice_job``), and ``curve.csv`` made again by ``curve_rows`` from it. Every
    column but the priced ``CUMULATIVE_COLUMNS`` must come out as recorded, byte for byte
    (RepriceError otherwise). What to write (``Repriced.texts``): ``curve.csv`` when the cost
    columns changed, ``run.json`` with ``PRICED_KEY``: ``commit``, and ``point.json`` with the files
    it was priced with (``files_read``) where their content changed since it trained (a hardware or
    system file: the run's accuracy does not read them). A run on a fleet whose prices changed is
    left as recorded: its arrivals follow the prices, so who trained may change; retrain it. A run
    on a fleet whose files changed is refused (RepriceError): it is no longer the study's run."""
    from bench.lib.fl.jobs import Job, reprice_job
    from iokit.identity import changed as files_changed, contents

    folder = Path(folder)
    record, info, old_text = _finished_run(folder)
    old = tuple(csv.DictReader(io.StringIO(old_text)))
    today = contents(files_read(record["config"]))
    stale = files_changed(record.get("files"), today)
    if stale and record["config"].get("fleet") is not None:
        raise RepriceError(f"{folder}: a run on a fleet whose files changed since it trained ({', '.join(stale)}): "
                           "who arrives in each round follows them, so it cannot be re-priced without training; "
                           "rerun the study without --reprice to train it with today's files")
    p, inputs = prepare(record["config"])
    history, accuracy, val_after = _recorded_run(folder, old, p.method, p.fl.rounds)
    rows = reprice_job(Job(p.method.name, p.hp), inputs, history, accuracy)
    new_text = curve_text(curve_rows(p.method, history, rows, val_after))
    new = tuple(csv.DictReader(io.StringIO(new_text)))
    kept = [c for c in CURVE_COLUMNS if c not in CUMULATIVE_COLUMNS]
    if len(new) != len(old) or any([a[c] for c in kept] != [b[c] for c in kept] for a, b in zip(old, new)):
        raise RepriceError(f"{folder}: re-priced, its curve's rows or accuracy columns would change; left as "
                           "recorded (retrain it)")
    rid = str(record.get("run_id", folder.name))
    changed = new_text != old_text
    if changed and p.fleet is not None:
        return Repriced(rid, True, False, old, new, "a fleet's arrivals follow its prices: retrain it", folder)
    texts = {CURVE_CSV: new_text} if changed else {}
    texts[RUN_JSON] = run_json_text({**info, PRICED_KEY: {"git_commit": commit}})
    if stale:
        texts["point.json"] = json.dumps({**record, "files": today}, indent=2, sort_keys=True, default=str)
    return Repriced(rid, changed, True, old, new, folder=folder, texts=texts)


def _finished_run(folder: Path) -> tuple[dict, dict, str]:
    """A finished run's ``point.json`` record, ``run.json`` and ``curve.csv`` text; RepriceError naming
    the folder when one is missing or unreadable, or the curve has other columns."""
    try:
        record = json.loads((folder / "point.json").read_text(encoding="utf-8"))
        info = json.loads((folder / RUN_JSON).read_text(encoding="utf-8"))
        old_text = (folder / CURVE_CSV).read_text(encoding="utf-8")
    except (OSError, ValueError) as err:
        raise RepriceError(f"{folder}: not a finished run ({type(err).__name__}: {str(err)[:80]})") from None
    old = tuple(csv.DictReader(io.StringIO(old_text)))
    if not old or tuple(old[0]) != CURVE_COLUMNS:
        raise RepriceError(f"{folder / CURVE_CSV}: not a curve.csv of columns {', '.join(CURVE_COLUMNS)}")
    return record, info, old_text


def _recorded_run(folder: Path, old: Sequence[Mapping[str, str]], method, rounds: int
                  ) -> tuple[list[dict[str, Any]], float | None, float | None]:
    """The loop's history as the run's curve recorded it (every training round 1..``rounds``), the
    final accuracy and the validation accuracy after a calibration; RepriceError when the curve
    stopped early or its calibration row does not match the method."""
    history = _recorded_history(old, labels_of(method)[0])
    if [h["round"] for h in history] != list(range(1, rounds + 1)):
        raise RepriceError(f"{folder}: its curve has training rounds {[h['round'] for h in history]}, not 1.."
                           f"{rounds}: a run that stopped early cannot be re-priced without training")
    calibration = [r for r in old if r["method"] == method.name and r["stage"] == "calibration"]
    if bool(calibration) != bool(method.calibration):
        raise RepriceError(f"{folder}: {method.name}'s curve {'lacks' if method.calibration else 'has'} "
                           "a calibration row")
    if calibration:
        return history, _number(calibration[0]["accuracy"]), _number(calibration[0]["val_accuracy"])
    return history, history[-1]["accuracy"], None

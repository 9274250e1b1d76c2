"""``python -m bench.study STUDY --out DIR --reprice``: a finished study's runs priced again by
today's code and today's hardware and system files, without training (docs/study.md, "Re-pricing a
study").

Every run of the study that left a curve (``phases.run_study`` with ``execute=False`` and
``accept_changed``: the tuning runs, the edge extension's, the evaluation runs, including those
whose hardware or system file changed since they trained) is priced again
(``bench.lib.study.reprice.price_again``): its cost columns become what today's pricing makes of the
same point, its accuracy, loss and learning-rate columns stay byte for byte as recorded, its
``run.json`` records the commit that priced it, and its ``point.json`` the files it was priced with.

In two steps, so that nothing is half done: ``reprice_study`` prices every run in memory and
writes nothing (the slow part; an interrupt or a refusal leaves the folder as it was), then
``StudyRepriced.write`` replaces the runs' files (renames only, with Ctrl-C and SIGTERM held until
the last). The caller then rebuilds the report as ``--report-only`` does.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from bench.lib.study.reprice import RepriceError, Repriced, price_again
from bench.study.phases import GRID_FOLDER, StudyRun


class RepriceRefused(ValueError):
    """The study cannot be re-priced as a whole (nothing written): the message names the run and the fix."""


@dataclass(frozen=True)
class StudyRepriced:
    """What re-pricing a study's runs makes of them: each run's outcome (not yet written), and the
    runs left as recorded (why)."""

    runs: tuple[Repriced, ...]
    refused: tuple[str, ...]  # one line per run that cannot be re-priced without training

    def line(self) -> str:
        changed = sum(r.changed and r.written for r in self.runs)
        kept = [r for r in self.runs if r.changed and not r.written]
        return (f"re-priced {len(self.runs)} run(s): {changed} with new cost columns, "
                f"{sum(not r.changed for r in self.runs)} unchanged"
                + (f", {len(kept)} left as recorded ({kept[0].note})" if kept else "")
                + (f"; {len(self.refused)} not re-priced (e.g. {self.refused[0]})" if self.refused else ""))

    def write(self) -> None:
        """Every run's new files into its folder (``Repriced.write``), Ctrl-C and SIGTERM held until
        the last is in place (``signals_held``)."""
        with signals_held():
            for r in self.runs:
                r.write()


def reprice_study(run: StudyRun, out: Path, commit: str, progress: Callable[[str], None]) -> StudyRepriced:
    """Price again every run of ``run`` (what the study folder ``out`` holds, read with
    ``accept_changed``) that left a curve, each once (a run shared by the tuning and the evaluation
    is one folder); nothing is written. RepriceRefused, before any pricing, when a run cannot be
    the study's run after it (a run on a fleet whose files changed), and after it when a run whose
    files changed cannot be re-priced (left as recorded it would be another content's run, and the
    report would lose it)."""
    outcomes = {o.run_id: o for o in (*run.tuning, *run.evaluation) if o.curve}
    folders = {rid: Path(out) / GRID_FOLDER / "runs" / rid for rid in outcomes}
    for rid, o in outcomes.items():
        if o.changed and o.planned.setting.fleet is not None:
            raise RepriceRefused(f"--reprice: runs/{rid} ({o.planned.describe()}) trained on a fleet whose files "
                                 f"changed since ({', '.join(o.changed)}): who arrives in each round follows them, "
                                 "so it cannot be re-priced without training; rerun the study without --reprice to "
                                 "train its fleet runs with today's files, or restore the files")
    done, refused = [], []
    for i, (rid, folder) in enumerate(folders.items(), 1):
        try:
            done.append(price_again(folder, commit))
        except RepriceError as err:
            if outcomes[rid].changed:
                raise RepriceRefused(f"--reprice: {err}; its files changed since it trained "
                                     f"({', '.join(outcomes[rid].changed)}), so it cannot be left as recorded: "
                                     "rerun the study without --reprice to train it again, or restore the files"
                                     ) from None
            refused.append(str(err))
        if i % 25 == 0 or i == len(folders):
            progress(f"priced {i}/{len(folders)} run(s) again (nothing written yet)")
    return StudyRepriced(tuple(done), tuple(refused))


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM held while the block runs, then delivered (raised) at its end:
    a block of renames that must all happen or none be interrupted half-way. Outside the main
    thread (where Python delivers no signals) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:  # delivered now, to the handlers restored
            signal.raise_signal(caught[0])

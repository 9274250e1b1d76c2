"""``python -m bench.study STUDY --out DIR --reprice``: a finished study's runs priced again by
today's code, without training (docs/study.md, "Re-pricing a study").

Every run of the study that left a curve (``phases.run_study`` with ``execute=False``: the tuning
runs, the edge extension's, the evaluation runs) is re-priced in its folder
(``bench.lib.study.runner.reprice_run``): its cost columns become what today's pricing makes of the
same point, its accuracy, loss and learning-rate columns stay byte for byte as recorded, and its
``run.json`` records the commit that priced it. The caller then rebuilds the report as
``--report-only`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bench.lib.study.runner import RepriceError, Repriced, reprice_run
from bench.study.phases import GRID_FOLDER, StudyRun


@dataclass(frozen=True)
class StudyRepriced:
    """What re-pricing a study's runs did: each run's outcome, and the runs left as recorded (why)."""

    runs: tuple[Repriced, ...]
    refused: tuple[str, ...]  # one line per run that cannot be re-priced without training

    def line(self) -> str:
        changed = sum(r.changed and r.written for r in self.runs)
        kept = [r for r in self.runs if r.changed and not r.written]
        return (f"re-priced {len(self.runs)} run(s): {changed} with new cost columns, "
                f"{sum(not r.changed for r in self.runs)} unchanged"
                + (f", {len(kept)} left as recorded ({kept[0].note})" if kept else "")
                + (f"; {len(self.refused)} not re-priced (e.g. {self.refused[0]})" if self.refused else ""))


def reprice_study(run: StudyRun, out: Path, commit: str, progress: Callable[[str], None]) -> StudyRepriced:
    """Re-price every run of ``run`` (what the study folder ``out`` holds) that left a curve, each
    once (a run shared by the tuning and the evaluation is one folder)."""
    folders = dict.fromkeys(o.run_id for o in (*run.tuning, *run.evaluation) if o.curve)
    done, refused = [], []
    for i, rid in enumerate(folders, 1):
        try:
            done.append(reprice_run(Path(out) / GRID_FOLDER / "runs" / rid, commit))
        except RepriceError as err:
            refused.append(str(err))
        if i % 25 == 0 or i == len(folders):
            progress(f"re-priced {i}/{len(folders)} run(s)")
    return StudyRepriced(tuple(done), tuple(refused))

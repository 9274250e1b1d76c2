"""``python -m bench.study.reproduce FOLDER MODEL SETTING METHOD SEED``: run one point of a study's
results folder again (one model, data setting, method and seed, with the study's chosen
hyper-parameters) and print its final test accuracy beside the folder's ``runs.csv`` row
(docs/study.md, "Reproducing one point").

    python -m bench.study.reproduce results/reference/digits convnet alpha=0.5 fedavg 0 [--out DIR]

The point is the study's own (``summary.json``'s chosen settings with this seed: the same run id as
the folder's row), run by the study's runner on one torch thread, as the study ran it, into
``--out`` (default a new temporary folder). Same machine, same numbers; another CPU's kernels may
differ (docs/results.md, "Reproducibility across machines").
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.lib.grid.point import run_id
from bench.study.phases import RUNNER
from iokit import cli


def reference_point(folder: str | Path, model: str, setting: str, method: str, seed: int) -> dict[str, Any]:
    """The study point of ``method`` (a label of runs.csv, e.g. ``fedavg+spherefed+ffc``) on ``model``,
    ``setting`` and ``seed`` (ValueError naming what the folder lacks)."""
    from bench.lib.study.runner import make_point
    from bench.lib.study.spec import training_method
    from workloads.fl.execution import Execution
    from workloads.fl.hparams import FLConfig, Hparams
    from workloads.fl.methods import parse_method

    summary = json.loads((Path(folder) / "summary.json").read_text(encoding="utf-8"))
    training = training_method(method)
    for choice in summary["choices"]:
        if (choice["model"], choice["setting"], choice["method"]) == (model, setting, training) and choice["point"]:
            p = choice["point"]
            if method not in (training, p["method"]):
                raise ValueError(f"{folder}: {model} {setting} ran {p['method']}, not {method}")
            fl = FLConfig(**{**p["fl"], "model": model, "seed": seed})
            hp = Hparams(declared=parse_method(p["method"]).knobs, **p["hparams"])
            return make_point(model, p["method"], seed, fl, hp, Execution(**p["execution"]),
                              summary["study"].get("hw"), summary["study"].get("system"))
    raise ValueError(f"{folder}: no chosen run of {model} {setting} {training}; see its summary.json choices")


@cli.command("interrupted; the run's folder under --out is incomplete: delete it and run again")
def main(argv: list[str] | None = None) -> int:
    p = cli.Parser(prog="python -m bench.study.reproduce", description="Run one point of a study folder again.")
    p.add_argument("folder", help="a study's results folder, e.g. results/reference/digits")
    p.add_argument("model")
    p.add_argument("setting", help="iid or alpha=A, as in runs.csv")
    p.add_argument("method", help="a method of runs.csv, e.g. fedavg+spherefed+ffc")
    p.add_argument("seed", type=cli.int_in(0, 2**31 - 1))
    p.add_argument("--out", help="folder for the run (default: a new temporary folder)")
    args = p.parse_args(argv)
    import pandas as pd

    with cli.bad_input():
        if not (Path(args.folder) / "summary.json").is_file():
            raise ValueError(f"{args.folder} holds no summary.json: give a study's results folder, e.g. "
                             "results/reference/digits")
        point = reference_point(args.folder, args.model, args.setting, args.method, args.seed)
        rid = run_id(RUNNER, point)
        out = Path(args.out or tempfile.mkdtemp(prefix="reproduce-")) / rid
        if out.exists():
            raise ValueError(f"--out {out.parent} already holds run {rid}; give another --out")
    from bench.lib.grid.runners import resolve_runner
    import torch

    torch.set_num_threads(1)  # as the study ran it: one torch thread per run (bench.study --workers)
    out.mkdir(parents=True)
    with cli.run_failure():
        metrics = resolve_runner(RUNNER).run(point, out)
    runs = pd.read_csv(Path(args.folder) / "runs.csv")
    row = runs[(runs["model"] == args.model) & (runs["setting"] == args.setting) & (runs["method"] == args.method)
               & (runs["seed"] == args.seed)]
    here = 100 * metrics[f"{args.method}.accuracy"]
    shipped = f"{row['final_accuracy_pct'].iloc[0]:.4f} % (run {row['run_id'].iloc[0]})" if len(row) else "no row"
    print(f"run {rid}: final test accuracy {here:.4f} %; {args.folder}/runs.csv: {shipped}; files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

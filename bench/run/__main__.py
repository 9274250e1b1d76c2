"""``python -m bench.run --model mobilenetv2``: SphereFed's efficiency study (Table 1, Fig. 5, Sec. 5.4).

For every model it reports, on the modeled accelerator (``accel_sim``, ``--hw``):

* one-round local training, FedAvg vs SphereFed: latency (cycles, seconds, and the round: E local
  epochs over the average client's |D| / K samples) and peak memory with its breakdown, from one
  step of the federated loop's own client trainer captured at the paper's shapes (CIFAR-100:
  3x32x32, 100 classes, ``--batch-size`` 64);
* calibration, CCVR vs FFC: the average client plus the server (``workloads.cost.calibration``);
* communication for the paper's run (10 clients, 100 rounds, every client every round): whole-model
  totals from the FL code's closed forms and the classifier's share from Table 1's
  (``bench.formulas``); the accuracy run's ledger is checked against the same closed forms;
* accuracy of the same methods from a federated run with the same model code, every round priced
  (``rounds.csv``), and the time, energy and bytes each method needs to reach a target accuracy
  (``tta.png``). ``--preset`` names a TOML file under ``configs/presets/`` (or a path): ``quick``
  (default) is a real comparison on the offline scikit-learn digits that fits the command in a few
  minutes on a 2-core CPU (not the paper's data: the output says so); ``smoke`` the smallest run;
  ``paper --data-dir`` CIFAR-100 with the paper's settings (hours on a GPU). The preset's
  ``model`` and ``methods`` are ignored: ``--model`` and ``--methods`` decide.

It prints one table (absolute and normalized to FedAvg / CCVR, as Fig. 5) and the paper's claims
beside ours, and writes ``--out`` (docs/results.md) through a temporary folder renamed at the end.
The library behind it: ``bench/run/`` (``config``, ``figures``, ``study``, ``table``).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from bench.lib import spec
from bench.lib.results import FORMAT_VERSION
from bench.lib.run import compare_hw, formats
from bench.lib.run.config import load_accuracy_data, resolved_runs
from bench.lib.run.figures import ledger_mismatches
from bench.lib.run.study import run_study, write_files
from bench.run.table import format_rates, format_references, format_table
from iokit import cli, outputs
from workloads.cost.participation import summary_line

COMMAND = "bench.run"


def parser() -> cli.Parser:
    p = cli.Parser(prog="python -m bench.run", description=__doc__.splitlines()[0].split(": ", 1)[-1])
    spec.add_flags(p, spec.RUN)
    p.add_argument("--out", help="results folder (default results/<models>-<preset>)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing results folder of this suite")
    return p


def parse_args(argv: list[str]) -> tuple[spec.RunSpec, str, bool]:
    """The command line as (run, results folder, --overwrite); UsageError naming a bad flag."""
    p = parser()
    a = p.parse_args(argv)
    try:
        run = spec.from_args(a, spec.RUN)
    except ValueError as exc:
        p.error(str(exc))
    if not run.models:
        p.error("give --model NAME or --models NAME [NAME ...]")
    out = str(outputs.out_folder(a.out, Path("results") / f"{'+'.join(run.models).replace(':', '-')}-"
                                 f"{Path(run.preset).stem}", error=cli.UsageError))
    return run, out, a.overwrite


@cli.command("interrupted; nothing written (a results folder appears only when complete)")
def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    cfg, out_text, overwrite = parse_args(argv)
    out = Path(out_text)
    with cli.bad_input():
        outputs.check_out(out, command=COMMAND, overwrite=overwrite)
        runs = resolved_runs(cfg)
        data = load_accuracy_data(runs)
    with outputs.claim(out):
        progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
        with cli.run_failure():
            study = run_study(runs, data, progress, shlex.join(["python", "-m", "bench.run", *argv]))
            outputs.write_results_dir(out, lambda tmp: write_files(tmp, study), command=COMMAND,
                                      config_sha256=outputs.config_hash(study.summary["config"]),
                                      version=FORMAT_VERSION, replace=overwrite)
    summary = study.summary
    print(format_table(summary))
    print("\n" + "\n".join(format_references(summary)))
    for line in format_rates(summary):
        print(line)
    print(formats.format_line(summary["number_formats"]))
    for model, s in summary["models"].items():
        for method, plan in s.get("fleet", {}).get("methods", {}).items():
            print(f"{model} {method} on fleet {s['fleet']['name']}: {summary_line(plan)}")
    if "hardware_comparison" in summary:
        print(f"\n{compare_hw.format_comparison(summary)}")
    mismatched = ledger_mismatches(summary)
    if mismatched:
        print(f"warning: the ledger disagrees with the closed forms for {mismatched}", file=sys.stderr)
    print(f"wrote {out_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

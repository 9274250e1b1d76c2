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

from bench.lib.results import FORMAT_VERSION
from bench.lib.run import compare_hw, formats
from bench.lib.run.config import DEFAULT_METHODS, RunConfig, load_accuracy_data, resolve
from bench.lib.run.figures import ledger_mismatches
from bench.lib.run.study import run_study, write_files
from bench.run.table import format_references, format_table
from iokit import checks, cli, outputs
from workloads.cost.fleet import add_round_args, summary_line
from workloads.cost.system import DEFAULT_SYSTEM_PATH
from workloads.fl.execution import add_execution_args
from workloads.model_spec import parse_input_shape
from workloads.models import MODELS

COMMAND = "bench.run"


def parser() -> cli.Parser:
    p = cli.Parser(prog="python -m bench.run", description=__doc__.splitlines()[0].split(": ", 1)[-1])
    p.add_argument("--model", help=f"one model ({', '.join(sorted(MODELS))}, or package.module:factory, "
                                   "torchvision:NAME, timm:NAME: docs/byom.md)")
    p.add_argument("--models", nargs="+", metavar="MODEL", help="several models")
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), metavar="METHOD",
                   help=f"training methods (any FL method, e.g. fedprox, fedavg+spherefed) and calibrations "
                        f"(ccvr, ffc); default: {' '.join(DEFAULT_METHODS)}")
    p.add_argument("--batch-size", type=cli.int_in(1, checks.BATCH_SIZE_MAX), default=64,
                   help=f"local batch size of the priced step (default 64, at most {checks.BATCH_SIZE_MAX:,})")
    p.add_argument("--seed", type=cli.int_in(0, checks.SEED_MAX), default=0,
                   help=f"0 to {checks.SEED_MAX:,} (default 0)")
    p.add_argument("--preset", default="quick",
                   help="accuracy run settings: a name under configs/presets/ (quick, smoke, paper, ...) or a .toml "
                        "path (default quick)")
    p.add_argument("--data-dir", help="dataset folder (needed by --preset paper: CIFAR-100)")
    p.add_argument("--hw", nargs="+", metavar="HW_TOML",
                   help="hardware config TOML (default: the paper's accelerator); several: each priced side "
                        "by side, the first is the run's (docs/byom.md)")
    p.add_argument("--out", help="results folder (default results/<models>-<preset>)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing results folder of this suite")
    p.add_argument("--alpha", type=cli.finite_float(positive=True),
                   help="Dirichlet concentration of the accuracy run (default: the preset's)")
    p.add_argument("--target", type=cli.finite_float(positive=True, high=100.0), metavar="PCT",
                   help="time-to-accuracy target, test accuracy in percent (default: the preset's [targets] "
                        "accuracy_pct, else the covering reference study's declared target)")
    p.add_argument("--system", default=cli.Default(DEFAULT_SYSTEM_PATH),
                   help="system-model TOML of the priced rounds: links and devices (default configs/system/default.toml)")
    p.add_argument("--fleet", metavar="FILE",
                   help="fleet TOML (or a name under configs/fleets/): the accuracy runs' rounds on a fleet of "
                        "devices with a deadline, aggregating only the clients that arrive (docs/fleets.md); "
                        "replaces --system")
    add_round_args(p)
    p.add_argument("--input-shape", metavar="C,H,W",
                   help="one sample's input shape, priced and trained (3,S,S; default: 3,32,32 priced, the "
                        "preset's size trained)")
    p.add_argument("--classifier", metavar="DOTTED.NAME", help="the nn.Linear the methods act on (default: the last)")
    p.add_argument("--classes", type=cli.int_in(2, checks.CLASSES_MAX), default=100,  # one class is no classifier
                   help=f"classes of the priced figures (default 100, at most {checks.CLASSES_MAX:,})")
    p.add_argument("--workers", type=cli.int_in(1, checks.WORKERS_MAX), metavar="N",
                   help="federated runs side by side in N processes, each with cores/N torch threads (default: one "
                        "per run, at most one per core; 1: one after another in this process)")
    add_execution_args(p)
    return p


def parse_args(argv: list[str]) -> RunConfig:
    """The command line as a ``RunConfig`` (UsageError naming a bad flag)."""
    p = parser()
    a = p.parse_args(argv)
    if a.model and a.models:
        p.error(f"give either --model {a.model} or --models {' '.join(a.models)}, not both")
    models = tuple(a.models or ([a.model] if a.model else []))
    if not models:
        p.error("give --model NAME or --models NAME [NAME ...]")
    out = str(outputs.out_folder(a.out, Path("results") / f"{'+'.join(models).replace(':', '-')}-{Path(a.preset).stem}",
                                 error=cli.UsageError))
    try:
        shape = parse_input_shape(a.input_shape) if a.input_shape else None
    except ValueError as exc:
        p.error(str(exc))
    hws = tuple(a.hw or ())
    return RunConfig(models, tuple(a.methods), a.batch_size, a.seed, a.preset, a.data_dir, hws[0] if hws else None,
                     out, a.overwrite, a.alpha, a.target, a.system, shape, a.classifier, a.classes,
                     hws if len(hws) > 1 else (), a.workers, a.device, a.augment, a.channels_last, a.bf16, a.compile,
                     a.number_format, a.comm_format, a.fleet, a.deadline_s, a.overcommit,
                     a.low_precision_weights)


@cli.command("interrupted; nothing written (a results folder appears only when complete)")
def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    cfg = parse_args(argv)
    out = Path(cfg.out)
    with cli.bad_input():
        outputs.check_out(out, command=COMMAND, overwrite=cfg.overwrite)
        resolved = resolve(cfg)
        data = load_accuracy_data(resolved)
    with outputs.claim(out):
        progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
        with cli.run_failure():
            study = run_study(resolved, data, progress, shlex.join(["python", "-m", "bench.run", *argv]))
            outputs.write_results_dir(out, lambda tmp: write_files(tmp, study), command=COMMAND,
                                      config_sha256=outputs.config_hash(study.summary["config"]),
                                      version=FORMAT_VERSION, replace=cfg.overwrite)
    summary = study.summary
    print(format_table(summary))
    print("\n" + "\n".join(format_references(summary)))
    print(formats.format_line(summary["number_formats"]))
    for model, s in summary["models"].items():
        for method, plan in s.get("fleet", {}).get("methods", {}).items():
            print(f"{model} {method} on fleet {s['fleet']['name']}: {summary_line(plan)}")
    if "hardware_comparison" in summary:
        print(f"\n{compare_hw.format_comparison(summary)}")
    mismatched = ledger_mismatches(summary)
    if mismatched:
        print(f"warning: the ledger disagrees with the closed forms for {mismatched}", file=sys.stderr)
    print(f"wrote {cfg.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

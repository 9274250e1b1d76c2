"""``python -m bench.fl``: accuracy and communication of FL methods under one preset, every round
priced on the modeled accelerator.

    python -m bench.fl --preset small [--methods fedavg spherefed+ffc] [--seed 0] [--rounds N]
                       [--holdout FRACTION] [--data-dir DIR] [--out DIR] [--overwrite | --resume]
                       [--threads N] [--progress] [--hw HW.toml] [--system SYSTEM.toml | --fleet FLEET.toml
                       [--deadline-s S] [--overcommit X]]
                       [--model NAME|package.module:factory] [--classifier DOTTED.NAME] [--alpha A]
                       [--lr-from preset|study] [--number-format F] [--comm-format F]
                       [--device auto|cpu|cuda|cuda:N] [--augment] [--channels-last] [--bf16] [--compile]

The run flags are the ones every command shares (``bench.lib.spec``, docs/cli.md): ``--lr-from
study`` trains each method at a covering reference study's rate, as ``bench.run`` does by default
(``preset``, the default here: the preset's), and says where each rate comes from.

``--preset`` is a name under ``configs/presets/`` or a ``.toml`` path (``workloads.fl.presets``).
Writes ``--out`` (default ``results/fl/<preset>-seed<seed>``): ``results.json`` (accuracy and
validation accuracy per method, per-round history, ledger totals beside the closed forms, measured
and projected wall time, resolved config, execution, command, git commit), ``accuracy.csv``,
``ledger.csv`` (every transfer), ``partition.csv`` and ``rounds.csv`` (every round priced under
``--hw`` and ``--system``, or with ``--fleet`` on a fleet's devices with a deadline, the loop
aggregating only the clients that arrive: docs/rounds.md, docs/fleets.md; ``--deadline-s`` and
``--overcommit`` replace the fleet file's round rule), on a fleet ``fleet_<model>.png`` (accuracy
and each round's arrivals against modeled wall time, ``bench.lib.plots.fleet``), and
``manifest.json`` (what the suite wrote).

While it runs, ``--out`` holds the per-round checkpoints (``checkpoints/``) and a manifest saying
the run is in progress; ``--resume`` continues an interrupted run from them, with results identical
to an uninterrupted run, and only in a folder whose manifest names the same resolved config. The
results files appear only when complete (docs/fl.md). ``--overwrite`` replaces only a results
folder of this suite (``iokit.outputs``). Bad input: one line, exit 2, nothing written; a failed
run: exit 1; Ctrl-C / SIGTERM: one line, exit 130 / 143, checkpoints kept.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Sequence

from bench.lib import spec
from bench.lib.fl import pipeline
from bench.lib.resolve import ResolvedRun, resolve
from bench.lib.results import FORMAT_VERSION
from iokit import checks, cli, outputs

CHECKPOINTS = "checkpoints"  # the sub-folder of --out holding each method's checkpoint while the run is in progress


def parser() -> cli.Parser:
    p = cli.Parser(prog="python -m bench.fl", description=__doc__.split("\n\n")[0].split(": ", 1)[-1])
    spec.add_flags(p, spec.FL)
    p.add_argument("--out", help="output folder (default results/fl/<preset>-seed<seed>)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true", help="replace an existing results folder of this suite")
    mode.add_argument("--resume", action="store_true",
                      help="continue the interrupted run whose checkpoints --out holds (same options)")
    p.add_argument("--threads", type=cli.int_in(1, checks.THREADS_MAX),
                   help="torch CPU threads (default: torch's choice); 1 avoids OpenMP stalls when other processes "
                        "share a small CPU")
    p.add_argument("--progress", action="store_true",
                   help="a progress bar per method on stderr (default: when stderr is a terminal)")
    return p


@cli.command("interrupted; the results are written only when complete (completed rounds are checkpointed "
             "under --out/checkpoints/: rerun with --resume to continue)")
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    with cli.bad_input():
        run = run_of(args)
        out = outputs.out_folder(args.out, f"results/fl/{run.preset.name}-seed{run.fl.seed}")
        config_sha = outputs.config_hash(run.identity())
        earlier = outputs.check_out(out, command=pipeline.COMMAND, overwrite=args.overwrite,
                                    resume_hash=config_sha if args.resume else None,
                                    resume_files=checkpoint_files(run))
        if args.resume and earlier.state == "complete":
            print(f"--resume: {out} holds a complete {pipeline.COMMAND} run of this config: nothing to resume "
                  f"(its results: {out}/{pipeline.RESULTS_FILES[0]}; --overwrite runs it again)", file=sys.stderr)
            return 0
        if args.threads is not None:
            import torch

            torch.set_num_threads(args.threads)
        if args.resume:
            pipeline.check_checkpoints(run, out / CHECKPOINTS)
        inputs = pipeline.load(run)
    with outputs.claim(out):
        start_run_folder(out, config_sha, earlier, run)
        with cli.run_failure(), settled(out):
            trained = pipeline.train(run, inputs, progress=args.progress or sys.stderr.isatty(),
                                     checkpoints=out / CHECKPOINTS, resume=args.resume)
            doc = pipeline.results_doc(run, inputs, trained, shlex.join(["python", "-m", "bench.fl", *argv]))
            outputs.write_results_dir(out, lambda tmp: pipeline.write(tmp, run, inputs, trained, doc),
                                      command=pipeline.COMMAND, config_sha256=config_sha, version=FORMAT_VERSION,
                                      replace=True)
    print(f"wrote {out}/{', '.join(pipeline.written_files(run))}", file=sys.stderr)
    return 0


def run_of(args) -> ResolvedRun:
    """The run the parsed command line ``args`` describes (``bench.lib.resolve.resolve``; the hash of
    its ``identity`` identifies its folder)."""
    return resolve(spec.from_args(args, spec.FL))


def checkpoint_files(run: ResolvedRun) -> tuple[str, ...]:
    """Every method's checkpoint file, relative to ``--out``."""
    return tuple(pipeline.checkpoint_path(Path(CHECKPOINTS), m).as_posix() for m in run.methods)


def start_run_folder(out: Path, config_sha: str, earlier: outputs.Manifest | None, run: ResolvedRun) -> None:
    """``out`` as the running run's folder: its manifest says a run of this config is in progress
    and lists every method's checkpoint file, file by file (the files an earlier folder of
    ``bench.fl`` listed stay listed, so that ``--overwrite`` or ``--resume`` can still replace them at
    the end)."""
    out.mkdir(parents=True, exist_ok=True)
    files = tuple(dict.fromkeys((*(earlier.files if earlier else ()), *checkpoint_files(run))))
    outputs.Manifest(pipeline.COMMAND, config_sha, FORMAT_VERSION, "running", files, (CHECKPOINTS,)).write(out)


@contextlib.contextmanager
def settled(out: Path) -> Iterator[None]:
    """The run in progress: when it stops on an error or an interrupt, its manifest is rewritten to
    list only the files that exist (``start_run_folder`` listed every checkpoint ahead), so a
    folder never lists a checkpoint that was never written (issue 46)."""
    try:
        yield
    except BaseException:
        manifest = outputs.Manifest.read(out)
        if manifest is not None:
            replace(manifest, files=tuple(f for f in manifest.files if (out / f).exists())).write(out)
        raise


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.flower``: the example Flower app in Flower's simulation engine, every client's
training priced on the modeled accelerator (docs/flower.md).

    python -m bench.flower --model convnet --methods fedavg fedavg+spherefed --clients 3 --rounds 2 \\
        --out DIR [--preset small] [--seed 0] [--hw HW.toml] [--system SYSTEM.toml | --fleet FLEET.toml
        [--deadline-s S] [--overcommit X]] [--overwrite]

Runs the methods one after the other in one simulation (``workloads.flower.app``) and writes
``DIR/rounds.csv`` (``ROUNDS_COLUMNS``, also printed), ``DIR/clients.csv`` (each client's share of
each round), ``DIR/simulation.log`` (Flower's and Ray's output) and ``DIR/manifest.json``; with
``--fleet`` (docs/fleets.md) each round trains and aggregates the clients its participation plan
says arrive, the plan computed before Ray starts as ``bench.fl`` computes it
(``bench.flower.fleet``), and ``DIR/fleet.json`` records the fleet and each method's
participation. All or nothing: the simulation writes into a temporary folder
renamed at the end, and a run in which a client failed (fewer rounds than asked) is exit 1 with
nothing written (the end of the simulation's log is printed). Without Flower installed: the install line, exit 2. Bad input: one line, exit 2,
before Ray starts. Ctrl-C / SIGTERM: the simulation (its own process group, Ray included) is
stopped, one line, exit 130 / 143, nothing written.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from typing import Sequence

from bench.flower.simulation import LOG, simulate
from bench.lib import spec
from bench.lib.resolve import fleet_record, preset_of, resolve
from bench.lib.results import FORMAT_VERSION
from iokit import cli, outputs
from iokit.files import atomic_write_text
from workloads.cost.participation import summary_line

INSTALL_HINT = ("the Flower integration needs the 'flower' extra: "
                "python3 -m pip install -c constraints.txt -e '.[flower]'")
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_HW = ROOT / "configs" / "hw" / "paper_default.toml"
COMMAND = "bench.flower"
CLIENTS_MAX = 1_000  # each simulated client is a Ray actor's worth of memory on one machine
STOP_GRACE_S = 2.0  # after SIGTERM to the simulation's process group, SIGKILL (nothing of it is kept)
GONE_WAIT_S = 2.0  # after SIGKILL, how long the command waits for the group's processes to exit


def parser() -> cli.Parser:
    p = cli.Parser(prog="python -m bench.flower", description=__doc__.split("\n\n")[0].split(": ", 1)[-1])
    spec.add_flags(p, COMMAND, model="convnet", methods=("fedavg", "fedavg+spherefed"), preset="small", seed=0, rounds=2)
    p.add_argument("--clients", type=cli.int_in(1, CLIENTS_MAX), default=3,
                   help="simulated clients (default 3), all sampled every round; on a fleet, the clients its "
                        "participation plan says arrive")
    p.add_argument("--out", help="default: results/flower/<model>-seed<seed>")
    p.add_argument("--overwrite", action="store_true", help="replace an existing results folder of this suite")
    return p


def run_in_child(run, hw: str, system_path: str, folder: Path, fleet=None) -> None:
    """``simulate`` in a spawned child; an interrupt here stops its whole process group."""
    child = multiprocessing.get_context("spawn").Process(target=simulate,
                                                         args=(run, hw, system_path, str(folder), fleet))
    child.start()
    try:
        child.join()
    except BaseException:
        stop(child)
        raise
    if child.exitcode != 0:
        raise cli.RunFailed(f"the simulation failed (exit {child.exitcode}); nothing written. The end of its log:\n"
                            + log_tail(folder))


def stop(child) -> None:
    """SIGTERM to the child's process group (Ray's workers included), SIGKILL after ``STOP_GRACE_S``;
    returns once the group is gone (or after ``GONE_WAIT_S`` more), so the command's exit means Ray's
    processes have ended, not only been told to."""
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 1.0)):
        try:
            os.killpg(child.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        child.join(wait_s)
        if child.exitcode is not None:
            break
    try:
        os.killpg(child.pid, signal.SIGKILL)  # what the child left behind in its group
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + GONE_WAIT_S
    while time.monotonic() < deadline:  # a killed process can take a moment to exit on a loaded machine
        try:
            os.killpg(child.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)


def log_tail(folder: Path, lines: int = 30) -> str:
    """The last lines of the simulation's log (Flower's and Ray's output)."""
    try:
        return "\n".join((folder / LOG).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def check_rounds(folder: Path, expected: int) -> list[list[str]]:
    """rounds.csv's rows; RunFailed unless every method's every round (and a calibrated method's
    calibration round) is there (a failed client leaves its round out)."""
    path = folder / "rounds.csv"
    if not path.is_file():
        raise cli.RunFailed("the simulation ended without writing rounds.csv; nothing written. The end of its "
                            "log:\n" + log_tail(folder))
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) - 1 != expected:
        raise cli.RunFailed(f"the simulation trained {len(rows) - 1} of {expected} rounds (a client failed); "
                            "nothing written. The end of its log:\n" + log_tail(folder))
    return rows


def flower_run(run_spec: spec.RunSpec, clients: int):
    """``bench.flower``'s run: ``run_spec`` on its preset with ``clients`` clients, resolved as every
    run is (``bench.lib.resolve.resolve``: the hardware, system and fleet files, each checked), its
    methods those the Flower example runs and its model built on the run's data, before Ray starts;
    (``FlowerRun``, the hardware file, the ``ResolvedRun``). ValueError naming the flag."""
    from accel_sim.hardware import load_hardware_config

    if run_spec.fleet_path is not None and run_spec.hw_path is not None:
        raise ValueError(f"--fleet {run_spec.fleet_path} and --hw {run_spec.hw_path}: a fleet gives every client's "
                         "accelerator (and Flower's aggregation is not priced); leave --hw out")
    resolved = resolve(run_spec, command=COMMAND,
                       preset=preset_of(run_spec, model=run_spec.models[0], num_clients=clients))
    if resolved.execution.rounds_arithmetic or resolved.execution.comm_format != "fp32":
        raise ValueError(f"preset {resolved.preset.name}'s [execution] sets a number format: the Flower example "
                         "trains and sends in FP32; train it with python -m bench.fl")
    from workloads.flower import app  # Flower itself: after every check that needs none of it

    methods = tuple(run_spec.methods)  # as given: the Flower app names each method so
    app.check_methods(methods, fleet=run_spec.fleet_path is not None)
    hw = str(run_spec.hw_path or DEFAULT_HW)
    load_hardware_config(hw)  # fail here, not inside a Ray actor
    run = app.FlowerRun(run_spec.preset, resolved.fl.model, methods, clients, resolved.fl.rounds, resolved.fl.seed)
    run.setting()
    for name in methods:  # the model on the run's data: a paper model or package.module:factory (docs/byom.md)
        app.new_model(run, run.method(name)[0])
    return run, hw, resolved


def config_of(run, hw: str, resolved, planned=None) -> dict:
    """What ``bench.flower`` hashes into its folder's manifest: the Flower run, its files, a fleet's
    record, and every run option set beyond them (``Execution.run_options``, only where set: a
    folder without one keeps its hash)."""
    options = dict(resolved.execution.run_options)
    return {"model": run.model, "methods": run.methods, "clients": run.num_clients, "rounds": run.rounds,
            "preset": run.preset, "seed": run.seed, "hw": hw, "system": str(resolved.spec.system_path),
            **({} if planned is None else {"fleet": fleet_record(resolved.fleet, planned.classes)}),
            **({"run_options": options} if options else {})}


@cli.command("interrupted; the simulation was stopped, nothing written")
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import flwr  # noqa: F401
        import ray  # noqa: F401  (Flower's simulation engine)

        from bench.flower.fleet import FLEET_JSON, fleet_doc, fleet_run
        from workloads.flower import app
    except ImportError as err:
        if (err.name or "").split(".")[0] not in ("flwr", "ray"):
            raise
        raise cli.UsageError(INSTALL_HINT) from None
    with cli.bad_input():
        run_spec = spec.from_args(args, COMMAND)
        out = outputs.out_folder(args.out, ROOT / "results" / "flower" / f"{run_spec.models[0]}-seed{run_spec.seed}")
        run, hw, resolved = flower_run(run_spec, args.clients)
        fleet = resolved.fleet
        outputs.check_out(out, command=COMMAND, overwrite=args.overwrite)
    planned = None
    if fleet is not None:
        with cli.run_failure():  # who arrives in each round, from deterministic prices, before Ray starts
            planned = fleet_run(resolved)
        for name, plan in planned.plans.items():
            print(f"{name:28s} {summary_line(plan.summary(fleet))}", file=sys.stderr)
    config = config_of(run, hw, resolved, planned)
    rows: list[list[str]] = []

    def build(tmp: Path) -> None:
        run_in_child(run, hw, run_spec.system_path, tmp, planned)
        rows.extend(check_rounds(tmp, sum(run.rounds + (run.method(m)[0].calib is not None) for m in run.methods)))
        if planned is not None:
            atomic_write_text(tmp / FLEET_JSON, json.dumps(fleet_doc(planned), indent=1, allow_nan=False) + "\n")

    with outputs.claim(out):
        outputs.write_results_dir(out, build, command=COMMAND, config_sha256=outputs.config_hash(config),
                                  version=FORMAT_VERSION, replace=args.overwrite)
    for row in rows:
        print(",".join(row))
    print(f"wrote {out / 'rounds.csv'} and {out / 'clients.csv'}"
          + ("" if planned is None else f" and {out / FLEET_JSON}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CLI: the example Flower app in Flower's simulation engine, priced on the accelerator.

    python -m workloads.fl.flower --model convnet --method fedavg+spherefed --clients 3 --rounds 2 --out DIR
        [--preset small] [--seed 0] [--hw configs/hw/paper_default.toml] [--system configs/system/default.toml]

``--method`` is one method name or several joined by commas (``fedavg,fedavg+spherefed``: FedAvg,
then SphereFed on FedAvg, in one simulation). Writes ``DIR/rounds.csv`` (``ROUNDS_COLUMNS``, printed)
and ``DIR/clients.csv`` (each client's share of each round, ``ledger.CLIENT_COLUMNS``). Without Flower installed it prints the install line and exits with 2; a bad argument
prints one message and exits with 2.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Sequence

INSTALL_HINT = ("the Flower integration needs the 'flower' extra: "
                "python3 -m pip install -c constraints.txt -e '.[flower]'")
ROOT = Path(__file__).resolve().parents[3]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workloads.fl.flower", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="convnet",
                   help="a workloads.models name (default convnet) or package.module:factory (docs/byom.md)")
    p.add_argument("--method", default="fedavg,fedavg+spherefed", help="method name(s), comma-separated")
    p.add_argument("--clients", type=int, default=3, help="simulated clients, all sampled every round")
    p.add_argument("--rounds", type=int, default=2, help="federated rounds per method")
    p.add_argument("--preset", default="small", help="data, partition and hyper-parameters (configs/presets)")
    p.add_argument("--seed", type=int, default=0, help="model init, partition, shuffling, speed factors")
    p.add_argument("--hw", default=str(ROOT / "configs" / "hw" / "paper_default.toml"),
                   help="hardware TOML the clients' steps are priced on")
    p.add_argument("--system", default=str(ROOT / "configs" / "system" / "default.toml"),
                   help="system-model TOML: links, speed factors, per-client hardware")
    p.add_argument("--out", type=Path, default=None, help="default: results/flower/<model>-seed<seed>")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import ray  # noqa: F401  (Flower's simulation engine)
        from flwr.simulation import run_simulation

        from workloads.fl.flower import app
    except ImportError as err:
        if (err.name or "").split(".")[0] not in ("flwr", "ray"):
            raise
        print(f"error: {INSTALL_HINT}", file=sys.stderr)
        return 2

    from accel_sim.hardware import load_hardware_config
    from accel_sim.rounds import load_system_model
    from workloads.fl.flower.mod import AccelMod

    try:
        methods = tuple(m.strip() for m in args.method.split(",") if m.strip())
        app.check_methods(methods)
        if args.clients < 1 or args.rounds < 1:
            raise ValueError("--clients and --rounds must be >= 1")
        load_hardware_config(args.hw)  # fail here, not inside a Ray actor
        system = load_system_model(args.system)
        run = app.FlowerRun(args.preset, args.model, methods, args.clients, args.rounds, args.seed)
        run.setting()
        for name in methods:  # the model on the run's data: a paper model or package.module:factory (docs/byom.md)
            app.new_model(run, run.method(name)[0])
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = args.out or ROOT / "results" / "flower" / f"{args.model}-seed{args.seed}"
    rounds_csv = out / "rounds.csv"
    rounds_csv.unlink(missing_ok=True)
    run_simulation(server_app=app.server_app(run, system, out),
                   client_app=app.client_app(run, AccelMod(args.hw, system)),
                   num_supernodes=args.clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    if not rounds_csv.is_file():
        print("error: the simulation ended without writing rounds.csv (Flower's log above says why)",
              file=sys.stderr)
        return 1
    with rounds_csv.open(newline="") as f:
        for row in csv.reader(f):
            print(",".join(row))
    print(f"wrote {rounds_csv} and {out / 'clients.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

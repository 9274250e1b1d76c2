"""The Flower simulation of ``python -m bench.flower``, as the function its child process runs."""

from __future__ import annotations

import os
from pathlib import Path


def simulate(run, hw: str, system_path: str, folder: str) -> None:
    """The simulation, in its own process and process group (so that an interrupt stops Ray too):
    writes rounds.csv and clients.csv into ``folder``."""
    os.setsid()
    from flwr.simulation import run_simulation

    from workloads.cost.system import load_system_model
    from workloads.flower import app
    from workloads.flower.mod import AccelMod

    system = load_system_model(system_path)
    run_simulation(server_app=app.server_app(run, system, Path(folder)),
                   client_app=app.client_app(run, AccelMod(hw, system)),
                   num_supernodes=run.num_clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})

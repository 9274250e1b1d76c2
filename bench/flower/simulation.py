"""The Flower simulation of ``python -m bench.flower``, as the function its child process runs."""

from __future__ import annotations

import os
from pathlib import Path

LOG = "simulation.log"


def simulate(run, hw: str, system_path: str, folder: str, fleet=None) -> None:
    """The simulation, in its own process and process group (so that an interrupt stops Ray too):
    writes rounds.csv and clients.csv into ``folder``; ``hw`` is the clients' accelerator and the
    server's (a calibration's server work is priced on it). ``fleet`` (a ``workloads.flower.fleet.FleetRun``):
    each client on its class's accelerator and link, each round the participation plan's arrivals."""
    os.setsid()
    log = os.open(Path(folder) / LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd in (1, 2):  # Flower's and Ray's log go to the results folder, not over the command's one line
        os.dup2(log, fd)
    from flwr.simulation import run_simulation

    from accel_sim.hardware import load_hardware_config

    from workloads.cost.system import load_system_model
    from workloads.flower import app
    from workloads.flower.mod import AccelMod

    if fleet is None:
        system = load_system_model(system_path)
        accel = AccelMod(hw, system)
    else:
        system = fleet.system()
        accel = AccelMod(devices=fleet.devices())
    run_simulation(server_app=app.server_app(run, system, Path(folder), fleet, load_hardware_config(hw)),
                   client_app=app.client_app(run, accel),
                   num_supernodes=run.num_clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})

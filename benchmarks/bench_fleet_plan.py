"""How long pricing a round's participation plan takes for 1,000 clients (issue 35: target <= 1 s).

    PYTHONPATH=. python benchmarks/bench_fleet_plan.py [--clients 1000] [--rounds 5] [--model convnet]
                                                       [--method fedavg]

A fleet of ``--clients`` clients on ``configs/fleets/mixed.toml`` (four device classes), each with
its own number of samples (a Dirichlet-like spread of 20..300, so its last mini-batch has one of many
sizes), 10 % of them wanted per round with the fleet's over-commitment. ``workloads.cost.rounds.
plan_run`` prices every sampled client's download, local training on its own class's accelerator
(this method's captured step at each of its batch sizes) and upload, and plans the round; a
calibrated ``--method`` (``fedavg+ccvr``, ``spherefed+ffc``) also its calibration round over every
client (each client's own labels, drawn uniformly over 10 classes).

Printed: the first plan (cold: every distinct step captured once and priced once per device class),
then the same plan again on the warm pricer (what every further round and method of the run pays per
round), per round and per 1,000 sampled clients. Captures are shared per (method, batch size) and
priced per device class, so the warm time is the round rule over the clients, not the accelerator.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from workloads import model_spec
from workloads.cost.fleet import assign_classes, load_fleet
from workloads.cost.rounds import PricedModel, RunPricer, fleet_devices, fleet_system, plan_run
from workloads.fl.hparams import Hparams
from workloads.fl.methods import parse_method


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--model", default="convnet")
    p.add_argument("--method", default="fedavg",
                   help="the FL method planned (a calibrated one plans its calibration round too)")
    p.add_argument("--participation", type=float, default=1.0,
                   help="fraction wanted per round (default 1: every client sampled, the plan of 1,000 clients)")
    a = p.parse_args()
    fleet = load_fleet("mixed")
    classes = assign_classes(fleet, a.clients, seed=0)
    rng = np.random.default_rng(0)
    sizes = [int(n) for n in rng.integers(20, 300, a.clients)]
    spec = model_spec.ModelSpec(a.model, (3, 16, 16), None)
    pricer = RunPricer(PricedModel(lambda head: model_spec.build(spec, num_classes=10, head=head), a.model, (3, 16, 16),
                               10, 0))
    method, hp = parse_method(a.method), Hparams(local_epochs=2, batch_size=32)
    labels = [rng.integers(0, 10, n) for n in sizes]
    args = dict(pricer=pricer, client_labels=labels, devices=fleet_devices(fleet, classes),
                system=fleet_system(fleet, classes), rounds=a.rounds, participation=a.participation, seed=0)
    start = time.perf_counter()
    plan = plan_run(fleet, classes, method, hp, **args)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    again = plan_run(fleet, classes, method, hp, **args)
    warm = (time.perf_counter() - start) / a.rounds
    assert again == plan
    sampled = sum(len(r.sampled) for r in plan.rounds) / a.rounds
    print(f"{a.clients} clients, {len(fleet.classes)} device classes, {sampled:.0f} sampled per round, "
          f"{len({n % hp.batch_size for n in sizes})} distinct last-batch sizes, {a.model}, {method.name}")
    print(f"cold plan of {a.rounds} rounds (captures + pricing): {cold:.2f} s")
    print(f"warm: {warm * 1e3:.1f} ms per round ({warm * 1e3 * 1000 / sampled:.1f} ms per 1,000 sampled clients; "
          f"target <= 1 s)")
    arrived = [len(r.arrived) for r in plan.rounds]
    print(f"arrivals per round: {arrived}; dropped: {plan.summary(fleet)['dropped']}")
    if plan.calibration is not None:
        print(f"calibration round: {len(plan.calibration.arrived)} of {a.clients} arrived; dropped: "
              f"{plan.calibration.dropped_counts()}")


if __name__ == "__main__":
    main()

"""``bench.flower --fleet``: each method's participation plan, computed before Ray starts exactly as
``bench.fl`` computes it (``bench.lib.fl.pipeline`` resolves and loads the same run,
``bench.lib.fl.jobs.participation_plan`` plans it), and the record ``fleet.json`` keeps of it."""

from __future__ import annotations

from accel_sim.hardware import HardwareConfig
from bench.lib.fl.jobs import participation_plan
from bench.lib.fl.pipeline import fl_run, fleet_record, load, method_list
from bench.lib.results import FORMAT_NAME, FORMAT_VERSION
from workloads.cost.fleet import Fleet
from workloads.cost.rounds import RunPricer
from workloads.cost.system import SystemModel
from workloads.fl.execution import Execution
from workloads.fl.presets import load_preset, with_changes
from bench.lib.resolve import hparams_of
from workloads.flower.app import FlowerRun
from workloads.flower.fleet import FleetRun

FLEET_JSON = "fleet.json"


def fleet_run(run: FlowerRun, fleet: Fleet) -> FleetRun:
    """The fleet run of ``run``: client k's class and every method's ``ParticipationPlan``, those of
    ``python -m bench.fl`` on the same preset, model, clients, rounds, seed and fleet (the FP32
    arithmetic and communication the Flower app trains with; the server's accelerator, which the
    plan does not read, the paper's)."""
    preset = with_changes(load_preset(run.preset), model=run.model, num_clients=run.num_clients, rounds=run.rounds,
                          seed=run.seed)
    methods = method_list(run.methods)
    resolved = fl_run(preset, methods, hparams_of(preset, methods), None, None, HardwareConfig(),
                      SystemModel(), Execution(), fleet=fleet)
    inputs = load(resolved).inputs
    pricer = RunPricer(inputs.run_spec())
    return FleetRun(fleet, resolved.classes, {m.name: participation_plan(inputs, m, resolved.hparams[m.name], pricer)
                                              for m in methods})


def fleet_doc(planned: FleetRun) -> dict:
    """``fleet.json``: the fleet as ``bench.fl``'s ``results.json`` records it (``fleet``) and each
    method's participation (``methods.<method>.fleet``: ``ParticipationPlan.summary``)."""
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION,
            "fleet": fleet_record(planned.fleet, planned.classes),
            "methods": {name: {"fleet": plan.summary(planned.fleet)} for name, plan in planned.plans.items()}}

"""``bench.flower --fleet``: each method's participation plan, computed before Ray starts exactly as
``bench.fl`` computes it (the run resolved as every run is, ``bench.lib.resolve.resolve``, loaded by
``bench.lib.fl.pipeline.load`` and planned by ``bench.lib.fl.jobs.participation_plan``), and the
record ``fleet.json`` keeps of it."""

from __future__ import annotations

from bench.lib.fl.jobs import participation_plan
from bench.lib.fl.pipeline import load
from bench.lib.resolve import ResolvedRun, fleet_record
from bench.lib.results import FORMAT_NAME, FORMAT_VERSION
from workloads.cost.rounds import RunPricer
from workloads.flower.fleet import FleetRun

FLEET_JSON = "fleet.json"


def fleet_run(resolved: ResolvedRun) -> FleetRun:
    """The fleet run of ``bench.flower``'s resolved run (``bench.flower.__main__.flower_run``: its
    preset, model, clients, rounds, seed and fleet, in the FP32 arithmetic the Flower app trains
    with): client k's class and every method's ``ParticipationPlan``, those of ``python -m
    bench.fl`` on the same run."""
    inputs = load(resolved)
    pricer = RunPricer(inputs.priced_model())
    return FleetRun(resolved.fleet, resolved.classes,
                    {m.name: participation_plan(inputs, m, resolved.hparams[m.name], pricer) for m in resolved.methods})


def fleet_doc(planned: FleetRun) -> dict:
    """``fleet.json``: the fleet as ``bench.fl``'s ``results.json`` records it (``fleet``) and each
    method's participation (``methods.<method>.fleet``: ``ParticipationPlan.summary``)."""
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION,
            "fleet": fleet_record(planned.fleet, planned.classes),
            "methods": {name: {"fleet": plan.summary(planned.fleet)} for name, plan in planned.plans.items()}}

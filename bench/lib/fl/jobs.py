"""Federated runs as jobs, every round priced: what ``bench.fl``, ``bench.run`` and ``bench.study``
train with.

A job is one FL method with its hyper-parameters (``fedavg``, ``fedprox+spherefed+ffc``); a
calibrated method's result also holds its base model's figures before calibration, so CCVR and
FFC reuse the run of FedAvg / SphereFed and cost no extra training. Jobs of one ``RunInputs``
share the data, partition, model and priced system. ``run_job`` runs one (module-level: worker
processes call it); ``started`` runs several one after another in this process (``workers = 1``)
or side by side in worker processes, each with ``cpus // workers`` torch threads. A small model's training
step uses two cores poorly (MobileNetV2 at 16x16, batch 32: 0.20 s per step on two threads, 0.31 s on
one, on the 2-core development machine), so two runs on one thread each finish sooner than the same
two runs one after another on two threads. Results depend on the thread count (floating-point
reduction order), so the count is fixed by ``workers`` and the machine's cores, and recorded.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch

from accel_sim.hardware import HardwareConfig
from workloads import model_spec
from workloads.cost.fleet import Fleet
from workloads.cost.participation import ParticipationPlan
from workloads.cost.asynchronous import FleetRun, plan_buffered
from workloads.cost.rounds import Device, PricedModel, RunPricer, plan_run, price_run
from workloads.cost.system import SystemModel
from workloads.fl.dataset import Dataset
from workloads.fl.execution import Execution
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.comm import Transfer, calibration_client_bytes, client_round_bytes, closed_form_sizes
from workloads.fl import loop
from workloads.fl.loop import RunPlan, RunResult, forecast, sample_clients
from workloads.fl.methods import MethodConfig, parse_method
from workloads.model_spec import ModelSpec
from workloads.models import Head

if TYPE_CHECKING:
    from bench.lib.resolve import ResolvedRun


@dataclass(frozen=True)
class RunInputs:
    """What every job of one model shares: the model, the data and its split, the priced system."""

    spec: ModelSpec
    fl: FLConfig
    train: Dataset
    test: Dataset
    parts: tuple[np.ndarray, ...]
    hw: HardwareConfig
    system: SystemModel
    devices: tuple[Device, ...]
    seed: int
    execution: Execution = Execution()  # where the runs train (workloads.fl.execution)
    val: Dataset | None = None  # the validation hold-out, scored wherever the test set is
    fleet: Fleet | None = None  # rounds with deadlines on a fleet (then ``devices`` and ``system`` are its)
    classes: tuple[int, ...] = ()  # with a fleet: client k's device class (``assign_classes``)
    by_round: tuple[tuple[Device, ...], ...] = ()  # a precision schedule's devices per round (``devices_by_round``)

    def build(self, head: Head):
        return model_spec.build(self.spec, num_classes=self.train.num_classes, norm=self.fl.norm, head=head)

    def priced_model(self) -> PricedModel:
        return PricedModel(self.build, self.spec.name, tuple(self.train.x.shape[1:]), self.train.num_classes, self.seed)


def run_inputs(run: "ResolvedRun", data: tuple[Dataset, Dataset]) -> RunInputs:
    """What the jobs of the resolved ``run`` (``bench.lib.resolve.resolve``) share, on its loaded
    ``data`` (train, test): the validation hold-out and the partition drawn from the run's seed
    (``workloads.fl.presets.client_data``, as every command draws them), the model at the data's
    input shape, and the run's accelerators, devices, links and formats as resolved."""
    from workloads.fl.presets import client_data

    train, test = data
    train, val, parts = client_data(train, run.fl)
    return RunInputs(ModelSpec(run.fl.model, tuple(train.x.shape[1:]), run.spec.classifier), run.fl, train, test,
                     tuple(parts), run.hw, run.system, run.devices, run.fl.seed, run.execution, val, run.fleet,
                     run.classes, run.by_round)


@dataclass(frozen=True)
class Job:
    """One FL method (a calibrated one trains its base method, then calibrates) and its hyper-parameters."""

    name: str  # e.g. "fedavg", "spherefed+ffc", "fedprox+spherefed+ffc"
    hp: Hparams

    @property
    def method(self) -> MethodConfig:
        return parse_method(self.name)


@dataclass(frozen=True)
class JobResult:
    result: RunResult  # the loop's record of the run (its final weights left out)
    rows: list[dict]  # rounds.csv rows (workloads.cost.system.ROUNDS_COLUMNS)
    wall_s: float  # this machine's wall time of the training (not a modeled figure)
    pricing_wall_s: float  # this machine's wall time of pricing every round (and planning the participation)
    plan: ParticipationPlan | None = None  # with a fleet: who arrived in each round (``plan_run``)

    @property
    def accuracy(self) -> float:
        """Test accuracy of the final global model, after calibration where the job calibrates."""
        return self.result.accuracy


def participation_plan(inputs: RunInputs, method: MethodConfig, hp: Hparams,
                       pricer: RunPricer) -> ParticipationPlan | None:
    """Who arrives in each round of ``method``'s run on the inputs' fleet (None: no fleet), from
    deterministic prices, before the run (``workloads.cost.rounds.plan_run``): what ``run_job``
    trains, and what ``bench.flower``'s strategy follows."""
    if inputs.fleet is None:
        return None
    if method.algo.buffered:
        return plan_buffered(fleet_run(inputs), method, hp, pricer)
    return plan_run(inputs.fleet, inputs.classes, method, hp, pricer=pricer,
                    client_labels=[inputs.train.y.numpy()[p] for p in inputs.parts], devices=inputs.devices,
                    system=inputs.system,
                    rounds=inputs.fl.rounds, participation=inputs.fl.participation, seed=inputs.seed,
                    comm_format=inputs.execution.communication, number_format=inputs.execution.number_format,
                    master_weights=not inputs.execution.low_precision_weights)


def fleet_run(inputs: RunInputs) -> FleetRun:
    """The inputs' fleet run, as FedBuff's plan takes it (``workloads.cost.asynchronous``)."""
    return FleetRun(inputs.fleet, tuple(inputs.classes), tuple(inputs.devices), inputs.system,
                    tuple(inputs.train.y.numpy()[p] for p in inputs.parts), inputs.fl.rounds, inputs.fl.participation,
                    inputs.seed, inputs.execution.communication, inputs.execution.number_format,
                    not inputs.execution.low_precision_weights)


def run_job(job: Job, inputs: RunInputs, *, pricer: RunPricer | None = None, bars: bool = False,
            announce: bool = False, threads: int | None = None, checkpoint: str | None = None,
            resume: bool = False, plan: ParticipationPlan | None = None) -> JobResult:
    """One federated run of ``job`` and its priced rounds (module-level: worker processes call it).
    ``announce``: first print the run's projected local-training time on stderr (``loop.forecast``),
    and, without ``bars``, a line per finished round. ``checkpoint`` / ``resume``: the loop's
    per-round checkpoint file (``workloads.fl.setup.RunPlan``)."""
    if threads is not None:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    method = job.method
    model_fn = functools.partial(inputs.build, method.head)
    pricer = pricer or RunPricer(inputs.priced_model())
    planning_s = time.perf_counter()
    plan = plan or participation_plan(inputs, method, job.hp, pricer)
    planning_s = time.perf_counter() - planning_s
    arrivals = None if plan is None else plan.arrivals
    if announce:  # know before you wait
        print(forecast(method, model_fn=model_fn, train=inputs.train, parts=inputs.parts, cfg=inputs.fl, hp=job.hp,
                       execution=inputs.execution, arrivals=arrivals).line(), file=sys.stderr, flush=True)

    def round_done(t: int) -> None:  # a line per round where no progress bar shows them (worker processes)
        print(f"{job.name}: round {t}/{inputs.fl.rounds} done ({time.perf_counter() - start:.0f} s)",
              file=sys.stderr, flush=True)

    result = loop.train(RunPlan(method, model_fn=model_fn, train=inputs.train, test=inputs.test, parts=inputs.parts,
                                cfg=inputs.fl, hp=job.hp, execution=sized_execution(inputs.execution, plan), progress=bars,
                                after_round=round_done if announce and not bars else None, val=inputs.val,
                                checkpoint=checkpoint, resume=resume,
                                arrivals=arrivals, staleness=() if plan is None else plan.staleness))
    result = with_plan(result, plan)
    trained = time.perf_counter()
    rows = priced_rounds(result, job, inputs, pricer=pricer, plan=plan)
    return JobResult(replace(result, weights={}), rows, trained - start - planning_s,
                     time.perf_counter() - trained + planning_s, plan)


def sized_execution(execution: Execution, plan: ParticipationPlan | None) -> Execution:
    """``execution`` with each client's submodel width where the plan sizes them (a width-scaled
    method on a fleet, ``workloads.cost.rounds.client_widths``): the data the loop trains them by."""
    return execution if plan is None or not plan.widths else replace(execution, client_widths=plan.widths)


def with_plan(result: RunResult, plan: ParticipationPlan | None) -> RunResult:
    """``result`` with, beside each round's clients in every history entry (in their order), their
    submodel widths (``widths``) where the plan sized them, and each update's staleness
    (``staleness``) where it ran FedBuff's clock."""
    if plan is None or not (plan.widths or plan.staleness):
        return result
    history = tuple({**entry, **({"widths": [plan.widths[k] for k in entry["clients"]]} if plan.widths else {}),
                     **({"staleness": list(plan.staleness[entry["round"] - 1])} if plan.staleness else {})}
                    for entry in result.history)
    return replace(result, history=history)


def priced_rounds(result: RunResult, job: Job, inputs: RunInputs, *, pricer: RunPricer,
                  plan: ParticipationPlan | None) -> list[dict]:
    """``rounds.csv`` rows of ``job``'s run ``result`` on ``inputs`` (``workloads.cost.rounds.price_run``):
    the one call that prices a run, whether it just trained (``run_job``) or trained earlier and is
    re-priced from its record (``reprice_job``)."""
    return price_run(result, job.method, job.hp, pricer=pricer,
                     client_labels=[inputs.train.y.numpy()[p] for p in inputs.parts], hw=inputs.hw,
                     system=inputs.system, devices=inputs.devices, plan=plan, by_round=inputs.by_round,
                     server_average=inputs.execution.server_average)


def recorded_result(job: Job, inputs: RunInputs, history: Sequence[Mapping], accuracy: float | None,
                    plan: ParticipationPlan | None, pricer: RunPricer) -> RunResult:
    """The loop's record of ``job``'s finished run on ``inputs``, as far as pricing reads it, rebuilt
    without training: ``history`` (per training round as the run recorded it: ``round``, ``lr``,
    ``mean_loss``, ``accuracy``, ``val_accuracy``), the final ``accuracy``, each round's clients as the
    loop chose them (``workloads.fl.loop.sample_clients`` from the seed, or the ``plan``'s arrivals on
    a fleet), and each client's bytes from the closed form the loop's ledger is tested against
    (``workloads.fl.comm.client_round_bytes`` per training round, ``calibration_client_bytes`` in
    round R + 1, in the run's communication format). Weights, samples and the local test mode are
    not part of it (pricing reads none of them)."""
    method, cfg = job.method, inputs.fl
    hp = job.hp.with_knobs(method.knobs)  # as the loop and the closed form complete a method's knobs
    sizes = closed_form_sizes(pricer.prepared(method), method, inputs.execution.communication)
    entries, transfers = [], []
    for row in history:
        t = int(row["round"])
        clients = (sample_clients(cfg.num_clients, cfg.participation, seed=cfg.seed, round=t) if plan is None
                   else list(plan.rounds[t - 1].arrived))
        down, up = client_round_bytes(method, hp, t, sizes)
        transfers += [Transfer(t, k, direction, "model", nbytes) for k in clients
                      for direction, nbytes in (("down", down), ("up", up))]
        entries.append({**row, "round": t, "clients": clients})
    if method.calib is not None:
        t = len(entries) + 1
        calibrated = range(cfg.num_clients) if plan is None else plan.calibration.arrived
        down, up = calibration_client_bytes(method, hp, sizes)
        transfers += [Transfer(t, k, direction, "calibration", nbytes) for k in calibrated
                      for direction, nbytes in (("down", down), ("up", up))]
    return RunResult(method.name, accuracy, None, tuple(entries), tuple(transfers), 0)


def reprice_job(job: Job, inputs: RunInputs, history: Sequence[Mapping], accuracy: float | None) -> list[dict]:
    """``rounds.csv`` rows of ``job``'s run on ``inputs`` as today's code prices it, from the run's
    recorded ``history`` and final ``accuracy`` (``recorded_result``), without training: the same
    ``RunPricer`` captures and ``priced_rounds`` as ``run_job``. On a fleet the arrivals are today's
    participation plan's (``participation_plan``), which follows the prices: the caller must check
    that they are the ones the run trained with."""
    pricer = RunPricer(inputs.priced_model())
    plan = participation_plan(inputs, job.method, job.hp, pricer)
    return priced_rounds(recorded_result(job, inputs, history, accuracy, plan, pricer), job, inputs, pricer=pricer,
                         plan=plan)


def available_cpus() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_workers(workers: int | None, n_jobs: int, device: str = "cpu") -> int:
    """``workers`` (None: on the CPU one per job, at most one per core; on a GPU one, the runs share
    it one after another), never more than the jobs."""
    if workers is None:
        workers = available_cpus() if device == "cpu" else 1
    return max(1, min(n_jobs, workers))


def threads_per_worker(workers: int) -> int | None:
    """Torch threads of each worker process; None (torch's own choice) for runs in this process."""
    return max(1, available_cpus() // workers) if workers > 1 else None


@contextmanager
def started(jobs: Sequence[Job], inputs: RunInputs, *, workers: int, progress: Callable[[str], None],
            bars: bool) -> Iterator[Callable[[], list[JobResult]]]:
    """Start ``jobs``; yields a function that returns every job's result in ``jobs``' order.

    ``workers == 1``: the runs go one after another in this process when the results are asked for
    (sharing one ``RunPricer``, progress bars when ``bars``). More: they start at once in
    ``workers`` spawned processes of ``threads_per_worker(workers)`` torch threads each, so this
    process can do other work meanwhile (with ``bars``: each run's forecast, a line per round and per
    finished run); leaving the block early (an error, an interrupt) stops them."""
    if workers <= 1:
        def one_after_another() -> list[JobResult]:
            pricer = RunPricer(inputs.priced_model())
            results = []
            for job in jobs:
                progress(f"{inputs.spec.name}: federated run {job.name} on {inputs.fl.dataset} ({inputs.fl.rounds} "
                         f"round(s)) on {inputs.execution.device}, every round priced")
                results.append(run_job(job, inputs, pricer=pricer, bars=bars, announce=bars))
            return results

        yield one_after_another
        return
    threads = threads_per_worker(workers)
    progress(f"{inputs.spec.name}: {len(jobs)} federated runs on {inputs.fl.dataset} ({', '.join(j.name for j in jobs)}; "
             f"{inputs.fl.rounds} round(s)) side by side in {workers} worker processes, {threads} thread(s) each, "
             "every round priced")
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds torch's thread pools
    quiet_resource_tracker()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_ignore_interrupts)
    futures = [pool.submit(run_job, job, inputs, announce=bars, threads=threads) for job in jobs]

    def collect() -> list[JobResult]:
        results = []
        for job, future in zip(jobs, futures):
            result = future.result()
            progress(f"{inputs.spec.name}: {job.name} done, {100 * result.accuracy:.1f} % test accuracy after "
                     f"{inputs.fl.rounds} round(s) ({result.wall_s:.0f} s)")
            results.append(result)
        return results

    try:
        yield collect
    except BaseException:  # a failed run or an interrupt: stop the others now, not after their runs
        processes = list((getattr(pool, "_processes", None) or {}).values())
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(5)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()


def quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker without its exit warning about "leaked semaphore
    objects": the pool's queue locks of workers stopped by an interrupt are still registered when
    this process exits, and the tracker then unlinks them itself (nothing is left in /dev/shm), but
    its warning would follow the command's one line."""
    from multiprocessing import resource_tracker

    previous = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = "ignore:resource_tracker:UserWarning"
    try:
        resource_tracker.ensure_running()
    finally:
        if previous is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = previous


def _ignore_interrupts() -> None:
    """Workers leave Ctrl-C to the parent, which stops them (one message, not one per process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

"""The accuracy half of ``bench.run``: one federated run per job, every round priced.

A job is a training method and, where one is asked for, the calibration that reuses its run (CCVR on
FedAvg, FFC on SphereFed): ``fedavg+ccvr`` and ``spherefed+ffc`` in the main job. Jobs are
independent, so ``started`` runs them one after another in this process (``workers = 1``) or side
by side in worker processes, each with ``cpus // workers`` torch threads. A small model's training
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
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from accel_sim.hardware import HardwareConfig
from accel_sim.rounds import SystemModel
from workloads import model_spec
from workloads.fl.comm import ledger_totals
from workloads.fl.data import Dataset
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.execution import Execution
from workloads.fl.loop import forecast, run_method
from workloads.fl.methods import parse_method
from workloads.fl.round_cost import Device, RunPricer, RunSpec, price_run
from workloads.model_spec import ModelSpec


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

    def build(self, spherefed: bool):
        return model_spec.build(self.spec, num_classes=self.train.num_classes, norm=self.fl.norm, spherefed=spherefed)

    def run_spec(self) -> RunSpec:
        return RunSpec(self.build, self.spec.name, tuple(self.train.x.shape[1:]), self.train.num_classes, self.seed)


@dataclass(frozen=True)
class Job:
    """A training method and the calibration (or None) that reuses its run, with its hyper-parameters."""

    base: str
    calibration: str | None
    hp: Hparams

    @property
    def name(self) -> str:
        return f"{self.base}+{self.calibration}" if self.calibration else self.base


@dataclass(frozen=True)
class JobResult:
    accuracy: float  # after calibration where the job calibrates
    accuracy_before_calibration: float | None
    rows: list[dict]  # rounds.csv rows (accel_sim.rounds.ROUNDS_COLUMNS)
    ledger_total_bytes: int
    wall_s: float  # this machine's wall time of the job (not a modeled figure)


def run_job(job: Job, inputs: RunInputs, *, pricer: RunPricer | None = None, bars: bool = False,
            announce: bool = False, threads: int | None = None) -> JobResult:
    """One federated run of ``job`` and its priced rounds (module-level: worker processes call it).
    ``announce``: first print the run's projected local-training time on stderr (``loop.forecast``),
    and, without ``bars``, a line per finished round."""
    if threads is not None:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    method = parse_method(job.name)
    labels = [inputs.train.y.numpy()[p] for p in inputs.parts]
    model_fn = functools.partial(inputs.build, method.spherefed)
    if announce:  # know before you wait
        print(forecast(method, model_fn=model_fn, train=inputs.train, parts=inputs.parts, cfg=inputs.fl, hp=job.hp,
                       execution=inputs.execution).line(), file=sys.stderr, flush=True)

    def round_done(t: int) -> None:  # a line per round where no progress bar shows them (worker processes)
        print(f"{job.name}: round {t}/{inputs.fl.rounds} done ({time.perf_counter() - start:.0f} s)",
              file=sys.stderr, flush=True)

    result = run_method(method, model_fn=model_fn, train=inputs.train, test=inputs.test, parts=inputs.parts,
                        cfg=inputs.fl, hp=job.hp, execution=inputs.execution, progress=bars,
                        after_round=round_done if announce and not bars else None)
    rows = price_run(result, method, job.hp, pricer=pricer or RunPricer(inputs.run_spec()), client_labels=labels,
                     hw=inputs.hw, system=inputs.system, devices=inputs.devices)
    return JobResult(result.accuracy, result.accuracy_before_calibration, rows,
                     ledger_totals(result.transfers)["total_bytes"], time.perf_counter() - start)


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
            pricer = RunPricer(inputs.run_spec())
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
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _ignore_interrupts() -> None:
    """Workers leave Ctrl-C to the parent, which stops them (one message, not one per process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

"""bench.lib.fl.jobs: federated runs side by side in worker processes give the very results of the
same runs one after another in this process with the same thread count."""

import numpy as np
import pytest
import torch

from accel_sim.hardware import HardwareConfig
from workloads.cost.system import SystemModel
from bench.lib.fl.jobs import (Job, RunInputs, available_cpus, resolve_workers, run_job, started,
                                 threads_per_worker)
from workloads.fl.data import load_dataset
from workloads.fl.dataset import subset
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.methods import parse_method
from workloads.cost.rounds import client_devices
from workloads.fl.presets import make_partition
from workloads.model_spec import ModelSpec


@pytest.fixture(scope="module")
def inputs():
    train, test = load_dataset("digits", image_size=16)
    train, test = subset(train, 120, 0, "train"), subset(test, 40, 1, "test")
    fl = FLConfig(dataset="digits", image_size=16, model="convnet", num_clients=3, rounds=2, eval_every=1)
    hw, system = HardwareConfig(), SystemModel()
    return RunInputs(ModelSpec("convnet", (3, 16, 16), None), fl, train, test,
                     tuple(make_partition(train.y.numpy(), fl)), hw, system,
                     client_devices(system, hw, fl.num_clients, seed=0), 0)


HP = Hparams(declared=(*parse_method("ccvr").knobs, *parse_method("ffc").knobs),  # the calibrations' knobs
             lr=0.05, local_epochs=1, batch_size=16, ccvr_virtual_per_class=5, ffc_ridge=1e-3)
JOBS = (Job("fedavg+ccvr", HP), Job("spherefed+ffc", HP))


def side_by_side(jobs, inputs):
    with started(jobs, inputs, workers=2, progress=lambda msg: None, bars=False) as results:
        return results()


@pytest.mark.slow
def test_side_by_side_equals_one_after_another(inputs):
    parallel = side_by_side(JOBS, inputs)
    previous = torch.get_num_threads()
    try:
        serial = [run_job(job, inputs, threads=threads_per_worker(2)) for job in JOBS]
    finally:
        torch.set_num_threads(previous)
    for p, s in zip(parallel, serial):
        assert p.result == s.result  # accuracies, history, ledger (RunResult compares them, not weights)
        assert p.rows == s.rows  # every priced round, bit for bit
    # the two runs are different runs (SphereFed's fixed classifier and MSE loss), so the check above can fail
    assert parallel[0].rows != parallel[1].rows


@pytest.mark.slow
def test_a_failed_run_fails_the_call(inputs):
    bad = Job("fedavg", Hparams(lr=1e30, local_epochs=1, batch_size=16))  # diverges: non-finite loss
    with pytest.raises(Exception, match="non-finite loss"):
        side_by_side((JOBS[0], bad), inputs)


@pytest.mark.parametrize("asked, jobs, expected", [
    (None, 1, 1),  # one run: in this process
    (1, 4, 1),
    (3, 2, 2),  # never more workers than runs
    (None, 64, min(64, available_cpus())),  # default: one per run, at most one per core
])
def test_resolve_workers(asked, jobs, expected):
    assert resolve_workers(asked, jobs) == expected


def test_runs_on_a_gpu_share_it_one_after_another_unless_asked():
    assert resolve_workers(None, 2, "cuda:0") == 1
    assert resolve_workers(2, 2, "cuda:0") == 2


def test_threads_split_the_cores():
    assert threads_per_worker(1) is None  # in-process runs keep torch's own choice
    assert threads_per_worker(2) == max(1, available_cpus() // 2)
    assert threads_per_worker(10 ** 6) == 1
    assert np.all([threads_per_worker(w) * w <= max(available_cpus(), w) for w in range(2, 9)])

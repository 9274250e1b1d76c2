"""Several runs on one device (issue 44): a study's or grid's ``--workers N`` on a GPU, and a share of
a GPU per run on Ray. No GPU here: torch (a CPU build) is made to answer as a machine with one CUDA
device does (``tests.study_runners.fake_one_cuda_device``), and the stand-in runner ``gpu_probe``
records what the real runner records of where it ran. What these show: the worker processes start
afresh (not forked from a process that initialised CUDA), the study's device reaches every run and
its record, each run gets its torch threads, Ray is asked for each run's GPU share, and bad
combinations are refused in one line before anything is written. Not shown, nor claimed: any speed
on a GPU (docs/study.md, "Several runs on one GPU")."""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import bench.grid.__main__ as grid_cli
from bench.lib.grid.backends import Resources, check_backend, check_device
from bench.lib.grid.point import GridError
from bench.lib.study.study_file import parse_study
from bench.study import phases
from bench.study.__main__ import main as study_main, wall_time_text
from tests.failfast import assert_fails_clean
from tests.study_runners import FAKE_CUDA_ENV, FAKE_GPU_NAME, fake_one_cuda_device
from tests.test_study import SMALL_STUDY, study_doc

PROBE = "tests.study_runners:gpu_probe"


def small_gpu_study(**changes):
    """3 tuning runs and 4 more evaluation runs (2 seeds x 2 methods; no seed shared), on ``device``."""
    return parse_study(study_doc(**{"methods": ["fedavg", "spherefed"], "seeds": [0, 1], "tuning_seeds": [7],
                                    "search": {"fedavg": {"lr": [0.05, 0.1]}, "spherefed": {"lr": [0.5]}},
                                    **changes}), "gpu.toml")


def runs_of(run: phases.StudyRun) -> list[phases.Outcome]:
    return list({o.run_id: o for o in (*run.tuning, *run.evaluation)}.values())


def _cuda_flag() -> bool:
    return bool(torch.cuda._initialized)


@pytest.mark.slow  # two spawned workers import torch: ~10 s on the loaded 2-core machine
def test_two_workers_on_one_gpu_each_open_it_afresh_and_record_it(tmp_path, monkeypatch):
    fake_one_cuda_device(monkeypatch.setattr)
    monkeypatch.setenv(FAKE_CUDA_ENV, "1")  # the workers inherit the environment, not this process's patches
    monkeypatch.setattr(torch.cuda, "_initialized", True)  # as the command's process is on a GPU (auto resolved,
    # the runs checked and projected there)
    with multiprocessing.get_context("fork").Pool(1) as pool:  # the probe's control: a forked child inherits it
        assert pool.apply(_cuda_flag) is True
    study = small_gpu_study(device="cuda")
    run = phases.run_study(study, tmp_path, runner=PROBE, workers=2)
    runs = runs_of(run)
    assert len(runs) == 7 and {o.status for o in runs} == {"done"}
    assert {o.info["execution"]["device"] for o in runs} == {"cuda:0"}  # resolved again in each worker
    assert {o.info["execution"]["device_name"] for o in runs} == {FAKE_GPU_NAME}
    assert {o.info["cuda_state_from_parent"] for o in runs} == {False}  # started afresh: WORKER_START_METHOD
    assert {o.info["machine"]["torch_threads"] for o in runs} == {1}  # --resources-per-run cpus=1, the default
    for phase in (run.tuning, run.evaluation):  # each phase's runs: in its pool of at most 2 workers, not here
        pids = {o.info["machine"]["pid"] for o in phase}
        assert 1 <= len(pids) <= 2 and os.getpid() not in pids


class FakeRay:
    """Ray's API as ``bench.lib.grid.backends.run_ray`` calls it, each task run at once in this process:
    what matters here is what each run asks Ray for."""

    def __init__(self):
        self.asked: list[dict] = []

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs) -> None:
        pass

    def remote(self, **options):
        self.asked.append(options)
        return lambda function: SimpleNamespace(remote=function)

    def wait(self, pending, num_returns):
        return pending[:num_returns], pending[num_returns:]

    def get(self, value):
        return value

    def shutdown(self) -> None:
        pass


def test_a_study_on_ray_asks_for_each_runs_gpu_share(tmp_path, monkeypatch):
    fake_one_cuda_device(monkeypatch.setattr)
    ray = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    run = phases.run_study(small_gpu_study(device="auto"), tmp_path, runner=PROBE, backend="ray",
                           resources=Resources(cpus=2, gpus=0.25))
    assert ray.asked and all(a == {"num_cpus": 2, "num_gpus": 0.25, "max_retries": 0} for a in ray.asked)
    runs = runs_of(run)
    assert len(runs) == 7 and {o.info["execution"]["device"] for o in runs} == {"cuda:0"}
    assert {o.info["machine"]["torch_threads"] for o in runs} == {2}  # cpus=2


def test_backend_options_that_cannot_go_together_are_refused():
    check_backend("local", address=None, workers=4, resources=Resources(cpus=1))  # N side by side, one GPU
    check_backend("ray", address="10.0.0.5:6379", workers=1, resources=Resources(cpus=1, gpus=0.25))
    for backend, workers, resources, message in [
            ("local", 2, Resources(gpus=0.5), "a GPU share per run is Ray's"),
            ("ray", 2, Resources(gpus=0.5), "--workers is for the local backend")]:
        with pytest.raises(GridError, match=message):
            check_backend(backend, address=None, workers=workers, resources=resources)


@pytest.mark.parametrize("device, resources, message", [
    ("cuda:0", Resources(cpus=1), "a run that asks Ray for no GPU gets none"),
    ("cuda:0", Resources(gpus=2), "a run trains on one GPU"),
    ("cuda:1", Resources(gpus=0.5), "sees only the GPU Ray gave it, as cuda:0"),
    ("cpu", Resources(gpus=0.5), "but the runs train on cpu"),
])
def test_a_device_a_ray_run_cannot_train_on_is_refused(device, resources, message):
    with pytest.raises(GridError, match=message):
        check_device(device, "ray", resources)


def test_a_device_ray_runs_can_train_on_is_accepted():
    check_device("cuda:0", "ray", Resources(gpus=0.25))
    check_device("cuda:0", "ray", Resources(gpus=1))
    check_device("cpu", "ray", Resources(cpus=2))
    check_device("cuda:1", "local", Resources())  # the local backend's runs see every GPU


@pytest.fixture
def gpu_study_file(tmp_path):
    def write(device: str) -> Path:
        path = tmp_path / f"study-{device.replace(':', '')}.toml"
        path.write_text(SMALL_STUDY.replace("\nrounds = 3\n", f'\nrounds = 3\ndevice = "{device}"\n', 1))
        return path
    return write


@pytest.mark.parametrize("device, argv, names, fake_cuda", [
    ("cuda", ["--workers", "2"], ("device = 'cuda'", "sees no CUDA device here", 'use device = "cpu"'), False),
    ("cuda", ["--workers", "2", "--resources-per-run", "cpus=1,gpus=0.5"], ("gpus=0.5", "--backend ray",
                                                                             "--workers N and gpus=0"), True),
    ("cuda", ["--backend", "ray"], ("device cuda:0 on --backend ray", "gpus=0.25"), True),
    ("cuda", ["--backend", "ray", "--workers", "2"], ("--workers is for the local backend",), True),
    ("cpu", ["--backend", "ray", "--resources-per-run", "gpus=1"], ("gpus=1 but the runs train on cpu",), False),
], ids=["cuda-without-cuda", "gpus-on-local", "cuda-on-ray-without-gpus", "workers-on-ray", "gpus-for-cpu-runs"])
def test_the_study_command_refuses_in_one_line_before_any_folder(gpu_study_file, tmp_path, capsys, monkeypatch,
                                                                 device, argv, names, fake_cuda):
    if fake_cuda:
        fake_one_cuda_device(monkeypatch.setattr)
    out = tmp_path / "out"
    assert_fails_clean(study_main, [str(gpu_study_file(device)), "--out", str(out), *argv], capsys, tmp_path, names)
    assert not out.exists()


def test_the_grid_command_gives_its_local_backend_the_workers(tmp_path, monkeypatch):
    """``bench.grid --workers N``: the local backend's N processes (the study's, tested above; its bad
    input: tests/test_failfast_bench_grid.py)."""
    grid = tmp_path / "g.toml"
    grid.write_text('name = "g"\nrunner = "tests.grid_runners:train_tiny"\n[axes]\nseed = [0, 1]\n')
    asked = {}
    monkeypatch.setattr(grid_cli, "run_grid", lambda spec, out, **kw: asked.update(kw) or SimpleNamespace(
        count=lambda status: 0))
    assert grid_cli.main([str(grid), "--workers", "3", "--out", str(tmp_path / "out")]) == 0
    assert asked["workers"] == 3 and asked["backend"] == "local" and asked["resources"] == Resources(cpus=1)


def test_the_projection_on_a_gpu_gives_a_range_not_a_speed_up():
    # 2 h summed: 4 CPU workers each at its own speed take 2 h / 4 = 30 min; 4 runs sharing a GPU
    # take from 30 min (room for all four at once) to 2 h (one run fills it)
    assert wall_time_text(7200.0, 4, "cpu") == "~30.0 min of wall time with --workers 4"
    on_gpu = wall_time_text(7200.0, 4, "cuda:0")
    assert on_gpu.startswith("~30.0 min to ~2.0 h of wall time with --workers 4 sharing cuda:0") and \
        "unmeasured" in on_gpu
    assert wall_time_text(7200.0, 1, "cuda:0") == "~2.0 h of wall time with --workers 1"

"""What a study says about its time before and while it runs: the projection timed with each run's
torch threads and from the median step (workloads/fl/timing.py, bench/study/__main__.py), and the
remaining time at the measured pace (bench/study/phases.py)."""

from __future__ import annotations

import time

import pytest
import torch

from bench.lib.grid.point import torch_threads
from bench.study.phases import left_text
from workloads.fl.timing import median_step_s


def test_left_text_is_the_mean_run_times_the_rounds_of_workers_still_to_go():
    # runs of 10 s and 20 s: 15 s each; 5 left on 2 workers: ceil(5 / 2) = 3 after another, 45 s
    assert left_text([10.0, 20.0], 5, 2) == "; ~45.0 s left in this phase at the pace of its 2 run(s)"
    # 1 left on 2 workers is still one whole run: 15 s, not 7.5 s
    assert left_text([10.0, 20.0], 1, 2) == "; ~15.0 s left in this phase at the pace of its 2 run(s)"
    assert left_text([600.0], 12, 1) == "; ~2.0 h left in this phase at the pace of its 1 run(s)"  # 7,200 s
    assert left_text([], 5, 2) == "" and left_text([10.0], 0, 2) == ""  # nothing ran yet; nothing left


def test_torch_threads_sets_a_runs_share_and_gives_the_count_back_even_on_error():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(1.7):  # a share of 1.7 CPUs: 1 thread
        assert torch.get_num_threads() == 1
        raise RuntimeError
    assert torch.get_num_threads() == before


class _Trainer:
    """A step that takes ``durations_s[k]`` on its k-th call: one step slowed by another process."""

    def __init__(self, durations_s):
        self.durations_s = list(durations_s)

    def step(self, x, y):
        time.sleep(self.durations_s.pop(0))


def test_one_slow_step_does_not_move_the_median():
    # 5 steps of 10 ms, the second preempted for 400 ms: their sum (440 ms) would project 2.2x too
    # slow a run; the median stays one 10 ms step
    trainer = _Trainer([0.01, 0.4, 0.01, 0.01, 0.01])
    step_s = median_step_s((trainer, None, None), 5, torch.device("cpu"))
    assert 0.01 <= step_s < 0.1


def test_the_studys_projection_is_timed_with_each_runs_threads(monkeypatch, tmp_path):
    from bench.lib.study import runner
    from bench.study import __main__ as study_cli
    from bench.study import phases
    from bench.lib.study.study_file import load_study

    seen = []

    def timed(points):
        seen.append(torch.get_num_threads())
        return {("convnet", "fedavg", "fp32"): (len(points), 1.0)}

    monkeypatch.setattr(runner, "projected_local_training_s", timed)
    study = load_study("configs/studies/digits-quick.toml")
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the command's process: every core's threads; each run: its share, 1
    try:
        lines = study_cli.projection_lines(study, phases.execution(study), tmp_path, 2, cpus=1)
    finally:
        torch.set_num_threads(before)
    assert seen == [1] and "still to do" in lines[-1]

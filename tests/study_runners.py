"""Stand-in runners for the accuracy-study tests: they write what ``bench.lib.study.runner.run_point``
writes (``curve.csv``, ``run.json``) from a formula instead of training, in milliseconds.

``opposite``: the validation and test accuracies rank the learning rates oppositely. Final
validation accuracy 0.5 + lr (higher rate, better validation), final test accuracy 0.9 - lr
(higher rate, worse test); both ramp linearly from 0.1 at round 1, plus 0.001 x seed so that seeds
differ. A calibrated method's calibration adds 0.01 to both. Round t costs 10 s of wall time,
1 s of device time, 2 J and 1,000 bytes. A run in a number format (its point's
``execution.number_format``) loses ``FORMAT_LOSS[format]`` of both accuracies in every round.
"""

from __future__ import annotations

from pathlib import Path

from bench.lib.grid.runners import grid_runner
from bench.lib.study.runner import files_read
from bench.lib.study.run_files import CURVE_CSV, labels_of, missing_rounds, read_curve, write_run
from workloads.fl.methods import parse_method


SAMPLES = {"test_samples": 1000, "val_samples": 200}  # as the real runner records them (run.json)
FORMAT_LOSS = {"fp32": 0.0, "bfp_m2_g16": 0.05, "bfp_m2_g16_sr": 0.02}


def opposite_accuracy(lr: float, seed: int, t: int, rounds: int) -> tuple[float, float]:
    """(validation, test) accuracy of round ``t`` (module doc)."""
    ramp = t / rounds
    return (0.1 + (0.4 + lr + 0.001 * seed) * ramp,
            0.1 + (0.8 - lr + 0.001 * seed) * ramp)


def whole_rounds(point: dict, folder: Path) -> str:
    """The study runner's ``complete`` check on its rounds (``missing_rounds``) alone: the stand-ins'
    accuracies are formulas that leave [0, 1] at high rates, which no real run writes
    (``bench.lib.study.run_files.out_of_range`` reads them as damaged)."""
    try:
        return missing_rounds(point, read_curve(Path(folder) / CURVE_CSV))
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{type(err).__name__}: {str(err)[:80]}"


@grid_runner("tests.study_opposite", reads=files_read, complete=whole_rounds)  # as a study run
def opposite(point: dict, out_dir: Path) -> dict:
    return write_run(out_dir, opposite_curve(point), {"machine": {"host": "stand-in", "cpu": "none"}, "wall_s": 0.0,
                                                      **SAMPLES})


def opposite_curve(point: dict) -> list[dict]:
    """``opposite``'s curve.csv rows of ``point`` (module doc)."""
    method = parse_method(point["method"])
    lr, seed, rounds = point["hparams"]["lr"], point["seed"], point["fl"]["rounds"]
    loss = FORMAT_LOSS[point["execution"].get("number_format", "fp32")]
    curve = []
    for label in labels_of(method):
        for t in range(1, rounds + 1):
            val, test = (a - loss for a in opposite_accuracy(lr, seed, t, rounds))
            curve.append({"method": label, "round": t, "stage": "train", "lr": lr, "mean_loss": 1.0 / t,
                          "accuracy": test, "val_accuracy": val, "cum_wall_s": 10.0 * t, "cum_device_s": 1.0 * t,
                          "cum_energy_j": 2.0 * t, "cum_bytes": 1000.0 * t})
        if label == method.name and method.calibration:
            val, test = (a - loss for a in opposite_accuracy(lr, seed, rounds, rounds))
            curve.append({"method": label, "round": rounds + 1, "stage": "calibration", "lr": None, "mean_loss": None,
                          "accuracy": test + 0.01, "val_accuracy": val + 0.01, "cum_wall_s": 10.0 * rounds + 5,
                          "cum_device_s": 1.0 * rounds + 0.5, "cum_energy_j": 2.0 * rounds + 1,
                          "cum_bytes": 1000.0 * rounds + 500})
    return curve


PEAK_LR = 0.8
DIVERGES_ABOVE_LR = 1.0


def peaked_accuracy(lr: float, seed: int, t: int, rounds: int) -> float:
    """Validation (and test) accuracy of round ``t`` for ``peaked``: 0.9 at lr = PEAK_LR, 0.05 less per
    factor of 2 away from it squared, plus 0.01 x (seed mod 3), ramping linearly over the rounds."""
    import math

    return (0.9 - 0.05 * math.log2(lr / PEAK_LR) ** 2 + 0.01 * (seed % 3)) * t / rounds


@grid_runner("tests.study_peaked")
def peaked(point: dict, out_dir: Path) -> dict:
    """A stand-in whose best learning rate (PEAK_LR) lies above the tests' grids, and whose runs fail
    (a diverged run) above DIVERGES_ABOVE_LR when the point's weight_decay is 0.5 (a marker)."""
    lr, seed, rounds = point["hparams"]["lr"], point["seed"], point["fl"]["rounds"]
    if point["hparams"]["weight_decay"] == 0.5 and lr > DIVERGES_ABOVE_LR:
        raise FloatingPointError(f"loss is nan at lr {lr} (stand-in divergence)")
    curve = [{"method": label, "round": t, "stage": "train", "lr": lr, "mean_loss": 1.0 / t,
              "accuracy": peaked_accuracy(lr, seed, t, rounds), "val_accuracy": peaked_accuracy(lr, seed, t, rounds),
              "cum_wall_s": 10.0 * t, "cum_device_s": 1.0 * t, "cum_energy_j": 2.0 * t, "cum_bytes": 1000.0 * t}
             for label in labels_of(parse_method(point["method"])) for t in range(1, rounds + 1)]
    return write_run(out_dir, curve, {"machine": {"host": "stand-in", "cpu": "none"}, "wall_s": 0.0, **SAMPLES})


@grid_runner("tests.study_fails")
def fails(point: dict, out_dir: Path) -> dict:
    """Every run diverges (a stand-in for a learning rate far too large)."""
    raise FloatingPointError(f"non-finite loss in round 1 (stand-in, lr={point['hparams']['lr']})")


@grid_runner("tests.study_diverging")
def diverging(point: dict, out_dir: Path) -> dict:
    """``opposite``'s curves, but a learning rate above 1e6 diverges without a NaN: its mean loss
    grows 1,000-fold per round from 2.3 (a run recorded before runs stopped on divergence, or a
    runner of the user's that does not stop), its accuracy at chance (0.1) with the best validation."""
    lr, rounds = point["hparams"]["lr"], point["fl"]["rounds"]
    if lr <= 1e6:
        return opposite(point, out_dir)
    curve = [{"method": label, "round": t, "stage": "train", "lr": lr, "mean_loss": 2.3 * 1000.0 ** (t - 1),
              "accuracy": 0.1, "val_accuracy": 0.99, "cum_wall_s": 10.0 * t, "cum_device_s": 1.0 * t,
              "cum_energy_j": 2.0 * t, "cum_bytes": 1000.0 * t}
             for label in labels_of(parse_method(point["method"])) for t in range(1, rounds + 1)]
    return write_run(out_dir, curve, {"machine": {"host": "stand-in", "cpu": "none"}, "wall_s": 0.0})


@grid_runner("tests.study_slow", reads=files_read)
def slow(point: dict, out_dir: Path) -> dict:
    """``opposite`` after 30 s with torch loaded, as a real run's worker has it: a run to interrupt."""
    import time

    import torch  # noqa: F401

    time.sleep(30)
    return opposite(point, out_dir)


FAKE_CUDA_ENV = "TESTS_FAKE_ONE_CUDA_DEVICE"  # set: gpu_probe's process fakes one CUDA device, as a test's does
FAKE_GPU_NAME = "stand-in GPU (tests)"


def fake_one_cuda_device(setattr_=setattr) -> None:
    """torch (a CPU build) answers as a machine with one CUDA device, cuda:0, does to what resolving
    and naming a device asks (``workloads.fl.execution.resolve_device``, ``device_name``); nothing
    runs on it. ``setattr_``: pytest's ``monkeypatch.setattr`` in a test's process."""
    import torch

    setattr_(torch.cuda, "is_available", lambda: True)
    setattr_(torch.cuda, "device_count", lambda: 1)
    setattr_(torch.cuda, "current_device", lambda: 0)
    setattr_(torch.cuda, "get_device_name", lambda device=None: FAKE_GPU_NAME)


@grid_runner("tests.study_gpu_probe", reads=files_read)
def gpu_probe(point: dict, out_dir: Path) -> dict:
    """``opposite``'s run, recording in run.json what the real runner records of where it ran (its
    ``execution``: the device resolved again in this process, by ``parse_point``; its torch threads)
    and ``cuda_state_from_parent``: torch's CUDA-initialised flag as this process found it, read
    first (a child forked from a process that initialised CUDA starts with it set, and cannot use
    CUDA; a spawned one starts afresh). With ``FAKE_CUDA_ENV`` set, this process fakes one CUDA
    device first (``fake_one_cuda_device``)."""
    import os

    import torch

    from bench.lib.study.runner import machine_info, parse_point

    inherited = bool(torch.cuda._initialized)
    if os.environ.get(FAKE_CUDA_ENV):
        fake_one_cuda_device()
    cell = parse_point(point)
    info = {"machine": {**machine_info(), "pid": os.getpid()}, "execution": cell.execution.describe(),
            "cuda_state_from_parent": inherited, "wall_s": 0.0, **SAMPLES}
    return write_run(out_dir, opposite_curve(point), info)

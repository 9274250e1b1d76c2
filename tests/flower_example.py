"""One run of ``python -m bench.flower`` in Flower's simulation engine (Ray), shared by the end-to-end
tests that check different properties of it (the ``flower_example`` fixture, tests/conftest.py):
tests/test_flower.py (the files, the ledger, the priced time and bytes, and our own loop on the same
setting) and tests/test_flower_methods.py (the stateful methods under Ray). Each run pays a command
start, Ray's start and stop, two actors' imports and their step captures: ~15 s of a quiet 2-core
machine before any training (docs/speed.md), so one run instead of one per test.

The setting: the small preset (digits at 16x16, ConvNet) at ``CLIENTS`` clients, all sampled, seed 0,
cut to 900 training and 200 test samples with its two local epochs (``cut_preset``: enough that
every method's accuracy leaves chance by round 2, ~0.3-0.9, so that comparing accuracies means
something, and FFC's pooled statistics are not singular); ``METHODS`` one after the other,
``ROUNDS`` rounds each (and a calibrated method's calibration round), priced on the default
hardware and system.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = 3
ROUNDS = 2
SPHEREFED = "fedavg+spherefed"  # the example's default pair's method with a classifier that stays home
STATEFUL = ("scaffold", "moon", "feddyn")  # server state, extras, client state (tests/test_flower_methods.py)
CALIBRATED = ("fedavg+spherefed+ffc", "fedavg+ccvr")  # a calibration round R + 1 after their rounds
METHODS = (SPHEREFED, *STATEFUL, *CALIBRATED)


def stages(method: str) -> list[tuple[int, str]]:
    """(round, stage) of each of ``method``'s rows in rounds.csv: its ``ROUNDS`` training rounds,
    then a calibrated method's calibration round."""
    return [(t, "train") for t in range(1, ROUNDS + 1)] + [(ROUNDS + 1, "calibration")] * (method in CALIBRATED)


def cut_preset(folder: Path, train_samples: int, local_epochs: int) -> str:
    """The small preset at ``CLIENTS`` clients, ``train_samples`` training and 200 test samples,
    ``local_epochs`` local epochs, written to ``folder``."""
    text = (ROOT / "configs/presets/small.toml").read_text()
    text, n = re.subn(r"(?m)^num_clients = \d+",
                      f"num_clients = {CLIENTS}\nmax_train_samples = {train_samples}\nmax_test_samples = 200", text)
    text, m = re.subn(r"(?m)^local_epochs = \d+", f"local_epochs = {local_epochs}", text)
    assert n == m == 1
    path = folder / f"small-{CLIENTS}c-{train_samples}-{local_epochs}e.toml"
    path.write_text(text)
    return str(path)


def read_csv(path: Path) -> tuple[tuple[str, ...], list[dict]]:
    """(the header, the rows)."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return tuple(reader.fieldnames or ()), list(reader)


def subprocess_env() -> dict[str, str]:
    """The environment a command runs in from the repository's root."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@dataclass(frozen=True)
class Finished:
    """A command's exit code, its stderr and its results folder."""

    returncode: int
    stderr: str
    out: Path


@dataclass(frozen=True)
class ExampleRun:
    """The preset, ``bench.flower``'s run on it (``flower``) and ``bench.fl``'s (``loop``: our own
    loop on the same setting, the same methods, hardware and system)."""

    preset: str
    flower: Finished
    loop: Finished


def run_together(commands: dict[str, list[str]], folder: Path) -> dict[str, Finished]:
    """``python -m <argv> --out folder/<name>`` for every name and argv of ``commands``, all at
    once, from the repository's root; stderr goes to ``folder/<name>.stderr`` (no command can block
    on a full pipe). The shared run's two tests took 63.7 and 61.0 s so against 73.0 and 72.0 s one
    after the other (load ~4.8; the fleet's end-to-end test gained nothing so: docs/speed.md)."""
    procs = {}
    try:
        for name, argv in commands.items():
            with (folder / f"{name}.stderr").open("w") as err:
                procs[name] = subprocess.Popen([sys.executable, "-m", *argv, "--out", str(folder / name)], cwd=ROOT,
                                               env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=err)
        return {name: Finished(proc.wait(timeout=600), (folder / f"{name}.stderr").read_text(), folder / name)
                for name, proc in procs.items()}
    finally:  # a timeout or an interrupt leaves none of them running
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def run_example(folder: Path) -> ExampleRun:
    """``python -m bench.flower --preset P --methods METHODS --clients CLIENTS --rounds ROUNDS`` beside
    ``python -m bench.fl --preset P --methods METHODS --rounds ROUNDS --threads 1 --hw paper_default``
    (``run_together``); their results in ``folder/flower`` and ``folder/loop``."""
    preset = cut_preset(folder, 900, 2)
    common = ["--preset", preset, "--methods", *METHODS, "--rounds", str(ROUNDS)]
    done = run_together({"flower": ["bench.flower", "--model", "convnet", "--clients", str(CLIENTS), *common],
                         "loop": ["bench.fl", *common, "--threads", "1", "--hw",
                                  str(ROOT / "configs/hw/paper_default.toml")]}, folder)
    return ExampleRun(preset, done["flower"], done["loop"])

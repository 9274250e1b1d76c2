"""Test-session settings.

Hypothesis runs derandomized: its examples are derived from each test's source, so CI (and every
user) runs the same examples every time and a failure reproduces from a clean checkout. A numeric
property that only fails on rare inputs then fails deterministically or not at all, instead of
once in a while in CI. To explore new random examples locally, run with
``HYPOTHESIS_PROFILE=explore python -m pytest``.

One fixture lives for the session: ``flower_example``, the Flower simulation that several
end-to-end tests check (tests/flower_example.py).

The suite runs on every core (pytest-xdist, ``-n auto --dist loadgroup``: README's test command).
The test files that start Ray or Flower's simulation (``RAY_FILES``) form one group, run one after
another on one worker: Ray is one per machine, and a test that interrupts a simulation looks for
its Ray processes machine-wide.
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


RAY_FILES = frozenset({
    "test_byom.py", "test_failfast_bench_grid.py", "test_flower.py", "test_flower_fleet.py", "test_flower_meter.py",
    "test_flower_methods.py", "test_gpu_workers.py", "test_grid.py", "test_no_data_loss.py",
    "test_no_data_loss_user_code.py", "test_own_method.py", "test_run_spec.py", "test_run_spec_everywhere.py"})
"""Test files that start Ray (the grid's Ray backend, Flower's simulation engine) or a
``bench.flower`` run (module doc)."""


def pytest_collection_modifyitems(config, items):
    """Every test of a ``RAY_FILES`` file in the xdist group ``ray`` (module doc)."""
    for item in items:
        if item.path.name in RAY_FILES:
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="session")
def flower_example(tmp_path_factory):
    """One ``python -m bench.flower`` run in Flower's simulation engine (Ray), shared by the
    end-to-end tests that check different properties of it (tests/flower_example.py)."""
    pytest.importorskip("flwr")
    from tests.flower_example import run_example

    return run_example(tmp_path_factory.mktemp("flower-example"))

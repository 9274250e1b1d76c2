"""Test-session settings.

Hypothesis runs derandomized: its examples are derived from each test's source, so CI (and every
user) runs the same examples every time and a failure reproduces from a clean checkout. A numeric
property that only fails on rare inputs then fails deterministically or not at all, instead of
once in a while in CI. To explore new random examples locally, run with
``HYPOTHESIS_PROFILE=explore python -m pytest``.

One fixture lives for the session: ``flower_example``, the Flower simulation that several
end-to-end tests check (tests/flower_example.py).
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def flower_example(tmp_path_factory):
    """One ``python -m bench.flower`` run in Flower's simulation engine (Ray), shared by the
    end-to-end tests that check different properties of it (tests/flower_example.py)."""
    pytest.importorskip("flwr")
    from tests.flower_example import run_example

    return run_example(tmp_path_factory.mktemp("flower-example"))

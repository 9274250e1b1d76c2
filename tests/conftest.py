"""Test-session settings.

Hypothesis runs derandomized: its examples are derived from each test's source, so CI (and every
user) runs the same examples every time and a failure reproduces from a clean checkout. A numeric
property that only fails on rare inputs then fails deterministically or not at all, instead of
once in a while in CI. To explore new random examples locally, run with
``HYPOTHESIS_PROFILE=explore python -m pytest``.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

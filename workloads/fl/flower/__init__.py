"""Flower integration: the accelerator's cost inside a Flower app (docs/flower.md).

``meter`` (the step meter, ``metered_step``) and ``ledger`` (round cost, ``rounds.csv``) need no
Flower; ``mod`` (``AccelMod``, ``accel_train_metrics``, ``flower_ledger_rows``), ``app`` (the
example app) and ``__main__`` need the ``flower`` extra. This package imports none of them, so
``python -m workloads.fl.flower`` can say how to install the extra when it is missing.
"""

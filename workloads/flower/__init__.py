"""Flower integration: the accelerator's cost inside a Flower app (docs/flower.md), on top of
``workloads.fl`` and ``workloads.cost``.

``meter`` (the step meter, ``metered_step``) and ``ledger`` (round cost, ``rounds.csv``) need no
Flower; ``mod`` (``AccelMod``, ``accel_train_metrics``, ``flower_ledger_rows``), ``strategy``
(``MethodStrategy``: any method's own aggregate, extras and state as a Flower strategy), ``fleet``
and ``app`` (the example app, run by ``python -m bench.flower``) need the ``flower`` extra. This
package imports none of them, so the command can say how to install the extra when it is missing.
"""

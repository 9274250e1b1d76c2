"""The pricing bridge: what the federated loop ran, priced on the modeled accelerator.

* ``step``: one FL method's local step captured in its steady state (``workloads.capture``) and
  priced (``accel_sim.simulate``);
* ``calibration``: CCVR's and FFC's client and server work;
* ``rounds``: every round of a run priced from its record (``RunResult``) into ``rounds.csv`` rows;
* ``system``: the round model (links, device speed factors, the synchronous round), torch-free.

``workloads.fl`` imports nothing of this package; this package takes the loop's record and prices it.
"""

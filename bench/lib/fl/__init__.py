"""Federated runs for the commands: ``jobs`` (federated runs as jobs, one after another or side by
side in worker processes; ``bench.fl``, ``bench.run`` and ``bench.study`` train with it) and
``pipeline`` (``bench.fl``'s load, train, write, after ``bench.lib.resolve``; ``bench.flower`` and ``bench.study``
reuse its steps)."""

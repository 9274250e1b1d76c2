"""``python -m bench.fl`` (``__main__``): FL methods under one preset, every round priced; its
library: ``pipeline`` (resolve, load, train, write) and ``jobs`` (federated runs as jobs, one after
another or side by side, shared with ``bench.run`` and ``bench.study``)."""

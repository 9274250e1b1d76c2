"""The grid engine (``engine``: points, locks, local and Ray backends, tables) and the registered
runners a grid may name (``runners``); ``python -m bench.grid`` and ``python -m bench.study`` run
grids with it."""

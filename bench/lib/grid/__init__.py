"""The grid engine (``engine``: grid files and ``run_grid``; ``point``: one point, its id, lock and
record; ``backends``: local and Ray; ``tables``: the aggregated tables) and the registered runners a
grid may name (``runners``); ``python -m bench.grid`` and ``python -m bench.study`` run grids with it."""

"""``python -m bench.grid`` (``__main__``) and the grid engine: ``engine`` (points, locks, local and
Ray backends, tables), ``runners`` (the registered runners a grid may name)."""

"""``python -m bench.grid`` (``__main__``): an experiment grid; the engine is ``bench.lib.grid``."""

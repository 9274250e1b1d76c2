"""``python -m bench.fl`` (``__main__``): FL methods under one preset, every round priced; its steps
are ``bench.lib.fl.pipeline``."""

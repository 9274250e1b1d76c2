"""``python -m bench.flower`` (``__main__``): the example Flower app (``workloads.flower``) in Flower's
simulation engine, priced on the accelerator."""

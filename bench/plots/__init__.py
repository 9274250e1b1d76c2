"""``python -m bench.plots RUN_DIR`` (``__main__``): redraw a ``bench.run`` folder's figures; every
figure is drawn by ``bench.lib.plots``."""

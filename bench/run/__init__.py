"""``python -m bench.run`` (``__main__``): SphereFed's efficiency study; ``table`` (what it prints)
is its own, the rest of its library is ``bench.lib.run``."""

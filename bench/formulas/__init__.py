"""``python -m bench.formulas`` (``__main__``): SphereFed Table 1's closed forms printed; the
formulas are ``bench.lib.formulas``."""

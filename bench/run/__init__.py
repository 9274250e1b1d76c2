"""``python -m bench.run`` (``__main__``) and its library: ``config`` (what to price and train),
``figures`` (Fig. 5, Table 1, accuracy, time-to-accuracy), ``study`` (all of it, and the grid runner
``bench.run``), ``table`` (what it prints), ``breakdown`` (time and energy per block), ``compare_hw``
(several accelerators side by side)."""

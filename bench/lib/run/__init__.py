"""``bench.run``'s library: ``config`` (what to price and train), ``figures`` (Fig. 5, Table 1,
accuracy, time-to-accuracy), ``study`` (all of it, the files it writes, and the grid runner
``bench.run``), ``reference`` (the shipped reference studies a run is compared to), ``formats``
(number formats), ``breakdown`` (time and energy per block), ``compare_hw`` (several accelerators
side by side)."""

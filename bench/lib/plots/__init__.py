"""Every figure of the suite, in one place, with one backend (``Agg``: files only, no screen).

* ``fig5``: SphereFed's Fig. 5 (a)-(e) bars plus energy panels (``fig5.png``);
* ``breakdown``: one training step's time and energy per block (``breakdown_<model>.png``);
* ``tta``: accuracy against modeled time, energy and bytes (``tta.png``);
* ``compare_hw``: every method on several accelerators (``hardware_<model>.png``);
* ``fleet``: a run on a fleet, accuracy and each round's arrivals and drops (``fleet_<model>.png``);
* ``sweep``: SphereFed's saving as each unpublished hardware parameter varies (``sweep.png``);
* ``run``: the one list of a ``bench.run`` folder's figures (``run_figures``: which files, how each
  is drawn), from its saved data; ``bench.run`` writes it and ``python -m bench.plots`` redraws it;
* ``study``: a ``bench.study`` report's figures; ``dse``: a design-space exploration's Pareto fronts.

To add a plot: a function ``figure(data) -> matplotlib Figure`` in a module here, saved with
``save(fig, path)``; a figure of a ``bench.run`` folder is one more entry of ``run.run_figures``.
Nothing else sets matplotlib's backend.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from iokit.files import atomic_write  # noqa: E402


def save(fig, path: Path, *, dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG at ``path`` (through a temporary file renamed into place) and close it."""
    try:
        return atomic_write(Path(path), lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    finally:
        plt.close(fig)

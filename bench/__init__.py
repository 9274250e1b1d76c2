"""The commands of the suite and their libraries; ``from bench import price`` is the Python API
(``bench/api.py``).

Every command is a package's ``__main__.py`` (``python -m bench.run``, ``bench.fl``, ``bench.grid``,
``bench.sweep``, ``bench.plots``, ``bench.capture``, ``bench.flower``, ``bench.formulas``); the rest
of the package is its library, and no module imports a ``__main__``. ``bench.paper`` holds the
paper's setting and claims, ``bench.results`` the results format, ``bench.plots`` every figure.

``price`` is imported on first use (PEP 562 module ``__getattr__``), so importing any other part of
``bench`` stays light.
"""


def __getattr__(name: str):
    if name == "price":
        from bench.api import price

        return price
    raise AttributeError(f"module 'bench' has no attribute {name!r}")

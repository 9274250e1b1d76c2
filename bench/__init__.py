"""The commands of the suite and their libraries; ``from bench import price`` is the Python API
(``bench/api.py``).

Every command is a package's ``__main__.py`` (``python -m bench.run``, ``bench.fl``, ``bench.study``,
``bench.grid``, ``bench.sweep``, ``bench.dse``, ``bench.plots``, ``bench.capture``, ``bench.flower``,
``bench.formulas``, ``bench.anchors``, ``bench.findings``) beside the modules only it uses; what several commands share is ``bench.lib``
(``bench.lib.paper`` the paper's setting and claims, ``bench.lib.results`` the results format,
``bench.lib.plots`` every figure). A command imports ``bench.lib`` and the layers below, never
another command, and no module imports a ``__main__`` (``tests/test_architecture.py``).

``price`` is imported on first use (PEP 562 module ``__getattr__``), so importing any other part of
``bench`` stays light.
"""


def __getattr__(name: str):
    if name == "price":
        from bench.api import price

        return price
    raise AttributeError(f"module 'bench' has no attribute {name!r}")

"""The efficiency study and its tools; ``from bench import price`` is the Python API (bench/api.py).

``price`` is imported on first use (PEP 562 module ``__getattr__``), so importing any other part of
``bench`` (e.g. ``bench.grid``, whose Ray driver must not import torch) stays light.
"""


def __getattr__(name: str):
    if name == "price":
        from bench.api import price

        return price
    raise AttributeError(f"module 'bench' has no attribute {name!r}")

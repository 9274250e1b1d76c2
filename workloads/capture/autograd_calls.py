"""All of ``torch.autograd.backward`` / ``grad`` seen by a capture as the backward phase: the seed
gradient is created there, before the autograd engine runs any node (``workloads.capture.engine``).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch


@contextlib.contextmanager
def backward_calls_recorded(recorder: Any) -> Iterator[None]:
    """``recorder`` (the engine's) hears ``enter_backward(roots)`` / ``exit_backward()`` around every call.
    Treat all of ``torch.autograd.backward`` / ``grad`` as the backward phase (the seed
    gradient is created there before the engine runs any node). ``Tensor.backward`` calls
    ``torch.autograd.backward`` through the module attribute, so it is covered too."""
    originals = {"backward": torch.autograd.backward, "grad": torch.autograd.grad}

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(roots, *args, **kwargs):
            recorder.enter_backward(roots)
            try:
                return fn(roots, *args, **kwargs)
            finally:
                recorder.exit_backward()

        return call

    for name, fn in originals.items():
        setattr(torch.autograd, name, wrap(fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch.autograd, name, fn)

"""What a run accepts from code it does not own, and when a run has failed (issue 46).

* ``guard(obj, owner)``: a user's method object (``package.module:Class``, docs/methods.md) whose
  every hook (``aggregate``, ``penalty``, ``prepare_model``, a calibration's ``server_calibrate``,
  ...) turns an exception into one ``UserCodeError`` line naming the user's code and the hook
  (``mymethods:Bad.aggregate raised ZeroDivisionError: ...``) instead of a traceback; it adds no
  tensor operation, so a captured trace of the hook is the hook's own;
* ``check_finite(tensors, where)``: a global model the server built (an ``aggregate``, a
  calibration) holds only finite numbers, else ``DivergedError`` naming where;
* divergence, defined once: a round whose mean local loss is not finite (``train_client``), or
  exceeds ``DIVERGENCE_LOSS_FACTOR`` times the first round's (``check_divergence``), has diverged;
  a diverged run is a failed run wherever it runs (``bench.fl`` exit 1, a study's trial left out
  of the choice and reported failed, ``bench.run``).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping, Sequence

import torch

DIVERGENCE_LOSS_FACTOR = 100.0
"""A round's mean local loss above this multiple of the first round's is divergence (our choice:
cross-entropy falls from ln(C) as a run learns; of the training curves under results/reference/,
the highest ratio of a round's mean loss to the first round's is 42, a FedCos run of
digits-systems that spiked in rounds 10-14 and recovered to 83 %: ``python -m pytest -q
tests/test_no_data_loss_user_code.py -k shipped`` checks that no shipped curve crosses this; a
learning rate of 1e9 gives ~10^16 by round 2, accuracy at chance)."""


class UserCodeError(ValueError):
    """A user's code raised; the message names it, the hook and the error, on one line."""


class DivergedError(FloatingPointError):
    """A run diverged (module doc): a failed run, never a result."""


def guard(obj: Any, owner: str) -> Any:
    """``obj`` (a user's method instance, made from ``owner``, its dotted path) with each public
    method replaced, on the instance, by one that names ``owner`` when it raises (module doc).
    The class, and so ``isinstance`` and the class's own functions, are unchanged."""
    for name in dir(type(obj)):
        if name.startswith("_") or not callable(getattr(type(obj), name, None)) or isinstance(
                getattr(type(obj), name), type):
            continue
        setattr(obj, name, _named(getattr(obj, name), f"{owner}.{name}"))
    return obj


def _named(hook: Callable, where: str) -> Callable:
    @functools.wraps(hook)
    def call(*args, **kwargs):
        try:
            return hook(*args, **kwargs)
        except (UserCodeError, FloatingPointError):  # already named, or a run's divergence: as it is
            raise
        except Exception as exc:  # noqa: BLE001 - the user's code: its own error, on one line
            text = " ".join(str(exc).split())
            raise UserCodeError(f"{where} raised {type(exc).__name__}" + (f": {text[:300]}" if text else "")
                                + " (your code, docs/methods.md)") from exc

    return call


def check_finite(tensors: Mapping[str, torch.Tensor], where: str, why: str = "a diverged run") -> None:
    """``DivergedError`` naming the first entry of ``tensors`` (a state_dict) holding NaN or inf,
    and ``why`` (a user's hook that built it: check it, rather than a divergence)."""
    for key, value in tensors.items():
        if torch.is_tensor(value) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise DivergedError(f"{where}: the global model's {key!r} holds NaN or inf ({why})")


def check_divergence(history: Sequence[Mapping[str, Any]], where: str) -> None:
    """``DivergedError`` when the last round of ``history`` (the loop's per-round entries with
    ``mean_loss``) has diverged from the first (module doc)."""
    losses = [h["mean_loss"] for h in history if h.get("mean_loss") is not None]
    if len(losses) < 2:
        return
    first, last = losses[0], losses[-1]
    if not math.isfinite(last) or (first > 0 and last > DIVERGENCE_LOSS_FACTOR * first):
        raise DivergedError(f"{where}, round {history[-1]['round']}: mean local loss {last:.3g} is above "
                            f"{DIVERGENCE_LOSS_FACTOR:g} x the first round's ({first:.3g}): the run diverged; "
                            f"lower the learning rate")

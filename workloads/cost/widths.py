"""Which submodel width each client of a fleet trains (HeteroFL, FjORD): torch-free and pure.

A device class declares its width (``width = 0.5`` in its fleet table: HeteroFL's rate r, FjORD's
largest width p_max) or ``width = "auto"``: then each of its clients trains the widest of the
method's declared widths (``FedAvg.rates``: HeteroFL's a-e levels 1, 1/2, ... 1/16, FjORD's
k / levels) whose work, priced on the client's own accelerator before the run, both

* fits its device: the peak memory of its largest mini-batch's step at that width
  (``RunPricer.peak_memory_bytes``) is at most the class's ``memory_bytes``, and
* meets the round's deadline: downloading the submodel, its local training at that width and
  uploading the submodel (``ClientOffer.finish_s``, the fleet's round model) end by ``deadline_s``.

This choice is ours: HeteroFL and FjORD assign each client a fixed level from its device tier
(HeteroFL's experiments: "Fix" and "Dynamic" assignments by proportion; FjORD's: uniform tiers); none
derives it from a priced step. Where no declared width fits, the client gets the narrowest one and
the round rule drops it as it drops any client that does not fit (``memory``) or is late
(``deadline``). A class without a width trains the full model. A method that is not width-scaled
trains every client at width 1 (FedAvg on a fleet drops whom the full model does not fit).
"""

from __future__ import annotations

from typing import Callable, Sequence


def chosen_width(declared: float | str | None, rates: Sequence[float], works: Callable[[float], bool]) -> float:
    """A client's width: its class's ``declared`` width; with ``"auto"`` the first (widest) of
    ``rates`` for which ``works(width)`` (it fits the device's memory and meets the deadline), else
    the narrowest; 1 where the class declares none."""
    if declared is None:
        return 1.0
    if declared != "auto":
        return float(declared)
    ordered = sorted(rates, reverse=True)
    return next((r for r in ordered if works(r)), ordered[-1])

"""Modifiers: what changes any base algorithm's model head and loss, as SphereFed (Dong et al.,
"SphereFed: Hyperspherical Federated Learning", ECCV 2022, Sec. 4) does on FedAvg, FedProx, ...

A modifier is one class, a subclass of ``Modifier``, registered by name in ``MODIFIERS``
(``workloads.fl.methods``); a method name writes it after its base algorithm
(``fedprox+spherefed``). It acts through the hooks an algorithm has (``workloads.fl.methods.base``),
so nothing outside the methods and the models names it:

* ``head``: what it asks of the model (``workloads.models.Head``: ``feature_norm``,
  ``fixed_head``); every command builds the run's model with it (``MethodConfig.head``);
* ``prepare_model(model, seed)``: its changes to the freshly built model, before the algorithm's
  own (SphereFed: the fixed head's weights from the shared seed);
* ``loss`` / ``per_sample_loss``: the loss the algorithm's ``batch_loss`` minimizes (its
  ``loss_fn``), batch mean / per sample (CCVR's virtual samples weigh each);
* ``knobs``: its own hyper-parameters (``workloads.fl.knob``);
* ``unfit(num_classes, feature_dim)``: why its head cannot be built at these sizes (None: it can),
  checked before any work.

``Modifier()`` itself modifies nothing: the model's own trained head and cross entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.fl.knob import Knob
from workloads.models import Head


def cross_entropy_per_sample(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross entropy of each sample (``F.cross_entropy`` without the batch mean)."""
    return F.cross_entropy(logits, targets, reduction="none")


class Modifier:
    """No modification; the base of every modifier (module doc)."""

    head: Head = Head()
    knobs: tuple[Knob, ...] = ()
    loss = staticmethod(F.cross_entropy)
    per_sample_loss = staticmethod(cross_entropy_per_sample)

    def prepare_model(self, model: nn.Module, *, seed: int) -> nn.Module:
        return model

    def unfit(self, num_classes: int, feature_dim: int) -> str | None:
        return None

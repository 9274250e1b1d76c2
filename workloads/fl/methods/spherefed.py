"""SphereFed (Dong et al., "SphereFed: Hyperspherical Federated Learning", ECCV 2022, Sec. 4.1-4.2):
a modifier for any base algorithm (``workloads.fl.methods.modifier``).

* The classifier W (C x l) is fixed to a row-orthonormal matrix (Eq. 4), built by QR decomposition
  (appendix 0.D, Tab. 10: "QR") from a seeded Gaussian, and frozen with ``requires_grad=False``
  (never lr = 0 or zeroed gradients: the trace must show no classifier weight gradient): the
  model's ``fixed_head``.
* Features are normalized to the unit hypersphere before the classifier (``FeatureNorm``: the
  model's ``feature_norm``).
* The loss is the MSE against the one-hot label, (1/C) ||W z - one_hot(y)||^2 (Eq. 5), averaged
  over the batch.

Because every client can rebuild W from the shared seed, it is never communicated.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.fl.methods.modifier import Modifier
from workloads.models import Head


def orthonormal_classifier(num_classes: int, feature_dim: int, *, seed: int) -> torch.Tensor:
    """Row-orthonormal W in R^{C x l} (Eq. 4): W = Q^T with Q R = qr(G), G ~ N(0, 1)^{l x C}.

    Rows have unit norm and are pairwise orthogonal, which needs C <= l.
    """
    if num_classes > feature_dim:
        raise ValueError(f"SphereFed needs num_classes <= feature_dim for orthonormal rows, "
                         f"got C={num_classes} > l={feature_dim}")
    gen = torch.Generator().manual_seed(seed)
    gauss = torch.randn(feature_dim, num_classes, generator=gen, dtype=torch.float64)
    q, _ = torch.linalg.qr(gauss)  # q: [l, C], orthonormal columns
    return q.T.contiguous().to(torch.float32)


def one_hot_like(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """one_hot(y) with the logits' shape and dtype, by ``scatter`` (``F.one_hot`` runs a range
    check that reads the labels on CPU but not on ``meta``, so the two traces would differ)."""
    return torch.zeros_like(logits).scatter_(1, targets.unsqueeze(1), 1.0)


def mse_onehot_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Eq. 5 averaged over the batch: mean_b (1/C) sum_i (o_bi - 1(i = y_b))^2."""
    return F.mse_loss(logits, one_hot_like(logits, targets))


def mse_onehot_per_sample(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Eq. 5 of each sample: (1/C) sum_i (o_bi - 1(i = y_b))^2."""
    return ((logits - one_hot_like(logits, targets)) ** 2).mean(1)


def fix_classifier(model: nn.Module, weight: torch.Tensor) -> None:
    """Set ``model.classifier.weight`` to ``weight`` and freeze it (``requires_grad=False``)."""
    with torch.no_grad():
        model.classifier.weight.copy_(weight)
    model.classifier.weight.requires_grad_(False)


class SphereFed(Modifier):
    """FeatureNorm, the fixed orthonormal classifier of Eq. 4 and the MSE loss of Eq. 5 (module doc)."""

    head = Head(feature_norm=True, fixed_head=True)
    loss = staticmethod(mse_onehot_loss)
    per_sample_loss = staticmethod(mse_onehot_per_sample)

    def prepare_model(self, model: nn.Module, *, seed: int) -> nn.Module:
        """Fix ``model.classifier.weight`` to the orthonormal W of ``seed`` and freeze it; the model
        must normalize its features (built with ``head``)."""
        if isinstance(model.feature_norm, nn.Identity):
            raise ValueError("SphereFed needs a model built with its head (Head(feature_norm=True, ...): "
                             "FeatureNorm before the classifier); got feature_norm = Identity")
        num_classes, feature_dim = model.classifier.weight.shape
        fix_classifier(model, orthonormal_classifier(num_classes, feature_dim, seed=seed))
        return model

    def unfit(self, num_classes: int, feature_dim: int) -> str | None:
        if num_classes > feature_dim:
            return (f"SphereFed's orthonormal classifier needs classes <= features: {feature_dim} features, "
                    f"{num_classes} classes")
        return None

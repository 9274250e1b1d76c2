"""SphereFed (Dong et al., ECCV 2022, Sec. 4.1-4.2): a modifier for any base algorithm.

* The classifier W (C x l) is fixed to a row-orthonormal matrix (Eq. 4), built by QR decomposition
  (appendix 0.D, Tab. 10: "QR") from a seeded Gaussian, and frozen with ``requires_grad=False``
  (never lr = 0 or zeroed gradients: the trace must show no classifier weight gradient).
* Features are normalized to the unit hypersphere before the classifier (``FeatureNorm``: the
  model's ``feature_norm`` when built with ``spherefed=True``).
* The loss is the MSE against the one-hot label, (1/C) ||W z - one_hot(y)||^2 (Eq. 5), averaged
  over the batch.

Because every client can rebuild W from the shared seed, it is never communicated.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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


def apply_spherefed(model: nn.Module, *, seed: int) -> None:
    """Fix ``model.classifier.weight`` to the orthonormal W of ``seed`` and freeze it.

    The model must have been built with ``spherefed=True`` (its ``feature_norm`` normalizes).
    """
    if isinstance(model.feature_norm, nn.Identity):
        raise ValueError("SphereFed needs a model built with spherefed=True (FeatureNorm before "
                         "the classifier); got feature_norm = Identity")
    weight = model.classifier.weight
    num_classes, feature_dim = weight.shape
    with torch.no_grad():
        weight.copy_(orthonormal_classifier(num_classes, feature_dim, seed=seed))
    weight.requires_grad_(False)

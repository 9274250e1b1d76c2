"""A FedETF-style modifier: the fixed simplex-ETF classifier of FedETF (Li, Shang, He, Lin and Wu,
"No Fear of Classifier Biases: Neural Collapse Inspired Federated Learning with Synthetic and Fixed
Classifier", ICCV 2023), one file on the modifier hooks (``workloads.fl.methods.modifier``).

* The classifier is the simplex equiangular tight frame of the paper's preliminaries (Sec. 3,
  neural collapse): M = sqrt(C/(C-1)) U (I_C - (1/C) 1 1^T), U in R^{l x C} with orthonormal
  columns, so the C class vectors (columns of M) have unit norm and every pair the cosine
  -1/(C-1). U is the Q of the QR of a seeded Gaussian, as SphereFed's W (the authors' code,
  ``models_dict/proto_classifiers.py``, takes the QR of a uniform draw). Every client rebuilds it
  from the shared seed: fixed, frozen (the model's ``fixed_head``), never communicated.
* Features are normalized to the unit sphere (the model's ``feature_norm``) and the logits
  beta * M^T z go through cross entropy; beta is folded into the fixed weights (W = beta M^T,
  the same logits and the same GEMM).

What this is not: FedETF learns beta (we fix it at ``TEMPERATURE``, the initial value of the
authors' CIFAR-10 CNN, ``models_dict/cnn.py``), puts a projection layer before the normalization,
trains with a balanced softmax loss from each client's class counts and fine-tunes locally for
personalization. None of that is here: it is FedETF's head on any base algorithm, not FedETF.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from workloads.fl.methods.modifier import Modifier
from workloads.fl.methods.spherefed import fix_classifier, orthonormal_classifier
from workloads.models import Head

TEMPERATURE = 10.0


def simplex_etf(num_classes: int, feature_dim: int, *, seed: int) -> torch.Tensor:
    """M^T in R^{C x l}: M = sqrt(C/(C-1)) U (I_C - (1/C) 1 1^T) (FedETF Sec. 3), U = the orthonormal
    columns of ``orthonormal_classifier``'s Q (C <= l, C >= 2). Rows: unit norm, pairwise cosine -1/(C-1)."""
    if not 2 <= num_classes <= feature_dim:
        raise ValueError(f"a simplex ETF needs 2 <= classes <= features, got C={num_classes}, l={feature_dim}")
    u = orthonormal_classifier(num_classes, feature_dim, seed=seed).T.double()  # [l, C]
    centering = torch.eye(num_classes, dtype=torch.float64) - 1.0 / num_classes
    return (math.sqrt(num_classes / (num_classes - 1)) * u @ centering).T.contiguous().to(torch.float32)


class SimplexETF(Modifier):
    """FeatureNorm, the fixed simplex-ETF classifier scaled by ``TEMPERATURE``, cross entropy (module doc)."""

    head = Head(feature_norm=True, fixed_head=True)

    def prepare_model(self, model: nn.Module, *, seed: int) -> nn.Module:
        num_classes, feature_dim = model.classifier.weight.shape
        fix_classifier(model, TEMPERATURE * simplex_etf(num_classes, feature_dim, seed=seed))
        return model

    def unfit(self, num_classes: int, feature_dim: int) -> str | None:
        if not 2 <= num_classes <= feature_dim:
            return (f"a simplex-ETF classifier needs 2 <= classes <= features: {feature_dim} features, "
                    f"{num_classes} classes")
        return None

"""Tiny stand-ins following the contracts of docs/architecture.md (FLNet, Dataset), so the FL
tests run in milliseconds and do not depend on the model zoo."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


class FeatureNorm(nn.Module):
    def forward(self, z):
        return z / z.norm(dim=1, keepdim=True)


class TinyNet(nn.Module):
    """FLNet contract: body -> [B, l], feature_norm, classifier Linear(l, C, bias=False)."""

    def __init__(self, in_features=16, feature_dim=12, num_classes=4, spherefed=False, bn=True):
        super().__init__()
        layers = [nn.Flatten(), nn.Linear(in_features, feature_dim)]
        if bn:
            layers.append(nn.BatchNorm1d(feature_dim))
        layers += [nn.ReLU(), nn.Linear(feature_dim, feature_dim), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.feature_norm = FeatureNorm() if spherefed else nn.Identity()
        self.classifier = nn.Linear(feature_dim, num_classes, bias=False)
        self.feature_dim = feature_dim

    def features(self, x):
        return self.feature_norm(self.body(x))

    def forward(self, x):
        return self.classifier(self.features(x))


@dataclass(frozen=True)
class Dataset:
    name: str
    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    note: str = "synthetic"


def blobs(n=200, num_classes=4, in_features=16, seed=0):
    """Gaussian class blobs: an easy, separable synthetic dataset."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(num_classes, in_features, generator=g) * 3
    y = torch.arange(n) % num_classes
    x = centers[y] + torch.randn(n, in_features, generator=g)
    return Dataset("blobs", x, y, num_classes)


def label_skew_parts(labels, num_clients, seed=0):
    """Each client gets mostly two classes (a simple non-IID split for tests)."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    order = np.argsort(labels, kind="stable")
    return [np.sort(p) for p in np.array_split(order, num_clients)] if rng is not None else None

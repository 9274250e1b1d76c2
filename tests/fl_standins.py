"""Tiny stand-ins following the FLNet contract of docs/models.md, and a synthetic dataset,
so the FL method tests run in milliseconds without the model zoo."""

from __future__ import annotations

import torch
from torch import nn

from workloads.fl.dataset import Dataset
from workloads.models import FeatureNorm, Head


class TinyNet(nn.Module):
    """FLNet contract: body -> [B, l], feature_norm, classifier Linear(l, C, bias=False), as ``head`` asks."""

    def __init__(self, feature_dim=12, num_classes=4, head=Head()):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(12, feature_dim), nn.BatchNorm1d(feature_dim),
                                  nn.ReLU(), nn.Linear(feature_dim, feature_dim), nn.ReLU())
        self.feature_norm = FeatureNorm() if head.feature_norm else nn.Identity()
        self.classifier = nn.Linear(feature_dim, num_classes, bias=False)
        self.classifier.weight.requires_grad_(not head.fixed_head)
        self.feature_dim = feature_dim

    def features(self, x):
        return self.feature_norm(self.body(x))

    def forward(self, x):
        return self.classifier(self.features(x))


def blobs(n=200, num_classes=4, seed=0):
    """Gaussian class blobs shaped as 3x2x2 'images' (12 values): an easy synthetic dataset."""
    g = torch.Generator().manual_seed(1234)
    centers = torch.randn(num_classes, 12, generator=g) * 3
    g.manual_seed(seed)
    y = torch.arange(n) % num_classes
    x = centers[y] + torch.randn(n, 12, generator=g)
    return Dataset("blobs", x.reshape(n, 3, 2, 2), y, num_classes, "synthetic Gaussian blobs")

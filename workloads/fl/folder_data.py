"""The datasets read from a folder (``--data-dir``, docs in ``workloads.fl.data``): CIFAR-10 / CIFAR-100 from
their python pickles (read without executing them), Tiny ImageNet from its JPEGs.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from workloads.fl.dataset import NORMALIZATION, DataError, Dataset, check_image_size, find_root, require, size_note, to_tensor

try:  # numpy >= 2 (and 1.26, which also ships the numpy._core alias)
    from numpy._core.multiarray import _reconstruct as _np_reconstruct
except ImportError:  # pragma: no cover - older numpy
    from numpy.core.multiarray import _reconstruct as _np_reconstruct


_CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
_TIN_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"


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


def load_cifar(name: str, data_dir, image_size: int | None) -> tuple[Dataset, Dataset]:
    lay = _CIFAR[name]
    how = (f"download the {lay.title} python version from {_CIFAR_URL} and extract it there "
           f"(data_dir may be the extracted {lay.folder}/ or its parent)")
    root = find_root(data_dir, lay.folder, lay.train_files[0], how)
    size = check_image_size(image_size, 32)
    splits = []
    for split, files in (("train", lay.train_files), ("test", (lay.test_file,))):
        parts = [_read_cifar_batch(require(root, f, lay.folder, how), lay.label_key, lay.num_classes, how)
                 for f in files]
        images = np.concatenate([p[0] for p in parts])
        labels = np.concatenate([p[1] for p in parts])
        note = (f"{lay.title} (python version) from {root}, {size_note(32, size)}; "
                f"{split} split, {len(labels):,} images")
        splits.append(Dataset(name, to_tensor(images, NORMALIZATION[name], size),
                              torch.from_numpy(labels), lay.num_classes, note))
    return splits[0], splits[1]


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


def load_tinyimagenet(name: str, data_dir, image_size: int | None) -> tuple[Dataset, Dataset]:
    how = f"download {_TIN_URL} and extract it there (data_dir may be the extracted {_TIN_FOLDER}/ or its parent)"
    root = find_root(data_dir, _TIN_FOLDER, "wnids.txt", how)
    size = check_image_size(image_size, _TIN_SIZE)
    wnids = sorted({line.strip() for line in (root / "wnids.txt").read_text().splitlines() if line.strip()})
    if not wnids:
        raise DataError(f"malformed {root / 'wnids.txt'}: expected one WordNet id per line; {how}")
    label_of = {w: i for i, w in enumerate(wnids)}

    train_paths, train_labels = [], []
    for wnid in wnids:
        files = sorted(require(root, f"train/{wnid}/images", _TIN_FOLDER, how).glob("*.JPEG"))
        if not files:
            raise DataError(f"expected {_TIN_FOLDER}/train/{wnid}/images/*.JPEG under {root.parent}: {how}")
        train_paths += files
        train_labels += [label_of[wnid]] * len(files)

    ann = require(root, "val/val_annotations.txt", _TIN_FOLDER, how)
    val_paths, val_labels = [], []
    for lineno, line in enumerate(ann.read_text().splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in label_of:
            raise DataError(f"malformed {ann} line {lineno}: expected '<file>\\t<wnid listed in wnids.txt>\\t...', "
                            f"got {line[:80]!r}; {how}")
        val_paths.append(require(root, f"val/images/{fields[0]}", _TIN_FOLDER, how))
        val_labels.append(label_of[fields[1]])
    if not val_paths:
        raise DataError(f"malformed {ann}: no annotations; {how}")

    norm, c = NORMALIZATION[name], len(wnids)
    src = f"TinyImageNet ({_TIN_FOLDER}, {c} classes) from {root}, {size_note(_TIN_SIZE, size)}"
    train = Dataset(name, to_tensor(_read_jpegs(train_paths, how), norm, size),
                    torch.tensor(train_labels, dtype=torch.int64), c,
                    f"{src}; train split, {len(train_labels):,} images")
    test = Dataset(name, to_tensor(_read_jpegs(val_paths, how), norm, size),
                   torch.tensor(val_labels, dtype=torch.int64), c,
                   f"{src}; test split = its labelled val split (the public test split has no labels), "
                   f"{len(val_labels):,} images")
    return train, test

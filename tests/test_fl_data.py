"""Dataset loaders: fixtures written in the real on-disk formats, loaded back exactly; clear errors."""

import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from workloads.fl.data import DATASETS, load_dataset
from workloads.fl.dataset import DataError, Dataset
from workloads.fl.dataset import NORMALIZATION


def _normalized(images_nchw_uint8: np.ndarray, name: str) -> np.ndarray:
    """The expected tensor, computed independently in float64: (pixel / 255 - mean[c]) / std[c]."""
    norm = NORMALIZATION[name]
    mean = np.array(norm.mean).reshape(1, 3, 1, 1)
    std = np.array(norm.std).reshape(1, 3, 1, 1)
    return (images_nchw_uint8.astype(np.float64) / 255.0 - mean) / std


# --------------------------------------------------------------------------- CIFAR fixtures


def _write_pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _write_cifar10(root, rng, per_batch=4, test=3):
    """cifar-10-batches-py with data_batch_1..5 and test_batch; returns (train, test) arrays."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    xs, ys = [], []
    for i in range(1, 6):
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, per_batch).tolist()  # the real files hold Python lists
        _write_pickle(folder / f"data_batch_{i}", {b"batch_label": b"b", b"data": data, b"labels": labels})
        xs.append(data)
        ys += labels
    tdata = rng.integers(0, 256, (test, 3072), dtype=np.uint8)
    tlabels = rng.integers(0, 10, test).tolist()
    _write_pickle(folder / "test_batch", {b"data": tdata, b"labels": tlabels})
    return (np.concatenate(xs), np.array(ys)), (tdata, np.array(tlabels))


def _write_cifar100(root, rng, train=6, test=4):
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    out = []
    for name, n in (("train", train), ("test", test)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = rng.integers(0, 100, n).tolist()
        _write_pickle(folder / name, {b"data": data, b"fine_labels": fine, b"coarse_labels": [f // 5 for f in fine]})
        out.append((data, np.array(fine)))
    return out


def test_cifar10_round_trip_from_parent_and_folder(tmp_path):
    (trx, try_), (tex, tey) = _write_cifar10(tmp_path, np.random.default_rng(0))
    for data_dir in (tmp_path, tmp_path / "cifar-10-batches-py", str(tmp_path)):
        train, test = load_dataset("cifar10", data_dir=data_dir)
        assert train.name == "cifar10" and train.num_classes == 10 and len(train) == 20 and len(test) == 3
        assert train.x.shape == (20, 3, 32, 32) and train.x.dtype == torch.float32
        # b"data" rows are 1024 R, then 1024 G, then 1024 B values, row-major: reshape(N, 3, 32, 32).
        np.testing.assert_allclose(train.x.numpy(), _normalized(trx.reshape(-1, 3, 32, 32), "cifar10"), atol=1e-5)
        np.testing.assert_allclose(test.x.numpy(), _normalized(tex.reshape(-1, 3, 32, 32), "cifar10"), atol=1e-5)
        assert train.y.tolist() == try_.tolist() and test.y.tolist() == tey.tolist()
        assert train.y.dtype == torch.int64
        assert "CIFAR-10" in train.note and "train" in train.note and "test" in test.note


def test_cifar10_pixel_layout_hand_case(tmp_path):
    # One image whose R plane is all 255, G all 0, B all 51: channel c of pixel (0, 0) must be
    # (255/255 - 0.4914)/0.2470 = 2.05911, (0 - 0.4822)/0.2435 = -1.98029, (0.2 - 0.4465)/0.2616 = -0.94228.
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    img = np.concatenate([np.full(1024, 255), np.zeros(1024), np.full(1024, 51)]).astype(np.uint8)[None]
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        _write_pickle(folder / f, {b"data": img, b"labels": [7]})
    train, _ = load_dataset("cifar10", data_dir=tmp_path)
    assert train.x[0, :, 0, 0].tolist() == pytest.approx([2.05911, -1.98029, -0.94228], abs=1e-5)
    assert train.y.tolist() == [7] * 5


def test_cifar100_round_trip_fine_labels(tmp_path):
    (trx, try_), (tex, tey) = _write_cifar100(tmp_path, np.random.default_rng(1))
    train, test = load_dataset("cifar100", data_dir=tmp_path)
    assert train.num_classes == 100 and train.x.shape == (6, 3, 32, 32)
    np.testing.assert_allclose(train.x.numpy(), _normalized(trx.reshape(-1, 3, 32, 32), "cifar100"), atol=1e-5)
    assert train.y.tolist() == try_.tolist() and test.y.tolist() == tey.tolist()
    assert "CIFAR-100" in test.note


def test_resize_matches_pil_bilinear(tmp_path):
    # Independent check: PIL's BILINEAR resize of each uint8 image (PIL rounds to whole grey
    # levels, so allow one level, i.e. 1/255/std in normalized units).
    (trx, _), _ = _write_cifar100(tmp_path, np.random.default_rng(2))
    train, _ = load_dataset("cifar100", data_dir=tmp_path, image_size=16)
    assert train.x.shape == (6, 3, 16, 16)
    hwc = trx.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    pil = np.stack([np.asarray(Image.fromarray(im).resize((16, 16), Image.BILINEAR)) for im in hwc])
    expected = _normalized(pil.transpose(0, 3, 1, 2), "cifar100")
    assert np.abs(train.x.numpy() - expected).max() <= 1.0 / 255 / min(NORMALIZATION["cifar100"].std) + 1e-5


def _messages(excinfo):
    return str(excinfo.value)


def test_missing_directory_says_what_and_where(tmp_path):
    with pytest.raises(DataError) as e:
        load_dataset("cifar100", data_dir=tmp_path / "nowhere")
    msg = _messages(e)
    assert "expected cifar-100-python/train under" in msg and "nowhere" in msg
    assert "https://www.cs.toronto.edu/~kriz/cifar.html" in msg and "does not exist" in msg
    with pytest.raises(DataError, match="needs a data directory"):
        load_dataset("cifar10")
    assert issubclass(DataError, ValueError)


def test_missing_batch_file_is_named(tmp_path):
    _write_cifar10(tmp_path, np.random.default_rng(0))
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataError, match="expected cifar-10-batches-py/data_batch_3 under"):
        load_dataset("cifar10", data_dir=tmp_path)


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"not a pickle at all", "could not unpickle"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"coarse_labels": [0, 1]}, "found"),
        ({b"data": np.zeros((2, 1024), np.uint8), b"fine_labels": [0, 1]}, "b'data' is uint8"),
        ({b"data": np.zeros((2, 3072), np.float32), b"fine_labels": [0, 1]}, "b'data' is float32"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": [0]}, "labels of shape"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": [0, 100]}, "labels span 0..100"),
        ([1, 2, 3], "found list"),
    ],
)
def test_malformed_cifar_file(tmp_path, content, reason):
    _write_cifar100(tmp_path, np.random.default_rng(0))
    path = tmp_path / "cifar-100-python" / "train"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        _write_pickle(path, content)
    with pytest.raises(DataError) as e:
        load_dataset("cifar100", data_dir=tmp_path)
    assert f"malformed {path}" in _messages(e) and reason in _messages(e)


class _Evil:
    """Pickles as a call to os.mkdir(marker): loading it with plain pickle would create marker."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.mkdir, (str(self.marker),)


def test_pickle_cannot_run_code(tmp_path):
    _write_cifar100(tmp_path, np.random.default_rng(0))
    marker = tmp_path / "pwned"
    _write_pickle(tmp_path / "cifar-100-python" / "train", {b"data": _Evil(marker), b"fine_labels": []})
    with pytest.raises(DataError, match="refusing to load"):
        load_dataset("cifar100", data_dir=tmp_path)
    assert not marker.exists()


# --------------------------------------------------------------------------- TinyImageNet fixture

_WNIDS = ["n09999999", "n01443537", "n02085620"]  # deliberately not in sorted order


def _write_tin(root, rng, per_class=2, grey_first=True):
    """A tiny tiny-imagenet-200 tree; returns {relative path: (original uint8 HWC, label)}."""
    tin = root / "tiny-imagenet-200"
    (tin / "val" / "images").mkdir(parents=True)
    (tin / "wnids.txt").write_text("\n".join(_WNIDS) + "\n")
    label = {w: i for i, w in enumerate(sorted(_WNIDS))}
    written = {}
    for w in _WNIDS:
        (tin / "train" / w / "images").mkdir(parents=True)
        for i in range(per_class):
            rel = f"train/{w}/images/{w}_{i}.JPEG"
            written[rel] = (_save_jpeg(tin / rel, rng, grey=grey_first and i == 0), label[w])
    lines = []
    for j, w in enumerate([_WNIDS[2], _WNIDS[0], _WNIDS[2], _WNIDS[1]]):
        rel = f"val/images/val_{j}.JPEG"
        written[rel] = (_save_jpeg(tin / rel, rng), label[w])
        lines.append(f"val_{j}.JPEG\t{w}\t0\t0\t63\t63")
    (tin / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return written


def _save_jpeg(path, rng, grey=False):
    # Smooth images (gradients), so JPEG at quality 95 stays within a few grey levels of them.
    yy, xx = np.mgrid[0:64, 0:64]
    a, b, c = rng.integers(1, 3, 3)
    img = np.stack([(xx * a) % 256, (yy * b) % 256, ((xx + yy) * c) % 256], axis=-1).astype(np.uint8)
    if grey:
        img = np.repeat(img[..., :1], 3, axis=-1)
        Image.fromarray(img[..., 0], mode="L").save(path, format="JPEG", quality=95)
    else:
        Image.fromarray(img).save(path, format="JPEG", quality=95)
    return img


def _decoded(path):
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB")).transpose(2, 0, 1)[None]


def test_tinyimagenet_round_trip(tmp_path):
    written = _write_tin(tmp_path, np.random.default_rng(0))
    train, test = load_dataset("tinyimagenet", data_dir=tmp_path)
    tin = tmp_path / "tiny-imagenet-200"
    assert train.num_classes == 3 and train.x.shape == (6, 3, 64, 64) and test.x.shape == (4, 3, 64, 64)
    # Order: wnids sorted (n01443537, n02085620, n09999999), files sorted within each class;
    # test follows val_annotations.txt.
    train_rel = [f"train/{w}/images/{w}_{i}.JPEG" for w in sorted(_WNIDS) for i in range(2)]
    test_rel = [f"val/images/val_{j}.JPEG" for j in range(4)]
    assert train.y.tolist() == [0, 0, 1, 1, 2, 2]
    assert test.y.tolist() == [written[r][1] for r in test_rel] == [1, 2, 1, 0]
    for ds, rels in ((train, train_rel), (test, test_rel)):
        for i, rel in enumerate(rels):
            # Exact against PIL's own decoding of the same file ...
            np.testing.assert_allclose(ds.x[i : i + 1].numpy(), _normalized(_decoded(tin / rel), "tinyimagenet"),
                                       atol=1e-5)
            # ... and close to the pixels written (JPEG is lossy; 8 grey levels at quality 95).
            orig = _normalized(written[rel][0].transpose(2, 0, 1)[None], "tinyimagenet")
            assert np.abs(ds.x[i : i + 1].numpy() - orig).max() < 8 / 255 / 0.224
    assert "test split = its labelled val split" in test.note and "TinyImageNet" in train.note


def test_tinyimagenet_resized_and_folder_given_directly(tmp_path):
    _write_tin(tmp_path, np.random.default_rng(0))
    train, _ = load_dataset("tinyimagenet", data_dir=tmp_path / "tiny-imagenet-200", image_size=32)
    assert train.x.shape == (6, 3, 32, 32) and "64x64 -> 32x32" in train.note


@pytest.mark.parametrize("damage, expected", [
    (lambda t: (t / "wnids.txt").unlink(), "expected tiny-imagenet-200/wnids.txt under"),
    (lambda t: (t / "wnids.txt").write_text("\n\n"), "expected one WordNet id per line"),
    (lambda t: (t / "val" / "val_annotations.txt").unlink(), "expected tiny-imagenet-200/val/val_annotations.txt"),
    (lambda t: (t / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn00000000\t0\t0\t1\t1\n"),
     "line 1: expected"),
    (lambda t: (t / "val" / "images" / "val_2.JPEG").unlink(), "expected tiny-imagenet-200/val/images/val_2.JPEG"),
    (lambda t: (t / "train" / "n01443537" / "images" / "n01443537_1.JPEG").write_bytes(b"\xff\xd8junk"),
     "not a readable image"),
    (lambda t: Image.new("RGB", (32, 32)).save(t / "val" / "images" / "val_0.JPEG", format="JPEG"),
     "expected a 64x64 image, got 32x32"),
    (lambda t: [p.unlink() for p in (t / "train" / "n02085620" / "images").glob("*")],
     "expected tiny-imagenet-200/train/n02085620/images/*.JPEG"),
])
def test_tinyimagenet_damage_gives_clear_error(tmp_path, damage, expected):
    _write_tin(tmp_path, np.random.default_rng(0))
    damage(tmp_path / "tiny-imagenet-200")
    with pytest.raises(DataError) as e:
        load_dataset("tinyimagenet", data_dir=tmp_path)
    assert expected in _messages(e) and "tiny-imagenet-200.zip" in _messages(e)


# --------------------------------------------------------------------------- digits (offline, real)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_digits_shapes_classes_and_split(digits):
    from sklearn.datasets import load_digits

    train, test = digits
    assert train.x.shape == (1437, 3, 32, 32) and test.x.shape == (360, 3, 32, 32)  # 1,797 = 1,437 + 360
    assert train.num_classes == test.num_classes == 10 and train.name == "digits"
    counts = np.bincount(load_digits().target, minlength=10)
    test_counts = np.bincount(test.y.numpy(), minlength=10)
    np.testing.assert_array_equal(np.bincount(train.y.numpy(), minlength=10) + test_counts, counts)
    assert np.all(np.abs(test_counts - 0.2 * counts) <= 1)  # stratified 80/20
    for ds in digits:
        assert "scikit-learn digits" in ds.note and "not CIFAR" in ds.note
        assert torch.equal(ds.x[:, 0], ds.x[:, 1]) and torch.equal(ds.x[:, 0], ds.x[:, 2])  # grey replicated


def test_digits_normalized_by_its_train_split(digits):
    train, test = digits
    assert float(train.x.double().mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(train.x.double().std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    assert abs(float(test.x.mean())) < 0.1  # same distribution, other images


def test_digits_match_pil_resize_of_the_documented_split(digits):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    train, test = digits
    raw = load_digits()
    # The split the module documents: stratified 80/20, random_state=0, each side in original order.
    tr_idx, te_idx = (np.sort(i) for i in train_test_split(np.arange(len(raw.target)), test_size=0.2,
                                                           stratify=raw.target, random_state=0))
    # Independent pixels: PIL's BILINEAR resize of each 8x8 image scaled to [0, 1], in float64,
    # normalized by the mean/std of the train side.
    pil = np.stack([np.asarray(Image.fromarray((im / 16.0).astype(np.float32), mode="F")
                               .resize((32, 32), Image.BILINEAR)) for im in raw.images]).astype(np.float64)
    mean, std = pil[tr_idx].mean(), pil[tr_idx].std()
    np.testing.assert_allclose(train.x[:, 0].numpy(), (pil[tr_idx] - mean) / std, atol=1e-5)
    np.testing.assert_allclose(test.x[:, 0].numpy(), (pil[te_idx] - mean) / std, atol=1e-5)
    assert train.y.tolist() == raw.target[tr_idx].tolist() and test.y.tolist() == raw.target[te_idx].tolist()
    again, _ = load_dataset("digits")
    assert torch.equal(again.x, train.x) and torch.equal(again.y, train.y)
    small, _ = load_dataset("digits", image_size=8)
    assert small.x.shape == (1437, 3, 8, 8) and "8x8," in small.note


def test_bad_names_and_sizes():
    with pytest.raises(ValueError, match=r"unknown dataset 'mnist'; choose one of \['cifar10', 'cifar100', 'digits'"):
        load_dataset("mnist")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(DataError, match="image_size must be a positive integer"):
            load_dataset("digits", image_size=bad)
    assert sorted(DATASETS) == ["cifar10", "cifar100", "digits", "mnist5k", "tinyimagenet"]


def test_dataset_record_validates():
    x, y = torch.zeros(2, 3, 4, 4), torch.tensor([0, 1])
    assert len(Dataset("t", x, y, 2, "n")) == 2
    with pytest.raises(ValueError, match="float32"):
        Dataset("t", x.double(), y, 2, "n")
    with pytest.raises(ValueError, match="int64"):
        Dataset("t", x, y.int(), 2, "n")
    with pytest.raises(ValueError, match="0..1"):
        Dataset("t", x, torch.tensor([0, 2]), 2, "n")

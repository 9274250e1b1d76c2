"""A short real run on the offline digits dataset: FedAvg and SphereFed + FFC beat chance clearly."""

import pytest
import torch

from workloads.fl.data import load_dataset
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl import loop
from workloads.fl.loop import RunPlan
from workloads.fl.methods import parse_method
from workloads.fl.partition import dirichlet_partition
from workloads.models import build_model
from workloads.fl.methods.spherefed import SphereFed


@pytest.fixture(scope="module")
def digits():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny convolutions: one thread is fastest and immune to CPU sharing
    train, test = load_dataset("digits", image_size=16)
    yield train, test, dirichlet_partition(train.y.numpy(), 4, 0.5, seed=0)
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize("name, lr", [("fedavg", 0.05), ("spherefed+ffc", 0.25)])
def test_short_digits_run_beats_chance(digits, name, lr):
    train, test, parts = digits
    method = parse_method(name)
    result = loop.train(RunPlan(
        method, model_fn=lambda: build_model("convnet", num_classes=10, image_size=16, head=method.head),
        train=train, test=test, parts=parts, cfg=FLConfig(dataset="digits", num_clients=4, rounds=3),
        hp=Hparams(lr=lr, local_epochs=1, batch_size=32)))
    # chance is 10 % (10 balanced classes); a short run must clearly beat it
    assert result.accuracy > 0.5, result
    assert result.history[-1]["mean_loss"] < result.history[0]["mean_loss"]
    if method.calibration:  # FFC replaced the fixed classifier by the least-squares one
        assert result.accuracy_before_calibration > 0.5
        assert not torch.equal(result.weights["classifier.weight"],
                               build_model("convnet", num_classes=10, image_size=16, head=SphereFed.head).classifier.weight)

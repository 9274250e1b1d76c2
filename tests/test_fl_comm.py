"""The communication ledger equals the closed forms, and hand-computed sizes (workloads/fl/comm.py)."""

import pytest

from fl_standins import TinyNet, blobs
from workloads.fl.comm import calibration_stats_bytes, closed_form_bytes, ledger_totals
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import prepare_model
from workloads.fl.loop import run_method
from workloads.fl.methods import parse_method
from workloads.fl.methods.base import frozen_keys
from workloads.fl.methods.doublehead import sharing_layers
from workloads.fl.partition import dirichlet_partition

TRAIN, TEST = blobs(160), blobs(40, seed=1)
PARTS = dirichlet_partition(TRAIN.y.numpy(), 5, 1.0, min_size=5, seed=0)
CFG = FLConfig(dataset="blobs", num_clients=5, rounds=4, participation=0.6)  # 3 clients a round
HP = Hparams(lr=0.05, local_epochs=1, batch_size=32, share_every_rounds=2, ccvr_virtual_per_class=10,
             ccvr_epochs=1, ffc_ridge=1e-3)


def sizes(method):
    """Sizes for the closed form, from the prepared model's parameter shapes."""
    model = prepare_model(TinyNet(spherefed=method.spherefed), method, seed=0)
    frozen = frozen_keys(model)
    nbytes = lambda t: t.numel() * t.element_size()
    state = model.state_dict()
    layer_bytes = [sum(nbytes(state[k]) for k in layer if k not in frozen) for layer in sharing_layers(model)]
    head = sum(nbytes(state[k]) for k in state if k.startswith("classifier.") and k not in frozen)
    trainable = sum(nbytes(p) for n, p in model.named_parameters()
                    if p.requires_grad and not n.startswith("local_classifier."))
    return dict(layer_bytes=[b for b in layer_bytes if b], head_bytes=head, trainable_bytes=trainable,
                feature_dim=12, num_classes=4)


@pytest.mark.parametrize("name", ["fedavg", "spherefed+ffc", "fedprox+ccvr", "fednova", "fedcos",
                                  "fedopt", "fedavgm", "fedbabu", "doublehead", "fedcos+spherefed+ffc"])
def test_ledger_equals_closed_form(name):
    method = parse_method(name)
    result = run_method(method, model_fn=lambda: TinyNet(spherefed=method.spherefed), train=TRAIN,
                        test=TEST, parts=PARTS, cfg=CFG, hp=HP)
    totals = ledger_totals(result.transfers)
    expected = closed_form_bytes(method, HP, rounds=4, clients_per_round=3, num_clients=5, **sizes(method))
    assert {k: totals[k] for k in expected} == expected
    assert sum(c["up_bytes"] + c["down_bytes"] for c in totals["by_client"].values()) == totals["total_bytes"]


def test_tinynet_fedavg_bytes_by_hand():
    # TinyNet (l = 12, C = 4), float32: body.1 Linear 12x12 + 12 = 156, BatchNorm1d(12) weight,
    # bias, running_mean, running_var 4 x 12 = 48 floats + num_batches_tracked (int64, 8 B),
    # body.4 Linear 156, classifier 4 x 12 = 48.  Model: (156 + 48 + 156 + 48) * 4 + 8 = 1640 B.
    # 4 rounds x 3 clients: down 12 x 1640 = 19680; up 12 x (1640 + 8 B sample count) = 19776.
    method = parse_method("fedavg")
    expected = closed_form_bytes(method, HP, rounds=4, clients_per_round=3, num_clients=5, **sizes(method))
    assert expected == {"down_bytes": 19680, "up_bytes": 19776, "total_bytes": 39456}


def test_calibration_bytes_match_sphere_fed_table1_sizes():
    # SphereFed Tab. 1 (MobileNetV2, CIFAR-100, l = 1280, C = 100, 32-bit): FFC sends
    # l (l + C) = 1,766,400 values = 7.07 MB ("7"); CCVR's Sigma (l x l x C) + mu (l x C) is
    # 163,968,000 values = 655.9 MB, the difference 758 - 102 of the table.
    hp32 = Hparams(ffc_stats_dtype="float32")
    assert calibration_stats_bytes("ffc", feature_dim=1280, num_classes=100, hp=hp32) == 7_065_600
    # we send CCVR statistics in float64, plus the C counts
    assert calibration_stats_bytes("ccvr", feature_dim=1280, num_classes=100, hp=hp32) == (100 + 163_968_000) * 8

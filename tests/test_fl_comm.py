"""The communication ledger equals the closed forms, and hand-computed sizes (workloads/fl/comm.py)."""

import dataclasses
import inspect

import pytest

from fl_standins import TinyNet, blobs
from workloads.fl.comm import ModelSizes, closed_form_bytes, closed_form_sizes, ledger_totals
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import prepare_model
from workloads.fl import loop
from workloads.fl.loop import RunPlan
from workloads.fl.methods import CALIBRATIONS, parse_method
from workloads.fl.partition import dirichlet_partition
from workloads.fl.methods.spherefed import SphereFed

TRAIN, TEST = blobs(160), blobs(40, seed=1)
PARTS = dirichlet_partition(TRAIN.y.numpy(), 5, 1.0, min_size=5, seed=0)
CFG = FLConfig(dataset="blobs", num_clients=5, rounds=4, participation=0.6)  # 3 clients a round
HP = Hparams(declared=(*parse_method("doublehead").knobs, *parse_method("ccvr").knobs, *parse_method("ffc").knobs),
             lr=0.05, local_epochs=1, batch_size=32, share_every_rounds=2, ccvr_virtual_per_class=10,
             ccvr_epochs=1, ffc_ridge=1e-3)


def sizes(method):
    """Sizes for the closed form, from the prepared model: ``closed_form_sizes``, the one builder
    ``workloads.fl.presets`` and ``bench.run`` use."""
    return closed_form_sizes(prepare_model(TinyNet(head=method.head), method, seed=0), method)


def test_closed_form_sizes_by_hand():
    # double head on TinyNet (float32): layers split at each Linear, BatchNorm joins the one before:
    # body.1 Linear 12x12 + 12 = 156 floats + BatchNorm1d(12) 4 x 12 floats + num_batches_tracked
    # (int64, 8 B) = 624 + 192 + 8 = 824 B; body.4 Linear 156 floats = 624 B; classifier 4 x 12 =
    # 192 B; the local head (another 192 B) is never sent, so it is in no layer and not trainable
    # shared state: trainable = 624 + 2 x 48 (BN weight, bias) + 624 + 192 = 1536 B.
    doublehead = parse_method("doublehead")
    model = prepare_model(TinyNet(), doublehead, seed=0)
    assert closed_form_sizes(model, doublehead) == ModelSizes(layer_bytes=(824, 624, 192), head_bytes=192,
                                                              trainable_bytes=1536, feature_dim=12, num_classes=4)
    # SphereFed: the frozen classifier is rebuilt from the seed, never sent
    spherefed = parse_method("spherefed")
    sphere = closed_form_sizes(prepare_model(TinyNet(head=SphereFed.head), spherefed, seed=0), spherefed)
    assert (sphere.layer_bytes, sphere.head_bytes, sphere.trainable_bytes) == ((824, 624), 0, 1344)


@pytest.mark.parametrize("name", ["fedavg", "spherefed+ffc", "fedprox+ccvr", "fednova", "fedcos",
                                  "fedopt", "fedavgm", "fedbabu", "doublehead", "fedcos+spherefed+ffc",
                                  "scaffold", "moon", "feddyn", "scaffold+spherefed+ffc"])
def test_ledger_equals_closed_form(name):
    method = parse_method(name)
    result = loop.train(RunPlan(method, model_fn=lambda: TinyNet(head=method.head), train=TRAIN,
                                test=TEST, parts=PARTS, cfg=CFG, hp=HP))
    totals = ledger_totals(result.transfers)
    expected = closed_form_bytes(method, HP, sizes(method), rounds=4, clients_per_round=3, num_clients=5)
    assert {k: totals[k] for k in expected} == expected
    assert sum(c["up_bytes"] + c["down_bytes"] for c in totals["by_client"].values()) == totals["total_bytes"]


def test_tinynet_fedavg_bytes_by_hand():
    # TinyNet (l = 12, C = 4), float32: body.1 Linear 12x12 + 12 = 156, BatchNorm1d(12) weight,
    # bias, running_mean, running_var 4 x 12 = 48 floats + num_batches_tracked (int64, 8 B),
    # body.4 Linear 156, classifier 4 x 12 = 48.  Model: (156 + 48 + 156 + 48) * 4 + 8 = 1640 B.
    # 4 rounds x 3 clients: down 12 x 1640 = 19680; up 12 x (1640 + 8 B sample count) = 19776.
    method = parse_method("fedavg")
    expected = closed_form_bytes(method, HP, sizes(method), rounds=4, clients_per_round=3, num_clients=5)
    assert expected == {"down_bytes": 19680, "up_bytes": 19776, "total_bytes": 39456}


def test_calibration_bytes_match_sphere_fed_table1_sizes():
    # SphereFed Tab. 1 (MobileNetV2, CIFAR-100, l = 1280, C = 100, 32-bit): FFC sends
    # l (l + C) = 1,766,400 values = 7.07 MB ("7"); CCVR's Sigma (l x l x C) + mu (l x C) is
    # 163,968,000 values = 655.9 MB, the difference 758 - 102 of the table.
    hp32 = Hparams(declared=parse_method("ffc").knobs, ffc_stats_dtype="float32")
    assert CALIBRATIONS["ffc"].upload_bytes(feature_dim=1280, num_classes=100, hp=hp32) == 7_065_600
    # we send CCVR statistics in float64, plus the C counts
    assert CALIBRATIONS["ccvr"].upload_bytes(feature_dim=1280, num_classes=100, hp=hp32) == (100 + 163_968_000) * 8


def test_bench_closed_form_equals_the_ledger_for_double_head():
    """Issue 14: ``bench.run --methods ... doublehead`` warned that the ledger disagrees with the
    closed form. The closed form was right; bench fed it the whole model as one layer, local head
    included, so gradual sharing (layers 1..p(t) in round t) and the never-sent local head were
    ignored. ConvNet, two rounds, one more layer shared each round."""
    import numpy as np
    import torch

    from bench.lib.run.figures import model_closed_form_bytes
    from workloads import model_spec
    from workloads.fl.dataset import Dataset

    g = torch.Generator().manual_seed(0)
    train, test = (Dataset("noise", torch.randn(n, 3, 16, 16, generator=g), torch.arange(n) % 10, 10, "noise")
                   for n in (16, 8))
    cfg = FLConfig(dataset="noise", num_clients=2, rounds=2, participation=1.0, model="convnet")
    hp = Hparams(declared=parse_method("doublehead").knobs, lr=0.01, local_epochs=1, batch_size=8, share_every_rounds=1)
    method = parse_method("doublehead")
    result = loop.train(RunPlan(method, model_fn=lambda: model_spec.build(model_spec.as_spec("convnet", 16), num_classes=10),
                                train=train, test=test, parts=[np.arange(0, 8), np.arange(8, 16)], cfg=cfg, hp=hp))
    closed = model_closed_form_bytes("convnet", method, hp, num_classes=10, image_size=16, rounds=2, num_clients=2,
                                     seed=cfg.seed)
    ledger = ledger_totals(result.transfers)
    assert {k: ledger[k] for k in closed} == closed
    # 2 clients download layer 1 in round 1 and layers 1, 2 in round 2; not the whole model twice
    layers = closed_form_sizes(prepare_model(model_spec.build(model_spec.as_spec("convnet", 16), num_classes=10),
                                             method, seed=0), method).layer_bytes
    assert len(layers) == 8 and closed["down_bytes"] == 2 * (2 * layers[0] + layers[1]) < 2 * 2 * sum(layers) / 10


def test_the_closed_form_takes_the_sizes_as_one_record():
    # issue 52: closed_form_bytes took the sizes as a ``**sizes`` catch-all; now one frozen
    # ModelSizes, so a misspelt size is Python's own TypeError and the old spread is refused
    method = parse_method("fedavg")
    kinds = {p.kind for p in inspect.signature(closed_form_bytes).parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_clases'"):
        ModelSizes(layer_bytes=(824, 624, 192), head_bytes=192, trainable_bytes=1536, feature_dim=12, num_clases=4)
    with pytest.raises(TypeError, match="layer_bytes"):
        closed_form_bytes(method, HP, rounds=4, clients_per_round=3, num_clients=5, **dataclasses.asdict(sizes(method)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        sizes(method).head_bytes = 0


def test_payload_bytes_by_hand():
    from accel_sim.formats import NumberFormat

    # 100 values: bfp_m4_g16 sends 100 x (1 + 4) bits + ceil(100 / 16) = 7 exponents x 8 bits = 556
    # bits -> 70 bytes; e4m3 one byte each; bf16 two; the sign-and-exponent share of bfp_m2_g32:
    # 100 x 3 + 4 x 8 = 332 bits -> 42 bytes; stochastic rounding sends the same
    assert [NumberFormat.parse(f).payload_bytes(100) for f in ("bfp_m4_g16", "e4m3", "bf16", "bfp_m2_g32",
                                                               "bfp_m4_g16_sr")] == [70, 100, 200, 42, 70]


@pytest.mark.parametrize("name", ["fedavg", "fedcos+spherefed+ffc", "doublehead", "fednova+ccvr", "scaffold"])
def test_ledger_equals_closed_form_in_a_communication_format(name):
    # the model, its updates and FedCos's direction sent in bfp_m4_g16_sr: each float32 tensor
    # charged its packed payload, by the ledger and by the closed form alike
    from workloads.fl.execution import Execution
    from workloads.numerics import NumberFormat

    method, fmt = parse_method(name), NumberFormat.parse("bfp_m4_g16_sr")
    result = loop.train(RunPlan(method, model_fn=lambda: TinyNet(head=method.head), train=TRAIN,
                                test=TEST, parts=PARTS, cfg=CFG, hp=HP, execution=Execution(comm_format=fmt.name)))
    totals = ledger_totals(result.transfers)
    sizes_in = closed_form_sizes(prepare_model(TinyNet(head=method.head), method, seed=0), method, fmt)
    expected = closed_form_bytes(method, HP, sizes_in, rounds=4, clients_per_round=3, num_clients=5)
    assert {k: totals[k] for k in expected} == expected
    fp32 = closed_form_bytes(method, HP, sizes(method), rounds=4, clients_per_round=3, num_clients=5)
    assert expected["total_bytes"] < fp32["total_bytes"]


def test_what_travels_in_a_format_is_in_the_format():
    # one client, one round of FedAvg: the server's new model is the client's upload, which was
    # rounded to bfp_m2_g16: rounding it again changes nothing; in FP32 it would
    import torch

    from workloads.fl.execution import Execution
    from workloads.numerics import NumberFormat
    from workloads.numerics.quantize import round_tensors

    method, fmt = parse_method("fedavg"), NumberFormat.parse("bfp_m2_g16")
    cfg = FLConfig(dataset="blobs", num_clients=1, rounds=1, participation=1.0)
    parts = [list(range(len(TRAIN.y)))]
    weights = {}
    for f in ("fp32", fmt.name):
        result = loop.train(RunPlan(method, model_fn=lambda: TinyNet(), train=TRAIN, test=TEST, parts=parts, cfg=cfg, hp=HP,
                                    execution=Execution(comm_format=f)))
        weights[f] = result.weights
    rounded = round_tensors(weights[fmt.name], fmt)
    assert all(torch.equal(rounded[k], weights[fmt.name][k]) for k in rounded)
    again = round_tensors(weights["fp32"], fmt)
    assert not all(torch.equal(again[k], weights["fp32"][k]) for k in again if again[k].dtype == torch.float32)

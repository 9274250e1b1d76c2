"""FL methods: equivalences, frozen heads, penalties, determinism, errors (workloads/fl)."""

import pytest
import torch

from fl_standins import TinyNet, blobs
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl import loop
from workloads.fl.loop import NonFiniteLossError, RunPlan, cosine_lr, sample_clients
from workloads.fl.methods import NAME_PARTS, MethodConfig, parse_method
from workloads.fl.methods.doublehead import double_head_predict, sharing_phase
from workloads.fl.methods.fedcos import cosine_penalty
from workloads.fl.methods.spherefed import orthonormal_classifier
from workloads.fl.partition import dirichlet_partition

TRAIN, TEST = blobs(240), blobs(80, seed=1)
PARTS = dirichlet_partition(TRAIN.y.numpy(), 4, 0.5, min_size=5, seed=0)
CFG = FLConfig(dataset="blobs", num_clients=4, rounds=3, participation=0.75)
HP = Hparams(lr=0.05, local_epochs=2, batch_size=16)


def run(name, hp=HP, cfg=CFG, train=TRAIN):
    m = parse_method(name)
    return loop.train(RunPlan(m, model_fn=lambda: TinyNet(head=m.head), train=train, test=TEST,
                              parts=PARTS, cfg=cfg, hp=hp))


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_fedprox_mu0_is_fedavg():
    assert_same_weights(run("fedprox", HP.with_knobs(parse_method("fedprox").knobs).replace(prox_mu=0.0)).weights,
                        run("fedavg").weights)


def test_fedcos_mu0_is_fedavg():
    # 3 rounds: rounds 2 and 3 compute the penalty with a non-zero direction d_t
    assert_same_weights(run("fedcos", HP.with_knobs(parse_method("fedcos").knobs).replace(fedcos_mu=0.0)).weights,
                        run("fedavg").weights)


def test_penalties_change_the_model():
    fedavg = run("fedavg").weights
    for name, hp in [("fedprox", {"prox_mu": 1.0}), ("fedcos", {"fedcos_mu": 1.0})]:
        w = run(name, HP.with_knobs(parse_method(name).knobs).replace(**hp)).weights
        assert not torch.equal(w["body.1.weight"], fedavg["body.1.weight"]), name


def test_fedopt_without_server_momentum_matches_fedavg():
    w = run("fedopt", HP.with_knobs(parse_method("fedopt").knobs).replace(server_momentum=0.0)).weights
    ref = run("fedavg").weights
    for k in ref:
        torch.testing.assert_close(w[k], ref[k], rtol=0, atol=1e-6)


def test_same_seed_same_results_and_seed_matters():
    a, b = run("fedavg"), run("fedavg")
    assert_same_weights(a.weights, b.weights)
    assert a.history == b.history and a.transfers == b.transfers
    c = run("fedavg", cfg=FLConfig(**{**CFG.__dict__, "seed": 1}))
    assert not torch.equal(a.weights["body.1.weight"], c.weights["body.1.weight"])


def test_spherefed_classifier_bitwise_unchanged_and_orthonormal():
    result = run("fedprox+spherefed")
    w = result.weights["classifier.weight"]
    assert torch.equal(w, orthonormal_classifier(4, 12, seed=CFG.seed))
    torch.testing.assert_close(w @ w.T, torch.eye(4), atol=1e-6, rtol=0)
    assert not any(t.group == "classifier" for t in result.transfers)


def test_fedbabu_head_bitwise_unchanged():
    torch.manual_seed(CFG.seed)
    initial = TinyNet().classifier.weight.detach().clone()
    result = run("fedbabu")
    assert torch.equal(result.weights["classifier.weight"], initial)
    assert not torch.equal(result.weights["body.1.weight"], TinyNet().body[1].weight)


def test_frozen_head_has_no_gradient_and_no_optimizer_slot():
    for name in ("spherefed", "fedbabu"):
        method = parse_method(name)
        model = prepare_model(TinyNet(head=method.head), method, seed=0)
        trainer = client_trainer(model, model.state_dict(), HP, method)
        trainer.step(TRAIN.x[:8], TRAIN.y[:8])
        assert model.classifier.weight.grad is None
        slots = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
        assert id(model.classifier.weight) not in slots


def test_cosine_penalty_hand_cases():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 1.0]]))
    anchor = {"weight": torch.tensor([[0.0, 1.0]])}  # a = w - w_t = (1, 0)
    along, against, ortho = ([[2.0, 0.0]], [[-3.0, 0.0]], [[0.0, 5.0]])
    assert cosine_penalty(model, anchor, {"weight": torch.tensor(along)}, 0.1).item() == 0.0
    assert abs(cosine_penalty(model, anchor, {"weight": torch.tensor(against)}, 0.1).item() - 0.2) < 1e-7
    assert abs(cosine_penalty(model, anchor, {"weight": torch.tensor(ortho)}, 0.1).item() - 0.1) < 1e-7
    # zero displacement (first local step): penalty 0 and a finite (zero) gradient
    at_anchor = {"weight": model.weight.detach().clone()}
    p = cosine_penalty(model, at_anchor, {"weight": torch.tensor(along)}, 0.1)
    p.backward()
    assert p.item() == 0.0 and torch.equal(model.weight.grad, torch.zeros(1, 2))


def test_fednova_sends_its_normalizer():
    meta = [t.nbytes for t in run("fednova").transfers if t.group == "metadata"]
    assert set(meta) == {16}  # int64 sample count + float64 a_i


def test_doublehead_local_head_stays_local_and_layers_are_released():
    hp = HP.with_knobs(parse_method("doublehead").knobs).replace(share_every_rounds=1)
    result = run("doublehead", hp)
    doublehead = parse_method("doublehead")
    model = prepare_model(TinyNet(), doublehead, seed=0)
    layers = doublehead.algo.sharing_layers(model)
    # TinyNet: body.1 (Linear) + body.2 (its BatchNorm), body.4 (Linear), classifier
    assert [sorted({k.rsplit(".", 1)[0] for k in layer}) for layer in layers] == [
        ["body.1", "body.2"], ["body.4"], ["classifier"]]
    assert [sharing_phase(t, 1, 4) for t in (1, 2, 3, 4, 9)] == [1, 2, 3, 4, 4]
    assert [sharing_phase(t, 3, 4) for t in (1, 3, 4, 7, 10, 99)] == [1, 1, 2, 3, 4, 4]
    assert sharing_phase(1, 0, 4) == 4
    # F = 1: the global head (layer 3) is shared from round 3 only; the local head never
    heads = {t.round for t in result.transfers if t.group == "classifier"}
    assert heads == {3}
    assert sorted({t.round for t in result.transfers}) == [1, 2, 3]
    pred = double_head_predict(model, TEST.x)
    assert pred.shape == (80,) and int(pred.max()) < 4


def test_cosine_lr_and_sampling():
    assert cosine_lr(0.1, 0.0, 1, 100) == 0.1
    assert abs(cosine_lr(0.1, 0.0, 51, 100) - 0.05) < 1e-12  # cos(pi/2) = 0: half way
    assert sample_clients(10, 1.0, seed=0, round=3) == list(range(10))
    picked = sample_clients(10, 0.3, seed=0, round=3)
    assert len(picked) == 3 and picked == sorted(set(picked))
    assert picked == sample_clients(10, 0.3, seed=0, round=3)


def test_nan_loss_names_round_and_client():
    x = TRAIN.x.clone()
    x[PARTS[2][0]] = float("nan")
    bad = type(TRAIN)(TRAIN.name, x, TRAIN.y, TRAIN.num_classes, TRAIN.note)
    with pytest.raises(NonFiniteLossError, match=r"round 1, client 2"):
        run("fedavg", cfg=FLConfig(**{**CFG.__dict__, "participation": 1.0}), train=bad)


def test_method_names():
    assert parse_method("fedopt+spherefed+ffc") == MethodConfig("fedopt", "spherefed", "ffc")
    assert parse_method("spherefed+ffc").name == "fedavg+spherefed+ffc"
    assert parse_method("ccvr") == MethodConfig("fedavg", None, "ccvr")
    assert {"fedavg", "fedprox", "fednova", "fedopt", "fedavgm", "fedcos", "fedbabu", "doublehead",
            "scaffold", "moon", "feddyn", "heterofl", "fjord", "fedbuff", "spherefed", "etf", "ffc", "ccvr"} == set(NAME_PARTS)
    for bad in ("fedsgd", "fedavg+fedprox", "ffc+ccvr", "fedbabu+spherefed", ""):
        with pytest.raises(ValueError):
            parse_method(bad)


def test_bad_hparams_rejected():
    with pytest.raises(ValueError, match="momentum"):
        Hparams(momentum=1.5)
    with pytest.raises(ValueError, match="lr"):
        Hparams(lr=0)


def test_fedavg_equals_a_bare_pytorch_fedavg():
    """Cross-check against the independent minimal loop of benchmarks/bench_fl_loop.py."""
    from benchmarks.bench_fl_loop import bare_fedavg

    cfg = FLConfig(**{**CFG.__dict__, "participation": 1.0})
    ours = run("fedavg", cfg=cfg)
    samples, accuracy, state = bare_fedavg(TinyNet, TRAIN, TEST, PARTS, cfg.rounds, HP, cfg.seed)
    assert samples == ours.samples_trained and accuracy == ours.accuracy
    for key, value in state.items():
        if value.dtype.is_floating_point:
            assert torch.equal(ours.weights[key], value), key

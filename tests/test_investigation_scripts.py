"""The scripts behind the measured facts of docs/fl.md ("SphereFed's slow start",
scripts/slow_start.py), docs/results.md ("Reproducibility across machines",
scripts/kernel_drift.py), docs/numerics.md (scripts/fp8_underflow.py) and docs/methods.md
("CCVR's re-training learning rate", scripts/ccvr_effect.py): their arithmetic on hand-made cases
and their hooks on the real loop."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from fl_standins import TinyNet, blobs
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl import loop
from workloads.fl.loop import RunPlan, batch_starts
from workloads.fl.methods import parse_method
from workloads.fl.partition import dirichlet_partition
from workloads.fl.methods.spherefed import SphereFed

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


slow_start = _script("slow_start")
kernel_drift = _script("kernel_drift")
ccvr_effect = _script("ccvr_effect")


def test_relative_and_largest_differences_by_hand():
    a = {"w": torch.tensor([3.0, 4.0]), "b": torch.tensor([0.0])}
    b = {"w": torch.tensor([3.0, 0.0]), "b": torch.tensor([0.0])}
    # ||a - b|| = ||(0, 4, 0)|| = 4, ||a|| = ||(3, 4, 0)|| = 5
    assert kernel_drift.relative_difference(a, b) == pytest.approx(0.8)
    assert kernel_drift.max_abs_difference(a["w"], b["w"]) == 4.0
    assert kernel_drift.relative_difference(a, a) == 0.0


@pytest.mark.parametrize("num_classes, feature_dim, seed", [(10, 64, 0), (4, 12, 3), (10, 1280, 0)])
def test_positive_reach_is_the_best_score_of_a_nonnegative_unit_feature(num_classes, feature_dim, seed):
    """||w_y^+|| bounds w_y . z~ over unit z~ >= 0 (Cauchy-Schwarz on the positive part) and
    z~ = w_y^+ / ||w_y^+|| attains it."""
    reach = slow_start.positive_reach(num_classes, feature_dim, seed)
    W = slow_start.orthonormal_classifier(num_classes, feature_dim, seed=seed)
    z = torch.rand(2000, feature_dim, generator=torch.Generator().manual_seed(1))
    z = z / z.norm(dim=1, keepdim=True)
    assert bool(((z @ W.T).max(dim=0).values <= reach + 1e-6).all())
    best = W.clamp_min(0) / reach[:, None]
    assert torch.allclose((W * best).sum(dim=1), reach, atol=1e-6)
    assert bool((reach < 1).all())  # an orthonormal row with a negative entry cannot reach its one-hot target


def test_the_step_recorder_sees_every_local_step_and_no_evaluation():
    """The recorder hooks the model the loop deep-copies into its client: one record per SGD step
    (a client's batches x local epochs, summed over clients), none for evaluation."""
    train, test = blobs(120), blobs(40, seed=1)
    parts = dirichlet_partition(train.y.numpy(), 3, 0.5, min_size=5, seed=0)
    cfg = FLConfig(dataset="blobs", num_clients=3, rounds=2, participation=1.0)
    hp = Hparams(lr=0.05, local_epochs=2, batch_size=16)
    recorder, per_round = slow_start.StepRecorder(), []
    hook = slow_start.register_optimizer_step_pre_hook(recorder.before_optimizer_step)
    try:
        loop.train(RunPlan(parse_method("spherefed"), model_fn=lambda: recorder.attach(TinyNet(head=SphereFed.head)), train=train,
                           test=test, parts=parts, cfg=cfg, hp=hp,
                           after_round=lambda t: per_round.append((len(recorder.steps), recorder.close_round()))))
    finally:
        hook.remove()
    steps_per_round = sum(hp.local_epochs * len(batch_starts(len(p), hp.batch_size)) for p in parts)
    assert [count for count, _ in per_round] == [steps_per_round] * cfg.rounds
    for _, means in per_round:
        assert means["z"] > 0 and means["dz"] > 0 and means["dtheta"] > 0 and math.isfinite(means["dtheta"])


@pytest.mark.slow
def test_gradient_scales_on_convnet():
    """On the quick preset's ConvNet: FeatureNorm's Jacobian leaves no radial gradient, a loss x 10
    scales every gradient by exactly 10, and SphereFed's body gradient is > 10 x smaller than
    FedAvg's (33 x in docs/fl.md)."""
    args = type("Args", (), {"preset": "quick", "model": "convnet", "seed": None})()
    run, inputs = slow_start.setup(args)
    table = slow_start.gradient_scales(run, inputs, batches=1)
    sphere = table["spherefed: frozen W, FeatureNorm, MSE (Eq. 4-5)"]
    assert sphere["cos"] < 1e-6 and table["frozen W, no FeatureNorm, MSE"]["cos"] > 1e-3
    assert table["spherefed, loss x 10"]["dtheta"] == pytest.approx(10 * sphere["dtheta"], rel=1e-5)
    assert table["fedavg: trainable head, CE"]["dtheta"] > 10 * sphere["dtheta"]


def test_fp8_underflow_counts_the_output_gradients_a_format_flushes():
    # scripts/fp8_underflow.py (docs/numerics.md): a 1x1 convolution whose output gradient dy holds
    # 1.0, 1e-4, -3e-3 and 0 (the loss is sum(y * g) with g those values): E4M3's smallest subnormal is
    # 2^-9 ~ 1.95e-3, so 1e-4 rounds to 0 (below half of it), -3e-3 to -2^-9 x 2 ~ -3.9e-3 (kept);
    # the exact 0 is not counted: 1 of 3 non-zero values flushed
    fp8 = _script("fp8_underflow")
    conv = torch.nn.Conv2d(1, 1, 1, bias=False)
    x = torch.ones(1, 1, 2, 2, requires_grad=True)
    g = torch.tensor([1.0, 1e-4, -3e-3, 0.0]).view(1, 1, 2, 2)
    counting = fp8.Counting("e4m3")
    with counting:
        (conv(x) * g).sum().backward()
    assert (counting.nonzero, counting.flushed) == (3, 1)


def test_ccvr_effect_by_hand():
    # features e_0, e_1 with labels 0, 1; W0 = [[1, 0], [0, 0.5]] gives logits [1, 0] and [0, 0.5]:
    # both right, top-1 margins 1 and 0.5. W1 adds 1 at W[0, 1]: sample 1's logits become [1, 0.5],
    # so its prediction flips to 0 (one change, accuracy 100 -> 50 %), the largest logit change is 1,
    # and ||W1 - W0|| / ||W0|| = 1 / sqrt(1 + 0.25)
    z, y = torch.eye(2, dtype=torch.float64), torch.tensor([0, 1])
    w0 = torch.tensor([[1.0, 0.0], [0.0, 0.5]], dtype=torch.float64)
    w1 = w0 + torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    assert ccvr_effect.top2_margins(z @ w0.T).tolist() == [1.0, 0.5]
    assert ccvr_effect.effect(w0, w1, z, y) == pytest.approx(
        {"dw_rel": 1 / math.sqrt(1.25), "max_dlogit": 1.0, "min_margin": 0.5, "changed": 1,
         "acc_before_pct": 100.0, "acc_after_pct": 50.0})
    assert ccvr_effect.effect(w0, w0, z, y)["changed"] == 0


def test_ccvr_virtual_loss_weighs_out_absent_classes():
    # logits [ln 3, 0] for label 0: softmax 3/4, loss ln(4/3); the second sample has weight 0
    ce = lambda o, t: torch.nn.functional.cross_entropy(o, t, reduction="none")
    w = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    feats, labels = torch.tensor([[math.log(3), 0.0], [5.0, 5.0]]), torch.tensor([0, 1])
    assert ccvr_effect.virtual_loss(w, feats, labels, torch.tensor([1.0, 0.0]), ce) == pytest.approx(math.log(4 / 3))


def test_ccvr_pooling_error_sees_a_wrong_client_mean():
    # class 0: two clients of two samples each; pooled exactly, both errors vanish. Client A's mean
    # moved by 0.5 in coordinate 0 moves the pooled mean by 0.5 x N_A / N_c = 0.25.
    z = torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 1.0], [1.0, 5.0]], dtype=torch.float64)
    y = torch.zeros(4, dtype=torch.long)

    def client(rows):
        zc = z[rows]
        return {"ccvr_counts": torch.tensor([2.0], dtype=torch.float64), "ccvr_means": zc.mean(0)[None],
                "ccvr_covs": torch.cov(zc.T)[None]}

    a, b = client([0, 1]), client([2, 3])
    mu_err, cov_err = ccvr_effect.pooling_error([a, b], z, y)
    assert mu_err < 1e-12 and cov_err < 1e-12
    a["ccvr_means"] = a["ccvr_means"] + torch.tensor([[0.5, 0.0]], dtype=torch.float64)
    assert ccvr_effect.pooling_error([a, b], z, y)[0] == pytest.approx(0.25)

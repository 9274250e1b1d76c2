"""FFC and CCVR: distributed statistics equal centralized ones, for any split of the data."""

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fl_standins import TinyNet, blobs
from workloads.fl.hparams import Hparams
from workloads.fl.methods import CALIBRATIONS, parse_method
from workloads.fl.methods.ccvr import (ccvr_client_statistics, class_batches, pool_class_statistics,
                                       sample_virtual_features)
from workloads.fl.methods.ffc import ffc_client_statistics, ffc_solve
from workloads.fl.presets import load_preset
from workloads.fl.methods.spherefed import SphereFed

ROOT = Path(__file__).resolve().parent.parent
DATA = blobs(120, num_classes=4)
torch.manual_seed(0)
MODEL = TinyNet(head=SphereFed.head).eval()
# Exactness checks need features that do not depend on how the data is split into batches
# (float32 GEMMs round differently per batch size, and FFC's unregularized solve amplifies that by
# cond(Z)^2): the body is a flatten, z = x / ||x||, computed row by row.
RAW = TinyNet(head=SphereFed.head).eval()
RAW.body = torch.nn.Flatten()
RAW_FEATURES = RAW.features(DATA.x).to(torch.float64)  # normalized, [120, 12]
assert torch.linalg.matrix_rank(RAW_FEATURES) == 12  # so Z^T Z is invertible and lambda = 0 is defined

def split_from(draw_ids, n):
    """Client id per sample -> list of index arrays (empty clients allowed)."""
    ids = np.asarray(draw_ids)
    return [np.flatnonzero(ids == k) for k in range(ids.max() + 1)]


def batches(idx, size=7):
    return [(DATA.x[idx[s:s + size]], DATA.y[idx[s:s + size]]) for s in range(0, len(idx), size)]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=120, max_size=120), st.sampled_from([0.0, 1e-3]))
def test_ffc_equals_centralized_least_squares(client_of, ridge):
    hp = Hparams(declared=parse_method("ffc").knobs, ffc_ridge=ridge)
    stats = [ffc_client_statistics(RAW, batches(idx), num_classes=4, hp=hp)
             for idx in split_from(client_of, 120) if len(idx)]
    w = CALIBRATIONS["ffc"].server_calibrate(stats, classifier_weight=RAW.classifier.weight.double(), hp=hp)
    # centralized: argmin_W ||Z W^T - Y||^2 + ridge ||W||^2 on all features at once (Eq. 6, 11)
    z, y = RAW_FEATURES, torch.nn.functional.one_hot(DATA.y, 4).to(torch.float64)
    if ridge:
        z = torch.cat([z, ridge ** 0.5 * torch.eye(12, dtype=torch.float64)])
        y = torch.cat([y, torch.zeros(12, 4, dtype=torch.float64)])
    reference = torch.linalg.lstsq(z, y, driver="gelsd").solution.T
    torch.testing.assert_close(w, reference, atol=1e-10, rtol=0)


def test_ffc_singular_system_says_to_use_ridge():
    z = torch.zeros(3, 3, dtype=torch.float64)
    try:
        ffc_solve(z, torch.zeros(3, 2, dtype=torch.float64), ridge=0.0)
    except ValueError as err:
        assert "ffc_ridge" in str(err)
    else:
        raise AssertionError("singular V must raise")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=120, max_size=120))
def test_ccvr_pooled_statistics_equal_concatenated(client_of):
    stats = []
    for idx in split_from(client_of, 120):
        if len(idx):
            stats.append(ccvr_client_statistics(RAW, class_batches(DATA.x[idx], DATA.y[idx], 5), num_classes=4))
    n, mu, cov = pool_class_statistics(stats)
    for c in range(4):
        zc = RAW_FEATURES[DATA.y == c]
        assert n[c].item() == len(zc)
        torch.testing.assert_close(mu[c], zc.mean(0), atol=1e-12, rtol=0)
        torch.testing.assert_close(cov[c], torch.cov(zc.T), atol=1e-12, rtol=0)  # unbiased (N - 1)


def test_ccvr_single_sample_and_absent_classes():
    # client 0 holds one sample of class 0 (covariance 0), no client holds class 3
    idx0, idx1 = np.array([0]), np.flatnonzero((DATA.y != 3).numpy())[1:]
    stats = [ccvr_client_statistics(RAW, class_batches(DATA.x[i], DATA.y[i], 8), num_classes=4)
             for i in (idx0, idx1)]
    assert torch.equal(stats[0]["ccvr_covs"][0], torch.zeros(12, 12, dtype=torch.float64))
    n, mu, cov = pool_class_statistics(stats)
    assert n[3].item() == 0 and torch.equal(mu[3], torch.zeros(12, dtype=torch.float64))
    torch.testing.assert_close(cov[0], torch.cov(RAW_FEATURES[DATA.y == 0].T), atol=1e-12, rtol=0)
    feats, labels, weights = sample_virtual_features(n, mu, cov, per_class=50, eps=1e-5,
                                                     generator=torch.Generator().manual_seed(0))
    assert feats.shape == (200, 12) and weights[labels == 3].sum() == 0 and weights[labels != 3].min() == 1
    # the virtual features follow the pooled class means
    torch.testing.assert_close(feats[labels == 1].mean(0).double(), mu[1], atol=0.05, rtol=0)


def test_ccvr_retraining_moves_the_classifier_and_is_seeded():
    stats = [ccvr_client_statistics(MODEL, class_batches(DATA.x, DATA.y, 16), num_classes=4)]
    hp = Hparams(declared=parse_method("ccvr").knobs, ccvr_lr=0.1, ccvr_epochs=2, ccvr_virtual_per_class=40)
    loss = lambda o, y: torch.nn.functional.cross_entropy(o, y, reduction="none")
    run = lambda: CALIBRATIONS["ccvr"].server_calibrate(
        stats, classifier_weight=MODEL.classifier.weight.detach(), loss_fn=loss, hp=hp,
        generator=torch.Generator().manual_seed(3))
    w1, w2 = run(), run()
    assert torch.equal(w1, w2) and not torch.equal(w1, MODEL.classifier.weight)


# CCVR's re-training must be able to undo a classifier bias, CCVR's purpose (Luo et al., NeurIPS 2021,
# Sec. 3-4). With Tab. 16's CIFAR-100 fine-tuning lr (1e-5), which the digits presets keep, the quick
# preset's 10 epochs of ceil(10 x 50 / 64) = 8 steps moved a digits ConvNet's classifier by < 0.2 % and
# changed no prediction (docs/methods.md), so FedAvg + CCVR equalled FedAvg on every shipped digits seed;
# the MNIST-5k preset re-trains at its FedAvg rate and undoes the bias.
@pytest.mark.parametrize("preset, corrects", [("mnist5k", True), ("quick", False)])
def test_ccvr_undoes_a_biased_classifier_at_the_mnist5k_presets_rate_not_at_tab16s(preset, corrects):
    hp = load_preset(str(ROOT / preset) if preset.endswith(".toml") else preset).hparams(parse_method("fedavg+ccvr"))
    c = 10  # digits' classes, so the step count is the presets' own (l = C here)
    eye = torch.eye(c, dtype=torch.float64)
    # one client, 100 samples per class, class c ~ N(3 e_c, 0.25 I): the classes are 3 sqrt(2) apart, 8.5 sigma
    stats = [{"ccvr_counts": torch.full((c,), 100.0, dtype=torch.float64), "ccvr_means": 3 * eye,
              "ccvr_covs": 0.25 * eye.expand(c, c, c).clone()}]
    # biased towards class 0: row 0 is e_0 + 1.5 sum_{c>0} e_c, so at the mean 3 e_c of a class c > 0 the
    # logits are 3 (class c) and 1.5 x 3 = 4.5 (class 0): every class's mean is predicted 0
    w0 = eye.clone()
    w0[0, 1:] = 1.5
    w0 = w0.float()
    assert (3 * eye.float() @ w0.T).argmax(1).tolist() == [0] * c
    loss = lambda o, y: torch.nn.functional.cross_entropy(o, y, reduction="none")
    w = CALIBRATIONS["ccvr"].server_calibrate(stats, classifier_weight=w0, loss_fn=loss, hp=hp,
                                              generator=torch.Generator().manual_seed(0))
    if not corrects:  # Tab. 16's rate: every class mean is still predicted 0
        assert (3 * eye.float() @ w.T).argmax(1).tolist() == [0] * c
        return
    assert (3 * eye.float() @ w.T).argmax(1).tolist() == list(range(c))
    # and fresh draws of the same Gaussians: 32.0 % right before (class 0's 100 and the draws of classes
    # c > 0 whose e_c coordinate beats 1.5 x the sum of their others by chance), at least 99 % after
    z = 3 * torch.eye(c).repeat_interleave(100, 0) + 0.5 * torch.randn(100 * c, c, generator=torch.Generator().manual_seed(1))
    y = torch.arange(c).repeat_interleave(100)
    assert ((z @ w0.T).argmax(1) == y).float().mean() < 0.35
    assert ((z @ w.T).argmax(1) == y).float().mean() >= 0.99

"""Aggregation rules: hand-computed cases and properties (workloads/fl/aggregate.py)."""

import math

import torch
from hypothesis import given, settings, strategies as st

from workloads.fl.aggregate import (fednova_average, fednova_normalizer, pseudo_gradient,
                                    server_sgd_momentum, weighted_average)


def test_weighted_average_hand_case():
    # n = (1, 3): (1 * 0 + 3 * 4) / 4 = 3 ; int buffer (2, 6) -> (2 + 18) / 4 = 5
    a = {"w": torch.tensor([0.0]), "n": torch.tensor(2)}
    b = {"w": torch.tensor([4.0]), "n": torch.tensor(6)}
    out = weighted_average([(a, 1), (b, 3)])
    assert out["w"].item() == 3.0
    assert out["n"].item() == 5 and out["n"].dtype == torch.int64


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=8), st.integers(0, 2**31 - 1))
def test_identical_updates_average_to_themselves(counts, seed):
    g = torch.Generator().manual_seed(seed)
    state = {"w": torch.randn(5, 3, generator=g), "b": torch.randn(3, generator=g),
             "steps": torch.tensor(seed % 97)}
    out = weighted_average([(state, n) for n in counts])
    for k in state:
        assert torch.equal(out[k], state[k]), k


def test_server_sgd_momentum_hand_case():
    # w0 = 1, Delta = 0.5 twice, lr 1, momentum 0.3:
    # m1 = 0.5, w1 = 0.5 ; m2 = 0.3 * 0.5 + 0.5 = 0.65, w2 = 0.5 - 0.65 = -0.15
    w = {"w": torch.tensor([1.0])}
    w1, m1 = server_sgd_momentum(w, {"w": torch.tensor([0.5], dtype=torch.float64)}, None, lr=1.0, momentum=0.3)
    w2, m2 = server_sgd_momentum(w1, {"w": torch.tensor([0.5], dtype=torch.float64)}, m1, lr=1.0, momentum=0.3)
    assert w1["w"].item() == 0.5 and math.isclose(w2["w"].item(), -0.15, rel_tol=1e-6)


def test_server_sgd_without_momentum_is_fedavg():
    g = torch.Generator().manual_seed(0)
    w = {"w": torch.randn(4, generator=g)}
    clients = [({"w": torch.randn(4, generator=g)}, n) for n in (5, 7, 11)]
    avg = weighted_average(clients)
    new, _ = server_sgd_momentum(w, pseudo_gradient(w, avg, ["w"]), None, lr=1.0, momentum=0.0)
    torch.testing.assert_close(new["w"], avg["w"], rtol=0, atol=1e-6)


def test_fednova_normalizer_hand_cases():
    assert fednova_normalizer(7, 0.0) == 7.0
    # tau = 3, rho = 0.5: (1 - .5)/.5 + (1 - .25)/.5 + (1 - .125)/.5 = 1 + 1.5 + 1.75 = 4.25
    assert math.isclose(fednova_normalizer(3, 0.5), 4.25)
    # closed form [tau - rho (1 - rho^tau) / (1 - rho)] / (1 - rho) agrees for a long run
    tau, rho = 50, 0.9
    assert math.isclose(fednova_normalizer(tau, rho), (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho))


def test_fednova_with_equal_normalizers_is_fedavg():
    g = torch.Generator().manual_seed(1)
    w = {"w": torch.randn(6, generator=g)}
    clients = [({"w": torch.randn(6, generator=g)}, n) for n in (3, 9)]
    nova = fednova_average(w, [(s, n, 4.25) for s, n in clients], ["w"])
    torch.testing.assert_close(nova["w"], weighted_average(clients)["w"], rtol=0, atol=1e-6)


def test_fednova_hand_case_unequal_steps():
    # w_t = 0; client A: n = 1, w = -2, a = 1 ; client B: n = 1, w = -4, a = 4
    # d_A = 2, d_B = 1, p = 1/2 each: tau_eff = 2.5, sum p d = 1.5 -> w = -3.75 (FedAvg: -3)
    w = {"w": torch.tensor([0.0])}
    out = fednova_average(w, [({"w": torch.tensor([-2.0])}, 1, 1.0), ({"w": torch.tensor([-4.0])}, 1, 4.0)], ["w"])
    assert out["w"].item() == -3.75

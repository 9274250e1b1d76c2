"""Table 1 of SphereFed (Dong et al., ECCV 2022): closed forms against the printed values."""

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import bench.formulas.__main__ as formulas_cli
from bench.lib import formulas as f

PAPER = f.Table1Setup()  # MobileNetV2 (l=1280), CIFAR-100 (C=100), 10 clients, 100 rounds, 32-bit


def two_digits(x: float) -> float:
    """Round to two significant digits, as Table 1 prints FLOPs (e.g. 1.9e4)."""
    exponent = math.floor(math.log10(x))
    return round(x / 10**exponent, 1) * 10**exponent


def two_digits_truncated(x: float) -> float:
    """Cut to two significant digits (176.64 -> 170)."""
    exponent = math.floor(math.log10(x))
    return math.floor(x / 10 ** (exponent - 1)) * 10 ** (exponent - 1)


def printed_mb(method: str) -> float:
    """Table 1's communication column as printed (``bench.formulas.TABLE1_METHODS``)."""
    return f.TABLE1_METHODS[method].comm_mb


def test_setup_defaults_are_the_papers():
    # Sec. 5.1: B = 64, E = 10, 100 rounds; Table 16: 500 virtual features per class (CIFAR-100)
    assert (PAPER.feature_dim, PAPER.num_classes, PAPER.num_clients, PAPER.rounds) == (1280, 100, 10, 100)
    assert (PAPER.local_epochs, PAPER.batch_size, PAPER.word_bytes, PAPER.virtual_per_class) == (10, 64, 4, 500)


def test_fedavg_communication_102_mb():
    # W is 1280 x 100 = 128,000 words; down + up every round: 2 x 100 x 128,000 x 4 B = 102,400,000 B
    assert f.per_client_bytes("fedavg", PAPER) == 102_400_000
    assert round(f.per_client_bytes("fedavg", PAPER) / 1e6) == printed_mb("fedavg") == 102
    assert f.total_bytes("fedavg", PAPER) == 10 * 102_400_000


def test_ccvr_communication_758_mb():
    # mu: 128,000 words; Sigma: 1280 x 1280 x 100 = 163,840,000 words; once:
    # (128,000 + 163,840,000) x 4 = 655,872,000 B; + FedAvg's 102,400,000 = 758,272,000 B
    assert f.per_client_bytes("ccvr", PAPER) == 758_272_000
    assert round(f.per_client_bytes("ccvr", PAPER) / 1e6) == printed_mb("ccvr") == 758


def test_spherefed_communication_7_mb():
    # U: 1280 x 100, V: 1280 x 1280 -> 1280 x 1380 = 1,766,400 words x 4 B = 7,065,600 B, once
    assert f.per_client_bytes("spherefed", PAPER) == 7_065_600
    assert round(f.per_client_bytes("spherefed", PAPER) / 1e6) == printed_mb("spherefed") == 7


def test_ffc_client_flops_eq9():
    # 2 l |D| (l + C) = 2 x 1280 x 50,000 x 1380 = 176,640,000,000 FLOPs
    macs = f.ffc_client_macs(1280, 100, 50_000)
    assert f.flops(macs) == 176_640_000_000
    # Table 1 prints 1.7e2 G: 176.64 truncated to two digits (rounded it would be 1.8e2)
    printed = f.TABLE1_METHODS["spherefed"].gflops
    assert two_digits_truncated(f.flops(macs) / 1e9) == pytest.approx(printed) == 170
    assert two_digits(f.flops(macs) / 1e9) != pytest.approx(printed)


def test_small_hand_cases():
    # l=2, C=3, |D|=4: V is 4 samples x 2x2, U is 4 x 2x3 -> 4 x 2 x 5 = 40 MACs
    assert f.ffc_client_macs(2, 3, 4) == 40
    # Eq. (10) on the server, l=3, C=2, K=2 clients: one sum of V, U (3 x 5 = 15 adds); the solve:
    # LU of 3 x 3 (step 0 updates a 2 x 2 block, step 1 a 1 x 1: 4 + 1 = 5 MACs) and, per right-hand
    # side, a forward and a back substitution (0 + 1 + 2 = 3 MACs each): 5 + 2 x 2 x 3 = 17
    small = f.Table1Setup(feature_dim=3, num_classes=2, num_clients=2, train_samples=4)
    assert [w.macs for w in f.classifier_work("spherefed", small) if w.side == "server"] == [15, 17]
    # 10 clients, 5,000 samples each, B = 64: ceil(78.125) = 79 steps each -> 790
    assert f.local_steps_per_epoch(50_000, 10, 64) == 790
    # statistics per sample: z (l adds) and z z^T (l^2): 3 samples, l = 4 -> 3 x 4 x 5 = 60
    assert f.feature_statistics_macs(4, 3) == 60


def test_fedavg_ours_hand_computed():
    # dW: 128,000 x 50,000 x 10 x 100                  = 6,400,000,000,000
    # SGD: 3 x 128,000 x (790 steps x 10 x 100)        =   303,360,000,000
    # average W on the server: 100 x 10 x 128,000      =       128,000,000
    work = f.classifier_work("fedavg", PAPER)
    assert sum(w.macs for w in work) == 6_703_488_000_000
    assert f.classifier_flops("fedavg", PAPER) == 13_406_976_000_000  # 1.3e4 G vs the paper's 1.9e4 G


def test_paper_reading_reproduces_fedavg():
    # 1 FLOP per MAC, fwd + dX + dW: 3 x 128,000 x 50,000 x 10 x 100 + 128,000,000 (average)
    g = f.classifier_flops("fedavg", PAPER, f.PAPER_READING)
    assert g == 19_200_128_000_000
    assert two_digits(g / 1e9) == pytest.approx(f.TABLE1_METHODS["fedavg"].gflops)


def test_no_two_flops_per_mac_reading_reproduces_fedavg():
    # Every subset of the classifier's training GEMMs, with and without the SGD updates,
    # at FLOPs = 2 x MACs: none rounds to the paper's 1.9e4 G.
    results = {}
    for r in range(1, 4):
        for gemms in itertools.combinations(("fwd", "dx", "dw"), r):
            for updates in (False, True):
                conv = f.Convention("probe", 2, gemms, gemms, updates)
                results[gemms, updates] = f.classifier_flops("fedavg", PAPER, conv) / 1e9
    assert all(two_digits(g) != pytest.approx(f.TABLE1_METHODS["fedavg"].gflops) for g in results.values()), results
    # and the one-FLOP-per-MAC reading does not reproduce FFC's 1.7e2 G: 89.2 G, half of ours
    # (client |D|.l.(l + C) = 88.32 G MACs + server 0.88 G MACs, at one FLOP per MAC)
    reading = f.classifier_flops("spherefed", PAPER, f.PAPER_READING)
    assert reading / 1e9 == pytest.approx(89.2, abs=0.05) and 2 * reading == f.classifier_flops("spherefed", PAPER)
    assert two_digits(reading / 1e9) != pytest.approx(f.TABLE1_METHODS["spherefed"].gflops)


@pytest.mark.parametrize("epochs, matches", [(57, False), (58, True), (109, True), (110, False), (10, False)])
def test_ccvr_matches_paper_only_for_some_unpublished_finetune_epochs(epochs, matches):
    s = f.Table1Setup(finetune_epochs=epochs)
    g = f.classifier_flops("ccvr", s, f.PAPER_READING) / 1e9
    assert (two_digits(g) == pytest.approx(f.TABLE1_METHODS["ccvr"].gflops)) is matches, g


def test_table1_rows_and_savings():
    rows = {r.method: r for r in f.table1(PAPER)}
    assert list(rows) == ["fedavg", "ccvr", "spherefed"]
    # "over two orders of magnitude" less communication than FedAvg and CCVR (Sec. 5.4)
    assert rows["fedavg"].per_client_bytes / rows["spherefed"].per_client_bytes > 10
    assert rows["ccvr"].per_client_bytes / rows["spherefed"].per_client_bytes > 100
    assert rows["fedavg"].gflops / rows["spherefed"].gflops > 70
    for r in rows.values():
        assert r.gflops == pytest.approx(2 * (r.client_macs + r.server_macs) / 1e9)


settings = st.builds(
    f.Table1Setup,
    feature_dim=st.integers(1, 4096),
    num_classes=st.integers(1, 1000),
    num_clients=st.integers(1, 100),
    rounds=st.integers(1, 1000),
    train_samples=st.integers(100, 10**6),
    local_epochs=st.integers(1, 20),
)


@given(settings, st.integers(1, 1000))
def test_only_fedavgs_weights_scale_with_rounds(s, more):
    longer = f.Table1Setup(**{**s.__dict__, "rounds": s.rounds + more})
    assert f.per_client_bytes("spherefed", longer) == f.per_client_bytes("spherefed", s)
    extra = 2 * more * s.feature_dim * s.num_classes * s.word_bytes
    for method in ("fedavg", "ccvr"):
        assert f.per_client_bytes(method, longer) - f.per_client_bytes(method, s) == extra
    assert f.classifier_flops("spherefed", longer) == f.classifier_flops("spherefed", s)
    assert f.classifier_flops("fedavg", longer) > f.classifier_flops("fedavg", s)


@given(settings)
def test_ccvr_costs_fedavg_plus_calibration(s):
    assert f.per_client_bytes("ccvr", s) > f.per_client_bytes("fedavg", s)
    assert f.classifier_flops("ccvr", s) > f.classifier_flops("fedavg", s)
    assert f.total_bytes("ccvr", s) == s.num_clients * f.per_client_bytes("ccvr", s)


@pytest.mark.parametrize("bad", [{"feature_dim": 0}, {"rounds": -1}, {"word_bytes": 2.5},
                                 {"train_samples": 5, "num_clients": 10}, {"batch_size": True}])
def test_bad_setup_is_rejected(bad):
    with pytest.raises(ValueError):
        f.Table1Setup(**bad)


def test_unknown_method_names_the_choices():
    with pytest.raises(ValueError, match="ccvr"):
        f.per_client_bytes("fedprox", PAPER)


def test_cli_prints_table(capsys):
    assert formulas_cli.main(["table1"]) == 0
    out = capsys.readouterr().out
    assert "102.4" in out and "758.3" in out and "7.1" in out and "1.92e+04" in out


def test_cli_rejects_bad_values(capsys):
    assert formulas_cli.main(["table1", "--classes", "zero"]) == 2
    assert "argument --classes: 'zero' is not an integer" in capsys.readouterr().err
    assert formulas_cli.main(["table1", "--samples", "3"]) == 2
    assert "num_clients" in capsys.readouterr().err

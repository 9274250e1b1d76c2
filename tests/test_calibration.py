"""workloads.cost.calibration: the one-and-two-step extrapolation equals full captures on small shapes."""

import pytest
import torch
import torch.nn.functional as F

from accel_sim.hardware import HardwareConfig
from accel_sim.simulate import simulate
from workloads.cost import calibration as cal
from workloads.fl.hparams import Hparams
from workloads.fl.methods import parse_method
from workloads.fl.methods.ccvr import retrain_classifier
from workloads.fl.methods.ffc import ffc_client_statistics
from workloads.cost.step import method_setup, simulate_complete
from workloads.fl.methods import calibration_named
from workloads.models import build_model
from workloads.capture import capture
from workloads.fl.methods.spherefed import SphereFed

HW = HardwareConfig()


def _report(fn, *args, **kwargs):
    return simulate(capture(fn, *args, default_phase="calibration", **kwargs).trace, HW)


def test_extrapolate_hand_case():
    # 100 + (5 - 1) x (130 - 100) = 220; from a = 2: 100 + (5 - 2) x 30 = 190
    assert cal.extrapolate(100, 130, 5) == 220
    assert cal.extrapolate(100, 130, 5, a=2) == 190
    assert cal.extrapolate(100, 130, 1) == 100


def test_client_statistics_extrapolation_is_exact():
    model = build_model("convnet", num_classes=10, head=SphereFed.head).to("meta").eval()
    hp = Hparams(declared=parse_method("ffc").knobs, batch_size=4)
    x = torch.empty(4, 3, 32, 32, device="meta")
    y = torch.zeros(4, dtype=torch.long, device="meta")
    stats = lambda batches: ffc_client_statistics(model, batches, num_classes=10, hp=hp)  # noqa: E731
    one, two, five = (_report(stats, [(x, y)] * n, model=model) for n in (1, 2, 5))
    assert cal.extrapolate(one.total_cycles, two.total_cycles, 5) == five.total_cycles
    # energy is linear in the counts the cycles come from: extrapolated alike (Cost), exact up to rounding
    price = cal.extrapolate(*(cal.Cost(r.total_cycles, r.energy_j) for r in (one, two)), 5)
    assert price.total_cycles == five.total_cycles
    assert price.energy_j == pytest.approx(five.energy_j, rel=1e-9)


def test_largest_batch_by_hand():
    # counts [3, 20, 0], B = 16: FFC batches run over all 23 samples (16 + 7), CCVR's single-class
    # batches over class 1's 20 (16 + 4) and class 0's 3; counts [3, 5]: 8 samples, at most 5 of a class
    assert (cal.largest_batch("ffc", [3, 20, 0], 16), cal.largest_batch("ccvr", [3, 20, 0], 16)) == (16, 16)
    assert (cal.largest_batch("ffc", [3, 5], 16), cal.largest_batch("ccvr", [3, 5], 16)) == (8, 5)


@pytest.mark.parametrize("counts, batches", [([16, 16, 16], 3), ([5, 2], 1)])
def test_client_peak_memory_is_the_full_loops_peak(counts, batches):
    # FFC over 48 samples in 3 batches of 16 holds at most what its capture over two batches holds
    # (from the second batch on the accumulators V, U live beside the batch's features); over 7
    # samples, one batch of 7. Checked against a capture of the whole loop, batch by batch.
    hp = Hparams(batch_size=16).with_knobs(calibration_named("ffc").knobs)
    model, _ = method_setup("spherefed", "convnet", num_classes=10, image_size=16)
    model = model.to("meta").eval()
    size = min(16, sum(counts))
    x = torch.empty(size, 3, 16, 16, device="meta")
    y = torch.zeros(size, dtype=torch.long, device="meta")
    stats = lambda b: ffc_client_statistics(model, b, num_classes=10, hp=hp)  # noqa: E731
    full = _report(stats, [(x, y)] * batches, model=model)
    peak = cal.client_peak_memory_bytes("ffc", "convnet", class_counts=counts, num_classes=10, image_size=16,
                                        hp=hp, hw=HW)
    assert peak == full.peak_memory_bytes


def test_retrain_extrapolation():
    l, c, b = 16, 4, 8
    hp = Hparams(declared=parse_method("ccvr").knobs, ccvr_epochs=1, ccvr_batch_size=b)
    loss = lambda o, t: F.cross_entropy(o, t, reduction="none")  # noqa: E731

    def report(steps):
        rows = steps * b
        feats = torch.empty(rows, l, device="meta")
        labels = torch.zeros(rows, dtype=torch.long, device="meta")
        return _report(retrain_classifier, torch.empty(c, l, device="meta"), feats, labels,
                       torch.empty(rows, device="meta"), per_sample_loss=loss, hp=hp)

    r2, r3, r6 = (report(n) for n in (2, 3, 6))
    # the arithmetic (GEMMs) of every step is the same: exact from steps 2 and 3
    assert cal.extrapolate(r2.macs, r3.macs, 6, a=2) == r6.macs
    # cycles: the first step differs (momentum buffers), so extrapolate from steps 2 and 3. Every
    # later step costs the same, the gather feats[idx] included (lowered to the rows it selects, not
    # the whole table); only the epoch's one randperm over all rows grows with the table, linearly
    # up to the ceil() of its DRAM cycles: at most one cycle per extrapolated step.
    assert abs(cal.extrapolate(r2.total_cycles, r3.total_cycles, 6, a=2) - r6.total_cycles) <= 6 - 2


def test_ffc_is_cheaper_than_ccvr_on_the_server():
    # CCVR samples C x M_c features and re-trains; FFC sums and solves once
    hp = Hparams(declared=parse_method("ccvr").knobs, ccvr_virtual_per_class=20, ccvr_epochs=2)
    kw = dict(feature_dim=64, num_classes=10, num_clients=3, hp=hp, hw=HW)
    ffc, ccvr = cal.server_cost("ffc", **kw), cal.server_cost("ccvr", **kw)
    assert 0 < ffc.total_cycles < ccvr.total_cycles
    assert 0 < ffc.energy_j < ccvr.energy_j


def test_unknown_calibration_is_rejected():
    import pytest

    with pytest.raises(ValueError, match="ccvr, ffc"):
        cal.calibration_cost("fedbn", "convnet", train_samples=100, num_clients=2, num_classes=10,
                             image_size=32, hp=Hparams(), hw=HW)


def test_bench_refuses_to_price_a_trace_with_unlowered_ops():
    # in-place baddbmm_ has no lowering: accel_sim would price it at 0 cycles, bench must refuse
    c = torch.zeros(2, 4, 4, device="meta")
    captured = capture(lambda c: c.baddbmm_(torch.ones(2, 4, 1, device="meta"), torch.ones(2, 1, 4, device="meta")), c)
    with pytest.raises(ValueError, match=r"aten\.baddbmm_.*LOWERINGS"):
        simulate_complete(captured.trace, HardwareConfig(), "toy")

"""The calibration round (CCVR, FFC: round R + 1) on a fleet (docs/fleets.md): planned as a
training round is (every client asked; availability, the statistics' peak memory, the deadline),
and the accuracy run calibrates with the statistics that arrive, and only those."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from bench.lib.fl.jobs import Job, run_job
from tests.test_fleet import FAST, HP, digits, fleet_of, pricer, run_inputs  # noqa: F401 (fixtures)
from workloads.cost.participation import summary_line
from workloads.cost.rounds import RunPricer, class_counts_of, plan_run
from workloads.fl.comm import closed_form_bytes, closed_form_sizes, ledger_totals
from workloads.fl import loop
from workloads.fl.loop import RunPlan

D = 2_448_312  # the ConvNet's feature extractor at 16 x 16 (every shared layer but the classifier), B
CCVR_UP = 8 * (10 + 10 * 256 + 10 * 256 * 256)  # C + C l + C l^2 float64 (l = 256, C = 10): 5,263,440 B
FFC_UP = 8 * (256 * 256 + 256 * 10)  # l^2 + l C float64: 544,768 B
PHONE = {**FAST, "hw": "gemmini_like", "downlink_bytes_per_s": 1e7, "uplink_bytes_per_s": 1e6, "latency_s": 0.05}


def labels_of(inputs):
    return [inputs.train.y.numpy()[p] for p in inputs.parts]


def calibration_s(pricer, name, inputs, k):
    """Client k's statistics' compute seconds on its own class's accelerator."""
    counts = class_counts_of(labels_of(inputs)[k], 10)
    return pricer.calibration(Job(name, HP).method, HP, counts, inputs.devices[k])[0]


def calibrated_clients(result, t):
    return sorted({x.client for x in result.transfers if x.round == t and x.direction == "up"})


def test_hand_worked_calibration_round(digits, pricer):
    # Three clients, two classes, assignment [fast, fast, phone], a 4 s deadline, one training round.
    #   fast: the paper's accelerator, infinite links, no latency: a client's time is its compute.
    #   phone: the Gemmini-like accelerator, 1e7 B/s down, 1e6 B/s up, 50 ms per transfer.
    # Calibration round 2: every client downloads the extractor, D = 2,448,312 B (the same for both:
    # FedAvg's model less its 10,240 B classifier, SphereFed's with its frozen one not sent), computes
    # its statistics (c, well under 0.1 s: asserted) and uploads them:
    #   CCVR: 8 (C + C l + C l^2) = 8 (10 + 2,560 + 655,360) = 5,263,440 B
    #   FFC:  8 (l^2 + l C)       = 8 (65,536 + 2,560)       =   544,768 B
    # phone, CCVR: 0.05 + 0.2448312 + c + 0.05 + 5.26344  = 5.6082712 + c > 4 s: dropped (deadline)
    # phone, FFC:  0.05 + 0.2448312 + c + 0.05 + 0.544768 = 0.8895992 + c < 4 s: arrives
    # Its training round (upload D + 10,240 + 8 B, or D + 8 B) takes about 2.8 s + c_train < 4 s, so
    # every client trains: the two runs differ in the calibration round only. CCVR's round closes at
    # the deadline (4 s) with the phone still working: its download counts, its upload never, its
    # compute in full (0.29 + c < 4): bytes 3 D + 2 x 5,263,440 = 17,871,816. FFC's closes at the
    # phone's arrival: bytes 3 D + 3 x 544,768 = 8,979,240.
    fleet = fleet_of({"fast": FAST, "phone": PHONE}, deadline_s=4.0, assignment=["fast", "fast", "phone"])
    inputs = run_inputs(digits, fleet=fleet, rounds=1)
    for name, up in (("fedavg+ccvr", CCVR_UP), ("spherefed+ffc", FFC_UP)):
        method = Job(name, HP).method
        sizes = closed_form_sizes(pricer.prepared(method), method)
        assert sum(sizes.layer_bytes) - sizes.head_bytes == D
        assert method.calib.upload_bytes(feature_dim=256, num_classes=10, hp=HP.with_knobs(method.knobs)) == up
    c = {name: [calibration_s(pricer, name, inputs, k) for k in range(3)] for name in ("fedavg+ccvr", "spherefed+ffc")}
    assert max(max(v) for v in c.values()) < 0.1

    ccvr = run_job(Job("fedavg+ccvr", HP), inputs, pricer=pricer)
    ffc = run_job(Job("spherefed+ffc", HP), inputs, pricer=pricer)
    for out in (ccvr, ffc):
        assert (out.rows[0]["stage"], out.rows[0]["clients"], out.rows[0]["sampled"]) == ("train", 3, 3)

    assert ccvr.plan.calibration.arrived == (0, 1) and ccvr.plan.calibration.dropped == {2: "deadline"}
    assert calibrated_clients(ccvr.result, 2) == [0, 1]  # the loop used exactly those statistics
    row = ccvr.rows[-1]
    assert (row["stage"], row["round"], row["sampled"], row["clients"], row["dropped_deadline"]) == \
        ("calibration", 2, 3, 2, 1)
    assert row["collect_s"] == 4.0 and row["round_wall_s"] == 4.0 + row["server_s"]
    assert row["round_device_s"] == math.fsum(c["fedavg+ccvr"])
    assert row["round_bytes"] == 3 * D + 2 * CCVR_UP == 17_871_816

    assert ffc.plan.calibration.arrived == (0, 1, 2) and ffc.plan.calibration.dropped == {}
    assert calibrated_clients(ffc.result, 2) == [0, 1, 2]
    row = ffc.rows[-1]
    assert (row["sampled"], row["clients"], row["dropped_deadline"]) == (3, 3, 0)
    assert row["collect_s"] == pytest.approx(0.8895992 + c["spherefed+ffc"][2], rel=1e-12)
    assert row["round_bytes"] == 3 * D + 3 * FFC_UP == 8_979_240

    # the summary keeps the calibration apart from the training updates, and the closed form of
    # the run's bytes counts the calibration's arrivals as the ledger does
    summary = ccvr.plan.summary(fleet)
    assert (summary["sampled"], summary["arrived"]) == (3, 3)
    assert summary["calibration"] == {"sampled": 3, "arrived": 2,
                                      "dropped": {"unavailable": 0, "memory": 0, "deadline": 1, "surplus": 0}}
    assert summary_line(summary).endswith("calibration: 2 of 3 clients' statistics arrived (1 deadline)")
    method = Job("fedavg+ccvr", HP).method
    closed = closed_form_bytes(method, HP, closed_form_sizes(pricer.prepared(method), method), rounds=1, num_clients=3,
                               **ccvr.plan.closed_form_counts())
    assert closed["total_bytes"] == ledger_totals(ccvr.result.transfers)["total_bytes"]


def test_the_calibration_round_checks_its_own_peak_memory(digits, pricer):
    # A 6 MB device (6e6 B) beside two unlimited ones. Peaks on the paper's accelerator (4 B words):
    #   training (either method, batch 16):                      ~9.5 MB  > 6 MB: never trains
    #   CCVR's statistics: the extractor's 2,452,608 B of weights + the [C, l, l] float64 covariance
    #     accumulator (10 x 256 x 256 x 8 = 5,242,880 B) = 7,695,488 B, + a batch:
    #                                                              ~8.4-8.7 MB > 6 MB: declines
    #   FFC's statistics: the extractor + V (256 x 256 x 8 B = 0.52 MB, and its update's temporary)
    #     + U + a batch's features:                                ~4.1 MB  < 6 MB: its statistics arrive
    fleet = fleet_of({"big": FAST, "small": {**FAST, "memory_bytes": 6e6}}, assignment=["big", "big", "small"])
    inputs = run_inputs(digits, fleet=fleet)
    labels = labels_of(inputs)
    hw = inputs.devices[2].hw
    plans = {}
    for name in ("fedavg+ccvr", "spherefed+ffc"):
        method = Job(name, HP).method
        assert pricer.peak_memory_bytes(method, HP, len(labels[2]), 1, hw) > 9e6
        plans[name] = plan_run(fleet, inputs.classes, method, HP, pricer=pricer, client_labels=labels,
                               devices=inputs.devices, system=inputs.system, rounds=2, participation=1.0, seed=0)
        assert all(r.dropped == {2: "memory"} for r in plans[name].rounds)
    counts = class_counts_of(labels[2], 10)
    peak = {name: pricer.calibration_peak_memory_bytes(Job(name, HP).method, HP, counts, hw) for name in plans}
    assert 2_452_608 + 5_242_880 < peak["fedavg+ccvr"] < 9e6
    assert 4e6 < peak["spherefed+ffc"] < 4.2e6
    assert plans["fedavg+ccvr"].calibration.dropped == {2: "memory"}
    assert plans["spherefed+ffc"].calibration.arrived == (0, 1, 2)
    # what reaches the loop: two training rounds of clients 0 and 1, then the calibration's arrivals
    assert plans["spherefed+ffc"].arrivals == ((0, 1), (0, 1), (0, 1, 2))


def test_same_seed_same_calibration_arrivals(digits):
    # Class "a" (online with probability 0.5 each round) gets clients 1 and 2 for seed 0; its draws
    # for round 3, the calibration after two training rounds, leave client 1 offline.
    fleet = fleet_of({"a": {**FAST, "share": 0.5, "availability": {"probability": 0.5}}, "b": {**FAST, "share": 0.5}})
    inputs = run_inputs(digits, fleet=fleet)
    method = Job("spherefed+ffc", HP).method
    plans = [plan_run(fleet, inputs.classes, method, HP, pricer=RunPricer(inputs.priced_model()),
                      client_labels=labels_of(inputs), devices=inputs.devices, system=inputs.system, rounds=2,
                      participation=1.0, seed=0) for _ in range(2)]  # each priced afresh
    assert plans[0] == plans[1]
    assert inputs.classes == (1, 0, 0) and plans[0].calibration.dropped == {1: "unavailable"}


def test_a_calibration_nobody_arrives_in_leaves_the_model_uncalibrated(digits, pricer):
    # Every client uplinks at 1e6 B/s (no latency, infinite downlink), deadline 4 s: a training round
    # uploads D + 10,248 B (2.46 s + c_train: arrives), CCVR's statistics 5,263,440 B (5.26 s: late).
    fleet = fleet_of({"up": {**FAST, "uplink_bytes_per_s": 1e6}}, deadline_s=4.0, assignment=["up"] * 3)
    out = run_job(Job("fedavg+ccvr", HP), run_inputs(digits, fleet=fleet, rounds=1), pricer=pricer)
    assert out.rows[0]["clients"] == 3
    row = out.rows[-1]
    assert (row["stage"], row["clients"], row["dropped_deadline"], row["server_s"], row["collect_s"]) == \
        ("calibration", 0, 3, 0.0, 4.0)
    assert out.result.accuracy == out.result.accuracy_before_calibration
    assert calibrated_clients(out.result, 2) == []
    assert summary_line(out.plan.summary(fleet)).endswith(
        "calibration: 0 of 3 clients' statistics arrived (3 deadline), so the model is left uncalibrated")


def loop_run(inputs, name, parts, arrivals=None):
    method = Job(name, HP).method
    return loop.train(RunPlan(method, model_fn=functools.partial(inputs.build, method.head), train=inputs.train,
                              test=inputs.test, parts=parts, cfg=inputs.fl, hp=HP, arrivals=arrivals))


@pytest.mark.parametrize("name", ["fedavg+ccvr", "spherefed+ffc"])
def test_the_loop_calibrates_with_exactly_the_arriving_statistics(digits, name):
    # As test_fleet.py's test_the_loop_aggregates_exactly_the_arrivals for training rounds: a run of
    # three clients whose plan leaves client 2 out of its training round and of the calibration ends
    # with the weights, bitwise, of a run of clients 0 and 1 alone (same seeds per round and client,
    # same server generator for CCVR's virtual features). Client 2's statistics, let in, change them.
    inputs = run_inputs(digits, rounds=1)
    two = loop_run(inputs, name, inputs.parts[:2])
    without = loop_run(inputs, name, inputs.parts, arrivals=((0, 1), (0, 1)))
    assert without.accuracy == two.accuracy
    assert without.weights.keys() == two.weights.keys()
    assert all(torch.equal(without.weights[k], two.weights[k]) for k in two.weights)
    assert ledger_totals(without.transfers) == ledger_totals(two.transfers)
    with_2 = loop_run(inputs, name, inputs.parts, arrivals=((0, 1), (0, 1, 2)))
    assert with_2.accuracy_before_calibration == two.accuracy_before_calibration  # the same training ...
    assert not torch.equal(with_2.weights["classifier.weight"], two.weights["classifier.weight"])  # ... not calibration
    with pytest.raises(ValueError, match="covers 1 round.*the run has 1 and a calibration round"):
        loop_run(inputs, name, inputs.parts, arrivals=((0, 1),))  # a calibrated method's plan names round R + 1

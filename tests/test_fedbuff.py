"""FedBuff (workloads/fl/methods/fedbuff.py, workloads/cost/buffered.py, asynchronous.py): the
virtual clock by hand, the staleness weights, the stale correction by hand, the reduction to
synchronous FedAvg, and a run on a fleet that records each update's staleness (docs/fleets.md)."""

import math

import pytest
import torch

from fl_standins import TinyNet, blobs
from workloads.cost.buffered import BufferRule, buffered_steps
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl import loop
from workloads.fl.loop import RunPlan
from workloads.fl.methods import parse_method
from workloads.fl.methods.base import ClientUpdate, ServerState
from workloads.fl.methods.fedbuff import VERSION, FedBuff, stale_corrected, staleness_weight
from workloads.fl.partition import dirichlet_partition

TRAIN, TEST = blobs(120), blobs(40, seed=1)
PARTS = dirichlet_partition(TRAIN.y.numpy(), 4, 1.0, min_size=5, seed=0)
HP = Hparams(lr=0.05, local_epochs=1, batch_size=16)


def always(k, step):
    return True


def test_the_virtual_clock_by_hand():
    # 3 clients finishing 1.0, 2.5 and 4.0 s after they start, all 3 training at once, a buffer of 2.
    # 1.0 s: client 0 arrives (started at version 0, staleness 0); 2.5 s: client 1 (0): step 1 closes
    # with {0, 1}, both restart from version 1 (client 0 waited: it had an update in the buffer).
    # 3.5 s: client 0 (version 1, staleness 0); 4.0 s: client 2, started at 0 s from version 0:
    # staleness 1; step 2 closes with {0, 2}; 0 and 2 restart from version 2.
    # 5.0 s: client 0 (version 2, staleness 0) and client 1 (started 2.5 s from version 1: staleness 1),
    # the lower client first: step 3 closes with {0, 1} at 5.0 s.
    steps = buffered_steps(BufferRule(concurrency=3, buffer_size=2), [1.0, 2.5, 4.0], always, steps=3, seed=0)
    assert [[u.client for u in s.updates] for s in steps] == [[0, 1], [0, 2], [0, 1]]
    assert [[u.staleness for u in s.updates] for s in steps] == [[0, 0], [0, 1], [0, 1]]
    assert [s.close_s for s in steps] == [2.5, 4.0, 5.0]
    assert [u.version for u in steps[2].updates] == [2, 1]


def test_a_buffer_nobody_can_fill_is_applied_as_it_is():
    # client 1 never fits its device: with a buffer of 2, each step applies client 0's update alone
    steps = buffered_steps(BufferRule(2, 2), [1.0, 1.0], lambda k, step: k == 0, steps=2, seed=0)
    assert [[u.client for u in s.updates] for s in steps] == [[0], [0]] and [s.close_s for s in steps] == [1.0, 2.0]


def test_buffer_of_every_client_has_no_staleness():
    # buffer = concurrency = every client: each step waits for all of them, so every update is fresh
    steps = buffered_steps(BufferRule(4, 4), [3.0, 1.0, 2.0, 5.0], always, steps=3, seed=7)
    assert all([u.client for u in s.updates] == [0, 1, 2, 3] for s in steps)
    assert all(u.staleness == 0 for s in steps for u in s.updates)
    assert [s.close_s for s in steps] == [5.0, 10.0, 15.0]
    with pytest.raises(ValueError, match="concurrency 2 and buffer size 3"):
        BufferRule(2, 3)


def test_staleness_weights():
    # 1 / sqrt(1 + s): s = 0 -> 1, s = 3 -> 1/2, s = 8 -> 1/3
    assert (staleness_weight(0), staleness_weight(3), staleness_weight(8)) == (1.0, 0.5, pytest.approx(1 / 3))


def test_the_stale_correction_and_the_step_by_hand():
    # today's model w_t = 3, a stale client started from w_v = 1 and trained to 2 with staleness 1:
    # 3 + (2 - 1) / sqrt(2) = 3.7071...; a fresh client (trained to 5 from w_t): itself. Samples 1
    # and 3: w_{t+1} = (1 x 3.7071 + 3 x 5) / 4 = 4.6768...
    now, start = {"w": torch.tensor([3.0])}, {"w": torch.tensor([1.0])}
    assert stale_corrected(now, start, {"w": torch.tensor([2.0])}, staleness_weight(1), ["w"])["w"].item() \
        == pytest.approx(3 + 1 / math.sqrt(2))
    server = ServerState(weights=now, extras={VERSION + "0": start})  # w_t is version 1, w_0 kept
    updates = [ClientUpdate(0, {"w": torch.tensor([2.0])}, 1, 1, staleness=1),
               ClientUpdate(1, {"w": torch.tensor([5.0])}, 3, 1, staleness=0)]
    after = FedBuff().aggregate(server, updates, HP, ["w"])
    assert after.weights["w"].item() == pytest.approx((3 + 1 / math.sqrt(2) + 3 * 5) / 4)
    assert torch.equal(after.extras[VERSION + "1"]["w"], now["w"])  # w_t kept for clients that start from it
    # a client of round 3 that started two server steps earlier downloads version 0
    assert torch.equal(FedBuff().server_view(after, 3, 2).weights["w"], start["w"])


def run(name, arrivals, staleness=()):
    method = parse_method(name)
    cfg = FLConfig(dataset="blobs", num_clients=4, rounds=len(arrivals), participation=1.0, seed=3)
    return loop.train(RunPlan(method, model_fn=TinyNet, train=TRAIN, test=TEST, parts=PARTS, cfg=cfg, hp=HP,
                              arrivals=arrivals, staleness=staleness))


def test_fedbuff_without_staleness_is_synchronous_fedavg_bit_for_bit():
    arrivals = [[0, 1, 2, 3], [0, 2], [1, 2, 3]]
    fresh = run("fedbuff", arrivals, [[0] * len(a) for a in arrivals])
    fedavg = run("fedavg", arrivals)
    assert all(torch.equal(fresh.weights[k], fedavg.weights[k]) for k in fedavg.weights)
    stale = run("fedbuff", arrivals, [[0, 0, 0, 0], [0, 1], [1, 0, 0]])
    assert not all(torch.equal(stale.weights[k], fedavg.weights[k]) for k in fedavg.weights)


@pytest.mark.slow
def test_bench_fl_on_a_fleet_records_widths_and_staleness(tmp_path):
    # the "must show": bench.fl --fleet ... --methods heterofl fjord fedbuff runs, and results.json
    # records each client's width per round (HeteroFL, FjORD) and each update's staleness (FedBuff);
    # the ledger of the width-scaled runs equals their closed form at each client's width
    import json

    import bench.fl.__main__ as command

    out = tmp_path / "out"
    assert command.main(["--preset", "smoke", "--model", "convnet", "--rounds", "3", "--fleet", "mixed-widths",
                         "--methods", "heterofl", "fjord", "fedbuff", "--threads", "1", "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    classes = doc["fleet"]["client_classes"]
    for name in ("heterofl", "fjord"):
        method = doc["methods"][name]
        widths = method["fleet"]["client_widths"]
        # 8 MiB: a narrower step on the IoT devices, the full model on every other class
        assert all((widths[k] < 1.0) == (c == "iot") for k, c in enumerate(classes)) and "iot" in classes
        assert all(h["widths"] == [widths[k] for k in h["clients"]] for h in method["history"])
        assert method["comm"]["total_bytes"] == method["comm_closed_form"]["total_bytes"]
    fedbuff = doc["methods"]["fedbuff"]
    assert all(len(h["staleness"]) == len(h["clients"]) for h in fedbuff["history"])
    assert fedbuff["fleet"]["max_staleness"] == max(s for h in fedbuff["history"] for s in h["staleness"])


def test_fedbuffs_plan_with_the_whole_round_as_its_buffer_is_synchronous_fedavg():
    # 4 clients of different sizes on one class (no memory limit, instant links, always online); FedBuff's
    # buffer and concurrency = the round's 4 clients: every server step waits for all 4, none is stale,
    # and its run equals synchronous FedAvg's on the same fleet bit for bit, rounds priced alike
    from workloads.cost.asynchronous import FleetRun, plan_buffered
    from workloads.cost.fleet import assign_classes, fleet_from_dict
    from workloads.cost.rounds import PricedModel, RunPricer, fleet_devices, fleet_system, plan_run

    fleet = fleet_from_dict({"classes": {"a": {"hw": "paper_default", "memory_bytes": math.inf, "share": 1.0,
                                               "downlink_bytes_per_s": math.inf, "uplink_bytes_per_s": math.inf,
                                               "latency_s": 0.0}}}, source="f.toml")
    classes = assign_classes(fleet, 4, seed=0)
    devices, system = fleet_devices(fleet, classes), fleet_system(fleet, classes)
    labels = tuple(TRAIN.y.numpy()[p] for p in PARTS)
    pricer = RunPricer(PricedModel(lambda head: TinyNet(), "tinynet", (3, 2, 2), 4, 0))
    hp = HP.with_knobs(FedBuff.knobs).replace(fedbuff_buffer=4, fedbuff_concurrency=4)
    buffered = plan_buffered(FleetRun(fleet, classes, devices, system, labels, 3, 1.0, 3), parse_method("fedbuff"),
                             hp, pricer)
    synchronous = plan_run(fleet, classes, parse_method("fedavg"), HP, pricer=pricer, client_labels=labels,
                           devices=devices, system=system, rounds=3, participation=1.0, seed=3)
    assert buffered.arrivals == synchronous.arrivals == ((0, 1, 2, 3),) * 3
    assert buffered.staleness == ((0, 0, 0, 0),) * 3
    assert [r.collect_s for r in buffered.rounds] == pytest.approx([r.collect_s for r in synchronous.rounds])
    fedbuff = run("fedbuff", [list(a) for a in buffered.arrivals], [list(s) for s in buffered.staleness])
    fedavg = run("fedavg", [list(a) for a in synchronous.arrivals])
    assert all(torch.equal(fedbuff.weights[k], fedavg.weights[k]) for k in fedavg.weights)

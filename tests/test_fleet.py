"""Fleets of real devices (workloads.cost.fleet, docs/fleets.md): the fleet file, the client-to-class
assignment, the round with a deadline and over-commitment, and a federated run that trains exactly
the clients that arrive."""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from accel_sim.hardware import HardwareConfig, load_hardware_config
from bench.lib.fl.jobs import Job, RunInputs, run_job
from tests.failfast import assert_fails_clean, workspace
from workloads.cost import fleet as fleet_mod
from workloads.cost.fleet import FleetError, assign_classes, class_counts, fleet_from_dict, load_fleet
from workloads.cost.participation import ClientOffer, online, plan_round, sampled_count
from workloads.cost.rounds import RunPricer, client_devices, fleet_devices, fleet_system
from workloads.cost.system import DEFAULT_SYSTEM_PATH, SystemModel, load_system_model
from workloads.fl.comm import closed_form_sizes, ledger_totals
from workloads.fl.data import load_dataset
from workloads.fl.dataset import subset
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.methods import parse_method
from workloads.fl.loop import forecast, planned_samples
from workloads.fl.presets import make_partition
from workloads.model_spec import ModelSpec
from workloads.models import Head

FAST = {"hw": "paper_default", "memory_bytes": math.inf, "downlink_bytes_per_s": math.inf,
        "uplink_bytes_per_s": math.inf, "latency_s": 0.0}
SLOW = {**FAST, "downlink_bytes_per_s": 1000.0, "uplink_bytes_per_s": 1000.0}
HP = Hparams(declared=(*parse_method("ccvr").knobs, *parse_method("ffc").knobs),  # the calibrations' knobs
             lr=0.05, local_epochs=1, batch_size=16, ccvr_virtual_per_class=5, ffc_ridge=1e-3)


def fleet_of(classes, *, deadline_s=math.inf, overcommit=1.0, assignment=None, name="test"):
    doc = {"name": name, "round": {"deadline_s": deadline_s, "overcommit": overcommit}, "classes": classes}
    if assignment is not None:
        doc["assignment"] = assignment
    return fleet_from_dict(doc, source="test.toml")


@pytest.fixture(scope="module")
def digits():
    train, test = load_dataset("digits", image_size=16)
    return subset(train, 120, 0, "train"), subset(test, 40, 1, "test")


@pytest.fixture(scope="module")
def pricer(digits):
    """One pricer for the module's runs (same model, shapes and seed): each capture taken once."""
    return RunPricer(run_inputs(digits).priced_model())


def run_inputs(digits, *, fleet=None, participation=1.0, rounds=2, seed=0, parts=None):
    train, test = digits
    fl = FLConfig(dataset="digits", image_size=16, model="convnet", num_clients=3, rounds=rounds, eval_every=1,
                  participation=participation, seed=seed)
    parts = tuple(make_partition(train.y.numpy(), fl)) if parts is None else parts
    hw = HardwareConfig()
    if fleet is None:
        system = SystemModel()
        return RunInputs(ModelSpec("convnet", (3, 16, 16), None), fl, train, test, parts, hw, system,
                         client_devices(system, hw, len(parts), seed=seed), seed)
    classes = assign_classes(fleet, len(parts), seed=seed)
    return RunInputs(ModelSpec("convnet", (3, 16, 16), None), fl, train, test, parts, hw, fleet_system(fleet, classes),
                     fleet_devices(fleet, classes), seed, fleet=fleet, classes=classes)


# ---- the fleet file -------------------------------------------------------------------------------------

def test_shipped_fleets_load():
    paper, mixed = load_fleet("paper"), load_fleet("configs/fleets/mixed.toml")
    assert [c.name for c in paper.classes] == ["vc707"] and paper.deadline_s == math.inf
    assert paper.classes[0].hw == load_hardware_config("configs/hw/paper_default.toml")
    assert [c.name for c in mixed.classes] == ["fpga", "edge_server", "phone", "iot"]
    assert math.fsum(c.share for c in mixed.classes) == 1.0 and mixed.overcommit == 1.3


BAD = [  # (change to a valid one-class fleet, words the one line must hold)
    ({"assignment": ["fast", "fats"]}, ("unknown class", "'fats'", "did you mean 'fast'")),
    ({"classes": {"fast": {**FAST, "share": 0.5}, "slow": {**SLOW, "share": 0.4}}}, ("sum to 0.9", "not 1")),
    ({"classes": {"fast": {**FAST, "share": 1.0, "memory_bytes": 0}}}, ("memory_bytes = 0", "> 0")),
    ({"classes": {"fast": {**FAST, "share": 1.0, "memory_bytes": -4e9}}}, ("memory_bytes", "> 0")),
    ({"round": {"deadline_s": 0}}, ("deadline_s = 0", "> 0")),
    ({"round": {"deadline_s": -1.5}}, ("deadline_s = -1.5", "> 0")),
    ({"classes": {"fast": {**FAST, "share": 1.0, "hw": "missing.toml"}}}, ("[classes.fast]", "missing.toml")),
    ({"classes": {"fast": {**FAST, "share": 1.0, "hw": "bad_hw.toml"}}}, ("[classes.fast]", "bad_hw.toml")),
    ({"classes": {"fast": {**FAST, "share": 1.0, "speed": 2}}}, ("unknown key 'speed'",)),
    ({"round": {"overcommit": 0.5}}, ("overcommit = 0.5",)),
    ({"classes": {"fast": {**FAST, "share": 1.0, "availability": {"probability": 0}}}}, ("probability",)),
    ({"classes": {"fast": {**FAST, "share": 1.0, "availability": {"period_rounds": 4}}}}, ("online_rounds",)),
    ({"classes": {"fast": {**FAST, "share": 1.0, "number_format": "mxfp5"}}}, ("[classes.fast]", "number_format",
                                                                              "'mxfp5'")),
]


@pytest.mark.parametrize("change, words", BAD)
def test_bad_fleet_files_are_refused_in_one_line(tmp_path, change, words):
    (tmp_path / "bad_hw.toml").write_text("rows = 'many'\n")
    doc = {"round": {}, "classes": {"fast": {**FAST, "share": 1.0}}}
    if "assignment" in change:
        doc["classes"] = {"fast": FAST, "slow": SLOW}
    doc.update(change)
    with pytest.raises(FleetError) as err:
        fleet_from_dict(doc, source="f.toml", folder=tmp_path)
    message = str(err.value)
    assert "\n" not in message and message.startswith("f.toml")
    for word in words:
        assert word in message, (word, message)


def test_a_bad_fleet_stops_bench_fl_before_any_training(tmp_path, monkeypatch, capsys):
    import bench.fl.__main__ as command

    monkeypatch.chdir(tmp_path)
    ws = workspace(tmp_path, out_with="results.json")
    (ws / "shares.toml").write_text('[classes.a]\nhw = "paper_default"\nmemory_bytes = 1e9\nshare = 0.7\n'
                                    'downlink_bytes_per_s = 1e6\nuplink_bytes_per_s = 1e6\nlatency_s = 0.0\n')
    argv = ["--preset", "smoke", "--model", "convnet", "--out", str(ws / "out")]
    assert_fails_clean(command.main, [*argv, "--fleet", "shares.toml"], capsys, ws, ("shares.toml", "sum to 0.7"))
    assert_fails_clean(command.main, [*argv, "--fleet", "nowhere.toml"], capsys, ws, ("nowhere.toml",))
    (ws / "sys.toml").write_text("[links]\nlatency_s = 0.1\n")
    assert_fails_clean(command.main, [*argv, "--fleet", "paper", "--system", "sys.toml"], capsys, ws,
                       ("--fleet", "--system"))


# ---- clients to classes, availability -----------------------------------------------------------------------

def test_class_counts_follow_the_shares_exactly():
    # 10 clients at 0.25 each: 2.5 each, floors 2 + 2 + 2 + 2 = 8, the 2 left to the earliest of the
    # equal remainders: 3, 3, 2, 2. 3 clients at 1/3, 2/3: 1 and 2.
    assert class_counts([0.25] * 4, 10) == [3, 3, 2, 2]
    assert class_counts([1 / 3, 2 / 3], 3) == [1, 2]
    assert class_counts([0.7, 0.3], 1) == [1, 0]


def test_assignment_is_reproducible_from_the_seed():
    mixed = load_fleet("mixed")
    a = assign_classes(mixed, 40, seed=7)
    assert a == assign_classes(mixed, 40, seed=7)
    assert sorted(a) == sorted(assign_classes(mixed, 40, seed=8))  # same counts (10 each) ...
    assert a != assign_classes(mixed, 40, seed=8)  # ... to other clients
    assert [a.count(c) for c in range(4)] == [10, 10, 10, 10]


def test_availability_patterns():
    fleet = fleet_of({"always": {**FAST, "share": 0.5},
                      "night": {**FAST, "share": 0.5, "availability": {"period_rounds": 4, "online_rounds": 1}}},
                     assignment=None)
    classes = (0, 1, 1, 1)
    rounds = np.array([online(fleet, classes, t, seed=3) for t in range(1, 9)])
    assert rounds[:, 0].all()  # always online
    for k in (1, 2, 3):  # online 1 round of every 4, at the client's own phase
        assert rounds[:4, k].sum() == 1 and (rounds[:4, k] == rounds[4:, k]).all()
    coin = fleet_of({"c": {**FAST, "share": 1.0, "availability": {"probability": 0.5}}})
    draws = np.array([online(coin, (0,) * 50, t, seed=0) for t in range(1, 41)])
    assert 0.4 < draws.mean() < 0.6 and (draws == np.array([online(coin, (0,) * 50, t, seed=0)
                                                             for t in range(1, 41)])).all()


def test_over_commitment_samples_ceil_of_the_product():
    # Bonawitz et al.'s 130 %: 10 wanted -> 13 sampled; 1.1 x 10 = 11.000000000000002 in floating
    # point, still 11; never more than the clients there are.
    assert sampled_count(10, 1.3, 100) == 13
    assert sampled_count(10, 1.1, 100) == 11
    assert sampled_count(10, 1.3, 12) == 12
    assert sampled_count(3, 1.0, 3) == 3


# ---- one round ---------------------------------------------------------------------------------------------

def offer(client, finish_parts, *, available=True, fits=True, energy=1.0, down=100, up=50):
    d, c, u = finish_parts
    return ClientOffer(client, available, fits, d, c, u, energy, down, up)


def test_plan_round_by_hand():
    # Five sampled clients, 3 wanted, deadline 10 s:
    #   0: unavailable; 1: memory too small;
    #   2: 1 + 2 + 1 = 4 s; 3: 2 + 4 + 2 = 8 s; 4: 3 + 8 + 3 = 14 s (past the deadline).
    # Two arrive by the deadline (< 3 wanted) and client 4 is still working: the round closes at 10 s.
    # Device time: 2 + 4 + client 4's compute until the close, 10 - 3 = 7 s -> 13 s; its energy
    # 1 J x 7 / 8; bytes down: the three that downloaded (300), up: the two arrivals (100).
    offers = [offer(0, (1, 1, 1), available=False), offer(1, (1, 1, 1), fits=False), offer(2, (1, 2, 1)),
              offer(3, (2, 4, 2)), offer(4, (3, 8, 3))]
    plan = plan_round(1, offers, target=3, deadline_s=10.0)
    assert plan.arrived == (2, 3)
    assert plan.dropped == {0: "unavailable", 1: "memory", 4: "deadline"}
    assert (plan.collect_s, plan.device_s, plan.energy_j) == (10.0, 13.0, 1.0 + 1.0 + 7 / 8)
    assert (plan.down_bytes, plan.up_bytes, plan.slowest_client) == (300, 100, 3)
    # 2 wanted: the round closes at the second arrival (8 s); client 4 is surplus, cut after
    # 8 - 3 = 5 s of its 8 s of compute.
    plan = plan_round(1, offers, target=2, deadline_s=10.0)
    assert (plan.arrived, plan.dropped[4], plan.collect_s, plan.device_s) == ((2, 3), "surplus", 8.0, 11.0)
    # Nobody still working at the deadline: the round closes at its last arrival.
    plan = plan_round(1, offers[:4], target=3, deadline_s=10.0)
    assert (plan.arrived, plan.collect_s) == ((2, 3), 8.0)
    assert plan_round(1, offers[:2], target=3, deadline_s=10.0).collect_s == 0.0  # nobody worked


finite = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)


@given(st.lists(st.tuples(st.booleans(), st.booleans(), finite, finite, finite), min_size=1, max_size=12),
       st.integers(1, 12), st.one_of(st.just(math.inf), st.floats(min_value=0.01, max_value=200.0)))
def test_a_client_never_both_arrives_and_is_dropped(raw, target, deadline_s):
    offers = [ClientOffer(k, a, f, d, c, u, c, 10, 5) for k, (a, f, d, c, u) in enumerate(raw)]
    plan = plan_round(1, offers, target=target, deadline_s=deadline_s)
    assert not set(plan.arrived) & set(plan.dropped)
    assert set(plan.arrived) | set(plan.dropped) == set(plan.sampled)
    assert len(plan.arrived) <= target
    by_client = {o.client: o for o in offers}
    assert all(by_client[k].finish_s <= min(deadline_s, plan.collect_s) for k in plan.arrived)
    assert plan.device_s <= math.fsum(o.compute_s for o in offers) + 1e-9
    assert plan.up_bytes == 5 * len(plan.arrived)


# ---- runs --------------------------------------------------------------------------------------------------

def test_hand_worked_fleet_run(digits, pricer):
    # Three clients, two classes, assignment [fast, fast, slow], a 10 s deadline.
    #   fast: infinite links, zero latency: a client's round is its compute c_k on the paper's
    #         accelerator (well under a second here: asserted), so it finishes at c_k;
    #   slow: 1000 B/s both ways: it downloads the whole ConvNet (D bytes, the closed form: ~2.5 MB)
    #         for D / 1000 s, over 2000 s, so it cannot finish in 10 s.
    # participation 1 (3 wanted, 3 sampled): clients 0 and 1 arrive; client 2 is still downloading
    # at 10 s, so the round closes at the deadline: collect_s = 10, round_wall_s = 10 + server_s,
    # dropped_deadline = 1; it computed nothing (10 - D / 1000 < 0), so round_device_s = c_0 + c_1;
    # bytes: 3 downloads (D each) and 2 uploads (D + 8 B of sample count) = 5 D + 16.
    # participation 2/3 (2 wanted), over-commitment 1.5 (ceil(1.5 x 2) = 3 sampled): clients 0 and 1
    # are the 2 wanted; the round closes at the later of them, max(c_0, c_1); client 2 is surplus.
    fleet = fleet_of({"fast": FAST, "slow": SLOW}, deadline_s=10.0, overcommit=1.5,
                     assignment=["fast", "fast", "slow"])
    inputs = run_inputs(digits, fleet=fleet)
    out = run_job(Job("fedavg", HP), inputs, pricer=pricer)
    sizes = closed_form_sizes(pricer.prepared(Job("fedavg", HP).method), Job("fedavg", HP).method)
    d = sum(sizes.layer_bytes)
    assert d / 1000 > 2000
    c = [pricer.local_training(Job("fedavg", HP).method, HP, len(inputs.parts[k]), 1, inputs.devices[k])[0]
         for k in (0, 1)]
    assert max(c) < 1.0
    for row in out.rows:
        assert (row["sampled"], row["clients"], row["dropped_deadline"], row["dropped_surplus"]) == (3, 2, 1, 0)
        assert row["collect_s"] == 10.0 and row["round_wall_s"] == 10.0 + row["server_s"]
        assert row["round_device_s"] == math.fsum(c)
        assert row["round_bytes"] == 5 * d + 16
    assert [h["clients"] for h in out.result.history] == [[0, 1], [0, 1]]
    # the projection printed before the run counts the arrivals' samples, what the loop then trains
    # (clients 0 and 1, 2 rounds), not the 3 sampled clients'
    ahead = forecast(Job("fedavg", HP).method,
                     model_fn=functools.partial(inputs.build, Head()), train=inputs.train, parts=inputs.parts,
                     cfg=inputs.fl, hp=HP, execution=inputs.execution, arrivals=out.plan.arrivals)
    assert ahead.samples == out.result.samples_trained == planned_samples(inputs.parts, inputs.fl, HP, [[0, 1], [0, 1]])
    assert planned_samples(inputs.parts, inputs.fl, HP) > ahead.samples

    out = run_job(Job("fedavg", HP), run_inputs(digits, fleet=fleet, participation=2 / 3, rounds=1), pricer=pricer)
    for row in out.rows:
        assert (row["sampled"], row["clients"], row["dropped_deadline"], row["dropped_surplus"]) == (3, 2, 0, 1)
        assert row["collect_s"] == max(c)

    small = fleet_of({"fast": FAST, "slow": {**SLOW, "memory_bytes": 1e6}}, deadline_s=10.0,
                     assignment=["fast", "fast", "slow"])  # 1 MB: less than the step's ~12 MB peak
    out = run_job(Job("fedavg", HP), run_inputs(digits, fleet=small, rounds=1), pricer=pricer)
    for row in out.rows:  # client 2 declines: nothing still working, the round closes at max(c_0, c_1)
        assert (row["clients"], row["dropped_memory"], row["collect_s"]) == (2, 1, max(c))
        assert row["round_bytes"] == 4 * d + 16
    assert out.plan.summary(small)["classes"]["slow"]["fits"] is False


@pytest.mark.slow
@pytest.mark.parametrize("name", ["spherefed+ffc", "fedavg+ccvr"])
def test_an_unconstrained_fleet_is_todays_synchronous_round(digits, pricer, name):
    # One class: the paper's accelerator, the default system's links, unlimited memory, always
    # online, no deadline, no over-commitment: every figure of the run equals the run without a fleet,
    # the calibration round's (every client's statistics arrive) and the calibrated accuracy too.
    system = load_system_model(DEFAULT_SYSTEM_PATH)
    link = system.link(0)
    fleet = fleet_of({"paper": {"hw": "paper_default", "memory_bytes": math.inf, "share": 1.0,
                                "downlink_bytes_per_s": link.downlink_bytes_per_s,
                                "uplink_bytes_per_s": link.uplink_bytes_per_s, "latency_s": link.latency_s}})
    job = Job(name, HP)
    today = run_job(job, run_inputs(digits), pricer=pricer)
    fleet_run = run_job(job, run_inputs(digits, fleet=fleet), pricer=RunPricer(run_inputs(digits).priced_model()))
    assert fleet_run.result.accuracy == today.result.accuracy  # bitwise
    assert fleet_run.result.history == today.result.history
    assert fleet_run.result.transfers == today.result.transfers
    assert fleet_run.rows == today.rows  # every column, exactly
    assert fleet_run.rows[-1]["stage"] == "calibration" and fleet_run.rows[-1]["clients"] == 3


@pytest.mark.slow
def test_the_loop_aggregates_exactly_the_arrivals(digits, pricer):
    # A fleet that drops client 2 every round (its memory is too small) trains what a run of
    # clients 0 and 1 alone trains: same seeds per (round, client), same aggregation weights.
    fleet = fleet_of({"big": FAST, "tiny": {**FAST, "memory_bytes": 1.0}}, assignment=["big", "big", "tiny"])
    inputs = run_inputs(digits, fleet=fleet)
    out = run_job(Job("fedavg", HP), inputs, pricer=pricer)
    two = run_job(Job("fedavg", HP), run_inputs(digits, parts=inputs.parts[:2]), pricer=pricer)
    assert out.result.accuracy == two.result.accuracy
    assert [h["mean_loss"] for h in out.result.history] == [h["mean_loss"] for h in two.result.history]
    assert ledger_totals(out.result.transfers) == ledger_totals(two.result.transfers)


@pytest.mark.slow
def test_same_seed_same_arrivals_and_accuracy(digits, pricer):
    # FedAvg's training rounds and CCVR's calibration round after them (round 3: client 1 offline)
    fleet = fleet_of({"a": {**FAST, "share": 0.5, "availability": {"probability": 0.5}},
                      "b": {**SLOW, "share": 0.5, "uplink_bytes_per_s": 1e9, "downlink_bytes_per_s": 1e9}},
                     deadline_s=5.0)
    runs = [run_job(Job("fedavg+ccvr", HP), run_inputs(digits, fleet=fleet), pricer=p)
            for p in (pricer, RunPricer(run_inputs(digits).priced_model()))]  # the second prices afresh
    assert runs[0].plan == runs[1].plan
    assert runs[0].result.accuracy == runs[1].result.accuracy
    assert runs[0].rows == runs[1].rows
    assert sum(r["dropped_unavailable"] for r in runs[0].rows) > 0  # the plan is not trivial
    assert runs[0].plan.calibration.dropped == {1: "unavailable"}  # ... nor is its calibration round


def test_a_round_nobody_arrives_in_keeps_the_model(digits, pricer):
    fleet = fleet_of({"far": SLOW}, deadline_s=1.0, assignment=["far"] * 3)
    out = run_job(Job("fedavg", HP), run_inputs(digits, fleet=fleet), pricer=pricer)
    assert [h["clients"] for h in out.result.history] == [[], []]
    assert all(r["clients"] == 0 and r["dropped_deadline"] == 3 and r["server_s"] == 0.0 for r in out.rows)
    assert out.result.samples_trained == 0 and out.result.transfers == ()


# ---- grids and studies -------------------------------------------------------------------------------------

def test_a_fleet_is_a_grid_key_and_a_study_axis():
    import tomllib

    from bench.lib.run.config import resolved_runs
    from bench.lib.run.study import point_config
    from bench.lib.study.spec import StudyError
    from bench.lib.study.study_file import load_study, parse_study

    cfg = point_config({"model": "convnet", "preset": "smoke", "fleet": "mixed"})
    assert cfg.fleet_path == "mixed" and resolved_runs(cfg)[0].fleet.name == "mixed"
    with pytest.raises(ValueError, match="--fleet mixed and --system"):
        resolved_runs(dataclasses.replace(cfg, system_path="configs/system/ideal.toml"))
    study = load_study("configs/studies/digits-fleets.toml")
    assert [s.label for s in study.settings] == ["alpha=0.5", "alpha=0.5 fleet=mixed deadline=1s",
                                                 "alpha=0.5 fleet=mixed deadline=6s", "alpha=0.5 fleet=mixed"]
    assert {s.tuned_on for s in study.settings} == {study.settings[0]}  # the fleet runs at the all-clients choice
    with open("configs/studies/digits-fleets.toml", "rb") as f:
        doc = tomllib.load(f)
    with pytest.raises(StudyError, match='add "none"'):
        parse_study({**doc, "fleets": ["mixed"]}, "s.toml")
    with pytest.raises(StudyError, match="fleets: .*nowhere"):
        parse_study({**doc, "fleets": ["none", "nowhere.toml"]}, "s.toml")


def test_a_fleet_runs_participation_is_recorded_and_reported():
    # two training rounds and a calibration row: round 1 aggregated 2 of 3 sampled (one past the
    # deadline), round 2 aggregated 1 of 3 (one unavailable, one over memory); the calibration row
    # is not a training round. Per round: clients (2 + 1) / 2 = 1.5, sampled (3 + 3) / 2 = 3.0;
    # drops over the run: deadline 1, unavailable 1, memory 1, surplus 0.
    from bench.lib.study.run_files import participation
    from bench.study.report import participation_columns
    from bench.study.table import _participation

    def row(stage, clients, sampled, **dropped):
        return {"stage": stage, "clients": clients, "sampled": sampled, "collect_s": 1.5,
                **{f"dropped_{r}": dropped.get(r, 0) for r in ("unavailable", "memory", "deadline", "surplus")}}

    plan = participation([row("train", 2, 3, deadline=1), row("train", 1, 3, unavailable=1, memory=1),
                          row("calibration", 3, 3)])
    assert plan["clients"] == [2, 1] and plan["sampled"] == [3, 3] and plan["collect_s"] == [1.5, 1.5]
    columns = participation_columns(plan)
    assert columns == {"clients_per_round": 1.5, "sampled_per_round": 3.0, "dropped_unavailable": 1,
                       "dropped_memory": 1, "dropped_deadline": 1, "dropped_surplus": 0}
    assert _participation(columns) == "1.5 / 3.0; unavailable 1.0, memory 1.0, deadline 1.0"
    assert participation_columns(None) == {}  # a run without a fleet adds no column


def test_a_study_sweeps_the_deadline_and_keeps_the_fleet_files_own_runs():
    import math
    import tomllib

    from bench.lib.grid.point import run_id
    from bench.lib.study.runner import make_point, parse_point, prepare
    from bench.lib.study.spec import StudyError
    from bench.lib.study.study_file import parse_study

    with open("configs/studies/digits-fleets.toml", "rb") as f:
        doc = tomllib.load(f)
    study = parse_study({**doc, "deadlines_s": [1.0, 6.0, 60.0, math.inf]}, "s.toml")
    # 60 s is configs/fleets/mixed.toml's own deadline: that setting keeps the label (and the run ids)
    # of the study without deadlines_s; the others are settings of their own, all tuned without the fleet
    assert [s.label for s in study.settings] == ["alpha=0.5", "alpha=0.5 fleet=mixed deadline=1s",
                                                 "alpha=0.5 fleet=mixed deadline=6s", "alpha=0.5 fleet=mixed",
                                                 "alpha=0.5 fleet=mixed deadline=inf"]
    assert {s.tuned_on for s in study.settings} == {study.settings[0]}
    fl, hp = study.fl("convnet", study.settings[1], 0), study.hparams("fedavg", {"lr": 0.05})
    from bench.study.phases import execution
    ex = execution(study)
    plain = make_point("convnet", "fedavg", 0, fl, hp, ex, fleet="mixed")
    at_inf = make_point("convnet", "fedavg", 0, fl, hp, ex, fleet="mixed", deadline_s=math.inf)
    assert at_inf["deadline_s"] == "inf" and "deadline_s" not in plain  # JSON has no infinity
    assert parse_point(at_inf).deadline_s == math.inf and parse_point(plain).deadline_s is None
    assert run_id("bench.study", plain) != run_id("bench.study", at_inf)
    # a point's settings are bench.fl's flags: its errors are theirs, the point named first
    with pytest.raises(ValueError, match="^--deadline-s 6: overrides a fleet's round rule; give --fleet FILE too"):
        prepare({**make_point("convnet", "fedavg", 0, fl, hp, ex), "deadline_s": 6.0})
    with pytest.raises(ValueError, match="^--deadline-s: deadline_s = 0.0 must be > 0"):
        prepare({**plain, "deadline_s": 0})
    for bad, words in (([0.0], "seconds > 0"), ([], "seconds > 0"), (["6"], "seconds > 0"), ([6.0, 6], "twice")):
        with pytest.raises(StudyError, match=words):
            parse_study({**doc, "deadlines_s": bad}, "s.toml")
    with pytest.raises(StudyError, match="deadlines_s needs a fleet"):
        parse_study({k: v for k, v in doc.items() if k != "fleets"} | {"deadlines_s": [6.0]}, "s.toml")


def test_the_fleet_answer_chooses_the_fastest_deadline_every_seed_reached():
    # FedAvg, 3 seeds, target 80 %. Every client: final 97, 98, 96 %.
    #   1 s: final 70, 75, 72; only seed 0 reaches 80 % (5 s): not a candidate although fastest.
    #   6 s: final 96, 97, 95 (Δ vs every client -1, -1, -1: mean -1.00, std 0); 80 % at 20, 18, 22 s (mean 20).
    #   60 s (the file's): final 97, 98, 96.5; 80 % at 40, 44, 36 s (mean 40).
    # Choice: 6 s. 60 s minus 6 s, paired: 20, 26, 14 s, mean 20, std 6, half width
    # t_{0.975, 2} * 6 / sqrt(3) = 4.3027 * 3.4641 = 14.905: [5.09, 34.91]; t = 20 / 3.4641 = 5.7735, p = 1 -
    # t / sqrt(2 + t^2) = 0.028714, the table's only time comparison (Holm: unchanged): resolved.
    # 1 s against 6 s: one seed in common, no interval.
    # Accuracy against every client (spread floored at one of 360 test images, 0.2778): 6 s: -1 on every seed,
    # [-1 - 0.6900, -1 + 0.6900], t = 1 / 0.160375 = 6.2354, p = 1 - t / sqrt(2 + t^2) = 0.024769; 1 s: -27, -23,
    # -24, p = 0.00237; 60 s: 0, 0, +0.5, p = 0.42265. Holm over the three (one per deadline, not per target):
    # 3 x 0.00237, 2 x 0.024769 = 0.049537 < 0.05: resolved (bold), 0.42265 not.
    import math
    import tomllib

    import pandas as pd

    from bench.lib.study.study_file import parse_study
    from bench.study.fleets import DECLARED, fleet_answers, fleet_markdown

    with open("configs/studies/digits-fleets.toml", "rb") as f:
        doc = tomllib.load(f)
    study = parse_study({**doc, "deadlines_s": [1.0, 6.0, 60.0]}, "s.toml")
    every, one, six, own = (s.label for s in study.settings)
    finals = {every: [97, 98, 96], one: [70, 75, 72], six: [96, 97, 95], own: [97, 98, 96.5]}
    runs = pd.DataFrame([{"model": "convnet", "setting": s, "method": "fedavg", "seed": seed, "final_accuracy_pct": v,
                          "clients_per_round": 9.5, "sampled_per_round": 13.0, "test_samples": 360}
                         for s, values in finals.items() for seed, v in enumerate(values)])
    walls = {every: [10, 10, 10], one: [5, None, None], six: [20, 18, 22], own: [40, 44, 36]}
    tta = pd.DataFrame([{"model": "convnet", "setting": s, "method": "fedavg", "seed": seed, "target_pct": 80.0,
                         "target_source": DECLARED, "reached": w is not None, "wall_s": w,
                         "energy_j": None if w is None else w / 10, "bytes": None if w is None else 1e6}
                        for s, values in walls.items() for seed, w in enumerate(values)])
    (answer,) = [a for a in fleet_answers(study, runs, tta) if a["target_pct"] == 80.0]
    assert answer["choice_deadline_s"] == 6.0
    rows = {r["deadline_s"]: r for r in answer["deadlines"]}
    assert [r["reached"] for r in answer["deadlines"]] == [1, 3, 3]
    assert rows[6.0]["wall_s"]["mean"] == 20.0 and rows[6.0]["final_vs_every_client_pct"]["mean"] == -1.0
    assert rows[60.0]["wall_s_vs_choice"]["mean"] == 20.0 and rows[60.0]["choice_resolved"]
    assert math.isclose(rows[60.0]["wall_s_vs_choice"]["ci_low"], 20 - 4.302653 * 6 / math.sqrt(3), rel_tol=1e-6)
    assert "wall_s_vs_choice" not in rows[1.0]
    text = "\n".join(fleet_markdown([answer]))
    assert rows[6.0]["final_vs_every_client_pct"]["p_adjusted"] == pytest.approx(0.049537, abs=1e-5)
    assert rows[60.0]["wall_s_vs_choice"]["p_adjusted"] == pytest.approx(0.028714, abs=1e-5)
    assert "| 6 | 9.5 / 13.0 | 96.00 ± 1.00 | **-1.00 [-1.69, -0.31]** | 3/3 | 20 ± 2 | **choice** |" in text
    assert "| 60 | 9.5 / 13.0 | 97.17 ± 0.76 | +0.17 [-0.55, +0.88] |" in text  # s 0.2887 > the floor
    assert "| 40 ± 4 | **+20 [+5.1, +34.9]**, adj. p 0.029: resolved | 4 ± 0.4 | 1 ± 0 |" in text

"""The round model (accel_sim/rounds.py): hand-worked rounds, the ledger, time-to-accuracy."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.cost.system import (INFINITE_LINK, ClientRound, Link, SystemModel, SystemModelError, client_round_s,
                              device_energy_j, ledger_rows, load_system_model, on_device, round_cost,
                              system_model_from_dict, time_to_accuracy)


def test_round_time_hand_worked_three_clients():
    # Three clients; the modeled step takes 0.2 s and 1 J dynamic, static power 0.5 W.
    # Client 0: speed 1.0, 10 steps -> compute 2.0 s, energy 10 + 0.5 * 2.0 = 11.0 J
    #           link 1e6 B/s down, 0.5e6 B/s up, 0.1 s latency; 2e6 B down, 1e6 B up:
    #           0.1 + 2 + 2.0 + 0.1 + 2 = 6.2 s
    # Client 1: speed 2.0, 30 steps -> compute 30 * 0.2 / 2 = 3.0 s, energy 30 + 0.5 * 3.0 = 31.5 J
    #           infinite link: 3.0 s
    # Client 2: speed 0.5, 5 steps -> compute 5 * 0.2 / 0.5 = 2.0 s, energy 5 + 0.5 * 2.0 = 6.0 J
    #           link 4e6 B/s both ways, 0 latency; 2e6 B down, 1e6 B up: 0.5 + 2.0 + 0.25 = 2.75 s
    # Round: max(6.2, 3.0, 2.75) + server 0.3 = 6.5 s; device 2 + 3 + 2 = 7 s; energy 48.5 J;
    # bytes 2e6 + 1e6 + 0 + 0 + 2e6 + 1e6 = 6e6 (client 1 sends nothing, e.g. a cached model).
    step_s, step_j, static_w = 0.2, 1.0, 0.5
    specs = [(0, 1.0, 10, Link(1e6, 0.5e6, 0.1), 2_000_000, 1_000_000),
             (1, 2.0, 30, INFINITE_LINK, 0, 0),
             (2, 0.5, 5, Link(4e6, 4e6, 0.0), 2_000_000, 1_000_000)]
    clients = []
    for k, speed, steps, link, down, up in specs:
        compute = steps * step_s / speed
        clients.append(ClientRound(k, compute, device_energy_j(steps * step_j, static_w, compute), down, up, link))
    assert [client_round_s(c) for c in clients] == pytest.approx([6.2, 3.0, 2.75])
    cost = round_cost(clients, server_s=0.3)
    assert cost.round_wall_s == pytest.approx(6.5)
    assert cost.device_s == pytest.approx(7.0)
    assert cost.energy_j == pytest.approx(48.5)
    assert cost.bytes == 6_000_000 and cost.down_bytes == 4_000_000
    assert cost.slowest_client == 0
    # the same client 1 from its modeled price: 30 steps x 0.2 s = 6 s and 30 x (1 + 0.5 x 0.2) = 33 J on
    # the modeled accelerator; at speed 2: 3 s, 30 J dynamic + 0.5 W x 3 s = 31.5 J
    assert on_device(6.0, 33.0, static_w=0.5, speed=2.0) == pytest.approx((3.0, 31.5))


@given(st.lists(st.floats(0.0, 1e4), min_size=1, max_size=8), st.floats(0.0, 1e3))
def test_identical_clients_infinite_links_round_is_one_client_plus_server(computes, server_s):
    compute = computes[0]
    clients = [ClientRound(k, compute, 1.0, 10_000, 5_000, INFINITE_LINK) for k in range(len(computes))]
    cost = round_cost(clients, server_s=server_s)
    assert cost.round_wall_s == compute + server_s
    assert cost.device_s == pytest.approx(compute * len(computes))


@given(st.lists(st.tuples(st.floats(0.0, 1e3), st.floats(0.0, 1e3), st.integers(0, 10**9)), min_size=1, max_size=6))
def test_round_wall_at_least_every_client(specs):
    link = Link(1e6, 2e6, 0.01)
    clients = [ClientRound(k, c, e, b, b // 2, link) for k, (c, e, b) in enumerate(specs)]
    cost = round_cost(clients, server_s=0.5)
    assert all(cost.round_wall_s >= client_round_s(c) + 0.5 - 1e-9 for c in clients)


def _costs(walls):
    link = INFINITE_LINK
    return [round_cost([ClientRound(0, w, 2 * w, 100, 50, link)], server_s=0.0) for w in walls]


def test_ledger_cumulative_columns_and_totals():
    costs = _costs([1.0, 2.0, 0.5])
    rows = ledger_rows("fedavg", [(t + 1, "train", 1, acc, c) for t, (acc, c) in enumerate(zip([0.2, None, 0.6], costs))])
    for key in ("cum_wall_s", "cum_device_s", "cum_energy_j", "cum_bytes"):
        values = [r[key] for r in rows]
        assert values == sorted(values)
    last = rows[-1]
    assert last["cum_wall_s"] == 3.5 and last["cum_energy_j"] == 7.0 and last["cum_bytes"] == 450


def test_time_to_accuracy_first_round_at_or_above_target_and_not_reached():
    a = ledger_rows("a", [(t + 1, "train", 1, acc, c) for t, (acc, c) in
                          enumerate(zip([0.5, 0.8, 0.7, 0.9], _costs([1, 1, 1, 1])))])
    b = ledger_rows("b", [(t + 1, "train", 1, acc, c) for t, (acc, c) in
                          enumerate(zip([0.1, None, 0.79], _costs([2, 2, 2])))])
    tta = time_to_accuracy(a + b, target=0.8)
    assert tta["a"].reached and tta["a"].round == 2 and tta["a"].wall_s == 2 and tta["a"].bytes == 300
    assert not tta["b"].reached and tta["b"].round is None and tta["b"].wall_s is None
    # a target is fixed before the runs: b's curve does not move a's time to accuracy
    b_better = ledger_rows("b", [(t + 1, "train", 1, 1.0, c) for t, c in enumerate(_costs([2, 2, 2]))])
    assert time_to_accuracy(a + b_better, target=0.8)["a"] == tta["a"]


def test_system_model_links_cycle_and_speed_factors_are_seeded():
    system = SystemModel(downlink_bytes_per_s=(1e6, 2e6), latency_s=0.0, speed="lognormal", speed_sigma=0.3)
    assert system.link(0).downlink_bytes_per_s == 1e6 and system.link(3).downlink_bytes_per_s == 2e6
    s1, s2 = system.speed_factors(5, seed=7), system.speed_factors(5, seed=7)
    assert s1 == s2 and len(set(s1)) == 5 and all(s > 0 for s in s1)
    assert system.speed_factors(5, seed=8) != s1
    assert SystemModel().speed_factors(3, seed=0) == (1.0, 1.0, 1.0)
    uniform = SystemModel(speed="uniform", speed_low=0.5, speed_high=0.6).speed_factors(50, seed=1)
    assert all(0.5 <= s <= 0.6 for s in uniform)


@pytest.mark.parametrize("data, name", [
    ({"links": {"uplink_bytes_per_s": -1.0}}, "uplink_bytes_per_s"),
    ({"links": {"latency_s": math.inf}}, "latency_s"),
    ({"links": {"bandwidth": 1.0}}, "links.bandwidth"),
    ({"devices": {"speed": "gamma"}}, "speed"),
    ({"devices": {"speed_low": 2.0, "speed_high": 1.0}}, "speed_low"),
    ({"devices": {"client_hw": [""]}}, "client_hw"),
    ({"network": {}}, "network"),
    ({"links": {"downlink_bytes_per_s": []}}, "downlink_bytes_per_s"),
    # numbers beyond what the round model represents (issue 14): named with their range
    ({"links": {"downlink_bytes_per_s": 1e-300}}, r"downlink_bytes_per_s = 1e-300 is out of range; give a number in \[1, 1e\+15\] or inf"),
    ({"links": {"uplink_bytes_per_s": math.nan}}, r"uplink_bytes_per_s = nan is out of range; give a number in \[1, 1e\+15\] or inf"),
    ({"links": {"latency_s": 1e300}}, r"latency_s = 1e\+300 is out of range; give a number in \[0, 1e\+06\]"),
    ({"links": {"latency_s": "0.05"}}, r"latency_s = '0.05' must be a number in \[0, 1e\+06\]"),
    ({"devices": {"speed_sigma": 1e308}}, r"'speed_sigma' = 1e\+308 is out of range; give a number in \[0, 5\]"),
    ({"devices": {"speed_low": 0.0}}, r"'speed_low' = 0.0 is out of range; give a number in \[0.001, 1000\]"),
])
def test_system_model_rejects_bad_values_by_name(data, name):
    with pytest.raises(SystemModelError, match=name):
        system_model_from_dict(data, source="sys.toml")


def test_shipped_system_models_load(tmp_path):
    default = load_system_model("configs/system/default.toml")
    assert default == SystemModel()
    ideal = load_system_model("configs/system/ideal.toml")
    assert ideal.link(0) == INFINITE_LINK
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(SystemModelError, match="bad.toml"):
        load_system_model(bad)


def test_system_model_is_recorded_as_strict_json():
    # JSON has no infinity: the ideal links' inf bandwidths are written "inf", as the TOML spells them
    import json

    ideal = load_system_model("configs/system/ideal.toml")
    text = json.dumps(ideal.describe(), allow_nan=False)
    assert json.loads(text)["downlink_bytes_per_s"] == "inf"
    listed = SystemModel(downlink_bytes_per_s=(1e6, float("inf")))
    assert listed.describe()["downlink_bytes_per_s"] == [1e6, "inf"]
    assert SystemModel().describe()["latency_s"] == 0.05

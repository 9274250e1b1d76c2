"""The Flower integration's parts that need no Flower (workloads/fl/flower, docs/flower.md): the
round arithmetic by hand, the step meter on a plain PyTorch step, and the CLI's install hint when
the extra is missing. The parts that need Flower are in tests/test_flower.py."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from torch import nn

from accel_sim.hardware import HardwareConfig
from workloads.cost.system import ROUNDS_COLUMNS, SystemModel
from workloads.flower import meter as meter_module
from workloads.flower.ledger import (CLIENT_COLUMNS, CLIENT_KEYS, ROUND_KEYS, client_metrics, client_rows_of,
                                        ledger_rows_of, round_cost_of, round_metrics, to_csv)
from workloads.cost.step import StepPrice
from workloads.flower.ledger import CalibrationRound
from workloads.flower.meter import StepMeter, TrainCost, metered_step, metered_work, metering

ROOT = Path(__file__).resolve().parents[1]


# ---- the round, by hand ------------------------------------------------------------------------------

def _client(k: int, train_s: float, energy_j: float, static_w: float, down: int, up: int) -> dict:
    return client_metrics(k, TrainCost(steps=3, train_s=train_s, step_s=train_s / 3, energy_j=energy_j,
                                       static_w=static_w, peak_memory_bytes=100 * (k + 1)), down_bytes=down, up_bytes=up)


def test_round_metrics_hand_case():
    # links: 1000 B/s down, 500 B/s up, 0.5 s latency per transfer; client 1 runs at half speed.
    system = SystemModel(downlink_bytes_per_s=1000.0, uplink_bytes_per_s=500.0, latency_s=0.5)
    clients = [_client(0, 2.0, 5.0, 1.0, 1000, 500), _client(1, 1.0, 3.0, 1.0, 1000, 500)]
    m = round_metrics(clients, system, speeds=(1.0, 0.5), server_s=0.25)
    # client 0: 0.5 + 1000/1000 = 1.5 down, 2.0 compute, 0.5 + 500/500 = 1.5 up -> 5.0 s
    # client 1: 1.5 + 1.0/0.5 = 2.0 + 1.5 -> 5.0 s as well; the first slowest wins (client 0)
    assert m["accel_round_wall_s"] == 5.0 + 0.25
    assert m["accel_round_device_s"] == 2.0 + 2.0
    # energy: client 0 as modeled (5 J); client 1 dynamic 3 - 1 W x 1 s = 2 J, + 1 W x 2 s -> 4 J
    assert m["accel_round_energy_j"] == 5.0 + 4.0
    assert (m["accel_round_down_bytes"], m["accel_round_up_bytes"]) == (2000, 1000)
    assert (m["accel_clients"], m["accel_slowest_client"], m["accel_server_s"]) == (2, 0, 0.25)
    assert m["accel_clients_compute_s"] == [2.0, 2.0] and m["accel_clients_client_round_s"] == [5.0, 5.0]
    assert m["accel_clients_energy_j"] == [5.0, 4.0] and m["accel_clients_peak_memory_bytes"] == [100, 200]
    assert set(m) == set(ROUND_KEYS) and set(clients[0]) == set(CLIENT_KEYS)


def test_ledger_rows_accumulate_and_csvs_have_their_columns():
    system = SystemModel(downlink_bytes_per_s=math.inf, uplink_bytes_per_s=math.inf, latency_s=0.0)
    per_round = {r: round_metrics([_client(0, 1.0 * r, 2.0, 0.5, 10, 20), _client(1, 3.0, 1.0, 0.5, 10, 20)],
                                  system, speeds=(1.0, 1.0)) for r in (2, 1)}
    rows = ledger_rows_of("fedavg", per_round, accuracy={2: 0.5})
    assert [r["round"] for r in rows] == [1, 2] and [r["accuracy"] for r in rows] == [None, 0.5]
    assert [r["round_wall_s"] for r in rows] == [3.0, 3.0]  # the slower client, 3 s, both rounds
    assert [r["cum_device_s"] for r in rows] == [1.0 + 3.0, 1.0 + 3.0 + 2.0 + 3.0]
    assert [r["cum_bytes"] for r in rows] == [60, 120]
    assert round_cost_of(per_round[1]).slowest_client == 1
    lines = to_csv(rows, ROUNDS_COLUMNS).splitlines()
    assert lines[0].split(",") == list(ROUNDS_COLUMNS)
    assert lines[1].split(",")[ROUNDS_COLUMNS.index("accuracy")] == ""
    clients = client_rows_of("fedavg", per_round)
    assert [(c["round"], c["client"]) for c in clients] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert [c["compute_s"] for c in clients] == [1.0, 3.0, 2.0, 3.0] and set(clients[0]) == set(CLIENT_COLUMNS)


# ---- the meter on a plain PyTorch step ---------------------------------------------------------------------

def _dropout_net() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))


def _sgd_step(model: nn.Module, penalty: bool = False):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        if penalty:  # a FedProx-like extra term: more ops from the same factory
            loss = loss + sum((p * p).sum() for p in model.parameters())
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _train(model: nn.Module, meter: StepMeter | None) -> dict:
    torch.manual_seed(2)  # dropout draws from the global generator
    x, y = torch.randn(10, 6), torch.randint(0, 3, (10,))
    if meter is None:
        step = metered_step(_sgd_step, model)
        for s in (0, 4, 8):
            step(x[s:s + 4], y[s:s + 4])
    else:
        with metering(meter):
            step = metered_step(_sgd_step, model)
            for s in (0, 4, 8):
                step(x[s:s + 4], y[s:s + 4])
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_meter_leaves_weights_and_random_stream_untouched(monkeypatch):
    monkeypatch.setattr(meter_module, "_PRICES", {})  # the captures happen inside this run
    plain = _train(_dropout_net(), None)
    meter = StepMeter(HardwareConfig())
    metered = _train(_dropout_net(), meter)
    assert all(torch.equal(plain[k], metered[k]) for k in plain)
    cost = meter.cost()
    assert cost.steps == 3 and sorted(meter.batches.values()) == [2, 4]  # 4, 4 and a trailing 2
    by_batch = {meter.batches[k]: p.latency_s for k, p in meter.prices.items()}
    assert cost.step_s == by_batch[4]
    assert cost.train_s == math.fsum([by_batch[4], by_batch[4], by_batch[2]])
    assert cost.peak_memory_bytes == max(p.peak_memory_bytes for p in meter.prices.values()) > 0


def test_key_separates_programs_one_factory_builds(monkeypatch):
    monkeypatch.setattr(meter_module, "_PRICES", {})
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    meter = StepMeter(HardwareConfig())
    with metering(meter):
        for penalty in (False, True):
            metered_step(lambda m: _sgd_step(m, penalty), _dropout_net(), key=penalty)(x, y)
    plain, prox = (meter.prices[k].latency_s for k in meter.counts)
    assert len(meter_module._PRICES) == 2 and prox > plain


def test_charged_work_adds_to_the_steps_and_is_priced_once_per_key(monkeypatch):
    monkeypatch.setattr(meter_module, "_PRICES", {})
    asked = []

    def price(hw):
        asked.append(hw)
        torch.rand(3)  # a price that draws: the caller's random stream must not see it
        return StepPrice(latency_s=0.5, energy_j=2.0, peak_memory_bytes=10**9)

    metered_work(price, key="hook")  # no meter active: nothing is asked
    assert asked == []
    meter = StepMeter(HardwareConfig())
    torch.manual_seed(3)
    with metering(meter):
        metered_work(price, key="hook")
        metered_work(price, key="hook")  # the same key: priced once, charged twice
        calibration = StepMeter(HardwareConfig())
        with metering(calibration):
            metered_work(price, key="statistics", steps=4)
    assert torch.equal(torch.rand(2), torch.manual_seed(3) and torch.rand(2))
    assert asked == [HardwareConfig(), HardwareConfig()]
    # two hooks and no step: 0 steps, 2 x 0.5 s, 2 x 2 J, the hook's peak
    assert meter.cost() == TrainCost(steps=0, train_s=1.0, step_s=0.0, energy_j=4.0,
                                     static_w=HardwareConfig().energy.static_w, peak_memory_bytes=10**9)
    # a calibration: its work counts as its 4 batches, step_s their mean 0.5 / 4
    assert (calibration.cost().steps, calibration.cost().step_s) == (4, 0.125)
    # beside metered steps: the steps' cost plus the work's, the larger peak
    with_steps = StepMeter(HardwareConfig())
    _train(_dropout_net(), with_steps)
    steps_only = with_steps.cost()
    with metering(with_steps):
        metered_work(price, key="hook")
    both = with_steps.cost()
    assert both.steps == steps_only.steps == 3 and both.step_s == steps_only.step_s
    assert both.train_s == math.fsum([*(n * with_steps.prices[k].latency_s for k, n in with_steps.counts.items()),
                                      0.5])
    assert both.peak_memory_bytes == 10**9 > steps_only.peak_memory_bytes


def test_a_calibration_round_follows_the_training_rounds_in_the_ledger():
    system = SystemModel(downlink_bytes_per_s=math.inf, uplink_bytes_per_s=math.inf, latency_s=0.0)
    train = {1: round_metrics([_client(0, 1.0, 2.0, 0.5, 10, 20), _client(1, 3.0, 1.0, 0.5, 10, 20)], system,
                              speeds=(1.0, 1.0))}
    # the calibration: client 1 alone, 0.25 s of statistics, 5 B down, 7 B up, 0.75 s on the server
    calibration = CalibrationRound(2, round_metrics([_client(1, 0.25, 0.5, 0.5, 5, 7)], system, speeds=(1.0, 1.0),
                                                    server_s=0.75), accuracy=0.9)
    rows = ledger_rows_of("ccvr", train, accuracy={1: 0.5}, calibration=calibration)
    assert [(r["round"], r["stage"], r["clients"], r["accuracy"]) for r in rows] == [
        (1, "train", 2, 0.5), (2, "calibration", 1, 0.9)]
    assert (rows[1]["server_s"], rows[1]["round_wall_s"], rows[1]["round_bytes"]) == (0.75, 0.25 + 0.75, 12)
    assert rows[1]["cum_device_s"] == 1.0 + 3.0 + 0.25 and rows[1]["cum_bytes"] == 60 + 12
    clients = client_rows_of("ccvr", train, calibration)
    assert [(c["round"], c["client"]) for c in clients] == [(1, 0), (1, 1), (2, 1)]


def test_without_the_extra_the_cli_says_how_to_install(monkeypatch, capsys):
    from bench.flower.__main__ import main

    monkeypatch.setitem(sys.modules, "flwr", None)  # import flwr -> ImportError, as when not installed
    monkeypatch.setitem(sys.modules, "flwr.simulation", None)
    assert main(["--clients", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install" in err[0] and ".[flower]" in err[0]

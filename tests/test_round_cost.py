"""Rounds of a federated run priced from its own facts (workloads/fl/round_cost.py) and rounds.csv."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from accel_sim.hardware import HardwareConfig
from workloads.cost.system import INFINITE_LINK, ROUNDS_COLUMNS, ClientRound, SystemModel, client_round_s
from accel_sim.simulate import simulate
from workloads.fl.comm import ledger_totals
from workloads.fl.data import load_dataset
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl import loop
from workloads.fl.loop import RunPlan
from workloads.fl.methods import parse_method
from workloads.cost.rounds import Device, PricedModel, RunPricer, client_devices, epoch_batch_sizes, price_run
from workloads.cost.step import local_step_trace
from workloads.models import Head, build_model
from workloads.capture import capture

HW = HardwareConfig()
IDEAL = SystemModel(downlink_bytes_per_s=float("inf"), uplink_bytes_per_s=float("inf"), latency_s=0.0)


def _build(head: Head = Head()):
    return build_model("convnet", num_classes=10, image_size=16, head=head)


SPEC = PricedModel(_build, "convnet", (3, 16, 16), 10, 0)


def test_epoch_batch_sizes_follow_the_loop():
    assert epoch_batch_sizes(70, 32) == [32, 32, 6]  # ceil(70 / 32) = 3 steps, the last of 70 - 64 = 6
    assert epoch_batch_sizes(65, 32) == [32, 32]  # the loop skips a trailing batch of one sample
    assert epoch_batch_sizes(5, 32) == [5]  # fewer samples than the batch size: one step of 5
    assert epoch_batch_sizes(64, 32) == [32, 32]


def test_steady_state_step_equals_a_captured_step_after_a_warm_up():
    # local_step_trace creates the momentum buffers instead of running a warm-up step: same ops,
    # same price, same peak memory as the warm-up route
    method, hp = parse_method("fedprox"), replace(Hparams(), batch_size=6)
    torch.manual_seed(0)
    model = prepare_model(_build(), method, seed=0).to("meta").train()
    trainer = client_trainer(model, model.state_dict(), hp, method)
    x, y = torch.zeros(6, 3, 16, 16, device="meta"), torch.zeros(6, dtype=torch.long, device="meta")
    trainer.step(x, y)
    warm = capture(trainer.step, x, y, model=model, held=trainer.held()).trace  # what the step holds (w_t), as local_step_trace holds it
    steady = local_step_trace(lambda: _build(), method, hp, batch_size=6, input_shape=(3, 16, 16))
    key = lambda t: [(o.aten, o.phase, o.layer, o.work) for o in t.ops]  # noqa: E731
    assert key(warm) == key(steady)
    a, b = simulate(warm, HW), simulate(steady, HW)
    assert (a.total_cycles, a.energy_j, a.peak_memory_bytes) == (b.total_cycles, b.energy_j, b.peak_memory_bytes)


def test_client_with_fewer_samples_than_the_batch_is_priced_at_its_real_batch():
    pricer = RunPricer(SPEC)
    method, hp = parse_method("fedavg"), Hparams(batch_size=32, local_epochs=3)
    compute_s, energy_j = pricer.local_training(method, hp, 5, 1, Device(HW, 1.0))
    step5, step32 = pricer.step(method, hp, 5, 1, HW), pricer.step(method, hp, 32, 1, HW)
    assert step5.latency_s < step32.latency_s
    assert compute_s == pytest.approx(3 * step5.latency_s)
    assert energy_j == pytest.approx(3 * step5.energy_j)
    # a device twice as fast: half the time, the same dynamic energy, half the static energy
    fast_s, fast_j = pricer.local_training(method, hp, 5, 1, Device(HW, 2.0))
    assert fast_s == pytest.approx(compute_s / 2)
    dynamic_j = 3 * (step5.energy_j - HW.energy.static_w * step5.latency_s)
    assert fast_j == pytest.approx(dynamic_j + HW.energy.static_w * compute_s / 2)


def test_equal_step_programs_share_one_capture():
    pricer = RunPricer(SPEC)
    hp = Hparams(batch_size=8)
    prices = {name: pricer.step(parse_method(name), replace(hp, lr=lr), 8, 1, HW)
              for name, lr in (("fedavg", 0.1), ("fednova", 0.01), ("fedavg+ccvr", 0.1), ("fedprox", 0.1))}
    assert prices["fedavg"] is prices["fednova"] is prices["fedavg+ccvr"]
    assert prices["fedprox"] is not prices["fedavg"]  # the proximal term adds work
    assert prices["fedprox"].latency_s > prices["fedavg"].latency_s


@pytest.fixture(scope="module")
def tiny_run():
    train, test = load_dataset("digits", image_size=16)
    idx = np.random.default_rng(0).permutation(len(train.y))[:120]
    train = replace(train, x=train.x[idx], y=train.y[idx])
    parts = [np.arange(0, 70), np.arange(70, 100), np.arange(100, 120)]  # 70, 30 and 20 samples
    cfg = FLConfig(dataset="digits", model="convnet", num_clients=3, rounds=2, seed=0, eval_every=1)
    hp = Hparams(lr=0.05, local_epochs=1, batch_size=32)
    method = parse_method("fedavg+ccvr")
    hp = hp.with_knobs(method.knobs).replace(ccvr_virtual_per_class=5, ccvr_epochs=1)
    result = loop.train(RunPlan(method, model_fn=lambda: _build(), train=train, test=test, parts=parts, cfg=cfg, hp=hp))
    return result, method, hp, [train.y[p].numpy() for p in parts]


def test_rounds_ledger_totals_and_monotone_columns(tiny_run):
    result, method, hp, labels = tiny_run
    devices = client_devices(SystemModel(), HW, 3, seed=0)
    rows = price_run(result, method, hp, pricer=RunPricer(SPEC), client_labels=labels, hw=HW,
                     system=SystemModel(), devices=devices)
    assert [(r["round"], r["stage"]) for r in rows] == [(1, "train"), (2, "train"), (3, "calibration")]
    for key in ("cum_wall_s", "cum_device_s", "cum_energy_j", "cum_bytes"):
        values = [r[key] for r in rows]
        assert values == sorted(values) and values[0] > 0
    assert rows[-1]["cum_bytes"] == ledger_totals(result.transfers)["total_bytes"]
    assert [r["accuracy"] for r in rows] == [h["accuracy"] for h in result.history] + [result.accuracy]


def test_ideal_links_identical_devices_round_is_slowest_client_plus_server(tiny_run):
    result, method, hp, labels = tiny_run
    pricer = RunPricer(SPEC)
    devices = client_devices(IDEAL, HW, 3, seed=0)
    rows = price_run(result, method, hp, pricer=pricer, client_labels=labels, hw=HW, system=IDEAL, devices=devices)
    train = replace(method, calibration=None)
    computes = [pricer.local_training(train, hp, len(y), 1, devices[k])[0] for k, y in enumerate(labels)]
    # 70 samples: steps of 32, 32, 6 -- the largest client is the slowest
    assert rows[0]["round_wall_s"] == pytest.approx(max(computes) + rows[0]["server_s"])
    assert rows[0]["round_device_s"] == pytest.approx(sum(computes))
    assert rows[0]["server_s"] > 0


@pytest.mark.slow
def test_fl_cli_writes_rounds_csv_matching_its_ledger(tmp_path):
    from tests.test_fl_run_cli import TINY
    from bench.fl.__main__ import main

    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY.replace("rounds = 1", "rounds = 2\neval_every = 1"))
    threads = torch.get_num_threads()
    try:
        assert main(["--preset", str(preset), "--out", str(tmp_path / "out"), "--threads", "1",
                     "--system", "configs/system/ideal.toml"]) == 0
    finally:
        torch.set_num_threads(threads)
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    with open(tmp_path / "out" / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == ROUNDS_COLUMNS
    for name, m in doc["methods"].items():
        own = [r for r in rows if r["method"] == name]
        assert int(own[-1]["cum_bytes"]) == m["comm"]["total_bytes"] == m["modeled"]["cum_bytes"]
        assert float(own[-1]["cum_wall_s"]) == m["modeled"]["cum_wall_s"]
        assert [r["round"] for r in own][:2] == ["1", "2"] and all(r["accuracy"] for r in own)
    assert doc["system"]["latency_s"] == 0.0


def test_fl_cli_rejects_bad_hardware_and_system_before_any_work(tmp_path, capsys):
    from tests.test_fl_run_cli import TINY
    from bench.fl.__main__ import main

    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY)
    bad = tmp_path / "sys.toml"
    bad.write_text("[links]\nlatency_s = -1.0\n")
    assert main(["--preset", str(preset), "--system", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "latency_s" in capsys.readouterr().err
    assert main(["--preset", str(preset), "--hw", str(tmp_path / "none.toml"), "--out", str(tmp_path / "o")]) == 2
    assert "none.toml" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_client_round_s_uses_each_clients_link():
    system = SystemModel(downlink_bytes_per_s=(1e6, 2e6), uplink_bytes_per_s=1e6, latency_s=0.0)
    a = ClientRound(0, 1.0, 0.0, 2_000_000, 0, system.link(0))
    b = ClientRound(1, 1.0, 0.0, 2_000_000, 0, system.link(1))
    assert client_round_s(a) == 3.0 and client_round_s(b) == 2.0  # 1 s compute + 2 MB at 1 or 2 MB/s
    assert INFINITE_LINK.download_s(10**9) == 0.0

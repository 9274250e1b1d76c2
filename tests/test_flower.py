"""The Flower integration inside Flower (workloads/fl/flower, docs/flower.md; needs the 'flower' extra).

Cheapest first: the mod and the server-side aggregation on hand-made Flower records; the example
ClientApp called in-process (bit-identical weights with and without the mod; its per-step
latency equals bench's); last, one end-to-end run in Flower's simulation engine (Ray), marked slow.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import (ArrayRecord, ConfigRecord, Context, Message, MessageType, Metadata,  # noqa: E402
                      MetricRecord, RecordDict)

from accel_sim.hardware import load_hardware_config  # noqa: E402
from workloads.cost.system import ROUNDS_COLUMNS, SystemModel, load_system_model  # noqa: E402
from tests.failfast import as_in_a_terminal  # noqa: E402
from tests.flower_example import CLIENTS, METHODS, ROUNDS, SPHEREFED, read_csv, stages  # noqa: E402
from workloads.flower import meter as meter_module  # noqa: E402
from workloads.flower.app import FlowerRun, client_app, new_model  # noqa: E402
from workloads.flower.ledger import CLIENT_KEYS, client_metrics  # noqa: E402
from workloads.flower.meter import TrainCost  # noqa: E402
from workloads.flower.mod import AccelMod, accel_train_metrics, payload_bytes  # noqa: E402
from workloads.flower.strategy import MethodStrategy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HW = ROOT / "configs" / "hw" / "paper_default.toml"


def _client(k: int, train_s: float, energy_j: float, static_w: float, down: int, up: int) -> dict:
    return client_metrics(k, TrainCost(steps=3, train_s=train_s, step_s=train_s / 3, energy_j=energy_j,
                                       static_w=static_w, peak_memory_bytes=100 * (k + 1)), down_bytes=down, up_bytes=up)


RUN = FlowerRun("small", "convnet", ("fedavg", "fedavg+spherefed", "fedprox"), num_clients=20, rounds=2, seed=0)
CLIENT = 0  # 83 samples: batches of 32, 32 and 19 per local epoch


def _message(content: RecordDict, message_type: str = MessageType.TRAIN) -> Message:
    """A message as the SuperLink would deliver it (Flower sets the metadata; here by hand)."""
    metadata = Metadata(run_id=1, message_id="m1", src_node_id=0, dst_node_id=7, reply_to_message_id="",
                        group_id="1", created_at=time.time(), ttl=3600.0, message_type=message_type)
    return Message(content, metadata=metadata)


def _context() -> Context:
    return Context(run_id=1, node_id=7, node_config={"partition-id": CLIENT, "num-partitions": RUN.num_clients},
                   state=RecordDict(), run_config={})


def _train_message(name: str, run: FlowerRun = RUN) -> Message:
    """Round 1's train message to ``CLIENT``, as the server's strategy builds it."""
    method, hp = run.method(name)
    strategy = MethodStrategy(method, hp, new_model(run, method), {CLIENT: 7})
    return _message(strategy.train_content(1, CLIENT, ConfigRecord({"method": name})))


@pytest.fixture(scope="module", params=["fedavg", "fedavg+spherefed", "fedprox"])
def replies(request):
    """(method, message, reply without the mod, reply with it); the mod captures inside the call."""
    name = request.param
    msg = _train_message(name)
    saved, threads = dict(meter_module._PRICES), torch.get_num_threads()
    meter_module._PRICES.clear()
    torch.set_num_threads(1)  # two threads stall on the shared 2-core machine (docs/fl.md, --threads 1)
    try:
        plain = client_app(RUN, None)(msg, _context())
        priced = client_app(RUN, AccelMod(HW))(msg, _context())
    finally:
        meter_module._PRICES.update(saved)
        torch.set_num_threads(threads)
    return name, msg, plain, priced


def test_mod_leaves_trained_weights_bit_identical(replies):
    _, _, plain, priced = replies
    a, b = plain.content["arrays"], priced.content["arrays"]
    assert list(a.keys()) == list(b.keys()) and all(a[k].data == b[k].data for k in a.keys())
    assert dict(plain.content["metrics"]) == {k: v for k, v in priced.content["metrics"].items()
                                              if k not in CLIENT_KEYS}


def test_step_latency_through_flower_equals_bench(replies):
    from workloads.cost.step import method_step_trace
    from workloads.cost.step import simulate_complete

    name, msg, _, priced = replies
    _, hp = RUN.method(name)
    trace = method_step_trace(RUN.model, name, batch_size=hp.batch_size, num_classes=10, image_size=16, hp=hp)
    report = simulate_complete(trace, load_hardware_config(HW), name)
    m = priced.content["metrics"]
    assert m["accel_step_s"] == report.latency_s
    assert m["accel_peak_memory_bytes"] == report.peak_memory_bytes  # the full batch's step is the largest
    assert m["accel_client"] == CLIENT
    # local epochs of full batches and one trailing partial batch (cheaper) per epoch
    assert m["accel_step_s"] < m["accel_train_s"] < m["accel_steps"] * m["accel_step_s"]
    assert m["accel_energy_j"] > 0 and m["accel_static_w"] == load_hardware_config(HW).energy.static_w
    assert m["accel_down_bytes"] == payload_bytes(msg.content) == m["accel_up_bytes"]


def test_payload_bytes_counts_numel_times_itemsize():
    content = RecordDict({"arrays": ArrayRecord({"w": torch.zeros(3, 4), "n": torch.zeros((), dtype=torch.int64)})})
    assert payload_bytes(content) == 3 * 4 * 4 + 8


def test_mod_passes_other_messages_through():
    seen = []
    reply = RecordDict({"metrics": MetricRecord({"num-examples": 1, "accuracy": 0.5})})

    def app(msg, ctx):
        seen.append(msg)
        return Message(reply, reply_to=msg)

    msg = _message(RecordDict(), MessageType.EVALUATE)
    out = AccelMod(HW)(msg, _context(), app)
    assert seen == [msg] and dict(out.content["metrics"]) == {"num-examples": 1, "accuracy": 0.5}


def test_mod_on_a_train_function_without_metered_step_reports_no_steps():
    arrays = ArrayRecord({"w": torch.ones(5)})

    def app(msg, ctx):
        return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord({"num-examples": 2})}), reply_to=msg)

    msg = _message(RecordDict({"arrays": arrays}))
    m = AccelMod(HW)(msg, _context(), app).content["metrics"]
    assert (m["accel_steps"], m["accel_train_s"], m["accel_energy_j"]) == (0, 0.0, 0.0)
    assert m["num-examples"] == 2 and m["accel_down_bytes"] == m["accel_up_bytes"] == 5 * 4


def test_train_metrics_aggregation_keeps_app_metrics_and_adds_the_round():
    system = SystemModel(downlink_bytes_per_s=math.inf, uplink_bytes_per_s=math.inf, latency_s=0.0)
    replies = [RecordDict({"metrics": MetricRecord({"num-examples": n, "train_loss": loss,
                                                    **_client(k, train_s, 1.0, 0.0, 8, 8)})})
               for k, n, loss, train_s in ((0, 1, 1.0, 2.0), (1, 3, 2.0, 1.0))]
    out = accel_train_metrics(system, num_clients=2)(replies, "num-examples")
    assert out["train_loss"] == pytest.approx((1 * 1.0 + 3 * 2.0) / 4)  # Flower's weighted average
    assert not set(CLIENT_KEYS) & set(out)
    assert out["accel_round_wall_s"] == 2.0 and out["accel_slowest_client"] == 0
    assert out["accel_round_device_s"] == 3.0 and out["accel_round_down_bytes"] == 16


def test_cli_rejects_a_comma_list_of_methods(capsys):
    from bench.flower.__main__ import main

    assert main(["--methods", "fedavg,spherefed"]) == 2  # one spelling: methods separated by spaces
    assert "separated by spaces" in capsys.readouterr().err


def test_every_method_runs_calibrations_included_and_on_a_fleet_but_width_scaled_ones():
    from workloads.flower.app import check_methods

    calibrated = ("fedavg+spherefed+ffc", "fedavg+ccvr", "ffc", "spherefed+ffc", "ccvr")
    check_methods(calibrated)
    check_methods(calibrated, fleet=True)
    check_methods(("heterofl", "fjord"))  # at full width without a fleet
    for name in ("heterofl", "fjord"):
        with pytest.raises(ValueError, match=f"{name}.*without --fleet"):
            check_methods((name,), fleet=True)


@pytest.mark.slow  # ~5-10 s: SCAFFOLD's steps and its after_training hook captured
def test_scaffolds_after_training_is_metered_as_bench_fl_prices_it():
    """A SCAFFOLD client's train reply prices its local steps and its ``after_training`` hook (the
    control-variate update c_i+ and Delta c_i), as ``bench.fl``'s ledger does
    (``RunPricer.local_training``: E epochs of its batches plus the hook): the same seconds and
    energy on the same accelerator (speed factor 1), and the hook's share is the
    ``after_training_price`` of the method on its prepared model, > 0."""
    from workloads.cost.rounds import Device, PricedModel, RunPricer
    from workloads.cost.step import after_training_price
    from workloads.flower.app import _data
    from workloads.model_spec import ModelSpec, build

    name, run = "scaffold", replace(RUN, methods=("scaffold",))
    method, hp = run.method(name)
    train, _, parts = _data(run)
    saved, threads = dict(meter_module._PRICES), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        priced = client_app(run, AccelMod(HW))(_train_message(name, run), _context())
    finally:
        meter_module._PRICES.clear()
        meter_module._PRICES.update(saved)
        torch.set_num_threads(threads)
    m = priced.content["metrics"]
    hw = load_hardware_config(HW)
    spec = PricedModel(lambda head: build(ModelSpec("convnet", tuple(train.x.shape[1:])), num_classes=10, norm="bn",
                                          head=head), "convnet", tuple(train.x.shape[1:]), 10, 0)
    seconds, energy = RunPricer(spec).local_training(method, hp, len(parts[CLIENT]), 1, Device(hw, 1.0))
    assert m["accel_train_s"] == pytest.approx(seconds, rel=1e-12)
    assert m["accel_energy_j"] == pytest.approx(energy, rel=1e-12)
    hook = after_training_price(method, hp, 1, new_model(run, method), hw)
    assert hook.latency_s > 0 and m["accel_steps"] * m["accel_step_s"] > m["accel_train_s"] - hook.latency_s


# ---- end to end in Flower's simulation engine ---------------------------------------------------------------

@pytest.mark.slow
def test_example_runs_in_flowers_simulation_and_writes_rounds_csv(flower_example):
    """The shared run (tests/flower_example.py: METHODS on the small preset cut to 900 samples,
    CLIENTS clients, ROUNDS rounds): its files and ledger, SphereFed's bytes and wall time, and our
    own loop on the same setting. tests/test_flower_methods.py checks the stateful methods of it."""
    sim, name, clients, rounds = flower_example.flower, SPHEREFED, CLIENTS, ROUNDS
    assert sim.returncode == 0, sim.stderr[-3000:]
    assert sorted(p.name for p in sim.out.iterdir()) == ["clients.csv", "manifest.json", "rounds.csv", "simulation.log"]
    header, every_row = read_csv(sim.out / "rounds.csv")
    assert header == ROUNDS_COLUMNS
    assert [(r["method"], int(r["round"]), r["stage"], int(r["clients"])) for r in every_row] == \
        [(m, t, stage, clients) for m in METHODS for t, stage in stages(m)]
    _, per_client = read_csv(sim.out / "clients.csv")
    assert sorted((c["method"], int(c["round"]), int(c["client"])) for c in per_client) == \
        sorted((m, t, k) for m in METHODS for t, _ in stages(m) for k in range(clients))
    for r in every_row:
        mine = [c for c in per_client if (c["method"], c["round"]) == (r["method"], r["round"])]
        assert math.isclose(sum(float(c["compute_s"]) for c in mine), float(r["round_device_s"]), rel_tol=1e-12)
        # server_s: 0 in a training round (Flower's aggregation is not priced), the calibration's after it
        assert (float(r["server_s"]) > 0) == (r["stage"] == "calibration")
        assert max(float(c["client_round_s"]) for c in mine) + float(r["server_s"]) == float(r["round_wall_s"])
        assert 0.0 <= float(r["accuracy"]) <= 1.0
    for method in METHODS:  # each method's own running totals
        for col in ("cum_wall_s", "cum_device_s", "cum_energy_j", "cum_bytes"):
            values = [float(r[col]) for r in every_row if r["method"] == method]
            assert values == sorted(values) and values[0] > 0
    rows = [r for r in every_row if r["method"] == name]
    # bytes: every client downloads and uploads the shared state (SphereFed's classifier stays home)
    run = FlowerRun(flower_example.preset, "convnet", METHODS, clients, rounds, 0)
    method, hp = run.method(name)
    model = new_model(run, method)
    state_bytes = sum(model.state_dict()[k].numel() * model.state_dict()[k].element_size()
                      for k in method.algo.shared_keys(model, 1, hp))
    assert all(int(r["round_bytes"]) == 2 * clients * state_bytes for r in rows)
    # wall time: the slowest client's download + compute + upload over the default system's links
    link = load_system_model(ROOT / "configs" / "system" / "default.toml").link(0)
    transfer_s = link.download_s(state_bytes) + link.upload_s(state_bytes)
    assert all(transfer_s < float(r["round_wall_s"]) <= transfer_s + float(r["round_device_s"]) for r in rows)

    # our own loop on the same setting (bench.fl on the same preset; same hardware and system
    # model) prices the same steps: equal device time and energy; it adds the priced aggregation
    # and the 8-byte sample count per upload (bytes and upload time)
    loop = flower_example.loop
    assert loop.returncode == 0, loop.stderr[-3000:]
    ours = [r for r in read_csv(loop.out / "rounds.csv")[1] if r["method"] == name]
    assert [r["round"] for r in ours] == [r["round"] for r in rows]
    for flower_row, loop_row in zip(rows, ours):
        for col in ("round_device_s", "round_energy_j"):
            assert flower_row[col] == loop_row[col]
        metadata_s = link.upload_s(state_bytes + 8) - link.upload_s(state_bytes)  # the slowest client's 8 B more
        assert math.isclose(float(flower_row["round_wall_s"]) + metadata_s + float(loop_row["server_s"]),
                            float(loop_row["round_wall_s"]), rel_tol=1e-12)
        assert int(flower_row["round_bytes"]) + 8 * clients == int(loop_row["round_bytes"])
        # the strategy aggregates with the method's own aggregate, replies in client order: the
        # weights are the loop's bit for bit (tests/test_flower_methods.py), so is the accuracy
        assert flower_row["accuracy"] == loop_row["accuracy"]


# ---- the command fails and stops cleanly ------------------------------------------------------------

RAISES_IN_TRAINING = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 32), nn.ReLU())
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        if self.training:
            raise RuntimeError("this model breaks in training")
        return self.fc(self.body(x))


def net():
    return Net()
'''


def _raylets() -> set[str]:
    found = subprocess.run(["pgrep", "-f", "ray/raylet"], capture_output=True, text=True).stdout.split()
    return set(found)


@pytest.mark.slow
def test_a_failing_client_is_exit_1_with_nothing_written(tmp_path):
    (tmp_path / "breaks.py").write_text(RAISES_IN_TRAINING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    proc = subprocess.run([sys.executable, "-m", "bench.flower", "--model", "breaks:net", "--methods", "fedavg",
                           "--clients", "2", "--rounds", "1", "--out", str(tmp_path / "out")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "error: the simulation" in proc.stderr and "nothing written" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["breaks.py"]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM], ids=["SIGTERM"])  # SIGINT takes the same path (iokit.cli,
def test_an_interrupted_simulation_stops_within_10_s_with_nothing_written(tmp_path, sig):  # tests/test_cli_helpers.py)
    before = _raylets()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "bench.flower", "--clients", "2", "--rounds", "50",
                             "--out", str(tmp_path / "out")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=as_in_a_terminal)
    deadline = time.time() + 120
    while time.time() < deadline and not (_raylets() - before):  # the simulation's Ray has started
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(sig)
    start = time.time()
    _, stderr = proc.communicate(timeout=30)
    assert time.time() - start < 10
    assert proc.returncode == 128 + sig
    assert stderr.strip().splitlines() == ["interrupted; the simulation was stopped, nothing written"]
    assert list(tmp_path.iterdir()) == []  # no results folder, no .partial, no lock
    gone_by = time.time() + 10  # the simulation's Ray is gone too, within 10 s (a loaded machine takes seconds)
    while _raylets() - before and time.time() < gone_by:
        time.sleep(0.2)
    left = _raylets() - before
    assert not left, subprocess.run(["ps", "-o", "pid,pgid,stat,etime,args", "-p", ",".join(left)],
                                    capture_output=True, text=True).stdout  # what survived, and in which state

"""A Flower run on a fleet (``bench.flower --fleet``; workloads/flower/fleet.py, docs/flower.md,
docs/fleets.md; needs the 'flower' extra).

Cheapest first: the planned strategy on a toy client in-process (hand-computed averages); the
example app's server and client called in-process through a grid that delivers each message to
the ClientApp (no Ray), beside ``bench.fl``'s own run on the same fleet; bad input; last, the
command end to end in Flower's simulation engine (Ray), marked slow.

The fleet (``FLEET``, 4 clients of the small preset, all sampled, 2 rounds, seed 0): client 0
``flaky`` is online with probability 0.5 (its draws ``default_rng([0, 0x0A1E, t]).random(4)[0]``
are 0.151 in round 1, 0.621 in round 2: online, then offline); client 1 ``fast`` (infinite links);
client 2 ``slow`` downloads 2.46 MB at 1e5 B/s (24.6 s, past the 10 s deadline); client 3 ``tiny``
has 1 MB of memory (ConvNet's step peaks at 11.7 MB). So round 1 aggregates clients 0 and 1, round
2 client 1 alone, and both rounds close at the deadline (client 2 still downloading): collect 10 s.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from tests.failfast import assert_fails_clean, workspace  # noqa: E402
from bench.lib.grid.point import torch_threads  # noqa: E402
from tests.flower_grid import InProcessGrid  # noqa: E402
from workloads.models import Head
from workloads.cost.rounds import RunPricer  # noqa: E402
from workloads.cost.system import ROUNDS_COLUMNS  # noqa: E402
from workloads.flower import app as flower_app  # noqa: E402
from workloads.flower.fleet import PlannedStrategy, client_index_reply, client_nodes  # noqa: E402
from workloads.fl.methods import parse_method  # noqa: E402
from workloads.flower.mod import AccelMod  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FLEET = """
assignment = ["flaky", "fast", "slow", "tiny"]

[round]
deadline_s = 10.0

[classes.flaky]
hw = "paper_default"
memory_bytes = inf
downlink_bytes_per_s = inf
uplink_bytes_per_s = inf
latency_s = 0.0
availability = { probability = 0.5 }

[classes.fast]
hw = "paper_default"
memory_bytes = inf
downlink_bytes_per_s = inf
uplink_bytes_per_s = inf
latency_s = 0.0

[classes.slow]
hw = "paper_default"
memory_bytes = inf
downlink_bytes_per_s = 1e5
uplink_bytes_per_s = 1e5
latency_s = 0.0

[classes.tiny]
hw = "paper_default"
memory_bytes = 1000000
downlink_bytes_per_s = inf
uplink_bytes_per_s = inf
latency_s = 0.0
"""
ARRIVED = [[0, 1], [1]]
# per round: sampled, clients, dropped unavailable / memory / deadline / surplus, collect_s
COUNTS = [(4, 2, 0, 1, 1, 0, 10.0), (4, 1, 1, 1, 1, 0, 10.0)]
COUNT_COLUMNS = ("sampled", "clients", "dropped_unavailable", "dropped_memory", "dropped_deadline", "dropped_surplus",
                 "collect_s")
NODES = {11: 2, 22: 0, 33: 1, 44: 3}  # node id -> client index, as a simulation might number them
RUN = flower_app.FlowerRun("small", "convnet", ("fedavg",), num_clients=4, rounds=2, seed=0)
FEDAVG = parse_method("fedavg")


@pytest.fixture
def task_identity(monkeypatch):
    """What Flower's server runtime sets before a ServerApp creates messages."""
    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


# ---- the strategy, on a toy client -----------------------------------------------------------------------

def test_planned_strategy_trains_only_the_arrivals_and_an_empty_round_keeps_the_model(task_identity):
    toy = ClientApp()
    toy.query()(client_index_reply)

    @toy.train()
    def train(msg: Message, context: Context) -> Message:  # client k sends w = k + 1 from k + 1 samples
        k = int(context.node_config["partition-id"])
        return Message(RecordDict({"arrays": ArrayRecord({"w": torch.full((2,), float(k + 1))}),
                                   "metrics": MetricRecord({"num-examples": k + 1})}), reply_to=msg)

    grid = InProcessGrid(toy, {11: 2, 22: 0, 33: 1})
    nodes = client_nodes(grid, 3)
    assert nodes == {2: 11, 0: 22, 1: 33}
    seen = {}

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        seen[server_round] = arrays.to_torch_state_dict()["w"].tolist()
        return MetricRecord({})

    base = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=3, min_available_nodes=3)
    PlannedStrategy(base, [(), (0, 2), (1,)], nodes).start(grid=grid, initial_arrays=ArrayRecord({"w": torch.zeros(2)}),
                                                          num_rounds=3, evaluate_fn=evaluate_fn)
    assert grid.trained() == [[0, 2], [1]]  # round 1 sent nothing
    # round 1: no arrival, the model stays 0; round 2: (1 x 1 + 3 x 3) / 4; round 3: client 1's 2
    assert seen == {0: [0.0, 0.0], 1: [0.0, 0.0], 2: [2.5, 2.5], 3: [2.0, 2.0]}


# ---- the example app in-process, beside bench.fl -------------------------------------------------------------

def _small_preset_at_4_clients(tmp_path: Path) -> Path:
    preset = re.sub(r"(?m)^num_clients = \d+", "num_clients = 4", (ROOT / "configs/presets/small.toml").read_text())
    (tmp_path / "preset.toml").write_text(preset)
    return tmp_path / "preset.toml"


def _bench_fl_inputs(fleet_file: Path, tmp_path: Path, method: str = "fedavg"):
    """bench.fl's run of ``method`` in the same setting (the small preset at 4 clients) on
    ``fleet_file``: (its inputs, the method's hyper-parameters, its participation plan)."""
    from bench.lib.fl import jobs, pipeline
    from bench.lib.resolve import resolve
    from bench.lib.spec import RunSpec

    run = resolve(RunSpec(preset=str(_small_preset_at_4_clients(tmp_path)), methods=(method,), rounds=2,
                          fleet_path=str(fleet_file)))
    inputs = pipeline.load(run)
    hp = run.hparams[method]
    return inputs, hp, jobs.participation_plan(inputs, parse_method(method), hp, RunPricer(inputs.priced_model()))


def _read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _serve_planned(run, planned, folder: Path) -> InProcessGrid:
    """``server_app`` of ``run`` on the fleet's participation plans over an in-process grid of
    ``NODES`` (the example's ClientApp priced on the fleet's devices); the grid, after the run."""
    grid = InProcessGrid(flower_app.client_app(run, AccelMod(devices=planned.devices())), NODES)
    server = flower_app.server_app(run, planned.system(), folder, planned)
    server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    return grid


@pytest.mark.slow  # 12-26 s: two plans (their step captures), Flower's run and two of our loop's
def test_the_flower_app_on_a_fleet_trains_the_plans_arrivals_and_equals_bench_fl(tmp_path, task_identity,
                                                                                  monkeypatch):
    from bench.flower.__main__ import flower_run
    from bench.flower.fleet import fleet_run
    from bench.lib.spec import RunSpec
    from workloads.fl import loop
    from workloads.fl.loop import RunPlan

    (tmp_path / "f.toml").write_text(FLEET)
    flower, _, resolved = flower_run(RunSpec(preset="small", models=("convnet",), methods=("fedavg",), rounds=2,
                                             seed=0, fleet_path=str(tmp_path / "f.toml")), clients=4)
    assert flower == RUN
    planned = fleet_run(resolved)
    inputs, hp, loop_plan = _bench_fl_inputs(tmp_path / "f.toml", tmp_path)
    assert planned.plans["fedavg"] == loop_plan  # the same plan as bench.fl's, round for round
    assert [list(a) for a in loop_plan.arrivals] == ARRIVED

    states, evaluate = [], flower_app.evaluate  # the global model each time the server evaluates it

    def evaluate_and_keep(model, x, y):
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        return evaluate(model, x, y)

    monkeypatch.setattr(flower_app, "evaluate", evaluate_and_keep)
    with torch_threads(1):
        grid = _serve_planned(RUN, planned, tmp_path)
        trained, every_client = (loop.train(RunPlan(FEDAVG, model_fn=lambda: inputs.build(FEDAVG.head), train=inputs.train,
                                                    test=inputs.test, parts=inputs.parts, cfg=inputs.fl, hp=hp, arrivals=arrivals))
                                 for arrivals in (loop_plan.arrivals, None))

    # (a) Flower trained, in each round, exactly the plan's arrivals, as our loop did
    assert grid.trained() == ARRIVED == [h["clients"] for h in trained.history]
    rows = _read_csv(tmp_path / "rounds.csv")
    assert [tuple(float(r[c]) for c in COUNT_COLUMNS) for r in rows] == COUNTS
    model = flower_app.new_model(RUN, FEDAVG)
    state = sum(v.numel() * v.element_size() for k, v in model.state_dict().items()
                if k in FEDAVG.algo.shared_keys(model, 1, hp))
    # round 1: clients 0, 1 and 2 download the state, 0 and 1 upload it with the 8-byte sample count
    assert [int(r["round_bytes"]) for r in rows] == [3 * state + 2 * (state + 8), 2 * state + (state + 8)]
    clients = _read_csv(tmp_path / "clients.csv")
    assert [(int(c["round"]), int(c["client"]), c["device_class"], c["dropped"]) for c in clients] == [
        (1, 0, "flaky", ""), (1, 1, "fast", ""), (1, 2, "slow", "deadline"), (1, 3, "tiny", "memory"),
        (2, 0, "flaky", "unavailable"), (2, 1, "fast", ""), (2, 2, "slow", "deadline"), (2, 3, "tiny", "memory")]
    for r in rows:  # no arrival was cut: the metered arrivals' compute is the plan's device time
        mine = [float(c["compute_s"]) for c in clients if c["round"] == r["round"] and not c["dropped"]]
        assert sum(mine) == pytest.approx(float(r["round_device_s"]), rel=1e-12)

    # (b) FedAvg in Flower on the fleet is our loop's FedAvg on the same arrivals: the same weights
    # bit for bit (the strategy calls the method's own aggregate on the replies in client order) and
    # the same accuracy after every round (every client trained instead, the weights are far apart:
    # the arrivals drive the aggregation)
    def equal(a: dict, b: dict) -> bool:
        return a.keys() == b.keys() and all(torch.equal(a[k], v) for k, v in b.items())

    assert equal(states[-1], trained.weights) and not equal(states[-1], every_client.weights)
    assert [float(r["accuracy"]) for r in rows] == [h["accuracy"] for h in trained.history]


@pytest.mark.slow  # 15-30 s: the buffered plan, Flower's run and our loop's
def test_fedbuff_under_flower_on_a_fleet_starts_stale_clients_from_their_version(tmp_path, task_identity):
    """FedBuff on the fleet: round 2 takes client 1 fresh and client 2, which started from the model
    of round 1 (staleness 1: its download, 24.6 s at 1e5 B/s, outlasts a server step). Flower's
    strategy sends client 2 that version (``server_view``) and aggregates with its staleness: the
    global weights and accuracies of our loop on the same plan, bit for bit."""
    from bench.flower.__main__ import flower_run
    from bench.flower.fleet import fleet_run
    from bench.lib.spec import RunSpec
    from workloads.fl import loop
    from workloads.fl.loop import RunPlan

    (tmp_path / "f.toml").write_text(FLEET)
    run, _, resolved = flower_run(RunSpec(preset="small", models=("convnet",), methods=("fedbuff",), rounds=2,
                                          seed=0, fleet_path=str(tmp_path / "f.toml")), clients=4)
    planned = fleet_run(resolved)
    plan = planned.plans["fedbuff"]
    inputs, hp, loop_plan = _bench_fl_inputs(tmp_path / "f.toml", tmp_path, "fedbuff")
    assert plan == loop_plan
    assert [list(a) for a in plan.arrivals] == [[0, 1], [1, 2]] and [list(s) for s in plan.staleness] == [[0, 0], [0, 1]]
    with torch_threads(1):
        grid = InProcessGrid(flower_app.client_app(run, None), NODES)
        result = flower_app.train_method(grid, run, "fedbuff", client_nodes(grid, 4), fleet=planned)
        trained = loop.train(RunPlan(parse_method("fedbuff"), model_fn=lambda: inputs.build(Head()), train=inputs.train,
                                     test=inputs.test, parts=inputs.parts, cfg=inputs.fl, hp=hp, arrivals=plan.arrivals,
                                     staleness=plan.staleness))
    weights = result.arrays.to_torch_state_dict()
    assert weights.keys() == trained.weights.keys() and all(torch.equal(weights[k], v) for k, v in trained.weights.items())
    assert [float(result.evaluate_metrics_serverapp[t]["accuracy"]) for t in (1, 2)] == \
        [h["accuracy"] for h in trained.history]


@pytest.mark.slow  # 20-40 s: the plan, Flower's run with its calibration, our loop's and its ledger
def test_a_calibration_on_a_fleet_under_flower_is_bench_fls_calibration_round(tmp_path, task_identity):
    """CCVR on the fleet: its calibration round 3 is planned as a training round is (every client
    asked; ``tiny`` cannot hold the statistics' peak memory, ``slow``'s download of the extractor
    outlasts the deadline), and Flower calibrates with exactly the plan's arrivals. Its
    ``rounds.csv`` row is bench.fl's (the plan's cost, the server's calibration seconds, the
    accuracy after it) and ``clients.csv`` names each dropped client's reason."""
    from bench.flower.__main__ import flower_run
    from bench.flower.fleet import fleet_run
    from bench.lib.spec import RunSpec
    from workloads.cost.rounds import price_run
    from workloads.fl import loop
    from workloads.fl.loop import RunPlan

    (tmp_path / "f.toml").write_text(FLEET)
    run, _, resolved = flower_run(RunSpec(preset="small", models=("convnet",), methods=("ccvr",), rounds=2, seed=0,
                                          fleet_path=str(tmp_path / "f.toml")), clients=4)
    planned = fleet_run(resolved)
    plan = planned.plan("ccvr")  # bench.flower keeps the name as given; the plans are keyed "fedavg+ccvr"
    inputs, hp, loop_plan = _bench_fl_inputs(tmp_path / "f.toml", tmp_path, "fedavg+ccvr")
    assert plan == loop_plan and plan.calibration is not None
    calibration = plan.calibration
    assert calibration.dropped[2] == "deadline" and calibration.dropped[3] == "memory" and 1 in calibration.arrived
    method = parse_method("ccvr")
    with torch_threads(1):
        grid = _serve_planned(run, planned, tmp_path)
        trained = loop.train(RunPlan(method, model_fn=lambda: inputs.build(method.head), train=inputs.train,
                                     test=inputs.test, parts=inputs.parts, cfg=inputs.fl, hp=hp, arrivals=plan.arrivals))
        ours = price_run(trained, method, hp, pricer=RunPricer(inputs.priced_model()),
                         client_labels=[inputs.train.y.numpy()[p] for p in inputs.parts], hw=inputs.hw,
                         system=inputs.system, devices=inputs.devices, plan=plan)
    calibrated = [sorted(k for _, k in sent) for sent in grid.sent
                  if {kind for kind, _ in sent} == {flower_app.CALIBRATE_MESSAGE}]
    assert calibrated == [sorted(calibration.arrived)]
    rows = _read_csv(tmp_path / "rounds.csv")
    assert [(int(r["round"]), r["stage"]) for r in rows] == [(1, "train"), (2, "train"), (3, "calibration")]
    mine, theirs = rows[-1], ours[-1]
    assert theirs["stage"] == "calibration" and float(mine["accuracy"]) == theirs["accuracy"] == trained.accuracy
    for col in (*COUNT_COLUMNS, "server_s", "round_device_s", "round_energy_j", "round_bytes", "round_wall_s"):
        assert float(mine[col]) == float(theirs[col]), col
    clients = [c for c in _read_csv(tmp_path / "clients.csv") if c["round"] == "3"]
    assert {int(c["client"]): c["dropped"] for c in clients} == {
        k: calibration.dropped.get(k, "") for k in range(4)}
    # nobody was cut while computing (tiny never starts, slow is still downloading at the deadline):
    # the metered arrivals' statistics are the plan's device time, priced as bench.fl prices them
    assert sum(float(c["compute_s"]) for c in clients if not c["dropped"]) == pytest.approx(
        float(mine["round_device_s"]), rel=1e-12)


# ---- bad input: one line, exit 2, nothing written, no simulation ---------------------------------------------

def test_bad_fleet_input_stops_before_ray_in_one_line(tmp_path, monkeypatch, capsys):
    import bench.flower.__main__ as command

    monkeypatch.setattr(command, "run_in_child", lambda *a, **k: pytest.fail("the simulation started"))
    monkeypatch.chdir(tmp_path)
    ws = workspace(tmp_path, out_with="rounds.csv")
    (ws / "f.toml").write_text(FLEET)
    (ws / "shares.toml").write_text(FLEET.replace('assignment = ["flaky", "fast", "slow", "tiny"]', "")
                                    .replace("latency_s = 0.0\n", "latency_s = 0.0\nshare = 0.3\n"))
    base = ["--methods", "fedavg", "--rounds", "1", "--out", str(ws / "out")]
    cases = [  # (clients, flags, what the line names)
        (4, ["--deadline-s", "5"], ("--deadline-s 5", "--fleet")),
        (4, ["--fleet", "f.toml", "--system", str(ROOT / "configs/system/ideal.toml")], ("--fleet f.toml", "--system")),
        (4, ["--fleet", "f.toml", "--hw", str(ROOT / "configs/hw/paper_default.toml")],
         ("--fleet f.toml", "leave --hw out")),
        (4, ["--fleet", "f.toml", "--overcommit", "0.5"], ("--overcommit", "0.5")),
        (4, ["--fleet", "f.toml", "--deadline-s", "0"], ("--deadline-s", "> 0")),
        (4, ["--fleet", "shares.toml"], ("shares.toml", "sum to 1.2")),
        (4, ["--fleet", "missing.toml"], ("missing.toml",)),
        (4, ["--fleet", "binary.toml"], ("binary.toml",)),
        (3, ["--fleet", "f.toml"], ("--fleet f.toml", "4 client(s)", "the run has 3")),
        (4, ["--fleet", "f.toml", "--methods", "fedavg", "heterofl"], ("heterofl", "without --fleet")),
    ]
    for clients, flags, names in cases:
        assert_fails_clean(command.main, [*base, "--clients", str(clients), *flags], capsys, ws, names)


# ---- end to end in Flower's simulation engine ----------------------------------------------------------------

@pytest.mark.slow
def test_bench_flower_on_a_fleet_in_flowers_simulation(tmp_path):
    (tmp_path / "f.toml").write_text(FLEET)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "bench.flower", "--model", "convnet", "--methods", "fedavg",
                           "--clients", "4", "--rounds", "2", "--fleet", str(tmp_path / "f.toml"),
                           "--out", str(tmp_path / "flower")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "flower"
    assert sorted(p.name for p in out.iterdir()) == ["clients.csv", "fleet.json", "manifest.json", "rounds.csv",
                                                     "simulation.log"]
    assert "fleet: 3 of 8 sampled updates arrived (1 unavailable, 2 memory, 2 deadline)" in proc.stderr
    rows = _read_csv(out / "rounds.csv")
    assert tuple(rows[0]) == ROUNDS_COLUMNS
    assert [tuple(float(r[c]) for c in COUNT_COLUMNS) for r in rows] == COUNTS
    clients = _read_csv(out / "clients.csv")
    assert [[int(c["client"]) for c in clients if int(c["round"]) == t and not c["dropped"]] for t in (1, 2)] == ARRIVED
    doc = json.loads((out / "fleet.json").read_text())
    assert doc["fleet"]["deadline_s"] == 10.0 and doc["fleet"]["client_classes"] == ["flaky", "fast", "slow", "tiny"]
    assert doc["methods"]["fedavg"]["fleet"]["dropped"] == {"unavailable": 1, "memory": 2, "deadline": 2, "surplus": 0}

    # bench.fl on the same setting and fleet: the same participation, round for round, and the same
    # accuracy (under Ray the replies arrive in completion order; the strategy aggregates them in
    # client order, with the method's own aggregate)
    loop = subprocess.run([sys.executable, "-m", "bench.fl", "--preset", str(_small_preset_at_4_clients(tmp_path)),
                           "--methods", "fedavg", "--rounds", "2", "--threads", "1",
                           "--fleet", str(tmp_path / "f.toml"), "--out", str(tmp_path / "loop")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert loop.returncode == 0, loop.stderr[-3000:]
    ours = _read_csv(tmp_path / "loop" / "rounds.csv")
    history = json.loads((tmp_path / "loop" / "results.json").read_text())["methods"]["fedavg"]["history"]
    assert [h["clients"] for h in history] == ARRIVED
    for flower_row, loop_row in zip(rows, ours, strict=True):
        for col in (*COUNT_COLUMNS, "round_device_s", "round_energy_j", "round_bytes"):
            assert flower_row[col] == loop_row[col], col
        assert float(flower_row["round_wall_s"]) + float(loop_row["server_s"]) == pytest.approx(
            float(loop_row["round_wall_s"]), rel=1e-12)  # Flower's aggregation is not priced
        assert flower_row["accuracy"] == loop_row["accuracy"]

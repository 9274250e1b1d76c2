"""Every method under Flower through its own aggregate (workloads/flower/strategy.py, docs/flower.md;
needs the 'flower' extra): SCAFFOLD, MOON and FedDyn, the methods with server state, extras or
client state, run by the example app's ``ServerApp`` logic (``train_method``: ``MethodStrategy``)
over an in-process grid (no Ray) equal our loop's ``train`` on the same setting bit for bit:
the same global weights after the last round and the same accuracy after every round. So do the
calibrated methods (FFC after SphereFed, CCVR after FedAvg) through their calibration round
(``calibrate_method``): the same state after the calibration and the same accuracy after it.

Why bit for bit and not to a tolerance: Flower's ``ArrayRecord`` carries a tensor as a NumPy array
of its dtype and bytes (float32 round-trips exactly), the strategy orders the replies by client
index before calling the method's own ``aggregate`` (the float sums of the loop, in its order), and
the client trains through the loop's trainer, generators and hooks. Flower's own ``FedAvg``
averaged in NumPy in arrival order, which is why the FedAvg fleet test (tests/test_flower_fleet.py)
compares weights to 1e-5.

The setting: the small preset (digits at 16x16, ConvNet) at 3 clients, all sampled, seed 0, cut
to 300 training and 200 test samples and one local epoch so that the fast check stays fast; the
check in Flower's simulation engine is on the run tests/test_flower.py checks too, with 900 training
samples and two local epochs (tests/flower_example.py).
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("flwr")

from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from tests.flower_example import CALIBRATED, CLIENTS, ROUNDS, STATEFUL, cut_preset, read_csv, stages  # noqa: E402
from tests.flower_grid import InProcessGrid  # noqa: E402
from workloads.flower import app as flower_app  # noqa: E402
from workloads.flower.fleet import client_nodes  # noqa: E402
from workloads.fl.methods import ALGORITHMS, parse_method  # noqa: E402

NODES = {11: 2, 22: 0, 33: 1}  # node id -> client index, as a simulation might number them


@pytest.fixture(scope="module")
def preset(tmp_path_factory) -> str:
    """The small preset at ``CLIENTS`` clients, 300 training and 200 test samples, one local epoch."""
    return cut_preset(tmp_path_factory.mktemp("preset"), 300, 1)


@pytest.fixture
def task_identity(monkeypatch):
    """What Flower's server runtime sets before a ServerApp creates messages."""
    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _flower(preset: str, names: tuple[str, ...], rounds: int, *, forget: bool = False) -> dict:
    """Method -> (the global state after the last round, the accuracy after each round) of
    ``names`` under Flower, one after the other on one in-process grid as ``server_app`` runs them
    (each node's context lives through every method): the example's ClientApp (unpriced) and
    ``train_method``, and a calibrated method's ``calibrate_method`` (its state after the
    calibration, its accuracy after it last); ``forget``: every message gets a fresh node context
    (clients keep nothing)."""
    run = flower_app.FlowerRun(preset, "convnet", names, num_clients=CLIENTS, rounds=rounds, seed=0)
    grid = InProcessGrid(flower_app.client_app(run, None), NODES, forget=forget)
    nodes, out, calibrated = client_nodes(grid, CLIENTS), {}, 0
    for name in names:
        result = flower_app.train_method(grid, run, name, nodes)
        weights = result.arrays.to_torch_state_dict()
        accuracy = [float(result.evaluate_metrics_serverapp[t]["accuracy"]) for t in range(1, rounds + 1)]
        if parse_method(name).calib is not None:
            done = flower_app.calibrate_method(grid, run, name, nodes, result, tuple(range(CLIENTS)))
            assert not _bit_equal(done.weights, weights)  # the calibration replaced the classifier
            weights, accuracy, calibrated = done.weights, [*accuracy, done.accuracy], calibrated + 1
        out[name] = (weights, accuracy)
    assert grid.trained() == [[0, 1, 2]] * rounds * len(names)
    assert [sorted(k for _, k in sent) for sent in grid.sent
            if {kind for kind, _ in sent} == {flower_app.CALIBRATE_MESSAGE}] == [[0, 1, 2]] * calibrated
    return out


def _loop(preset: str, name: str, rounds: int):
    """The same of ``name`` in our loop, on bench.fl's resolution of the same preset (a calibrated
    method's state after its calibration, its accuracy after it last)."""
    from bench.lib.fl import pipeline
    from bench.lib.resolve import resolve
    from bench.lib.spec import RunSpec
    from workloads.fl import loop
    from workloads.fl.loop import RunPlan

    run = resolve(RunSpec(preset=preset, methods=(name,), rounds=rounds))
    inputs, method = pipeline.load(run), parse_method(name)
    result = loop.train(RunPlan(method, model_fn=lambda: inputs.build(method.head), train=inputs.train, test=inputs.test,
                                parts=inputs.parts, cfg=inputs.fl, hp=run.hparams[name]))
    calibrated = [result.accuracy] if method.calib is not None else []
    return result.weights, [h["accuracy"] for h in result.history] + calibrated


def _bit_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def test_feddyn_under_flower_is_our_loops_feddyn_bit_for_bit(preset, task_identity, one_thread):
    """The fast check: FedDyn (server state h, client state grad L_k) over 2 rounds."""
    flower_weights, flower_accuracy = _flower(preset, ("feddyn",), 2)["feddyn"]
    loop_weights, loop_accuracy = _loop(preset, "feddyn", 2)
    assert _bit_equal(flower_weights, loop_weights)
    assert flower_accuracy == loop_accuracy


@pytest.mark.slow  # 15-25 s: three methods in Flower and in three loop runs, 3 rounds each
def test_stateful_methods_under_flower_are_our_loops_bit_for_bit(preset, task_identity, one_thread):
    """One after the other in one Flower run, as ``bench.flower --methods scaffold moon feddyn``
    runs them: each method's clients keep their own state, not the last method's."""
    names = ("scaffold", "moon", "feddyn")
    flower = _flower(preset, names, 3)
    for name in names:
        loop_weights, loop_accuracy = _loop(preset, name, 3)
        assert _bit_equal(flower[name][0], loop_weights), name
        assert flower[name][1] == loop_accuracy, name


@pytest.mark.slow  # ~5 s a method
@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n not in ("scaffold", "moon", "feddyn")]
                         + ["fedprox+spherefed"])
def test_every_other_method_under_flower_is_our_loops_bit_for_bit(name, preset, task_identity, one_thread):
    """The rest of the registry, 2 rounds each: server momentum (FedOpt, FedAvgM), w_{t-1} and d_t
    (FedCos), the local steps (FedNova), a frozen head (FedBABU, SphereFed), local parts (double
    head), width-scaled methods at full width (HeteroFL, FjORD), FedBuff's synchronous rounds."""
    flower_weights, flower_accuracy = _flower(preset, (name,), 2)[name]
    loop_weights, loop_accuracy = _loop(preset, name, 2)
    assert _bit_equal(flower_weights, loop_weights)
    assert flower_accuracy == loop_accuracy


@pytest.fixture(scope="module")
def calibration_preset(tmp_path_factory) -> str:
    """The small preset at ``CLIENTS`` clients, 900 training samples and its two local epochs (the
    end-to-end run's, tests/flower_example.py): with 300 samples and one epoch FFC's pooled Z^T Z is
    singular (``ffc_ridge`` 0, as the paper keeps it) and FedAvg stays at chance."""
    return cut_preset(tmp_path_factory.mktemp("calibration-preset"), 900, 2)


@pytest.mark.slow  # ~10-15 s a method: 2 rounds and the calibration in Flower and in our loop
@pytest.mark.parametrize("name", ["fedavg+spherefed+ffc", "fedavg+ccvr"])
def test_a_calibrated_method_under_flower_is_our_loops_bit_for_bit(name, calibration_preset, task_identity,
                                                                   one_thread):
    """FFC after SphereFed and CCVR after FedAvg: after their 2 rounds every client gets the final
    feature extractor in a ``train.calibrate`` message and replies with its statistics; the server
    calibrates in client order with bench.fl's generator (``derived_seed(seed, R + 1)``: CCVR's
    virtual features and re-training draw from it). The global state after the calibration (its
    new classifier) is our loop's bit for bit, and so is the accuracy after each round and after
    the calibration (the float64 statistics travel exactly in an ``ArrayRecord``)."""
    flower_weights, flower_accuracy = _flower(calibration_preset, (name,), 2)[name]
    loop_weights, loop_accuracy = _loop(calibration_preset, name, 2)
    assert _bit_equal(flower_weights, loop_weights)
    assert flower_accuracy == loop_accuracy and len(loop_accuracy) == 3


@pytest.mark.slow
def test_a_client_that_forgets_its_state_is_not_scaffold(preset, task_identity, one_thread):
    """The equality above rests on the client's state: SCAFFOLD whose clients keep nothing between
    rounds (c_i = 0 every round, a fresh node context per message) ends elsewhere."""
    forgetful, _ = _flower(preset, ("scaffold",), 2, forget=True)["scaffold"]
    kept, _ = _flower(preset, ("scaffold",), 2)["scaffold"]
    loop_weights, _ = _loop(preset, "scaffold", 2)
    assert _bit_equal(kept, loop_weights) and not _bit_equal(forgetful, loop_weights)


@pytest.mark.slow  # the shared simulation (tests/flower_example.py, ~20-35 s once for both tests)
def test_bench_flower_runs_the_stateful_methods_in_flowers_simulation(flower_example):
    """``python -m bench.flower --methods ... scaffold moon feddyn`` in Flower's simulation engine (Ray):
    every round of each, the bytes of what each method sends (SCAFFOLD: the state and c down, the
    state and Delta c up), and the accuracy of every round that of ``bench.fl``'s run of the same
    methods on the same preset (our loop, which the in-process runs above equal bit for bit):
    under Ray too, each node keeps its client's state from round to round. The run is the one
    tests/test_flower.py checks too (a SphereFed method first, then these)."""
    sim, loop, names, rounds = flower_example.flower, flower_example.loop, STATEFUL, ROUNDS
    assert sim.returncode == 0, sim.stderr[-3000:]
    assert loop.returncode == 0, loop.stderr[-3000:]
    rows = [r for r in read_csv(sim.out / "rounds.csv")[1] if r["method"] in names]
    ours = [r for r in read_csv(loop.out / "rounds.csv")[1] if r["method"] in names]
    assert [(r["method"], int(r["round"]), int(r["clients"])) for r in rows] == \
        [(name, t, CLIENTS) for name in names for t in range(1, rounds + 1)]
    model = flower_app.new_model(flower_app.FlowerRun(flower_example.preset, "convnet", names, CLIENTS, rounds, 0),
                                 parse_method("scaffold"))
    state_bytes = sum(v.numel() * v.element_size() for v in model.state_dict().values())
    trainable_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    expected = {"scaffold": 2 * state_bytes + 2 * trainable_bytes, "moon": 2 * state_bytes, "feddyn": 2 * state_bytes}
    for name in names:
        mine, theirs = [r for r in rows if r["method"] == name], [r for r in ours if r["method"] == name]
        assert all(int(r["round_bytes"]) == CLIENTS * expected[name] for r in mine), name
        assert [r["accuracy"] for r in mine] == [r["accuracy"] for r in theirs], name
        # the device time and energy of bench.fl's ledger: the local steps and the method's
        # after_training hook (SCAFFOLD's control-variate update, FedDyn's gradient term, MOON's
        # copy of its model), each metered at bench.fl's price (after_training_price)
        for col in ("round_device_s", "round_energy_j"):
            assert all(math.isclose(float(a[col]), float(b[col]), rel_tol=1e-12) for a, b in zip(mine, theirs)), \
                (name, col)


@pytest.mark.slow  # the shared simulation (tests/flower_example.py)
def test_bench_flower_runs_the_calibrations_in_flowers_simulation_as_bench_fl(flower_example):
    """``python -m bench.flower --methods ... fedavg+spherefed+ffc fedavg+ccvr`` under Ray: after each
    calibrated method's rounds, its calibration round R + 1 (stage ``calibration``) with every
    client. Every accuracy is ``bench.fl``'s (round R's before the calibration, R + 1's after it),
    and the calibration row is bench.fl's to the last digit: the same clients, server seconds (the
    calibration's server work on the same accelerator), device time and energy (each client's
    statistics as bench.fl's ledger prices them), bytes and wall time. The bytes by hand: each
    client downloads the feature extractor (the state but the classifier) and uploads what its
    calibration declares (FFC: V and U, l (l + C) float64; CCVR: C counts, C x l means, C x l x l
    covariances, float64), nothing more (no sample count in this round)."""
    sim, loop = flower_example.flower, flower_example.loop
    assert sim.returncode == 0, sim.stderr[-3000:]
    assert loop.returncode == 0, loop.stderr[-3000:]
    rows, ours = read_csv(sim.out / "rounds.csv")[1], read_csv(loop.out / "rounds.csv")[1]
    run = flower_app.FlowerRun(flower_example.preset, "convnet", CALIBRATED, CLIENTS, ROUNDS, 0)
    for name in CALIBRATED:
        mine, theirs = [r for r in rows if r["method"] == name], [r for r in ours if r["method"] == name]
        assert [(int(r["round"]), r["stage"]) for r in mine] == [(int(r["round"]), r["stage"]) for r in theirs] \
            == stages(name)
        assert [r["accuracy"] for r in mine] == [r["accuracy"] for r in theirs], name
        for col in ("clients", "sampled", "server_s", "round_device_s", "round_energy_j", "round_bytes",
                    "round_wall_s", "collect_s"):
            assert mine[-1][col] == theirs[-1][col], (name, col)
        method, hp = run.method(name)
        model = flower_app.new_model(run, method)
        extractor = sum(v.numel() * v.element_size() for k, v in model.state_dict().items()
                        if not k.startswith("classifier."))
        statistics = method.calib.upload_bytes(feature_dim=model.feature_dim, num_classes=10, hp=hp)
        assert int(mine[-1]["round_bytes"]) == CLIENTS * (extractor + statistics), name
        assert float(mine[-1]["server_s"]) > 0 and int(mine[-1]["clients"]) == CLIENTS

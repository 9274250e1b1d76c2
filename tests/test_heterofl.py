"""Width-scaled methods (HeteroFL, FjORD; workloads/fl/width.py, workloads/fl/methods/heterofl.py,
fjord.py): the submodel the full model trains under masks is the sliced submodel, width 1 is FedAvg
bit for bit, the aggregation by holders by hand and against a transcription of Flower's baseline,
the priced step at its width, and widths from a fleet (docs/methods.md, docs/fleets.md)."""

import math

import pytest
import torch
from torch import nn

from fl_standins import TinyNet, blobs
from workloads.cost.fleet import FleetError, fleet_from_dict
from workloads.cost.step import local_step_trace
from workloads.cost.widths import chosen_width
from workloads.fl.comm import ledger_totals
from workloads.fl.execution import Execution
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import ClientContext, client_trainer
from workloads.fl import loop
from workloads.fl.loop import RunPlan
from workloads.fl.methods import MethodConfig, parse_method
from workloads.fl.methods.base import ClientUpdate, RoundContext, ServerState
from workloads.fl.methods.fjord import FjORD, allowed, fjord_rates
from workloads.fl.methods.heterofl import HeteroFL
from workloads.fl.partition import dirichlet_partition
from workloads.fl.width import (average_by_holders, held, held_shapes, kept, masked, prefix, static_batch_norm,
                                submodel)
from workloads.models import convnet

TRAIN, TEST = blobs(120), blobs(40, seed=1)
PARTS = dirichlet_partition(TRAIN.y.numpy(), 4, 1.0, min_size=5, seed=0)
HP = Hparams(lr=0.05, local_epochs=1, batch_size=16)
WIDTHS = Execution(client_widths=(1.0, 0.5, 0.25, 0.5))


class TrackedHeteroFL(HeteroFL):
    """HeteroFL keeping the model's batch norm (running statistics), to compare with FedAvg itself."""
    static_norm = False


def run(name, *, execution=Execution(), model_fn=TinyNet, hp=HP, rounds=2):
    method = parse_method(name)
    cfg = FLConfig(dataset="blobs", num_clients=4, rounds=rounds, participation=1.0, seed=3)
    return loop.train(RunPlan(method, model_fn=model_fn, train=TRAIN, test=TEST, parts=PARTS, cfg=cfg, hp=hp,
                              execution=execution))


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- the submodel


def test_kept_channels_are_the_ceiling_of_rate_times_channels():
    # ceil(0.5 x 32) = 16, ceil(0.3 x 10) = 3 (not 4: 0.3 x 10 = 3.0000000000000004 in binary),
    # ceil(0.0625 x 3) = 1 (at least one)
    assert (kept(32, 0.5), kept(10, 0.3), kept(3, 0.0625), kept(7, 1.0)) == (16, 3, 1, 7)


def test_held_shapes_of_the_convnet_keep_inputs_and_classes():
    # ConvNet at 32x32 (stride 2 at conv2, 3, 5, 7: 32 -> 2): conv1 3 -> 32 (input channels kept), ...,
    # conv7 128 -> 256, then a flattened 256 x 2 x 2 map into the classifier: at rate 1/2 conv1 keeps 16
    # of 32 outputs and all 3 inputs, conv7 64 of 128 inputs and 128 of 256 outputs, the classifier all
    # 10 classes and 128 x 2 x 2 = 512 of its 1024 inputs (a channel-major prefix)
    shapes = held_shapes(static_batch_norm(convnet(num_classes=10, image_size=32)), 0.5)
    assert shapes["body.conv1.conv.weight"] == (16, 3, 3, 3)
    assert shapes["body.conv7.conv.weight"] == (128, 64, 3, 3)
    assert shapes["body.conv7.norm.weight"] == (128,)
    assert shapes["classifier.weight"] == (10, 512)


@pytest.mark.parametrize("rate", [0.5, pytest.param(0.3, marks=pytest.mark.slow)])
def test_the_masked_full_model_trains_the_sliced_submodel(rate):
    # three SGD steps (momentum, weight decay) of HeteroFL's step on the full ConvNet at width r and
    # on the sliced ConvNet: every held entry ends equal (0.3: kept counts that are no exact fraction)
    torch.manual_seed(0)
    full = HeteroFL().prepare_model(convnet(num_classes=10, image_size=32), seed=0).train()
    small = submodel(full, rate).train()
    hp = Hparams(lr=0.1, momentum=0.9, weight_decay=1e-4)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    method = MethodConfig("heterofl")
    trainers = [client_trainer(m, m.state_dict(), hp, method, ClientContext(width=rate)) for m in (full, small)]
    for _ in range(3):
        losses = [t.step(x, y) for t in trainers]
    assert losses[0].item() == pytest.approx(losses[1].item(), abs=1e-6)
    trained = held(full.state_dict(), held_shapes(full, rate))
    assert all(torch.allclose(trained[k], small.state_dict()[k], atol=1e-6) for k in trained)
    assert any(not torch.equal(trained[k], full.state_dict()[k]) for k in trained)  # a real prefix


@pytest.mark.parametrize("name", ["vgg13", "mobilenetv2", pytest.param("resnet18", marks=pytest.mark.slow),
                                  pytest.param("senet18", marks=pytest.mark.slow)])
def test_every_model_of_the_zoo_scales(name):
    # shortcuts (ResNet, SENet, MobileNetV2's inverted residuals), squeeze-excitation, depthwise
    # convolutions: the masked full model's forward is the sliced one's at width 1/2, which holds
    # about a quarter of the parameters (both sides of most layers halved)
    from workloads.models import build_model

    torch.manual_seed(0)
    full = static_batch_norm(build_model(name, num_classes=10, image_size=16)).train()
    small = submodel(full, 0.5).train()
    x = torch.randn(4, 3, 16, 16)
    with masked(full, 0.5), masked(small, 0.5):
        assert torch.allclose(full(x), small(x), atol=1e-5)
    share = sum(p.numel() for p in small.parameters()) / sum(p.numel() for p in full.parameters())
    assert 0.24 < share < 0.27


def test_rate_one_registers_no_hook_and_the_scaler_acts_in_training_only():
    model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
    x = torch.ones(1, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1.0)
    with masked(model, 1.0):
        assert model(x).item() == 13.0  # hidden 4 x (1 + 1 + 1) = 12, plus the bias 1
    with masked(model, 0.5):
        # 2 of 4 hidden units kept, each 3 / 0.5 = 6 (the scaler): 2 x 6 + 1 = 13
        assert model(x).item() == 13.0
        model.eval()
        assert model(x).item() == 7.0  # no scaler in evaluation: 2 x 3 + 1


# --------------------------------------------------------------------------- reductions to FedAvg


def test_heterofl_at_width_one_is_fedavg_bit_for_bit(monkeypatch):
    # static batch norm: FedAvg on the same model; without it (the model's own batch norm): FedAvg itself
    assert same(run("heterofl").weights, run("fedavg", model_fn=lambda: static_batch_norm(TinyNet())).weights)
    import workloads.fl.methods as registry

    monkeypatch.setitem(registry.ALGORITHMS, "heterofl_tracked", TrackedHeteroFL())
    monkeypatch.setitem(registry.NAME_PARTS, "heterofl_tracked", "algorithm")
    assert same(run("heterofl_tracked").weights, run("fedavg").weights)
    assert not same(run("heterofl", execution=WIDTHS).weights, run("heterofl").weights)  # narrower clients differ


def test_fjord_with_one_level_is_fedavg_bit_for_bit():
    one_level = HP.with_knobs(FjORD.knobs).replace(fjord_levels=1)
    fedavg = run("fedavg", model_fn=lambda: static_batch_norm(TinyNet()))
    assert same(run("fjord", hp=one_level).weights, fedavg.weights)
    assert not same(run("fjord").weights, fedavg.weights)  # five levels: ordered dropout trains narrower steps


def test_narrower_clients_send_their_prefix_and_the_ledger_counts_it():
    # TinyNet: Linear(12, 12) + bias, BatchNorm1d(12) (static: weight, bias), Linear(12, 12) + bias,
    # classifier Linear(12, 4): 156 + 24 + 156 + 48 = 384 floats = 1,536 B at width 1. At width 1/2
    # (6 hidden units): 12 x 6 + 6, 6 + 6, 6 x 6 + 6, 4 x 6 = 78 + 12 + 42 + 24 = 156 floats = 624 B;
    # at 1/4 (3 units): 39 + 6 + 12 + 12 = 69 floats = 276 B. Widths 1, 1/2, 1/4, 1/2, two rounds:
    # down 2 x (1536 + 624 + 276 + 624) = 6,120 B
    result = run("heterofl", execution=WIDTHS)
    totals = ledger_totals(result.transfers)
    assert totals["down_bytes"] == 6120
    assert totals["by_client"]["2"]["down_bytes"] == 2 * 276


# --------------------------------------------------------------------------- the aggregation


def test_aggregation_by_holders_by_hand():
    # Two layers: fc1 = Linear(2, 2) (its inputs are the data's: all kept), classifier Linear(2, 1)
    # (its output is the class: kept). Width 1/2 keeps ceil(2 / 2) = 1 hidden unit: fc1's first row,
    # the classifier's first column.
    model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.ReLU(), nn.Linear(2, 1, bias=False))
    assert held_shapes(model, 0.5) == {"0.weight": (1, 2), "2.weight": (1, 1)}
    glob = {"0.weight": torch.zeros(2, 2), "2.weight": torch.zeros(1, 2)}
    a = {"0.weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "2.weight": torch.tensor([[5.0, 6.0]])}  # width 1, n = 1
    b = {"0.weight": torch.tensor([[10.0, 20.0]]), "2.weight": torch.tensor([[30.0]])}  # width 1/2, n = 3
    out = average_by_holders(glob, [(a, 1), (b, 3)])
    # held by both: (1 x 1 + 3 x 10) / 4 = 7.75, (1 x 2 + 3 x 20) / 4 = 15.5, (1 x 5 + 3 x 30) / 4 = 23.75;
    # held by a alone: a's values, 3, 4 and 6
    assert out["0.weight"].tolist() == [[7.75, 15.5], [3.0, 4.0]]
    assert out["2.weight"].tolist() == [[23.75, 6.0]]
    # both at width 1/2: fc1's second row and the classifier's second column were held by nobody:
    # they keep the global values (here 9), the first row is (1 x 10 + 3 x 20) / 4 = 17.5, (1 x 20 + 3 x 40) / 4 = 35
    glob = {"0.weight": torch.full((2, 2), 9.0), "2.weight": torch.full((1, 2), 9.0)}
    c = {"0.weight": torch.tensor([[20.0, 40.0]]), "2.weight": torch.tensor([[2.0]])}
    out = average_by_holders(glob, [(b, 1), (c, 3)])
    assert out["0.weight"].tolist() == [[17.5, 35.0], [9.0, 9.0]]
    assert out["2.weight"].tolist() == [[(30.0 + 6.0) / 4, 9.0]]


def flower_heterofl_average(global_state, local_parameters, param_idx):
    """Transcription of Flower's HeteroFL baseline (github.com/adap/flower,
    baselines/heterofl/heterofl/strategy.py, ``HeteroFL._aggregate_conv``, which its README says
    follows the authors' code), without the label split of the output layer (a training option we
    do not use): per key, sum every client's values into their index ranges, count the clients per
    entry, divide where counted, keep the global value elsewhere. Each client counts once."""
    out = {}
    for k, val in global_state.items():
        val = val.clone()
        count = val.new_zeros(val.size(), dtype=torch.float32)
        tmp_v = val.new_zeros(val.size(), dtype=torch.float32)
        for clnt in range(len(local_parameters)):
            if val.dim() > 1:
                tmp_v[torch.meshgrid(param_idx[clnt][k], indexing="ij")] += local_parameters[clnt][k]
                count[torch.meshgrid(param_idx[clnt][k], indexing="ij")] += 1
            else:
                tmp_v[param_idx[clnt][k]] += local_parameters[clnt][k]
                count[param_idx[clnt][k]] += 1
        tmp_v[count > 0] = tmp_v[count > 0].div_(count[count > 0])
        val[count > 0] = tmp_v[count > 0].to(val.dtype)
        out[k] = val
    return out


def test_aggregation_agrees_with_flowers_heterofl_baseline():
    # three ConvNet clients at widths 1, 1/2 and 1/4, equal sample counts (where the baseline's count
    # average and our sample-weighted one coincide), random trained values
    torch.manual_seed(1)
    model = HeteroFL().prepare_model(convnet(num_classes=10, image_size=16), seed=0)
    glob = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    states, indices = [], []
    for rate in (1.0, 0.5, 0.25):
        shapes = held_shapes(model, rate)
        states.append(held({k: torch.randn_like(v) for k, v in glob.items()}, shapes))
        indices.append({k: [torch.arange(n) for n in shapes[k]] if len(shapes[k]) > 1 else torch.arange(shapes[k][0])
                        for k in glob})  # as the baseline's param_idx: a list per dimension, one tensor for a vector
    ours = average_by_holders(glob, [(s, 50) for s in states])
    theirs = flower_heterofl_average(glob, states, indices)
    assert all(torch.allclose(ours[k], theirs[k], atol=1e-6) for k in glob)
    assert not torch.equal(ours["body.conv1.conv.weight"][20:], glob["body.conv1.conv.weight"][20:])  # width 1 held them


def test_heterofl_aggregate_weights_holders_by_samples():
    server = ServerState(weights={"w": torch.zeros(2)})
    updates = [ClientUpdate(0, {"w": torch.tensor([4.0, 8.0])}, 3, 1), ClientUpdate(1, {"w": torch.tensor([0.0])}, 1, 1)]
    # entry 0: (3 x 4 + 1 x 0) / 4 = 3; entry 1: client 0 alone, 8
    assert HeteroFL().aggregate(server, updates, HP, ["w"]).weights["w"].tolist() == [3.0, 8.0]


# --------------------------------------------------------------------------- FjORD's draws


def test_fjord_levels_and_uniform_mix():
    assert fjord_rates(5) == (1.0, 0.8, 0.6, 0.4, 0.2)
    assert allowed(fjord_rates(5), 0.6) == (0.6, 0.4, 0.2)
    assert allowed(fjord_rates(5), 0.1) == (0.1,)  # narrower than every level: its own width
    hp = HP.with_knobs(FjORD.knobs)
    assert FjORD().width_mix(0.6, hp) == ((0.6, 1 / 3), (0.4, 1 / 3), (0.2, 1 / 3))
    assert HeteroFL().width_mix(0.5, hp) == ((0.5, 1.0),)


def test_fjord_draws_from_the_clients_generator():
    hp = HP.with_knobs(FjORD.knobs)

    def draws(seed):
        ctx = RoundContext(1, {}, width=0.6, draws=torch.Generator().manual_seed(seed))
        return [FjORD().step_width(ctx, hp) for _ in range(60)]

    first = draws(7)
    assert first == draws(7) and set(first) == {0.2, 0.4, 0.6}  # same seed, same widths; only allowed levels
    assert FjORD().step_width(RoundContext(1, {}, width=0.6), hp) == 0.6  # a priced step: its own width
    assert same(run("fjord", execution=WIDTHS).weights, run("fjord", execution=WIDTHS).weights)


# --------------------------------------------------------------------------- priced at the width trained


def test_a_step_is_priced_at_its_width():
    # a two-layer model, batch 2: forward MACs at width 1: 2 x 4 x 8 + 2 x 8 x 3 = 112; at width 1/2
    # (4 hidden units): 2 x 4 x 4 + 2 x 4 x 3 = 56
    def model():
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

    from accel_sim.hardware import HardwareConfig
    from accel_sim.simulate import simulate

    method = MethodConfig("heterofl")
    reports = {w: simulate(local_step_trace(model, method, HP, batch_size=2, input_shape=(4,), width=w),
                           HardwareConfig()) for w in (1.0, 0.5)}
    forward = {w: r.by_work()["gemm:fwd"].macs for w, r in reports.items()}
    assert forward == {1.0: 112, 0.5: 56}
    assert reports[0.5].peak_memory_bytes < reports[1.0].peak_memory_bytes


# --------------------------------------------------------------------------- widths from a fleet


def test_a_class_declares_its_width_or_auto():
    base = {"hw": "paper_default", "memory_bytes": math.inf, "downlink_bytes_per_s": math.inf,
            "uplink_bytes_per_s": math.inf, "latency_s": 0.0, "share": 1.0}
    fleet = fleet_from_dict({"classes": {"a": {**base, "width": 0.5}}}, source="f.toml")
    assert fleet.classes[0].width == 0.5 and fleet.describe()["classes"]["a"]["width"] == 0.5
    assert fleet_from_dict({"classes": {"a": {**base, "width": "auto"}}}, source="f.toml").classes[0].width == "auto"
    with pytest.raises(FleetError, match=r"f.toml \[classes.a\]: width = 1.5; give a number in \(0, 1\]"):
        fleet_from_dict({"classes": {"a": {**base, "width": 1.5}}}, source="f.toml")


def test_auto_picks_the_widest_declared_width_that_works():
    rates = (1.0, 0.5, 0.25, 0.125)
    assert chosen_width("auto", rates, lambda w: w <= 0.3) == 0.25
    assert chosen_width("auto", rates, lambda w: False) == 0.125  # nothing works: the narrowest (then dropped)
    assert chosen_width(0.5, rates, lambda w: False) == 0.5  # a declared width is the class's
    assert chosen_width(None, rates, lambda w: False) == 1.0  # none declared: the full model


def test_the_plan_gives_each_client_the_widest_width_that_fits():
    # two classes on the paper's accelerator: "big" without a memory limit, "small" with a limit between
    # the half-width and the full-width step's peak (priced here from the same captures); with width =
    # "auto" the small clients train at 1/2, the big ones at 1; HeteroFL's plan records it, FedAvg's
    # trains every client at width 1 (and drops the small ones: memory)
    import numpy as np

    from accel_sim.hardware import load_hardware_config
    from workloads.cost.fleet import assign_classes
    from workloads.cost.rounds import PricedModel, RunPricer, fleet_devices, fleet_system, plan_run

    pricer = RunPricer(PricedModel(lambda head: TinyNet(), "tinynet", (3, 2, 2), 4, 0))
    heterofl, fedavg = parse_method("heterofl"), parse_method("fedavg")
    hp = Hparams(lr=0.05, local_epochs=1, batch_size=8)
    paper = load_hardware_config("configs/hw/paper_default.toml")
    full, half = (pricer.peak_memory_bytes(heterofl, hp, 8, 1, paper, w) for w in (1.0, 0.5))
    assert half < full
    base = {"hw": "paper_default", "downlink_bytes_per_s": math.inf, "uplink_bytes_per_s": math.inf,
            "latency_s": 0.0, "width": "auto"}
    fleet = fleet_from_dict({"classes": {"big": {**base, "memory_bytes": math.inf},
                                         "small": {**base, "memory_bytes": (full + half) / 2}},
                             "assignment": ["big", "small", "small", "big"]}, source="w.toml")
    classes = assign_classes(fleet, 4, seed=0)
    labels = [np.zeros(8, dtype=np.int64)] * 4

    def plan(method):
        return plan_run(fleet, classes, method, hp, pricer=pricer, client_labels=labels,
                        devices=fleet_devices(fleet, classes), system=fleet_system(fleet, classes), rounds=1,
                        participation=1.0, seed=0)

    assert plan(heterofl).widths == (1.0, 0.5, 0.5, 1.0) and plan(heterofl).rounds[0].arrived == (0, 1, 2, 3)
    assert plan(fedavg).widths == () and plan(fedavg).rounds[0].dropped == {1: "memory", 2: "memory"}


@pytest.mark.parametrize("name", ["heterofl", "fjord"])
@pytest.mark.parametrize("mode", [{"capture_step": True}, {"client_threads": 2}])
def test_narrower_clients_through_the_static_step_or_threads_are_the_sequential_run(name, mode):
    # the recorded step (eager on the CPU) takes each client's width and generator; threads train
    # each client on its own copy: bit for bit the sequential run, clients of widths 1, 1/2, 1/4, 1/2
    from test_client_threads import assert_identical
    from test_clients_together import run_in

    widths = {"client_widths": (1.0, 0.5, 0.25, 0.5)}
    assert_identical(run_in({}, name, execution=widths), run_in(mode, name, execution=widths))


def test_fjord_is_never_recorded_as_a_graph(capsys):
    # a recorder on a CUDA device (nothing of CUDA is touched: FjORD's step is refused before any
    # recording) trains FjORD's full batches eagerly and says so once
    from workloads.fl.capture import StepRecorder

    model = static_batch_norm(TinyNet()).train()
    hp = HP.with_knobs(FjORD.knobs)
    x, y = TRAIN.x[:16], TRAIN.y[:16]
    eager = client_trainer(model, model.state_dict(), hp, MethodConfig("fjord"),
                           ClientContext(width=0.6, draws=torch.Generator().manual_seed(5)))
    recorded = StepRecorder("fjord", 16, torch.device("cuda")).trainer(eager)
    for _ in range(3):
        recorded.step(x, y)
    assert capsys.readouterr().err.count("--capture-step: fjord trains eagerly (its step draws a width per step)") == 1

"""Methods with state (SCAFFOLD, MOON, FedDyn): hand-worked updates, their reductions to FedAvg,
their bytes by hand, their state in the priced step's memory, and the capture key that tells
methods apart (workloads/fl/methods/scaffold.py, moon.py, feddyn.py; docs/methods.md)."""

import math

import pytest
import torch
from torch import nn

from accel_sim.hardware import HardwareConfig
from accel_sim.simulate import simulate
from fl_standins import TinyNet, blobs
from workloads.cost.step import local_step_trace
from workloads.fl.comm import closed_form_bytes, closed_form_sizes, ledger_totals
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import ClientContext, client_trainer, prepare_model
from workloads.fl import loop
from workloads.fl.loop import RunPlan
from workloads.fl.methods import parse_method
from workloads.fl.methods.base import ClientUpdate, FedAvg, RoundContext, ServerState, step_identity
from workloads.fl.methods.feddyn import FedDyn
from workloads.fl.methods.moon import MOON, contrastive_loss
from workloads.fl.methods.scaffold import CONTROL, Scaffold, option_two
from workloads.fl.partition import dirichlet_partition
from workloads.models import FLNet

TRAIN, TEST = blobs(120), blobs(40, seed=1)
PARTS = dirichlet_partition(TRAIN.y.numpy(), 4, 1.0, min_size=5, seed=0)
HP = Hparams(lr=0.05, local_epochs=1, batch_size=16)


def run(name, rounds=2, hp=HP, participation=1.0, **kw):
    method = parse_method(name)
    cfg = FLConfig(dataset="blobs", num_clients=4, rounds=rounds, participation=participation, seed=3)
    return loop.train(RunPlan(method, model_fn=lambda: TinyNet(head=method.head), train=TRAIN, test=TEST,
                              parts=PARTS, cfg=cfg, hp=hp, **kw))


# --------------------------------------------------------------------------- SCAFFOLD


def test_scaffold_option_two_by_hand():
    # c_i+ = c_i - c + (x - y) / (K lr): c_i = 0.25, c = 0.5, x = 1.0, y = 0.8, K = 4, lr = 0.1:
    # 0.25 - 0.5 + 0.2 / 0.4 = 0.25
    one = lambda v: {"w": torch.tensor([v], dtype=torch.float64)}  # noqa: E731
    assert option_two(one(0.5), one(0.25), one(1.0), one(0.8), 0.4)["w"].item() == pytest.approx(0.25)


def test_scaffold_corrects_the_gradient_and_updates_its_variates_by_hand():
    # one parameter w (a 1x1 linear layer, loss = its output on x = 1, so g = 1), lr 0.1, no
    # momentum or decay: the corrected step is w' = w - lr (g + c - c_i) = 2 - 0.1 (1 + 0.5 - 0.25)
    # = 1.875; option II with K = 1: c_i+ = 0.25 - 0.5 + (2 - 1.875) / 0.1 = 1.0 (g itself, which
    # option II estimates), Delta c_i = 1.0 - 0.25 = 0.75
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(2.0)
    hp = Hparams(lr=0.1, momentum=0.0, weight_decay=0.0)
    method = parse_method("scaffold")
    c, c_i = {"weight": torch.tensor([[0.5]])}, {"weight": torch.tensor([[0.25]])}
    trainer = client_trainer(model, model.state_dict(), hp, method, ClientContext(received={CONTROL: c}, state=c_i))
    trainer.loss_fn = lambda out, y: out.sum()
    trainer.step(torch.ones(1, 1), torch.zeros(1, dtype=torch.long))
    assert model.weight.item() == pytest.approx(1.875)
    new, up = Scaffold().after_training(model, trainer.ctx, 1, hp)
    assert new["weight"].item() == pytest.approx(1.0) and up[CONTROL]["weight"].item() == pytest.approx(0.75)
    # the server: x the weighted average, c += (1/N) sum Delta c_i: N = 4, Delta c = 0.75 and 0.25 -> c = 0.25
    server = ServerState(weights={"weight": torch.tensor([[2.0]])}, num_clients=4)
    updates = [ClientUpdate(0, {"weight": torch.tensor([[1.0]])}, 1, 1, {CONTROL: {"weight": torch.tensor([[0.75]])}}),
               ClientUpdate(1, {"weight": torch.tensor([[4.0]])}, 3, 1, {CONTROL: {"weight": torch.tensor([[0.25]])}})]
    after = Scaffold().aggregate(server, updates, hp, ["weight"])
    assert after.weights["weight"].item() == pytest.approx(0.25 * 1.0 + 0.75 * 4.0)
    assert after.extras[CONTROL]["weight"].item() == pytest.approx(0.25)


def test_scaffold_with_zero_control_variates_is_fedavg_bit_for_bit():
    # round 1: c = c_i = 0, so every local step and the weighted average are FedAvg's
    scaffold, fedavg = run("scaffold", rounds=1), run("fedavg", rounds=1)
    assert all(torch.equal(scaffold.weights[k], fedavg.weights[k]) for k in fedavg.weights)
    # from round 2 the variates are not zero: the runs part
    assert not all(torch.equal(a, b) for a, b in zip(run("scaffold").weights.values(), run("fedavg").weights.values()))


def test_a_built_in_named_as_a_plug_in_is_the_same_run():
    # SCAFFOLD uses nothing but the interface a method of yours has: named package.module:Class it runs the same
    built_in, plug_in = run("scaffold", rounds=1), run("workloads.fl.methods.scaffold:Scaffold", rounds=1)
    assert all(torch.equal(built_in.weights[k], plug_in.weights[k]) for k in built_in.weights)
    assert ledger_totals(built_in.transfers) == ledger_totals(plug_in.transfers)


def test_scaffold_bytes_by_hand():
    # TinyNet: the model 1640 B, its trainable parameters 1536 B (test_fl_comm). 2 rounds x 4
    # clients: down 8 x (1640 + 1536 c) = 25408; up 8 x (1640 + 1536 Delta c_i + 8 sample count) = 25472
    totals = ledger_totals(run("scaffold").transfers)
    assert (totals["down_bytes"], totals["up_bytes"]) == (25408, 25472)
    assert totals["by_group"][CONTROL] == {"down_bytes": 8 * 1536, "up_bytes": 8 * 1536}
    method = parse_method("scaffold")
    sizes = closed_form_sizes(prepare_model(TinyNet(), method, seed=0), method)
    assert closed_form_bytes(method, HP, sizes, rounds=2, clients_per_round=4, num_clients=4)["total_bytes"] == 50880


def test_a_resumed_scaffold_run_keeps_each_clients_variate(tmp_path):
    # the clients' c_i live in the checkpoint: stopping after round 1 and resuming gives the same run
    path = tmp_path / "ckpt.pt"
    whole = run("scaffold", rounds=3, participation=0.5)

    class Stop(Exception):
        pass

    def stop(t):
        if t == 1:
            raise Stop

    with pytest.raises(Stop):
        run("scaffold", rounds=3, participation=0.5, checkpoint=path, after_round=stop)
    resumed = run("scaffold", rounds=3, participation=0.5, checkpoint=path, resume=True)
    assert resumed.resumed_after_round == 1
    assert all(torch.equal(whole.weights[k], resumed.weights[k]) for k in whole.weights)


# --------------------------------------------------------------------------- FedDyn


def test_feddyn_server_and_client_state_by_hand():
    # m = 4 clients, alpha = 0.5, theta^{t-1} = 1, two clients at 2 and 4 (h^{t-1} = 0):
    # h = 0 - 0.5 / 4 ((2 - 1) + (4 - 1)) = -0.5; theta = (2 + 4) / 2 - (-0.5) / 0.5 = 4
    hp = Hparams().with_knobs(FedDyn.knobs).replace(feddyn_alpha=0.5)
    server = ServerState(weights={"w": torch.tensor([1.0])}, num_clients=4)
    updates = [ClientUpdate(0, {"w": torch.tensor([2.0])}, 10, 1), ClientUpdate(1, {"w": torch.tensor([4.0])}, 1, 1)]
    after = FedDyn().aggregate(server, updates, hp, ["w"])
    assert after.extras["feddyn_h"]["w"].item() == pytest.approx(-0.5) and after.weights["w"].item() == pytest.approx(4.0)
    # client: g = 0.2, theta_k = 2 after training from theta^{t-1} = 1: g' = 0.2 - 0.5 (2 - 1) = -0.3
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(2.0)
    ctx = RoundContext(1, {"weight": torch.tensor([[1.0]])}, state={"weight": torch.tensor([[0.2]])})
    new, up = FedDyn().after_training(model, ctx, 5, hp)
    assert new["weight"].item() == pytest.approx(-0.3) and up == {}
    # the regularizer at theta = 2: -g theta + alpha/2 (theta - 1)^2 = -0.4 + 0.25 = -0.15, gradient -0.2 + 0.5 = 0.3
    term = FedDyn().penalty(model, ctx, hp)
    term.backward()
    assert term.item() == pytest.approx(-0.15) and model.weight.grad.item() == pytest.approx(0.3)


def test_feddyn_adds_no_bytes_and_its_state_changes_training():
    feddyn, fedavg = run("feddyn"), run("fedavg")
    assert ledger_totals(feddyn.transfers)["total_bytes"] == ledger_totals(fedavg.transfers)["total_bytes"]
    assert not all(torch.equal(feddyn.weights[k], fedavg.weights[k]) for k in fedavg.weights)


# --------------------------------------------------------------------------- MOON


def test_moon_contrastive_loss_by_hand():
    # z = z_glob = (1, 0), z_prev = (0, 1), tau = 0.5: logits (1 / 0.5, 0 / 0.5) = (2, 0),
    # l_con = -log(e^2 / (e^2 + 1)) = log(1 + e^-2) = 0.126928
    z, z_prev = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    assert contrastive_loss(z, z, z_prev, 0.5).item() == pytest.approx(math.log1p(math.exp(-2)), rel=1e-6)
    # the previous model equal to the global one: log 2 whatever z, and no gradient (up to float32 rounding)
    z = torch.tensor([[0.3, -2.0]], requires_grad=True)
    loss = contrastive_loss(z, torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 1.0]]), 0.5)
    loss.backward()
    assert loss.item() == pytest.approx(math.log(2)) and z.grad.abs().max() < 1e-7


def test_moon_with_mu_zero_is_fedavg_bit_for_bit_and_mu_changes_it():
    fedavg = run("fedavg")
    zero = run("moon", hp=HP.with_knobs(MOON.knobs).replace(moon_mu=0.0))
    assert all(torch.equal(zero.weights[k], fedavg.weights[k]) for k in fedavg.weights)
    assert not all(torch.equal(a, b) for a, b in zip(run("moon").weights.values(), fedavg.weights.values()))


def test_moon_keeps_its_previous_model_and_leaves_the_trained_ones_statistics_alone():
    # the global and previous models run in eval mode on their own weights: the trained model's
    # BatchNorm statistics move as FedAvg's (mu = 0 above); its state after training is its model
    model = TinyNet()
    method = parse_method("moon")
    trainer = client_trainer(model, model.state_dict(), HP, method)
    assert torch.equal(trainer.ctx.state["body.2.running_mean"], model.state_dict()["body.2.running_mean"])
    trainer.step(TRAIN.x[:8], TRAIN.y[:8])
    assert model.training
    kept, up = MOON().after_training(model, trainer.ctx, 1, HP)
    assert up == {} and all(torch.equal(kept[k], v) for k, v in model.state_dict().items())


# --------------------------------------------------------------------------- priced


def _tiny():
    """conv 3 -> 4 (3x3, bias: 112 floats), BatchNorm2d(4) (weight, bias: 8 floats; running mean,
    var: 8 floats; num_batches_tracked: int64), classifier 3 x 4 (12 floats)."""
    body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten())
    return FLNet(body, 4, 3)


def _peak(name):
    trace = local_step_trace(_tiny, parse_method(name), Hparams(batch_size=2), batch_size=2, input_shape=(3, 4, 4),
                             round=2)
    return simulate(trace, HardwareConfig()).peak


def test_the_state_is_in_the_priced_steps_peak_memory_by_hand():
    # trainable parameters: (112 + 8 + 12) x 4 B = 528 B; a whole model's state (what an anchored
    # method copies as w_t, MOON's previous model): 528 + running mean and var 8 x 4 B + the int64
    # num_batches_tracked 8 B = 568 B. Held beside FedAvg's step (the "input" storages, live
    # throughout, read by the step or not): SCAFFOLD c, c_i and w_t (kept for its control-variate
    # update after training), 2 x 528 + 568; FedDyn its gradient term and w_t, 528 + 568; MOON the
    # global and the previous model, 2 x 568; FedProx w_t, 568.
    base = _peak("fedavg")
    expected = {"scaffold": 2 * 528 + 568, "feddyn": 528 + 568, "moon": 2 * 568, "fedprox": 568}
    for name, extra in expected.items():
        peak = _peak(name)
        assert peak.by_kind_bytes["input"] - base.by_kind_bytes["input"] == extra, name
        assert peak.peak_memory_bytes >= base.peak_memory_bytes + extra, name


# --------------------------------------------------------------------------- the capture key


def test_the_capture_key_derives_from_the_method():
    identity = {name: step_identity(parse_method(name).algo) for name in
                ("fedavg", "fednova", "fedprox", "fedcos", "scaffold", "moon", "feddyn", "doublehead")}
    assert identity["fedavg"] == identity["fednova"]  # FedNova differs on the server only
    others = [v for k, v in identity.items() if k != "fednova"]
    assert len(set(others)) == len(others)

    class WithAHelper(FedAvg):  # a hook nobody listed: its own step
        def batch_loss(self, model, x, y, outputs, loss_fn, ctx, hp):
            return self.helper(super().batch_loss(model, x, y, outputs, loss_fn, ctx, hp))

        def helper(self, loss):
            return 2 * loss

    class ServerOnly(FedAvg):
        def aggregate(self, server, updates, hp, keys):
            return super().aggregate(server, updates, hp, keys)

    assert step_identity(WithAHelper()) != identity["fedavg"]
    assert step_identity(ServerOnly()) == identity["fedavg"]


@pytest.mark.slow
def test_a_fleets_memory_limit_sees_moons_extra_models():
    # a device that holds FedAvg's step exactly: MOON's clients, with the global and the previous
    # model resident beside it, do not fit and decline; FedAvg's all train
    from bench.lib.fl.jobs import Job, run_job
    from tests.test_fleet import FAST, HP as FLEET_HP, fleet_of, run_inputs
    from workloads.cost.rounds import RunPricer
    from workloads.fl.data import load_dataset
    from workloads.fl.dataset import subset

    train, test = load_dataset("digits", image_size=16)
    digits = subset(train, 120, 0, "train"), subset(test, 40, 1, "test")
    pricer = RunPricer(run_inputs(digits).priced_model())
    n = max(len(p) for p in run_inputs(digits).parts)
    peak = {name: pricer.peak_memory_bytes(parse_method(name), FLEET_HP, n, 1, HardwareConfig())
            for name in ("fedavg", "moon")}
    assert peak["moon"] > peak["fedavg"]
    fleet = fleet_of({"exact": {**FAST, "memory_bytes": float(peak["fedavg"]), "share": 1.0}})
    for name, trained, declined in (("fedavg", 3, 0), ("moon", 0, 3)):
        (row,) = run_job(Job(name, FLEET_HP), run_inputs(digits, fleet=fleet, rounds=1), pricer=pricer).rows
        assert (row["clients"], row["dropped_memory"]) == (trained, declined), name


def test_extras_that_do_not_match_their_declaration_are_one_line(monkeypatch):
    # what the closed form charges is what the method declares: a hook that sends anything else stops the run
    from workloads.fl import methods

    class Undeclared(Scaffold):
        def extra_uploads(self, round):
            return ()

    monkeypatch.setitem(methods.ALGORITHMS, "scaffold", Undeclared())
    with pytest.raises(ValueError, match=r"after_training in round 1 gave groups \['scaffold_control'\], but it "
                                         r"declares \[\] \(extra_downloads / extra_uploads\)"):
        run("scaffold", rounds=1)

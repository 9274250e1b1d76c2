"""A round's clients trained together (workloads/fl/together.py, ``--clients-together``, issue 44):
equal to the sequential loop within a stated float tolerance, for every built-in method it covers,
and the one-line fallback for what it does not.

Tolerance, and why not bitwise: under ``torch.func.vmap`` a convolution of G clients is one
grouped convolution, a linear layer one batched matrix product and BatchNorm one kernel over the
G x C channels; their reductions run in another order than the per-client kernels', so each
step differs from the sequential one by float rounding (measured below at one step: <= 1e-6
relative), and SGD carries the difference on. ``ONE_STEP_RTOL`` bounds one step; after a few
rounds of these tiny runs ``ROUNDS_ATOL`` bounds every weight (rounding grown through ~10 steps per
round at lr 0.05 with momentum 0.9; the weights are O(1)). The ledger, the sample counts, each
client's step count and every integer buffer (``num_batches_tracked``) are equal exactly.
"""

import pytest
import torch
from torch import nn

from fl_standins import TinyNet, blobs
from workloads.fl.execution import Execution
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import ClientContext, NonFiniteLossError, client_trainer
from workloads.fl import loop
from workloads.fl.loop import RunPlan, batch_starts
from workloads.fl.methods import parse_method
from workloads.fl.methods.base import FedAvg, trains_together
from workloads.fl.methods.fedprox import FedProx
from workloads.fl.together import ClientRun, fallback_reason, sgd_update, train_together
from workloads.fl.execution import DeviceData
from workloads.models import FLNet, Head

ONE_STEP_RTOL, ONE_STEP_ATOL = 1e-5, 1e-6
ROUNDS_ATOL = 1e-5

TRAIN, TEST = blobs(150), blobs(40, seed=1)
# uneven clients: 7 samples (one partial batch of 7), 17 (16 + a skipped single), 30 (16 + 14), 46 (16 + 16 + 14)
PARTS = [list(range(0, 7)), list(range(7, 24)), list(range(24, 54)), list(range(54, 100))]
HP = Hparams(lr=0.05, local_epochs=1, batch_size=16)


def conv_net(head=Head(), num_classes=4):
    """A tiny FLNet with a convolution and BatchNorm2d (what vmap turns into grouped kernels)."""
    body = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten())
    return FLNet(body, 6 * 2 * 2, num_classes, head)


def run_in(mode: dict, name, rounds=2, model=conv_net, train=TRAIN, hp=HP, execution=None, **kw):
    """``name`` on the four uneven ``PARTS`` of ``train`` for ``rounds`` rounds, with the execution
    options ``mode`` (how the clients train) and ``execution`` (the others)."""
    method = parse_method(name)
    cfg = FLConfig(dataset="blobs", num_clients=len(PARTS), rounds=rounds, seed=3)
    return loop.train(RunPlan(method, model_fn=lambda: model(head=method.head), train=train, test=TEST,
                              parts=[torch.tensor(p).numpy() for p in PARTS], cfg=cfg, hp=hp,
                              execution=Execution(**mode, **(execution or {})), **kw))


def run(name, together, **kw):
    return run_in({"clients_together": together}, name, **kw)


def nan_messages(modes: list[dict], match: str, **kw) -> list[str]:
    """The error each of ``modes`` raises on a training set where client 2's sample 20 is NaN (and
    the samples ``kw.pop('also')`` too), each checked against ``match``."""
    x = TRAIN.x.clone()
    for i in (PARTS[2][20], *kw.pop("also", ())):
        x[i] = float("nan")
    bad = type(TRAIN)(TRAIN.name, x, TRAIN.y, TRAIN.num_classes, TRAIN.note)
    messages = []
    for mode in modes:
        with pytest.raises(NonFiniteLossError, match=match) as err:
            run_in(mode, "fedavg", train=bad, **kw)
        messages.append(str(err.value))
    return messages


def assert_same_run(a, b, atol=ROUNDS_ATOL):
    assert a.transfers == b.transfers and a.samples_trained == b.samples_trained
    assert [h["clients"] for h in a.history] == [h["clients"] for h in b.history]
    for key, v in a.weights.items():
        if v.dtype.is_floating_point:
            torch.testing.assert_close(b.weights[key], v, rtol=0, atol=atol, msg=key)
        else:
            assert torch.equal(b.weights[key], v), key
    for x, y in zip(a.history, b.history):
        assert y["mean_loss"] == pytest.approx(x["mean_loss"], abs=atol)


def test_one_step_of_two_clients_is_each_trainers_step():
    # two clients from different weights, one full batch of 16 each: train_together's one step
    # against ClientTrainer.step on each client (its own torch.optim.SGD)
    method, data = parse_method("fedavg"), DeviceData.from_dataset(TRAIN, "cpu")
    model = conv_net()
    starts, expected, runs = [], [], []
    for k in range(2):
        torch.manual_seed(k)
        own = conv_net()
        start = {key: v.clone() for key, v in own.state_dict().items()}
        trainer = client_trainer(own, start, HP, method, ClientContext(lr=0.05))
        idx = torch.arange(16 * k, 16 * k + 16)
        gen = torch.Generator().manual_seed(k)
        order = idx[torch.randperm(16, generator=torch.Generator().manual_seed(k))]
        trainer.step(TRAIN.x[order], TRAIN.y[order])
        expected.append(own.state_dict())
        runs.append(ClientRun(start, trainer.ctx, idx, (0,), gen, None, f"client {k}"))
    results = train_together(model, method, Hparams(lr=0.05, local_epochs=1, batch_size=16), runs, data)
    for result, want in zip(results, expected):
        assert result.steps == 1
        for key, v in want.items():
            torch.testing.assert_close(result.state[key], v, rtol=ONE_STEP_RTOL, atol=ONE_STEP_ATOL, msg=key)


def test_sgd_update_is_torchs_sgd_bit_for_bit():
    # three steps of torch.optim.SGD (momentum 0.9, weight decay 0.1) on one tensor against
    # sgd_update on the same tensor stacked twice: the same elementwise arithmetic
    g = torch.Generator().manual_seed(0)
    p = torch.randn(5, generator=g)
    grads = [torch.randn(5, generator=g) for _ in range(3)]
    ref = p.clone().requires_grad_()
    opt = torch.optim.SGD([ref], lr=0.3, momentum=0.9, weight_decay=0.1, foreach=False)
    stacked, buf = torch.stack([p, p]), None
    for grad in grads:
        ref.grad = grad.clone()
        opt.step()
        buf = sgd_update(stacked, torch.stack([grad, grad]), buf, lr=0.3, momentum=0.9, weight_decay=0.1)
    assert torch.equal(stacked[0], ref.detach()) and torch.equal(stacked[1], ref.detach())


SUPPORTED = ["fedavg", "spherefed", "fedprox", "fedprox+spherefed", "fedcos", "fednova", "fedavgm", "fedopt",
             "fedbabu", "doublehead", "scaffold", "feddyn", "moon", "spherefed+ffc", "ccvr"]


FAST_TIER = ("fedavg", "spherefed", "scaffold")  # the rest in the full suite (each ~1-4 s; CCVR's calibration ~10 s)


@pytest.mark.parametrize("name", [n if n in FAST_TIER else pytest.param(n, marks=pytest.mark.slow) for n in SUPPORTED])
def test_a_method_trained_together_is_the_sequential_run(name, capsys):
    # two rounds: FedCos's direction in round 2, SCAFFOLD's / FedDyn's / MOON's client state read
    # in round 2, the double head's local head kept, FFC and CCVR calibrated after training
    assert fallback_reason(parse_method(name), Execution(clients_together=True)) is None
    one, together = run(name, False), run(name, True)
    assert "--clients-together" not in capsys.readouterr().err  # it did train together
    assert_same_run(one, together)
    if one.accuracy_before_calibration is not None:  # a calibration ran on the batched run's model
        assert together.accuracy_before_calibration is not None


def test_fedprox_penalty_changes_the_batched_run_as_the_sequential_one():
    # the proximal term acts in the batched step: mu = 10 moves the weights away from mu = 0's
    strong = HP.with_knobs(FedProx().knobs).replace(prox_mu=10.0)
    plain, prox = run("fedprox", True, hp=HP.with_knobs(FedProx().knobs).replace(prox_mu=0.0)), run("fedprox", True, hp=strong)
    assert_same_run(run("fedprox", False, hp=strong), prox)
    gap = max(float((plain.weights[k] - prox.weights[k]).abs().max()) for k in plain.weights
              if plain.weights[k].dtype.is_floating_point)
    assert gap > 1000 * ROUNDS_ATOL


def test_each_client_keeps_its_step_count_and_samples():
    # FedNova's aggregate reads every client's local step count: 1, 2, 4 and 6 steps over two epochs
    # (batch_starts: 7 -> [0]; 17 -> [0] and a skipped single; 30 -> [0, 16]; 46 -> [0, 16, 32])
    assert [len(batch_starts(len(p), 16)) for p in PARTS] == [1, 1, 2, 3]
    two_epochs = Hparams(lr=0.05, local_epochs=2, batch_size=16)
    one, together = run("fednova", False, rounds=1, hp=two_epochs), run("fednova", True, rounds=1, hp=two_epochs)
    assert together.samples_trained == 2 * (7 + 16 + 30 + 46)
    assert_same_run(one, together)


def test_a_fleets_partial_arrivals_train_together():
    arrivals = [(0, 2), (1, 2, 3), ()]
    assert_same_run(run("fedavg", False, rounds=3, arrivals=arrivals), run("fedavg", True, rounds=3, arrivals=arrivals))


def test_augmentation_draws_per_client_as_sequentially():
    # crop (4-pixel padding: 2x2 crops of 10x10) and flip drawn from each client's own generator
    assert_same_run(run("fedavg", False, execution={"augment": True}), run("fedavg", True, execution={"augment": True}))


def test_tiny_net_with_batchnorm1d_trains_together():
    assert_same_run(run("spherefed", False, model=TinyNet), run("spherefed", True, model=TinyNet))


@pytest.mark.parametrize("execution, reason", [
    ({"number_format": "bfp_m4_g16_sr"}, "number format"), ({"bf16": True}, "bf16"),
    ({"precision_schedule": "1:bf16,2:fp32"}, "number format")])
def test_what_cannot_be_batched_falls_back_with_one_line(execution, reason, capsys):
    together = run("fedavg", True, rounds=2, execution=execution)
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if line.startswith("--clients-together")]
    assert len(lines) == 1 and reason in lines[0] and "one after another" in lines[0]
    assert together == run("fedavg", False, rounds=2, execution=execution)  # the sequential loop, bit for bit
    assert fallback_reason(parse_method("fedavg"), Execution(clients_together=True, **execution)) is not None


class OwnLoss(FedAvg):
    def batch_loss(self, model, x, y, outputs, loss_fn, ctx, hp):
        return 2.0 * loss_fn(outputs[0], y)


class OwnLossDeclared(OwnLoss):
    clients_together = True


class OwnServer(FedAvg):
    def aggregate(self, server, updates, hp, keys):
        return super().aggregate(server, updates, hp, keys)


def test_a_method_that_changes_its_step_says_so_itself():
    # built-ins that override a step hook declare it again; a subclass of yours that overrides
    # batch_loss is trained one client after another until it declares it; one that changes only
    # the server keeps its base's declaration
    assert trains_together(FedAvg()) and trains_together(FedProx())
    assert not trains_together(OwnLoss())
    assert trains_together(OwnLossDeclared()) and trains_together(OwnServer())


def test_an_undeclared_method_of_yours_falls_back(monkeypatch, capsys):
    monkeypatch.syspath_prepend(__file__.rsplit("/", 1)[0])
    name = "test_clients_together:OwnLoss"
    together = run(name, True, rounds=1)
    assert "OwnLoss" in capsys.readouterr().err and together == run(name, False, rounds=1)
    assert_same_run(run(f"{name}Declared", False, rounds=1), run(f"{name}Declared", True, rounds=1))


def test_nan_loss_names_round_client_and_epoch_as_sequentially():
    # client 2's sample 20: in its first (only) epoch, on one of its two batches
    one, together = nan_messages([{}, {"clients_together": True}], r"round 1, client 2 \(fedavg\), local epoch 1")
    assert one == together


def test_the_option_is_recorded_and_off_by_default():
    assert not Execution().clients_together and "clients_together" not in Execution().settings()
    assert Execution(clients_together=True).settings()["clients_together"] is True
    assert Execution(clients_together=True).describe()["clients_together"] is True


def test_the_flag_and_the_presets_switch_set_it():
    # --clients-together wins over a preset's [execution] clients_together, as every switch does
    from bench.lib.spec import FL, add_flags, from_args
    from iokit import cli
    from workloads.fl.execution import execution_of, preset_options

    parser = cli.Parser(prog="python -m bench.fl")
    add_flags(parser, FL)
    spec = from_args(parser.parse_args(["--preset", "quick", "--clients-together"]), FL)
    assert spec.clients_together is True
    assert execution_of("cpu", spec.execution_flags).clients_together
    preset = preset_options({"clients_together": True}, where="p.toml")
    assert execution_of("cpu", {}, preset).clients_together
    assert not execution_of("cpu", {"clients_together": False}, preset).clients_together

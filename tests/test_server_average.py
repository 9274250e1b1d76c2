"""The server's moving average of the aggregated models (``--server-average``; Li et al., "Low
Precision Local Training is Enough for Federated Learning", NeurIPS 2024): the formula by hand, a
2-round run against the plain run it must be built from, and bad decays refused before training."""

from __future__ import annotations

import pytest
import torch

import bench.fl.__main__ as fl_cli
from bench.lib import spec
from bench.lib.run.study import point_config
from fl_standins import TinyNet, blobs
from workloads.fl.aggregate import moving_average
from workloads.fl.execution import Execution, execution_of, preset_options
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl import loop
from workloads.fl.loop import RunPlan, load_checkpoint_document
from workloads.fl.methods import parse_method
from workloads.fl.partition import dirichlet_partition
from workloads.fl.presets import load_preset

TRAIN, TEST = blobs(96), blobs(40, seed=1)
PARTS = dirichlet_partition(TRAIN.y.numpy(), 3, 1.0, min_size=5, seed=0)
CFG = FLConfig(dataset="blobs", num_clients=3, rounds=2, participation=1.0, eval_every=1)
HP = Hparams(lr=0.05, local_epochs=1, batch_size=16)
DECAY = 0.75


def test_moving_average_by_hand():
    # a = 0.75 a_prev + 0.25 w: 0.75 x 4 + 0.25 x 0 = 3; 0.75 x (-2) + 0.25 x 2 = -1.5 + 0.5 = -1;
    # "b" is not an averaged key: the aggregate's 7 (not 0.75 x 1 + 0.25 x 7 = 2.5)
    average = {"w": torch.tensor([4.0, -2.0]), "b": torch.tensor([1.0])}
    aggregated = {"w": torch.tensor([0.0, 2.0]), "b": torch.tensor([7.0])}
    out = moving_average(average, aggregated, ["w"], decay=DECAY)
    assert out["w"].tolist() == [3.0, -1.0] and out["b"].tolist() == [7.0]
    assert out["w"].dtype == torch.float32
    assert moving_average(average, aggregated, ["w"], decay=0.0)["w"].tolist() == [0.0, 2.0]  # decay 0: the aggregate


def _run(tmp_path, execution: Execution, name: str):
    """fedavg on TinyNet for 2 rounds; returns the result and the global model after round 1 (read
    back from the loop's own checkpoint)."""
    method, path, after_one = parse_method("fedavg"), tmp_path / f"{name}.pt", {}

    def keep(t):
        if t == 1:
            after_one.update(load_checkpoint_document(path)["server"]["weights"])

    result = loop.train(RunPlan(method, model_fn=lambda: TinyNet(), train=TRAIN, test=TEST, parts=PARTS, cfg=CFG, hp=HP,
                                execution=execution, checkpoint=path, after_round=keep))
    return result, after_one


def test_a_two_round_average_is_built_from_the_plain_runs_rounds(tmp_path):
    # Round 1's average is its aggregate w1, so the averaged run's clients start round 2 from the
    # plain run's w1 and aggregate the plain run's w2 (same seeds): the averaged run ends at
    # a2 = 0.75 w1 + 0.25 w2 on the trainable keys, and the BatchNorm buffers are w2's.
    plain, w1 = _run(tmp_path, Execution(), "plain")
    averaged, a1 = _run(tmp_path, Execution(server_average=DECAY), "averaged")
    assert all(torch.equal(a1[k], w1[k]) for k in w1)
    assert averaged.history[0] == plain.history[0]  # round 1 is bitwise the plain run's
    w2, a2 = plain.weights, averaged.weights
    trainable = [k for k, v in TinyNet().state_dict().items() if "running" not in k and "num_batches" not in k]
    assert trainable and set(trainable) < set(w2)
    for key in w2:
        if key in trainable:
            expected = (DECAY * w1[key].double() + (1 - DECAY) * w2[key].double()).float()
            assert torch.equal(a2[key], expected), key
            assert not torch.equal(a2[key], w2[key]), key  # the average moved it off the aggregate
        else:
            assert torch.equal(a2[key], w2[key]), key
    assert averaged.accuracy == averaged.history[-1]["accuracy"]  # what is scored is the average


def test_the_option_is_one_field_flag_preset_key_and_grid_setting(tmp_path):
    quick = load_preset("quick")
    assert spec.RunSpec(server_average=0.9, device="cpu").execution(quick).server_average == 0.9
    args = fl_cli.parser().parse_args(["--preset", "quick", "--server-average", "0.9"])
    assert spec.from_args(args, spec.FL).server_average == 0.9
    assert point_config({"model": "convnet", "server_average": 0.5}).server_average == 0.5
    assert execution_of("cpu", {}, {"server_average": 0.9}).server_average == 0.9  # a preset's [execution] key
    assert "server_average" not in Execution().settings()  # runs from before it keep their identity
    assert Execution(server_average=0.9).settings()["server_average"] == 0.9
    assert Execution(server_average=0.9).describe()["server_average"] == 0.9


@pytest.mark.parametrize("bad", [1.0, -0.1])
def test_a_decay_outside_0_1_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match=r"--server-average .*decay is in \[0, 1\)"):
        execution_of("cpu", {"server_average": bad}, {})
    with pytest.raises(ValueError, match=r"\[execution\]: server_average .* must be a decay in \[0, 1\)"):
        preset_options({"server_average": bad}, where="p.toml")
    with pytest.raises(ValueError, match=r"\[execution\]: server_average = 'high'"):
        preset_options({"server_average": "high"}, where="p.toml")


def test_the_average_is_priced_on_the_server_from_round_2_and_nowhere_else():
    from accel_sim.hardware import HardwareConfig
    from workloads.cost.rounds import PricedModel, RunPricer, client_devices, price_run
    from workloads.cost.system import SystemModel

    method, hw, system = parse_method("fedavg"), HardwareConfig(), SystemModel()
    result = loop.train(RunPlan(method, model_fn=lambda: TinyNet(), train=TRAIN, test=TEST, parts=PARTS, cfg=CFG, hp=HP,
                                execution=Execution(server_average=DECAY)))
    pricer = RunPricer(PricedModel(lambda head: TinyNet(head=head), "tinynet", (3, 2, 2), 4, 0))
    labels = [TRAIN.y.numpy()[p] for p in PARTS]
    devices = client_devices(system, hw, 3, seed=0)
    plain, averaged = (price_run(result, method, HP, pricer=pricer, client_labels=labels, hw=hw, system=system,
                                 devices=devices, server_average=d) for d in (0.0, DECAY))
    average_s = pricer.moving_average_s(method, HP, 2, hw)
    assert average_s > 0
    assert averaged[0]["server_s"] == plain[0]["server_s"]  # round 1's average is its aggregate: no work
    assert averaged[1]["server_s"] == pytest.approx(plain[1]["server_s"] + average_s, rel=1e-12)
    for column in ("round_device_s", "round_energy_j", "round_bytes"):  # nothing on the clients
        assert [r[column] for r in averaged] == [r[column] for r in plain]

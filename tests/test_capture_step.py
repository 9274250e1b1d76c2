"""The local step recorded once a round and replayed (workloads/fl/capture.py, ``--capture-step``,
issue 44). On the CPU no graph is recorded: the round's static step runs eagerly, and must equal
the sequential loop bit for bit for every built-in method, since it reads each client's weights,
context and batches only through tensors that stay put, the property a replayed CUDA graph needs.
``test_a_step_that_skipped_a_clients_context_is_caught`` shows these comparisons can fail. The
recording itself needs a GPU: ``test_the_recorded_graph_replays_the_eager_run`` runs only there.
"""

import pytest
import torch
from torch import nn

from test_client_threads import assert_identical, dropout_net
from test_clients_together import SUPPORTED, nan_messages, run_in
from workloads.fl import capture
from workloads.fl.execution import Execution
from workloads.fl.hparams import Hparams
from workloads.fl.methods import parse_method

# two epochs of 16: clients of 7, 17, 30 and 46 samples have 1, 1, 2 and 3 steps an epoch, the
# first step eager, full batches through the static step, partial last batches (7, 14) eager
HP = Hparams(lr=0.05, local_epochs=2, batch_size=16)


def run(name, recorded, device="cpu", **kw):
    return run_in({"capture_step": recorded, "device": device}, name, hp=kw.pop("hp", HP), **kw)


@pytest.mark.parametrize("name", [*SUPPORTED, "fedavg+ffc"])  # ~0.15 s each
def test_a_method_through_the_static_step_is_the_sequential_run_bit_for_bit(name, capsys):
    # two rounds: the step is made again for round 2 (its lr and round); SCAFFOLD's / FedDyn's /
    # MOON's client state and FedCos's direction enter through the round's static context
    assert_identical(run(name, False), run(name, True))
    assert "--capture-step" not in capsys.readouterr().err  # it did run the static step


@pytest.mark.parametrize("execution", [{"augment": True}, {"comm_format": "bfp_m4_g16_sr"}, {"channels_last": True}],
                         ids=lambda e: ",".join(e))
def test_options_outside_the_step_keep_their_meaning(execution):
    assert_identical(run("fedavg", False, execution=execution), run("fedavg", True, execution=execution))


def test_a_fleets_partial_arrivals_through_the_static_step():
    arrivals = [(0, 2), (1, 2, 3), ()]
    assert_identical(run("scaffold", False, rounds=3, arrivals=arrivals), run("scaffold", True, rounds=3, arrivals=arrivals))


def test_a_step_that_skipped_a_clients_context_is_caught(monkeypatch):
    # SCAFFOLD's c_i differs per client from round 2 on: a static step that kept the first
    # client's (what a graph would replay if a client's context were not copied in) differs
    sequential = run("scaffold", False)
    monkeypatch.setattr(capture.StaticStep, "load", lambda self, trainer: None)
    stale = run("scaffold", True)
    assert any(not torch.equal(v, stale.weights[k]) for k, v in sequential.weights.items())


@pytest.mark.parametrize("execution, reason", [
    ({"number_format": "bfp_m4_g16_sr"}, "number format"), ({"bf16": True}, "bf16"),
    ({"precision_schedule": "1:bf16,2:fp32"}, "number format")])
def test_what_cannot_be_recorded_trains_as_before_with_one_line(execution, reason, capsys):
    recorded = run("fedavg", True, execution=execution)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("--capture-step")]
    assert len(lines) == 1 and reason in lines[0] and "trains eagerly" in lines[0]
    assert_identical(run("fedavg", False, execution=execution), recorded)


def test_a_model_drawing_from_the_global_generator_is_not_recorded(capsys):
    recorded = run("fedavg", True, model=dropout_net)
    assert "global generator" in capsys.readouterr().err
    assert_identical(run("fedavg", False, model=dropout_net), recorded)


def test_nan_loss_names_round_client_and_epoch_as_sequentially():
    one, recorded = nan_messages([{}, {"capture_step": True}], r"round 1, client 2 \(fedavg\), local epoch 1", hp=HP)
    assert one == recorded


@pytest.mark.parametrize("kw, other", [({"clients_together": True}, "--clients-together"),
                                       ({"compile": True}, "--compile"),
                                       ({"client_threads": 2}, "--client-threads 2")])
def test_what_also_chooses_how_clients_train_is_refused_in_one_line(kw, other):
    with pytest.raises(ValueError, match=f"--capture-step and {other} both") as err:
        Execution(capture_step=True, **kw)
    assert "\n" not in str(err.value)


def test_the_option_is_recorded_where_set_and_the_flag_and_preset_set_it():
    from bench.lib.spec import FL, add_flags, from_args
    from iokit import cli
    from workloads.fl.execution import execution_of, preset_options

    assert "capture_step" not in Execution().settings() and Execution(capture_step=True).settings()["capture_step"]
    assert Execution(capture_step=True).describe()["capture_step"] is True
    parser = cli.Parser(prog="python -m bench.fl")
    add_flags(parser, FL)
    spec = from_args(parser.parse_args(["--preset", "quick", "--capture-step"]), FL)
    assert execution_of("cpu", spec.execution_flags).capture_step
    assert execution_of("cpu", {}, preset_options({"capture_step": True}, where="p.toml")).capture_step


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records a CUDA graph: needs a GPU")
@pytest.mark.parametrize("name", ["fedavg", "fedprox", "scaffold", "spherefed+ffc"])
def test_the_recorded_graph_replays_the_eager_run(name, capsys):
    # on a GPU the full batches replay the recorded graph: the same kernels on the same tensors
    eager, recorded = run(name, False, device="cuda"), run(name, True, device="cuda")
    assert "--capture-step" not in capsys.readouterr().err  # it recorded
    assert eager.transfers == recorded.transfers and eager.samples_trained == recorded.samples_trained
    for key, v in eager.weights.items():
        torch.testing.assert_close(recorded.weights[key], v, rtol=1e-5, atol=1e-6, msg=key)


def test_the_recorder_records_only_on_a_gpu_and_keeps_the_first_and_partial_steps_eager():
    model = nn.Linear(3, 2)
    recorder = capture.StepRecorder("fedavg", batch_size=4, device=torch.device("cpu"))
    from workloads.fl.local import client_trainer

    start = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = recorder.trainer(client_trainer(model, start, Hparams(lr=0.1, batch_size=4), parse_method("fedavg")))
    for n in (4, 4, 3):
        trainer.step(torch.randn(n, 3), torch.randint(0, 2, (n,)))
    assert trainer.steps == 3 and recorder.step.graph is None and not recorder.failed

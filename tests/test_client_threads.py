"""A round's clients trained at once on threads (workloads/fl/threads.py, ``--client-threads N``,
issue 44): the sequential loop's own code per client, so every run equals the one-after-another
run bit for bit on the CPU (weights, history, ledger, sample counts), for every built-in method
and the options that draw per client (stochastic rounding, augmentation, a communication format,
a fleet's arrivals); a model that draws from torch's global generator falls back with one line.
"""

import threading
import time

import pytest
import torch
from torch import nn

from test_clients_together import PARTS, SUPPORTED, nan_messages, run_in
from workloads.fl.execution import Execution
from workloads.fl.hparams import Hparams
from workloads.fl.threads import draws_global_generator, run_on_slots, slots
from workloads.models import FLNet, Head

HP = Hparams(lr=0.05, local_epochs=2, batch_size=16)  # two epochs: each client's shuffling drawn twice


def run(name, threads, **kw):
    return run_in({"client_threads": threads}, name, hp=kw.pop("hp", HP), **kw)


def assert_identical(a, b):
    """Bit for bit: the compared fields (accuracies, history with every loss, ledger, samples) and every weight."""
    assert a == b
    assert a.weights.keys() == b.weights.keys()
    for key, v in a.weights.items():
        assert torch.equal(v, b.weights[key]), key


@pytest.mark.parametrize("name", [*SUPPORTED, "fedavg+ffc"])  # ~0.15 s each
def test_a_method_on_threads_is_the_sequential_run_bit_for_bit(name, capsys):
    # three threads for four clients of 7, 17, 30 and 46 samples: a slot is reused within a round,
    # and clients finish out of order; SCAFFOLD's / FedDyn's / MOON's state is read in round 2, the
    # double head's local head kept, FFC and CCVR calibrated after training
    assert_identical(run(name, 1), run(name, 3))
    assert "--client-threads" not in capsys.readouterr().err  # it did run on threads


@pytest.mark.parametrize("execution", [
    {"number_format": "bfp_m4_g16_sr"},  # each client's stochastic rounding from its own generator
    {"precision_schedule": "1:bfp_m2_g16_sr,2:bf16"},
    {"number_format": "bf16", "low_precision_weights": True},
    {"bf16": True},  # autocast is per thread
    {"augment": True},  # each client's crops and flips from its own generator
    {"comm_format": "bfp_m4_g16_sr"},  # uploads rounded from (seed, t, k)
], ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()))
def test_what_draws_per_client_draws_as_sequentially(execution):
    assert_identical(run("fedavg", 1, execution=execution), run("fedavg", 2, execution=execution))


def test_a_fleets_partial_arrivals_train_on_threads():
    arrivals = [(0, 2), (1, 2, 3), ()]  # round 3: nobody arrives
    assert_identical(run("fedavg", 1, rounds=3, arrivals=arrivals), run("fedavg", 2, rounds=3, arrivals=arrivals))


def test_nan_loss_names_the_client_that_one_after_another_names():
    # clients 1 and 2 both get a NaN sample; sequentially client 1 fails first, and on threads
    # client 2 (three threads: it may finish before client 1) must not be the one reported
    one, threaded = nan_messages([{}, {"client_threads": 3}], r"round 1, client 1 \(fedavg\), local epoch 1",
                                 also=(PARTS[1][3],), hp=HP)
    assert one == threaded


def dropout_net(head=Head(), num_classes=4):
    body = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Dropout(0.5), nn.Flatten())
    return FLNet(body, 6 * 2 * 2, num_classes, head)


def test_a_model_drawing_from_the_global_generator_falls_back_with_one_line(capsys):
    threaded = run("fedavg", 2, model=dropout_net)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("--client-threads")]
    assert len(lines) == 1 and "global generator" in lines[0] and "one after another" in lines[0]
    assert_identical(run("fedavg", 1, model=dropout_net), threaded)  # the probe left the generator as it found it


def test_draws_global_generator_sees_dropout_and_restores_the_state():
    x, linear = torch.randn(4, 8), nn.Linear(8, 2)  # built outside: its initialization draws
    torch.manual_seed(5)
    state = torch.get_rng_state()
    assert draws_global_generator(lambda: nn.Dropout(0.5).train()(x), torch.device("cpu"))
    assert not draws_global_generator(lambda: linear(x), torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), state)


def test_run_on_slots_keeps_the_order_and_at_most_one_item_per_slot():
    # 9 items on 3 slots, the later items quicker (so they would finish first): the results come
    # in the items' order, no slot ever serves two items at once, and at most 3 run together
    models = slots(nn.Linear(2, 2), 3, torch.device("cpu"))
    assert len({id(s.model) for s in models}) == 3 and all(s.stream is None for s in models)
    busy, peak, lock = set(), [0], threading.Lock()

    def work(model, item):
        with lock:
            assert id(model) not in busy
            busy.add(id(model))
            peak[0] = max(peak[0], len(busy))
        time.sleep(0.002 * (9 - item))
        with lock:
            busy.remove(id(model))
        return item * item

    assert run_on_slots(work, range(9), models) == [i * i for i in range(9)]
    assert 1 <= peak[0] <= 3


def test_an_items_error_is_raised_after_the_items_before_it():
    done = []

    def work(model, item):
        if item in (1, 2):
            raise ValueError(f"item {item}")
        done.append(item)
        return item

    with pytest.raises(ValueError, match="item 1"):
        run_on_slots(work, range(4), slots(nn.Linear(2, 2), 2, torch.device("cpu")))
    assert 0 in done


def test_the_option_is_a_resource_recorded_but_not_in_the_identity():
    assert Execution().client_threads == 1 and Execution().describe()["client_threads"] == 1
    assert Execution(client_threads=4).describe()["client_threads"] == 4
    assert Execution(client_threads=4).settings() == Execution().settings()  # a run resumes whatever it is


@pytest.mark.parametrize("kw, words", [
    ({"client_threads": 0}, "--client-threads 0: give 1"),
    ({"client_threads": 2, "clients_together": True}, "--client-threads 2 and --clients-together both"),
    ({"client_threads": 2, "compile": True}, "--client-threads 2 and --compile both")])
def test_what_cannot_run_on_threads_is_refused_in_one_line(kw, words):
    with pytest.raises(ValueError, match=words) as err:
        Execution(**kw)
    assert "\n" not in str(err.value)


def test_the_flag_sets_it_for_bench_run_and_bench_fl():
    from bench.lib.spec import FL, RUN, add_flags, from_args
    from workloads.fl.presets import load_preset
    from iokit import cli

    for command, argv in ((FL, ["--preset", "quick"]), (RUN, [])):
        parser = cli.Parser(prog=f"python -m {command}")
        add_flags(parser, command)
        spec = from_args(parser.parse_args([*argv, "--client-threads", "2"]), command)
        assert spec.client_threads == 2
    assert spec.execution(load_preset("quick")).client_threads == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA streams: needs a GPU")
@pytest.mark.parametrize("name", ["fedavg", "scaffold", "spherefed+ffc"])
def test_on_a_gpu_each_slots_stream_gives_the_sequential_run(name):
    # each client on its own CUDA stream: the same kernels per client, so the same results to the
    # GPU's own run-to-run rounding (its convolution algorithms may reduce in varying order)
    one, threaded = run(name, 1, execution={"device": "cuda"}), run(name, 3, execution={"device": "cuda"})
    assert one.transfers == threaded.transfers and one.samples_trained == threaded.samples_trained
    for key, v in one.weights.items():
        torch.testing.assert_close(threaded.weights[key], v, rtol=1e-5, atol=1e-6, msg=key)

"""The federated loop: one run of one method, from its plan (``RunPlan``) to its result
(``RunResult``). ``run_method(method, **fields)`` builds the plan from keywords; ``train(plan)``
runs it: ``set_up`` builds what stays fixed (``workloads.fl.setup``), then each round t = 1..R
(``workloads.fl.round``: sampling from ``workloads.fl.schedule``, the clients in the run's way of
training from ``workloads.fl.ways`` and ``workloads.fl.clients``, the aggregate, the evaluation
from ``workloads.fl.evaluation``), the checkpoint after it (``workloads.fl.checkpoint``), and after
round R the optional calibration (``workloads.fl.calibrate``: over all K clients, or a
participation plan's arrivals of round R + 1; none: the model stays uncalibrated). The global
model is evaluated on the global test set every ``eval_every`` rounds and after the last round
(and after the calibration).

Same seed, same results: the model is built and prepared on the CPU under
``torch.manual_seed(seed)`` (the same initial weights whatever the run's device) and then moved to
the run's device; client sampling uses ``numpy.random.default_rng([seed, t])``; every other
generator is seeded as ``workloads.fl.streams`` says.

Device: everything of a round (models, batches, client updates, aggregation, calibration
statistics, evaluation) lives on ``execution.device``; the data are held there once
(``execution.DeviceData``) and batches are gathered by index there. Only the shuffling order is
drawn on the CPU and copied over once per local epoch.

Resume: with ``checkpoint=PATH`` the loop's state after every round is written atomically to PATH;
with ``resume=True`` a run starts from the last completed round found there and gives results
identical to an uninterrupted run (``workloads.fl.checkpoint``).

Before a run, ``forecast`` projects its local-training time (``workloads.fl.forecast``).
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from workloads.fl import threads
from workloads.fl.calibrate import calibrate
from workloads.fl.capture import StepRecorder
from workloads.fl.checkpoint import CHECKPOINT_FORMAT, fingerprint, load_checkpoint, load_checkpoint_document, save_checkpoint
from workloads.fl.comm import Transfer
from workloads.fl.evaluation import evaluate, global_state, local_accuracy, scores, correct_per_sample
from workloads.fl.execution import DeviceData
from workloads.fl.forecast import Forecast, duration_text, forecast
from workloads.fl.guard import check_divergence, check_finite
from workloads.fl.local import NonFiniteLossError
from workloads.fl.methods import MethodConfig
from workloads.fl.methods.base import frozen_keys, trainable_keys
from workloads.fl.round import LoopState, federated_round, initial_state
from workloads.fl.schedule import (batch_starts, check_arrivals, check_staleness, clients_per_round, cosine_lr,
                                   draw_clients, planned_samples, sample_clients)
from workloads.fl.setup import RunPlan, Setup, build_on_device
from workloads.fl.streams import arithmetic_of, derived_seed
from workloads.fl.timing import Timed, step_draws_global, step_rate, together_rate
from workloads.fl.ways import Probe, choose

__all__ = [  # the loop's API: its own, and what its callers import from it of the modules it is made of
    "RunPlan", "RunResult", "run_method", "train", "set_up",
    "CHECKPOINT_FORMAT", "load_checkpoint_document", "Forecast", "duration_text", "forecast", "step_rate",
    "together_rate", "NonFiniteLossError", "evaluate", "batch_starts", "clients_per_round", "cosine_lr", "draw_clients",
    "planned_samples", "sample_clients", "build_on_device", "arithmetic_of", "derived_seed",
]


@dataclass(frozen=True)
class RunResult:
    method: str
    accuracy: float  # global model on the global test set, after calibration if any
    accuracy_before_calibration: float | None
    history: tuple[dict, ...]  # per round: round, lr, clients, mean_loss, accuracy and val_accuracy (or None)
    transfers: tuple[Transfer, ...]
    samples_trained: int  # local training samples processed over the run
    weights: dict = field(repr=False, compare=False, default_factory=dict)  # final global state
    resumed_after_round: int = field(compare=False, default=0)  # 0: started from round 1
    val_accuracy: float | None = None  # the final global model on the validation hold-out (None: no hold-out)
    val_accuracy_before_calibration: float | None = None
    local_accuracy: float | None = None  # the local test mode (``local_test_accuracy``), after calibration if any
    local_accuracy_before_calibration: float | None = None
    correct_per_sample: str | None = field(repr=False, default=None)  # per test sample, right or wrong (``evaluation.correct_per_sample``)
    correct_per_sample_before_calibration: str | None = field(repr=False, default=None)


def run_method(method: MethodConfig, **given) -> RunResult:
    """Run ``method`` as ``train`` does, its plan given as keywords (``RunPlan``'s fields):
    ``model_fn``, ``train``, ``test``, ``parts`` (one index array into ``train`` per client),
    ``cfg``, ``hp``, and optionally ``execution``, ``progress``, ``checkpoint``, ``resume``,
    ``after_round``, ``val``, ``arrivals``, ``staleness``.

    ``staleness`` (FedBuff's clock, ``workloads.cost.buffered``: per round, beside ``arrivals``, how
    many server steps ago each arriving client started) makes each client start from the server as
    it was then (the method's ``server_view``) and tells the aggregation (``ClientUpdate.staleness``).

    ``arrivals`` (a participation plan, ``workloads.cost.fleet``: per round, the sampled clients
    whose updates arrive in time; None: every sampled client) are the clients each round trains
    and aggregates, instead of ``sample_clients``; the loop never learns why the others were left out.
    A calibrated method's plan has one more entry, round R + 1: the clients whose statistics the
    calibration uses (instead of all K; none: the model is left uncalibrated).

    ``val`` (a ``Dataset`` held out of ``train`` before partitioning, or None) is scored wherever
    the test set is: every evaluated round's ``val_accuracy`` and the final model's, so that
    hyper-parameters can be chosen on validation and never on test.

    ``execution`` chooses how a round's clients train (``workloads.fl.ways``: together, on threads,
    recorded, one after another); where the method or the options cannot, one line on stderr says
    so and they train one after another.

    ``model_fn()`` builds the (unprepared) model; it is called on the CPU under
    ``torch.manual_seed(seed)`` so every method starts from the same initial weights on any device.
    ``after_round(t)`` is called after round t's checkpoint is written (a test interrupts a run there).
    """
    return train(RunPlan(method, **given))


def train(plan: RunPlan) -> RunResult:
    """The run of ``plan``: its rounds (checkpointed after each where it has a checkpoint, resumed
    from one where asked), then its calibration and its result."""
    setup = set_up(plan)
    fingerprinted = fingerprint(setup, plan.parts) if plan.checkpoint is not None else ""
    state = initial_state(setup)
    if plan.resume and plan.checkpoint is not None and Path(plan.checkpoint).is_file():
        state = load_checkpoint(plan.checkpoint, fingerprinted, setup.execution.torch_device)
    resumed_after = state.round
    name, rounds = plan.method.name, plan.cfg.rounds
    bar = tqdm(total=rounds, initial=state.round, desc=name, unit="round", file=sys.stderr, disable=not plan.progress)
    for t in range(state.round + 1, rounds + 1):
        state = federated_round(setup, state, t)
        check_divergence(state.history, name)
        if state.history[-1]["accuracy"] is not None and state.history[-1]["mean_loss"] is not None:
            bar.set_postfix(acc=f"{state.history[-1]['accuracy']:.3f}", loss=f"{state.history[-1]['mean_loss']:.3f}")
        bar.update(1)
        if plan.checkpoint is not None:
            save_checkpoint(plan.checkpoint, state, fingerprinted)
        if plan.after_round is not None:
            plan.after_round(t)
    bar.close()
    return _finish(setup, state, resumed_after)


def set_up(plan: RunPlan) -> Setup:
    """What stays fixed for the run: the models built on the CPU from the seed, then moved; the
    data held on the device once; the participation plan checked; the way its clients train
    (``ways.choose``: one line on stderr where it is not the one asked for)."""
    method, execution, parts = plan.method, plan.execution, plan.parts
    device = execution.torch_device
    global_model = build_on_device(method, plan.model_fn, plan.cfg.seed, execution)
    client_model = copy.deepcopy(global_model)  # clients rebuild the same model from the seed
    client_model.train()
    if execution.compile:
        client_model.compile()
    if any(len(p) == 0 for p in parts):
        raise ValueError("every client needs at least one training sample; check the partition")
    client_idx = tuple(torch.as_tensor(np.asarray(p), dtype=torch.long, device=device) for p in parts)
    train_data = DeviceData.from_dataset(plan.train, device)
    setup = Setup(method, plan.cfg, plan.hp.with_knobs(method.knobs), execution, global_model, client_model,
                  frozen_keys(client_model), set(trainable_keys(client_model)), train_data,
                  DeviceData.from_dataset(plan.test, device), client_idx,
                  None if plan.val is None else DeviceData.from_dataset(plan.val, device))
    if plan.arrivals is not None:
        setup = replace(setup, arrivals=check_arrivals(plan.arrivals, len(parts), plan.cfg.rounds,
                                                       method.calib is not None))
    if plan.staleness:
        setup = replace(setup, staleness=check_staleness(setup.arrivals, plan.staleness))
    timed = Timed(client_model, method, setup.hp, train_data, client_idx[0], execution)
    choice = choose(Probe(method, execution, lambda: step_draws_global(timed)))
    if choice.fallback is not None:
        print(choice.fallback, file=sys.stderr)
    way = choice.way.name
    return replace(setup, way=way,
                   slots=threads.slots(client_model, execution.client_threads, device) if way == "threads" else (),
                   recorder=StepRecorder(method.name, setup.hp.batch_size, device) if way == "recorded" else None)


def _finish(setup: Setup, state: LoopState, resumed_after: int) -> RunResult:
    """The optional calibration, then the result."""
    setup.global_model.load_state_dict(state.server.weights)
    last = state.history[-1]
    accuracy, val, before, val_before = last["accuracy"], last.get("val_accuracy"), None, None
    transfers = list(state.transfers)
    local_before = correct_before = None
    if setup.method.calib is not None:
        before, val_before, local_before = accuracy, val, local_accuracy(setup, state.memory)
        correct_before = correct_per_sample(setup)
        t = setup.cfg.rounds + 1
        clients = range(len(setup.client_idx)) if setup.arrivals is None else setup.arrivals[t - 1]
        if clients:  # no statistics arrived: the model stays as trained, uncalibrated
            calibrate(setup, clients, round=t, transfers=transfers)
            check_finite(setup.global_model.state_dict(), f"{setup.method.name}'s calibration")
            accuracy, val = scores(setup)
    return RunResult(setup.method.name, accuracy, before, state.history, tuple(transfers), state.samples,
                     global_state(setup), resumed_after, val, val_before, local_accuracy(setup, state.memory),
                     local_before, correct_per_sample(setup), correct_before)

"""The example Flower app: every built-in method on the offline digits, priced on the accelerator.

A ``ClientApp`` and a ``ServerApp`` written as a Flower user writes them (Message API, Flower
1.41), with the accelerator's cost added by the few lines ``workloads.flower.mod`` describes.
What they train is ours: the model (``workloads.models.build_model``), the method's preparation,
step and hooks (``workloads.fl.local``, ``workloads.fl.methods``), the data and its split (the
``small`` preset: scikit-learn digits at 16x16, Dirichlet partition), the per-method
hyper-parameters and cosine learning rate. The server runs each method in turn, in one simulation,
on ``workloads.flower.strategy.MethodStrategy``: Flower's ``FedAvg`` sampling with the method's own
server rule, extras and state; each client keeps its method state (SCAFFOLD's c_i, FedDyn's
gradient term, MOON's previous model) and local parts (a double head's) in its node's
``Context.state``. Every client is sampled each round (on a fleet: the participation plan's
arrivals, through ``workloads.flower.fleet.PlannedStrategy``), and the global model is evaluated on
the global test set after each round (``evaluate_fn``); the clients run no evaluation. A
calibrated method (FFC, CCVR) then runs its calibration round R + 1 as our loop does
(``workloads.fl.calibrate``): every client (on a fleet, the plan's calibration arrivals) gets a
``train.calibrate`` message with the final feature extractor and replies with its statistics; the
server calibrates the classifier and evaluates (``calibrate_method``), and the round is priced as
``bench.fl``'s ledger prices it (``calibration_round``). A method's ``after_training`` hook is
metered at ``bench.fl``'s price (``workloads.flower.meter.metered_work``). Not here: width-scaled
methods on a fleet (``check_methods``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Result

from accel_sim.hardware import HardwareConfig
from workloads.cost.calibration import client_batches as client_batch_count, client_price, server_seconds
from workloads.cost.step import after_training_price, held_step
from workloads.cost.system import SystemModel
from workloads.fl.calibrate import client_statistics, extractor_state, server_calibrate
from workloads.fl.guard import check_divergence, check_finite
from workloads.flower.fleet import (QUERY_TIMEOUT_S, FleetRun, PlannedStrategy, client_index_reply, client_nodes,
                                    planned_client_rows, planned_ledger_rows)
from workloads.flower.ledger import CalibrationRound, write_clients_csv, write_rounds_csv
from workloads.flower.meter import metered_step, metered_work, model_signature
from workloads.flower.mod import (AccelMod, accel_round_metrics, accel_train_metrics, client_index, flower_client_rows,
                                  flower_ledger_rows)
from workloads.flower.strategy import STEPS_KEY, MethodStrategy, extra_record, extras_of
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import (ClientContext, client_trainer, example_received, local_batches, prepare_model,
                                shuffling_generator)
from workloads.fl.evaluation import evaluate
from workloads.fl.schedule import batch_starts, cosine_lr
from workloads.fl.streams import DRAWS_STREAM, derived_seed
from workloads.fl.methods import MethodConfig, parse_method
from workloads.fl.methods.base import frozen_keys
from workloads.fl.presets import client_data, load_data, load_preset
from workloads.model_spec import ModelSpec, build

METHOD_STATE = "method-state"  # Context.state record: the method's client state (``after_training``'s)
CALIBRATE = "calibrate"  # the ClientApp's train action of a calibration round: message type "train.calibrate"
CALIBRATE_MESSAGE = f"{MessageType.TRAIN}.{CALIBRATE}"
LOCAL_PARTS = "local-parts"  # Context.state record: the client's never-sent parts (a double head's local head)
MetricsAggregation = Callable[[list[RecordDict], str], MetricRecord]


@dataclass(frozen=True)
class FlowerRun:
    """What the example app trains: the preset's data, model and hyper-parameters with the CLI's
    model, methods, client count and rounds."""

    preset: str
    model: str
    methods: tuple[str, ...]
    num_clients: int
    rounds: int
    seed: int

    def setting(self) -> tuple[FLConfig, dict[str, Hparams]]:
        return _setting(self)

    def method(self, name: str) -> tuple[MethodConfig, Hparams]:
        """The method and its hyper-parameters, its knobs declared (as the loop's ``RunPlan`` declares them)."""
        method = parse_method(name)
        return method, self.setting()[1][name].with_knobs(method.knobs)


def check_methods(names: tuple[str, ...], *, fleet: bool = False) -> None:
    """Every method runs but, on a fleet, those that train submodels sized to each client's class
    (the example sends the whole model). ValueError naming it."""
    for name in names:
        if fleet and parse_method(name).algo.sized_to_device:
            raise ValueError(f"method {name!r} trains submodels sized to each fleet class, which the Flower example "
                             "does not send; run it without --fleet, or with bench.fl")


@functools.cache
def _setting(run: FlowerRun) -> tuple[FLConfig, dict[str, Hparams]]:
    preset = load_preset(run.preset)
    cfg = replace(preset.fl, model=run.model, num_clients=run.num_clients, rounds=run.rounds, seed=run.seed)
    methods = [parse_method(name) for name in run.methods]
    preset.check_knobs(methods)
    return cfg, {name: preset.hparams(m) for name, m in zip(run.methods, methods)}


@functools.cache
def _data(run: FlowerRun):
    """(train, test, parts): the preset's dataset, its subsets and hold-out as ``workloads.fl.presets``
    draws them, and its partition; loaded once per process."""
    cfg, _ = run.setting()
    train, test = load_data(cfg)
    train, _, parts = client_data(train, cfg)
    return train, test, parts


def new_model(run: FlowerRun, method: MethodConfig) -> torch.nn.Module:
    """The method's prepared model, the same on every client and the server (seeded)."""
    cfg, _ = run.setting()
    train, _, _ = _data(run)
    torch.manual_seed(run.seed)
    model = build(ModelSpec(cfg.model, tuple(train.x.shape[1:])), num_classes=train.num_classes, norm=cfg.norm,
                  head=method.head)
    return prepare_model(model, method, seed=run.seed)


def kept_record(method: str, record: str) -> str:
    """The name in a node's ``Context.state`` of what its client keeps for ``method`` (``METHOD_STATE``
    or ``LOCAL_PARTS``): one per method, as the node's context lives through every method of the run."""
    return f"{method}/{record}"


def _kept(kept: RecordDict, method: str, record: str) -> dict[str, torch.Tensor] | None:
    name = kept_record(method, record)
    return kept[name].to_torch_state_dict() if name in kept.array_records else None


def local_training(run: FlowerRun, client: int, content: RecordDict, kept: RecordDict) -> RecordDict:
    """Client ``client``'s round from its train message's ``content``: its local epochs as our loop
    trains them (the method's trainer with what it received and what it kept), then the method's
    ``after_training``; returns the reply's content (the shared state, the extra uploads, the
    metrics) and keeps the client's method state and local parts in ``kept`` (its node's
    ``Context.state``)."""
    config = content["config"]
    name, t = str(config["method"]), int(config["server-round"])
    method, hp = run.method(name)
    algo = method.algo
    train, _, parts = _data(run)
    idx = torch.as_tensor(parts[client], dtype=torch.long)
    model = new_model(run, method)
    down = content["arrays"].to_torch_state_dict()
    model.load_state_dict({**model.state_dict(), **(_kept(kept, name, LOCAL_PARTS) or {}), **down})
    model.train()
    lr = cosine_lr(hp.lr, hp.lr_min, t, run.rounds)
    trainer = client_trainer(model, down, hp, method, ClientContext(
        round=t, lr=lr, received=extras_of(content, algo.extra_downloads(t)), state=_kept(kept, name, METHOD_STATE),
        draws=torch.Generator().manual_seed(derived_seed(run.seed, t, client, DRAWS_STREAM))))

    def make_step(m: torch.nn.Module):  # the real model's trainer; on the meter's meta copy, one like it
        return held_step(trainer if m is model else client_trainer(
            m, m.state_dict(), hp, method, ClientContext(round=t, lr=lr, received=example_received(m, method, hp, t))))

    step = metered_step(make_step, model, key=method.name)
    batches = local_batches(idx, shuffling_generator(derived_seed(run.seed, t, client)),
                            batch_starts(len(idx), hp.batch_size), hp.batch_size, hp.local_epochs)
    losses = [step(train.x[batch], train.y[batch]) for batch in batches]
    loss = float(torch.stack(losses).mean())
    if not math.isfinite(loss):
        raise FloatingPointError(f"non-finite loss: client {client}, round {t}, {name} (lr={lr:g})")
    own, uploads = algo.after_training(model, trainer.ctx, len(losses), hp)
    metered_work(lambda hw: after_training_price(method, hp, t, new_model(run, method), hw),
                 key=(name, "after-training", model_signature(model), algo.extra_downloads(t), hp.replace(lr=1.0)))
    if sorted(uploads) != sorted(algo.extra_uploads(t)):
        raise ValueError(f"method {name!r}: after_training in round {t} gave groups {sorted(uploads)}, but it declares "
                         f"{sorted(algo.extra_uploads(t))} (extra_uploads)")
    state = model.state_dict()
    shared = algo.shared_keys(model, t, hp)
    elsewhere = set(shared) | frozen_keys(model)  # sent, or rebuilt from the seed
    local = {k: v.detach().clone() for k, v in state.items() if k not in elsewhere}
    for record, tensors in ((METHOD_STATE, own), (LOCAL_PARTS, local)):
        if tensors:  # as the loop keeps them: only what a client has
            kept[kept_record(name, record)] = ArrayRecord(dict(tensors))
    up = algo.payload(model, {k: state[k].detach().clone() for k in shared}, trainer.ctx)
    return RecordDict({"arrays": ArrayRecord(up), **{extra_record(g): ArrayRecord(v) for g, v in sorted(uploads.items())},
                       "metrics": MetricRecord({"num-examples": len(idx), "train_loss": loss, STEPS_KEY: len(losses)})})


def local_calibration(run: FlowerRun, client: int, content: RecordDict) -> RecordDict:
    """Client ``client``'s calibration (a ``train.calibrate`` message after the method's last
    round): its statistics over its samples with the feature extractor it received
    (``workloads.fl.calibrate.client_statistics``, as ``bench.fl``'s calibration round computes
    them), charged to the meter as ``bench.fl``'s ledger prices them
    (``workloads.cost.calibration.client_price``, one step per batch); the reply's content."""
    name = str(content["config"]["method"])
    method, hp = run.method(name)
    cfg, _ = run.setting()
    train, _, parts = _data(run)
    idx = torch.as_tensor(parts[client], dtype=torch.long)
    model = new_model(run, method)
    model.load_state_dict({**model.state_dict(), **content["arrays"].to_torch_state_dict()})
    model.eval()
    counts = tuple(torch.bincount(train.y[idx], minlength=train.num_classes).tolist())
    metered_work(lambda hw: client_price(method.calibration, cfg.model, class_counts=counts,
                                         num_classes=train.num_classes, image_size=train.x.shape[-1], hp=hp, hw=hw),
                 key=(name, "calibration", model_signature(model), hp, counts),
                 steps=client_batch_count(method.calibration, counts, hp.batch_size))
    stats = client_statistics(method, model, train.x[idx], train.y[idx], hp)
    return RecordDict({"arrays": ArrayRecord(stats), "metrics": MetricRecord({"num-examples": len(idx)})})


def check_losses(name: str, train_metrics: Mapping[int, Mapping[str, Any]]) -> None:
    """A Flower run's divergence, by the loop's one definition (``workloads.fl.guard.check_divergence``):
    the rounds' aggregated ``train_loss`` (Flower's weighted mean over the clients), every round
    against the first; ``DivergedError`` before anything is written (a diverged run is a failure)."""
    history = [{"round": r, "mean_loss": float(m["train_loss"])} for r, m in sorted(train_metrics.items())
               if "train_loss" in m]
    for last in range(2, len(history) + 1):
        check_divergence(history[:last], f"{name} (Flower)")


def client_app(run: FlowerRun, accel: AccelMod | None) -> ClientApp:
    """The example ``ClientApp``; ``accel`` (None: unpriced) is its accelerator mod. Its query
    function names the client's index (the server asks every node once: ``fleet.client_nodes``)."""
    app = ClientApp(mods=[accel] if accel is not None else [])
    app.query()(client_index_reply)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return Message(local_training(run, client_index(context), msg.content, context.state), reply_to=msg)

    @app.train(CALIBRATE)
    def calibrate(msg: Message, context: Context) -> Message:
        return Message(local_calibration(run, client_index(context), msg.content), reply_to=msg)

    return app


def train_method(grid: Grid, run: FlowerRun, name: str, nodes: Mapping[int, int], *,
                 metrics: MetricsAggregation | None = None, fleet: FleetRun | None = None) -> Result:
    """Method ``name``'s rounds on ``MethodStrategy`` (``nodes``: client index -> node id), every
    client sampled each round (with a ``fleet``: its plan's arrivals, at their staleness), the
    global model evaluated after each; ``metrics``: the strategy's ``train_metrics_aggr_fn``
    (None: Flower's weighted average)."""
    method, hp = run.method(name)
    model = new_model(run, method)
    _, test, _ = _data(run)
    plan = None if fleet is None else fleet.plan(name)

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict({**model.state_dict(), **arrays.to_torch_state_dict()})
        return MetricRecord({"accuracy": evaluate(model, test.x, test.y)})

    strategy = MethodStrategy(method, hp, model, nodes, fraction_train=1.0, fraction_evaluate=0.0,
                              min_train_nodes=run.num_clients, min_available_nodes=run.num_clients,
                              staleness=() if plan is None else [dict(zip(a, s)) for a, s in zip(plan.arrivals,
                                                                                                  plan.staleness)],
                              train_metrics_aggr_fn=metrics)
    start = strategy.initial_arrays()
    if plan is not None:
        strategy = PlannedStrategy(strategy, plan.arrivals, nodes)
    return strategy.start(grid=grid, initial_arrays=start, num_rounds=run.rounds,
                          train_config=ConfigRecord({"method": name}), evaluate_fn=evaluate_fn)


@dataclass(frozen=True)
class Calibrated:
    """What ``calibrate_method`` gives back: the global state after the calibration, its accuracy,
    and the clients' replies in client order (their statistics and, under ``AccelMod``, their cost)."""

    weights: dict[str, torch.Tensor]
    accuracy: float
    replies: tuple[RecordDict, ...]


def calibrate_method(grid: Grid, run: FlowerRun, name: str, nodes: Mapping[int, int], result: Result,
                     clients: Sequence[int]) -> Calibrated:
    """Calibrated method ``name``'s round R + 1 after its training (``result``), as ``bench.fl``
    runs it (``workloads.fl.calibrate``): each of ``clients`` (every client; on a fleet its plan's
    arrivals of round R + 1) gets a ``train.calibrate`` message with the final feature extractor
    and replies with its statistics; the server calibrates the global classifier on them in client
    order (``server_calibrate``, its draws from ``derived_seed(seed, R + 1)``) and evaluates the
    global model. With no ``clients`` the model stays as trained, uncalibrated, as in our loop."""
    method, hp = run.method(name)
    _, test, _ = _data(run)
    model = new_model(run, method)
    model.load_state_dict({**model.state_dict(), **result.arrays.to_torch_state_dict()})
    model.eval()
    if not clients:
        return Calibrated(model.state_dict(), float(result.evaluate_metrics_serverapp[run.rounds]["accuracy"]), ())
    t = run.rounds + 1
    extractor = ArrayRecord(extractor_state(model, method))
    config = ConfigRecord({"method": name, "server-round": t})
    replies = list(grid.send_and_receive([Message(RecordDict({"arrays": extractor, "config": config}),
                                                  message_type=CALIBRATE_MESSAGE, dst_node_id=nodes[k])
                                          for k in clients], timeout=QUERY_TIMEOUT_S))
    failed = [r.error.reason for r in replies if r.has_error()]
    client_of = {node: k for k, node in nodes.items()}
    replies = sorted((r for r in replies if not r.has_error()), key=lambda r: client_of[r.metadata.src_node_id])
    if failed or len(replies) != len(clients):
        raise RuntimeError(f"{name}: {len(replies)} of {len(clients)} client(s) sent calibration statistics"
                           + (f" (errors {failed})" if failed else ""))
    server_calibrate(method, model, [r.content["arrays"].to_torch_state_dict() for r in replies], hp,
                     seed=run.seed, round=t)
    check_finite(model.state_dict(), f"{name}'s calibration (Flower)")
    return Calibrated(model.state_dict(), evaluate(model, test.x, test.y), tuple(r.content for r in replies))


def calibration_round(grid: Grid, run: FlowerRun, name: str, nodes: Mapping[int, int], result: Result, *,
                      system: SystemModel, server_hw: HardwareConfig, fleet: FleetRun | None) -> CalibrationRound:
    """``calibrate_method`` over every client (on a ``fleet``: its plan's calibration arrivals),
    priced: the clients' metered statistics and transfers over their links (``accel_round_metrics``)
    and the server's calibration on ``server_hw`` (``calibration_cost.server_seconds``, as
    ``bench.fl`` prices it)."""
    method, hp = run.method(name)
    clients = range(run.num_clients) if fleet is None else fleet.plan(name).calibration.arrived
    done = calibrate_method(grid, run, name, nodes, result, tuple(clients))
    _, test, _ = _data(run)
    server_s = server_seconds(method.calibration, feature_dim=new_model(run, method).feature_dim,
                              num_classes=test.num_classes, num_clients=len(done.replies), hp=hp,
                              hw=server_hw) if done.replies else 0.0
    metrics = accel_round_metrics(list(done.replies), system, num_clients=run.num_clients, seed=run.seed,
                                  server_s=server_s)
    return CalibrationRound(run.rounds + 1, metrics, done.accuracy)


def server_app(run: FlowerRun, system: SystemModel, out: Path, fleet: FleetRun | None = None,
               server_hw: HardwareConfig | None = None) -> ServerApp:
    """The example ``ServerApp``: each method in turn (``train_method``), a calibrated method's
    calibration round after its last (``calibration_round``, its server priced on ``server_hw``;
    None: ``HardwareConfig()``); writes ``out/rounds.csv`` and ``out/clients.csv``. With a
    ``fleet``, each round trains exactly its participation plan's arrivals (``workloads.flower.fleet``)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        nodes = client_nodes(grid, run.num_clients)
        rows, client_rows = [], []
        for name in run.methods:
            result = train_method(grid, run, name, nodes, fleet=fleet,
                                  metrics=accel_train_metrics(system, num_clients=run.num_clients, seed=run.seed))
            check_losses(name, result.train_metrics_clientapp)
            calibration = None
            if run.method(name)[0].calib is not None:
                calibration = calibration_round(grid, run, name, nodes, result, system=system, fleet=fleet,
                                                server_hw=server_hw or HardwareConfig())
            if fleet is None:
                rows += flower_ledger_rows(name, result, calibration=calibration)
                client_rows += flower_client_rows(name, result, calibration)
            else:
                rows += planned_ledger_rows(name, fleet.plan(name), result, calibration)
                client_rows += planned_client_rows(name, fleet, result, calibration)
        write_clients_csv(out / "clients.csv", client_rows)
        write_rounds_csv(out / "rounds.csv", rows)

    return app

"""The example Flower app: FedAvg / SphereFed on the offline digits, priced on the accelerator.

A ``ClientApp`` and a ``ServerApp`` written as a Flower user writes them (Message API, Flower
1.41), with the accelerator's cost added by the few lines ``workloads.flower.mod`` describes.
What they train is ours: the model (``workloads.models.build_model``), the method's preparation
and step (``workloads.fl.local``: SphereFed's frozen orthonormal classifier, FeatureNorm and MSE
loss; FedProx's proximal term), the data and its split (the ``small`` preset: scikit-learn digits
at 16x16, Dirichlet partition), the per-method hyper-parameters and cosine learning rate. The
server runs Flower's own ``FedAvg`` strategy, one method after the other in one simulation, with
every client sampled each round (on a fleet: the participation plan's arrivals, through
``workloads.flower.fleet.PlannedStrategy``) and a centralized evaluation on the global test set
after each round (``evaluate_fn``); the clients run no evaluation.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from workloads.cost.step import held_step
from workloads.cost.system import SystemModel
from workloads.fl.guard import check_divergence
from workloads.flower.fleet import (FleetRun, PlannedStrategy, client_index_reply, client_nodes, planned_client_rows,
                                    planned_ledger_rows)
from workloads.flower.ledger import write_clients_csv, write_rounds_csv
from workloads.flower.meter import metered_step
from workloads.flower.mod import AccelMod, accel_train_metrics, client_index, flower_client_rows, flower_ledger_rows
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.loop import batch_starts, cosine_lr, derived_seed, evaluate
from workloads.fl.methods import MethodConfig, parse_method
from workloads.fl.presets import client_data, load_data, load_preset
from workloads.model_spec import ModelSpec, build

STRATEGIES = {"FedAvg": FedAvg}
"""The Flower strategies the example runs a method on, by the name a method declares as its
``flower_strategy`` (the strategy whose server rule is its ``aggregate``: FedAvg's sample-weighted
average for FedAvg and FedProx, which differs on the client only)."""


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
        return parse_method(name), self.setting()[1][name]


def check_methods(names: tuple[str, ...]) -> None:
    """Only methods that declare a Flower strategy the example has, and need no calibration round."""
    for name in names:
        m = parse_method(name)
        if m.algo.flower_strategy not in STRATEGIES or m.calibration:
            raise ValueError(f"method {name!r}: the Flower example runs methods whose server rule is a Flower "
                             f"strategy ({', '.join(STRATEGIES)}: fedavg, fedprox, optionally +spherefed), with no "
                             "calibration")
        extras = (*m.algo.upload_extras, *m.algo.extra_downloads(2), *m.algo.extra_uploads(2))
        if extras:  # a Flower message here carries the model only
            sent = ", ".join(extras)
            raise ValueError(f"method {name!r} sends more than the model ({sent}), which the Flower example does "
                             "not carry; run it with bench.fl")


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


def shared_state(model: torch.nn.Module, method: MethodConfig, hp: Hparams, round: int) -> dict[str, torch.Tensor]:
    """What the client and the server exchange: the method's shared keys (SphereFed's fixed
    classifier is rebuilt from the seed, never sent)."""
    state = model.state_dict()
    return {k: state[k].detach().clone() for k in method.algo.shared_keys(model, round, hp)}


def local_training(run: FlowerRun, name: str, client: int, round: int, arrays: ArrayRecord) -> tuple[dict, int, float]:
    """One client's local epochs from the downloaded ``arrays``: (shared state, samples, mean loss)."""
    method, hp = run.method(name)
    train, _, parts = _data(run)
    idx = torch.as_tensor(parts[client], dtype=torch.long)
    x, y = train.x[idx], train.y[idx]
    model = new_model(run, method)
    model.load_state_dict({**model.state_dict(), **arrays.to_torch_state_dict()})
    model.train()
    lr = cosine_lr(hp.lr, hp.lr_min, round, run.rounds)
    step = metered_step(lambda m: held_step(client_trainer(m, m.state_dict(), hp, method, round=round, lr=lr)), model,
                        key=method.name)
    gen = torch.Generator().manual_seed(derived_seed(run.seed, round, client))
    starts, losses = batch_starts(len(y), hp.batch_size), []
    for _ in range(hp.local_epochs):
        order = torch.randperm(len(y), generator=gen)
        losses += [step(x[order[s:s + hp.batch_size]], y[order[s:s + hp.batch_size]]) for s in starts]
    loss = float(torch.stack(losses).mean())
    if not math.isfinite(loss):
        raise FloatingPointError(f"non-finite loss: client {client}, round {round}, {name} (lr={lr:g})")
    return shared_state(model, method, hp, round), len(y), loss


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
    function names the client's index (a fleet run's server asks it: ``fleet.client_nodes``)."""
    app = ClientApp(mods=[accel] if accel is not None else [])
    app.query()(client_index_reply)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        config = msg.content["config"]
        state, n, loss = local_training(run, str(config["method"]), client_index(context),
                                        int(config["server-round"]), msg.content["arrays"])
        return Message(RecordDict({"arrays": ArrayRecord(state),
                                   "metrics": MetricRecord({"num-examples": n, "train_loss": loss})}), reply_to=msg)

    return app


def server_app(run: FlowerRun, system: SystemModel, out: Path, fleet: FleetRun | None = None) -> ServerApp:
    """The example ``ServerApp``: each method in turn on Flower's FedAvg; writes ``out/rounds.csv``
and ``out/clients.csv``. With a ``fleet``, each round trains exactly its participation plan's
arrivals (``workloads.flower.fleet``)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        _, test, _ = _data(run)
        nodes = None if fleet is None else client_nodes(grid, run.num_clients)
        rows, client_rows = [], []
        for name in run.methods:
            method, hp = run.method(name)
            model = new_model(run, method)

            def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
                model.load_state_dict({**model.state_dict(), **arrays.to_torch_state_dict()})
                return MetricRecord({"accuracy": evaluate(model, test.x, test.y)})

            strategy = STRATEGIES[method.algo.flower_strategy](fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=run.num_clients,
                              min_available_nodes=run.num_clients,
                              train_metrics_aggr_fn=accel_train_metrics(system, num_clients=run.num_clients,
                                                                        seed=run.seed))
            if fleet is not None:
                strategy = PlannedStrategy(strategy, fleet.plans[name].arrivals, nodes)
            result = strategy.start(grid=grid, initial_arrays=ArrayRecord(shared_state(model, method, hp, 1)),
                                    num_rounds=run.rounds, train_config=ConfigRecord({"method": name}),
                                    evaluate_fn=evaluate_fn)
            check_losses(name, result.train_metrics_clientapp)
            if fleet is None:
                rows += flower_ledger_rows(name, result)
                client_rows += flower_client_rows(name, result)
            else:
                rows += planned_ledger_rows(name, fleet.plans[name], result)
                client_rows += planned_client_rows(name, fleet, result)
        write_clients_csv(out / "clients.csv", client_rows)
        write_rounds_csv(out / "rounds.csv", rows)

    return app

"""The federated loop: rounds, client sampling, local training, aggregation, evaluation,
calibration and the communication ledger.

Per round t = 1..R (SphereFed Sec. 5.1): the learning rate follows cosine annealing per round,
lr_t = lr_min + (lr - lr_min) (1 + cos(pi (t - 1) / R)) / 2 (torch's CosineAnnealingLR stepped
once per round); round(participation x K) clients (at least one) are sampled without replacement;
each downloads the shared state, trains ``local_epochs`` epochs of mini-batches of ``batch_size``
from a fresh SGD optimizer (clients are stateless except a double-head client's local parts) and
sends the shared state back with its sample count; the algorithm aggregates. After round R an
optional calibration runs over all K clients. The global model is evaluated on the global test
set every ``eval_every`` rounds and after the last round (and after the calibration).

Same seed, same results: the model is initialized under ``torch.manual_seed(seed)``, client
sampling uses ``numpy.random.default_rng([seed, t])``, each client's shuffling a torch generator
seeded from ``(seed, t, k)``, CCVR's sampling one seeded from ``(seed, R + 1)``.

A trailing mini-batch of a single sample is skipped (BatchNorm cannot train on one sample);
every other partial batch is used.
"""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from workloads.fl.comm import (FEDNOVA_A_BYTES, METADATA_BYTES, Transfer, grouped_bytes,
                               tensor_bytes)
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import client_trainer, per_sample_loss, prepare_model
from workloads.fl.methods import MethodConfig
from workloads.fl.methods.base import ClientUpdate, ServerState, frozen_keys, trainable_keys
from workloads.fl.methods.ccvr import class_batches
from workloads.fl.methods.doublehead import LOCAL_HEAD


class NonFiniteLossError(FloatingPointError):
    """Local training produced a NaN or infinite loss."""


@dataclass(frozen=True)
class RunResult:
    method: str
    accuracy: float  # global model on the global test set, after calibration if any
    accuracy_before_calibration: float | None
    history: tuple[dict, ...]  # per round: round, lr, clients, mean_loss, accuracy (or None)
    transfers: tuple[Transfer, ...]
    samples_trained: int  # local training samples processed over the run


def cosine_lr(lr: float, lr_min: float, round: int, rounds: int) -> float:
    """Cosine annealing per round (SGDR / torch CosineAnnealingLR with T_max = R), round 1-based."""
    return lr_min + (lr - lr_min) * (1.0 + math.cos(math.pi * (round - 1) / rounds)) / 2.0


def sample_clients(num_clients: int, participation: float, *, seed: int, round: int) -> list[int]:
    m = max(1, round_half_up(participation * num_clients))
    if m >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng([seed, round])
    return sorted(int(k) for k in rng.choice(num_clients, size=m, replace=False))


def round_half_up(value: float) -> int:
    return int(math.floor(value + 0.5))


def derived_seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def batch_starts(n: int, batch_size: int) -> list[int]:
    """Start indices of the mini-batches of one epoch (a trailing batch of 1 is skipped)."""
    starts = list(range(0, n, batch_size))
    if n > 1 and n - starts[-1] == 1:
        starts.pop()
    return starts


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> float:
    """Top-1 accuracy of ``model`` (eval mode) on (x, y)."""
    was_training = model.training
    model.eval()
    correct = 0
    for s in range(0, len(y), batch_size):
        correct += int((model(x[s:s + batch_size]).argmax(1) == y[s:s + batch_size]).sum())
    model.train(was_training)
    return correct / len(y)


def train_client(trainer, x: torch.Tensor, y: torch.Tensor, hp: Hparams, *, seed: int,
                 where: str) -> tuple[int, float]:
    """Local epochs of SGD steps; returns (steps, mean loss). NaN/inf -> NonFiniteLossError."""
    gen = torch.Generator().manual_seed(seed)
    n, steps, loss_sum = len(y), 0, torch.zeros(())
    starts = batch_starts(n, hp.batch_size)
    for epoch in range(hp.local_epochs):
        order = torch.randperm(n, generator=gen)
        for s in starts:
            idx = order[s:s + hp.batch_size]
            loss_sum = loss_sum + trainer.step(x[idx], y[idx])
        steps += len(starts)
        if not torch.isfinite(loss_sum):
            raise NonFiniteLossError(f"non-finite loss in {where}, local epoch {epoch + 1}: lower "
                                     f"the learning rate (lr={trainer.optimizer.param_groups[0]['lr']:g})")
    return steps, float(loss_sum) / max(steps, 1)


def _record(transfers: list, round: int, client: int, direction: str, sizes: dict[str, int]) -> None:
    transfers.extend(Transfer(round, client, direction, g, b) for g, b in sorted(sizes.items()))


def run_method(method: MethodConfig, *, model_fn: Callable[[], nn.Module], train, test,
               parts: Sequence[np.ndarray], cfg: FLConfig, hp: Hparams,
               progress: bool = False) -> RunResult:
    """Run ``method`` on ``train`` split by ``parts`` (one index array per client).

    ``model_fn()`` builds the (unprepared) model; it is called under ``torch.manual_seed(seed)``
    so every method starts from the same initial weights.
    """
    algo, seed, rounds = method.algo, cfg.seed, cfg.rounds
    torch.manual_seed(seed)
    global_model = prepare_model(model_fn(), method, seed=seed)
    client_model = copy.deepcopy(global_model)  # clients rebuild the same model from the seed
    client_model.train()
    server = ServerState(weights={k: v.detach().clone() for k, v in global_model.state_dict().items()})
    frozen = frozen_keys(client_model)
    params = set(trainable_keys(client_model))
    client_data = [(train.x[torch.as_tensor(p, dtype=torch.long)],
                    train.y[torch.as_tensor(p, dtype=torch.long)]) for p in parts]
    if any(len(y) == 0 for _, y in client_data):
        raise ValueError("every client needs at least one training sample; check the partition")
    memory: dict[int, dict[str, torch.Tensor]] = {}  # client-side state never sent
    transfers: list[Transfer] = []
    history: list[dict] = []
    samples = 0
    bar = tqdm(range(1, rounds + 1), desc=method.name, file=sys.stderr, disable=not progress)
    for t in bar:
        lr = cosine_lr(hp.lr, hp.lr_min, t, rounds)
        clients = sample_clients(len(parts), cfg.participation, seed=seed, round=t)
        shared = algo.shared_keys(client_model, t, hp)
        shared_set = set(shared)
        direction = None
        if algo.needs_direction and server.prev_weights is not None:
            direction = {k: server.weights[k] - server.prev_weights[k] for k in shared if k in params}
        updates, losses = [], []
        for k in clients:
            down = {key: server.weights[key] for key in shared}
            _record(transfers, t, k, "down", grouped_bytes(down))
            if direction is not None:
                _record(transfers, t, k, "down", grouped_bytes(direction, "fedcos_direction"))
            own = {key: v for key, v in memory.get(k, {}).items() if key not in shared_set}
            client_model.load_state_dict({**server.weights, **own, **down})
            trainer = client_trainer(client_model, down, hp, method, round=t, lr=lr, direction=direction)
            x, y = client_data[k]
            steps, loss = train_client(trainer, x, y, hp, seed=derived_seed(seed, t, k),
                                       where=f"round {t}, client {k} ({method.name})")
            samples += hp.local_epochs * sum(min(hp.batch_size, len(y) - s)
                                             for s in batch_starts(len(y), hp.batch_size))
            state = client_model.state_dict()
            up = {key: state[key].detach().clone() for key in shared}
            local = {key: v.detach().clone() for key, v in state.items()
                     if key not in shared_set and key not in frozen}
            if local:
                memory[k] = local
            metadata = METADATA_BYTES + (FEDNOVA_A_BYTES if "fednova_a" in algo.upload_extras else 0)
            _record(transfers, t, k, "up", {**grouped_bytes(up), "metadata": metadata})
            updates.append(ClientUpdate(k, up, len(y), steps))
            losses.append(loss)
        server = algo.aggregate(server, updates, hp, [k for k in shared if k in params])
        acc = None
        if t == rounds or (cfg.eval_every and t % cfg.eval_every == 0):
            global_model.load_state_dict(server.weights)
            acc = evaluate(global_model, test.x, test.y)
            bar.set_postfix(acc=f"{acc:.3f}")
        history.append({"round": t, "lr": lr, "clients": clients,
                        "mean_loss": float(np.mean(losses)), "accuracy": acc})
    accuracy = history[-1]["accuracy"]
    before = None
    if method.calib is not None:
        before = accuracy
        accuracy = _calibrate(method, global_model, client_data, test, hp, seed=seed,
                              round=rounds + 1, transfers=transfers)
    return RunResult(method.name, accuracy, before, tuple(history), tuple(transfers), samples)


def _calibrate(method: MethodConfig, model: nn.Module, client_data, test, hp: Hparams, *,
               seed: int, round: int, transfers: list) -> float:
    """Every client downloads the final feature extractor and sends its statistics; the server
    replaces the classifier by the calibrated one. Returns the calibrated accuracy."""
    calib = method.calib
    model.eval()
    extractor = {k: v for k, v in model.state_dict().items()
                 if k.split(".")[0] not in ("classifier", LOCAL_HEAD)}
    num_classes = model.classifier.out_features
    stats = []
    for k, (x, y) in enumerate(client_data):
        _record(transfers, round, k, "down", grouped_bytes(extractor))
        if calib.name == "ccvr":
            batches = class_batches(x, y, hp.batch_size)
        else:
            batches = ((x[s:s + hp.batch_size], y[s:s + hp.batch_size]) for s in range(0, len(y), hp.batch_size))
        s = calib.client_statistics(model, batches, num_classes=num_classes, hp=hp)
        _record(transfers, round, k, "up", {"calibration_statistics": sum(tensor_bytes(v) for v in s.values())})
        stats.append(s)
    gen = torch.Generator().manual_seed(derived_seed(seed, round))
    weight = calib.server_calibrate(stats, classifier_weight=model.classifier.weight.detach(),
                                    loss_fn=per_sample_loss(method), hp=hp, generator=gen)
    with torch.no_grad():
        model.classifier.weight.copy_(weight)
    return evaluate(model, test.x, test.y)

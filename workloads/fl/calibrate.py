"""The calibration round R + 1 of a calibrated method (CCVR, FFC): each arriving client (every
client, or a participation plan's arrivals of round R + 1) downloads the final feature extractor
and sends its statistics; the server replaces the global model's classifier by the one calibrated
on those statistics alone (``method.calib``). Its server step draws from a generator on the run's
device seeded from ``derived_seed(seed, R + 1)``.

``extractor_state``, ``client_statistics`` and ``server_calibrate`` are the round's three pieces,
shared with the Flower app's calibration round (``workloads.flower.app``).
"""

from __future__ import annotations

import contextlib
from typing import Mapping, Sequence

import torch
from torch import nn

from workloads.fl.clients import record
from workloads.fl.comm import grouped_bytes, tensor_bytes
from workloads.fl.evaluation import memory_format
from workloads.fl.hparams import Hparams
from workloads.fl.local import per_sample_loss
from workloads.fl.methods import MethodConfig
from workloads.fl.setup import Setup
from workloads.fl.streams import SEND_DOWN_STREAM, arithmetic_of, derived_seed, sent


def extractor_state(model: nn.Module, method: MethodConfig) -> dict[str, torch.Tensor]:
    """What a client downloads for the calibration: the global state but the classifier and the
    method's local modules (a double head's local head)."""
    heads = ("classifier", *method.algo.local_modules)
    return {k: v for k, v in model.state_dict().items() if k.split(".")[0] not in heads}


def client_statistics(method: MethodConfig, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                      hp: Hparams) -> dict[str, torch.Tensor]:
    """One client's statistics over its samples ``x``, ``y`` (in their order) with ``model`` (the
    extractor as received, in eval mode): the calibration's ``client_statistics`` over its
    ``client_batches`` of the local batch size."""
    calib = method.calib
    return calib.client_statistics(model, calib.client_batches(x, y, hp.batch_size),
                                   num_classes=model.classifier.out_features, hp=hp)


def server_calibrate(method: MethodConfig, model: nn.Module, stats: Sequence[Mapping[str, torch.Tensor]],
                     hp: Hparams, *, seed: int, round: int) -> None:
    """The server's step: ``model``'s classifier replaced by the one the calibration computes from
    ``stats`` (in client order) alone, its draws from ``derived_seed(seed, round)`` on the
    classifier's device."""
    weight = model.classifier.weight.detach()
    gen = torch.Generator(device=weight.device).manual_seed(derived_seed(seed, round))
    new = method.calib.server_calibrate(list(stats), classifier_weight=weight, loss_fn=per_sample_loss(method),
                                        hp=hp, generator=gen)
    with torch.no_grad():
        model.classifier.weight.copy_(new)


def calibrate(setup: Setup, clients: Sequence[int], *, round: int, transfers: list) -> None:
    """Each of ``clients`` (every client, or the calibration round's arrivals) downloads the final
    feature extractor and sends its statistics; the server replaces the classifier of the global
    model by the one calibrated on those statistics alone."""
    model, hp = setup.global_model, setup.hp
    model.eval()
    extractor = sent(setup.execution, extractor_state(model, setup.method), setup.cfg.seed, round, SEND_DOWN_STREAM)
    clients_model = model  # the clients compute their statistics with the extractor as they received it
    if not setup.execution.communication.is_identity:
        clients_model = setup.client_model
        clients_model.load_state_dict({**model.state_dict(), **extractor})
        clients_model.eval()
    stats = []
    for k in clients:
        idx = setup.client_idx[k]
        record(transfers, round, k, "down", grouped_bytes(extractor, fmt=setup.execution.communication))
        x = memory_format(setup.train.take(idx), setup.execution.channels_last)
        with arithmetic_of(setup.execution, setup.cfg.seed, round, k) or contextlib.nullcontext():
            s = client_statistics(setup.method, clients_model, x, setup.train.y[idx], hp)
        record(transfers, round, k, "up", {"calibration_statistics": sum(tensor_bytes(v) for v in s.values())})
        stats.append(s)
    server_calibrate(setup.method, model, stats, hp, seed=setup.cfg.seed, round=round)

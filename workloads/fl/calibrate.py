"""The calibration round R + 1 of a calibrated method (CCVR, FFC): each arriving client (every
client, or a participation plan's arrivals of round R + 1) downloads the final feature extractor
and sends its statistics; the server replaces the global model's classifier by the one calibrated
on those statistics alone (``method.calib``). Its server step draws from a generator on the run's
device seeded from ``derived_seed(seed, R + 1)``.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch

from workloads.fl.clients import record
from workloads.fl.comm import grouped_bytes, tensor_bytes
from workloads.fl.evaluation import memory_format
from workloads.fl.local import per_sample_loss
from workloads.fl.setup import Setup
from workloads.fl.streams import SEND_DOWN_STREAM, arithmetic_of, derived_seed, sent


def calibrate(setup: Setup, clients: Sequence[int], *, round: int, transfers: list) -> None:
    """Each of ``clients`` (every client, or the calibration round's arrivals) downloads the final
    feature extractor and sends its statistics; the server replaces the classifier of the global
    model by the one calibrated on those statistics alone."""
    calib, model, hp = setup.method.calib, setup.global_model, setup.hp
    model.eval()
    heads = ("classifier", *setup.method.algo.local_modules)
    extractor = sent(setup.execution, {k: v for k, v in model.state_dict().items() if k.split(".")[0] not in heads},
                     setup.cfg.seed, round, SEND_DOWN_STREAM)
    clients_model = model  # the clients compute their statistics with the extractor as they received it
    if not setup.execution.communication.is_identity:
        clients_model = setup.client_model
        clients_model.load_state_dict({**model.state_dict(), **extractor})
        clients_model.eval()
    num_classes = model.classifier.out_features
    stats = []
    for k in clients:
        idx = setup.client_idx[k]
        record(transfers, round, k, "down", grouped_bytes(extractor, fmt=setup.execution.communication))
        x = memory_format(setup.train.take(idx), setup.execution.channels_last)
        with arithmetic_of(setup.execution, setup.cfg.seed, round, k) or contextlib.nullcontext():
            s = calib.client_statistics(clients_model, calib.client_batches(x, setup.train.y[idx], hp.batch_size),
                                        num_classes=num_classes, hp=hp)
        record(transfers, round, k, "up", {"calibration_statistics": sum(tensor_bytes(v) for v in s.values())})
        stats.append(s)
    gen = torch.Generator(device=setup.execution.torch_device).manual_seed(derived_seed(setup.cfg.seed, round))
    weight = calib.server_calibrate(stats, classifier_weight=model.classifier.weight.detach(),
                                    loss_fn=per_sample_loss(setup.method), hp=hp, generator=gen)
    with torch.no_grad():
        model.classifier.weight.copy_(weight)


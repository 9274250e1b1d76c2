"""Communication: the ledger's records and totals, and closed forms for the same quantities.

The federated loop records one ``Transfer`` per (round, client, direction, tensor group) from the
tensors it really hands over, with bytes = numel x itemsize. Groups:

* ``feature_extractor``: every state_dict entry outside the heads (weights and BatchNorm buffers);
* ``classifier``: ``classifier.*`` (absent when frozen: SphereFed, FedBABU rebuild it from the seed);
* ``metadata``: the client's sample count (int64) and what its method declares it uploads beside it
  (``upload_extras``: FedNova's normalizer a_i, one float64);
* a method's ``extra_downloads`` and ``extra_uploads``, each under its own group, each the size of
  the trainable shared parameters: FedCos's ``fedcos_direction`` d_t (down, from round 2),
  SCAFFOLD's ``scaffold_control`` (c down, Delta c_i up, every round);
* ``calibration_statistics``: FFC's V, U or CCVR's counts, means, covariances (once, round R+1,
  after the clients downloaded the final feature extractor; on a fleet, the arrivals only).

A run with a communication format (``Execution.comm_format``) sends the model, its updates and
the methods' extra tensors rounded to it, and the ledger charges each float32 tensor the format's packed
payload (``NumberFormat.payload_bytes``); the sample count, the normalizer and the calibration's
download and statistics stay as they are.

Tensors a client can rebuild from the shared seed (initial weights of never-shared parts, the
fixed classifier) cost nothing; what a method keeps on its clients (``local_modules``: double
head's local head) never leaves them. The ledger and the closed form ask the method, and name none.

``closed_form_bytes`` computes the totals from sizes alone (parameter shapes, l, C, rounds,
clients), independently of the loop; tests check the two agree.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch
from torch import nn

from workloads.fl.hparams import Hparams
from workloads.fl.methods import MethodConfig
from workloads.fl.methods.base import FedAvg, frozen_keys
from workloads.numerics import NumberFormat

SAMPLE_COUNT_BYTES = 8  # num_examples as int64


def metadata_bytes(algorithm: FedAvg) -> int:
    """What a client uploads each round beside the model: its sample count and its method's
    ``upload_extras``."""
    return SAMPLE_COUNT_BYTES + sum(algorithm.upload_extras.values())


@dataclass(frozen=True)
class Transfer:
    round: int  # 1..R for training rounds, R + 1 for the calibration
    client: int
    direction: str  # "down" (server -> client) or "up"
    group: str
    nbytes: int


def tensor_bytes(t: torch.Tensor, fmt: NumberFormat | None = None) -> int:
    """Bytes ``t`` occupies on a link: ``numel x itemsize``, or, sent in a number format
    (``fmt``, float32 tensors only), the format's packed payload (``NumberFormat.payload_bytes``)."""
    if fmt is not None and not fmt.is_identity and t.dtype == torch.float32:
        return fmt.payload_bytes(t.numel())
    return t.numel() * t.element_size()


def group_of(key: str) -> str:
    return "classifier" if key.split(".")[0] == "classifier" else "feature_extractor"


def grouped_bytes(tensors: Mapping[str, torch.Tensor], group: str | None = None,
                  fmt: NumberFormat | None = None) -> dict[str, int]:
    """Bytes per group of a dict of tensors (``group`` forces one group for all of them), sent in
    ``fmt`` (None: as they are)."""
    out: dict[str, int] = defaultdict(int)
    for key, t in tensors.items():
        out[group or group_of(key)] += tensor_bytes(t, fmt)
    return dict(out)


def ledger_totals(transfers: Iterable[Transfer]) -> dict:
    """Totals overall, per direction, per group and per client (JSON-ready)."""
    total = {"down": 0, "up": 0}
    by_group: dict[str, dict[str, int]] = defaultdict(lambda: {"down": 0, "up": 0})
    by_client: dict[int, dict[str, int]] = defaultdict(lambda: {"down": 0, "up": 0})
    for t in transfers:
        total[t.direction] += t.nbytes
        by_group[t.group][t.direction] += t.nbytes
        by_client[t.client][t.direction] += t.nbytes
    return {"down_bytes": total["down"], "up_bytes": total["up"],
            "total_bytes": total["down"] + total["up"],
            "by_group": {g: {f"{d}_bytes": v for d, v in dv.items()} for g, dv in sorted(by_group.items())},
            "by_client": {str(c): {f"{d}_bytes": v for d, v in dv.items()}
                          for c, dv in sorted(by_client.items())}}


@dataclass(frozen=True)
class ModelSizes:
    """The sizes of a prepared model the closed forms take (``closed_form_sizes`` reads them).

    ``layer_bytes``: bytes of the shared state of each sharing layer, shallow to deep, the global
    head last if it is shared (for plain methods any split of the shared state works: only the
    sum matters); ``head_bytes``: bytes of the shared classifier (0 when frozen);
    ``trainable_bytes``: bytes of the trainable shared parameters (the size of each extra group:
    FedCos's d_t, SCAFFOLD's c); ``feature_dim`` and ``num_classes``: the classifier's in and out
    features."""

    layer_bytes: tuple[int, ...]
    head_bytes: int
    trainable_bytes: int
    feature_dim: int
    num_classes: int


def closed_form_sizes(model: nn.Module, method: MethodConfig, fmt: NumberFormat | None = None) -> ModelSizes:
    """The sizes the closed forms take, read from a *prepared* model (after the method's
    ``prepare_model``: a double-head model has its local head, a SphereFed one its frozen
    classifier): ``layer_bytes`` per sharing layer (``method``'s ``sharing_layers``: shallow to deep, its
    local modules left out, frozen state left out, empty layers dropped), ``head_bytes`` of the shared
    classifier, ``trainable_bytes`` of the trainable shared parameters, ``feature_dim`` and
    ``num_classes``. The one place these are built, for every caller (``bench.fl``, ``bench.run``,
    ``workloads.cost``), so that the closed form cannot count what the ledger never sends. ``fmt``: the
    run's communication format (each tensor's bytes as sent in it, ``tensor_bytes``)."""
    frozen, state, layered = frozen_keys(model), model.state_dict(), method.algo.sharing_layers(model)
    layers = [sum(tensor_bytes(state[k], fmt) for k in layer if k not in frozen) for layer in layered]
    shared = {k for layer in layered for k in layer}
    head = sum(tensor_bytes(state[k], fmt) for k in state if k.split(".")[0] == "classifier" and k not in frozen)
    trainable = sum(tensor_bytes(p, fmt) for n, p in model.named_parameters()
                    if p.requires_grad and n in shared)
    return ModelSizes(layer_bytes=tuple(b for b in layers if b), head_bytes=head, trainable_bytes=trainable,
                      feature_dim=model.classifier.in_features, num_classes=model.classifier.out_features)


def client_round_bytes(method: MethodConfig, hp: Hparams, round: int, sizes: ModelSizes) -> tuple[int, int]:
    """(down, up) bytes of one sampled client in training round ``round``, from sizes only
    (``closed_form_bytes``): down the layers the method shares that round + one ``trainable_bytes``
    per ``extra_downloads(round)`` group (FedCos's d_t from round 2, SCAFFOLD's c), up the same
    layers + one ``trainable_bytes`` per ``extra_uploads(round)`` group (SCAFFOLD's Delta c_i) +
    ``metadata_bytes`` (the sample count + the method's ``upload_extras``)."""
    algo, layer_bytes = method.algo, sizes.layer_bytes
    shared = sum(layer_bytes[:algo.shared_layer_count(round, hp, len(layer_bytes))])
    down = shared + len(algo.extra_downloads(round)) * sizes.trainable_bytes
    return down, shared + len(algo.extra_uploads(round)) * sizes.trainable_bytes + metadata_bytes(algo)


def calibration_client_bytes(method: MethodConfig, hp: Hparams, sizes: ModelSizes) -> tuple[int, int]:
    """(down, up) bytes of one client in the calibration round R + 1, from sizes only
    (``closed_form_bytes``): down the final feature extractor (every shared layer but the
    classifier), up the statistics the calibration declares (``upload_bytes``, from its
    ``statistics``: CCVR's and FFC's differ)."""
    hp = hp.with_knobs(method.knobs)
    return (sum(sizes.layer_bytes) - sizes.head_bytes,
            method.calib.upload_bytes(feature_dim=sizes.feature_dim, num_classes=sizes.num_classes, hp=hp))


def closed_form_bytes(method: MethodConfig, hp: Hparams, sizes: ModelSizes, *, rounds: int,
                      clients_per_round: int | Sequence[int], num_clients: int,
                      calibration_clients: int | None = None) -> dict[str, int]:
    """Total bytes down and up over a run, from sizes only (``sizes``: the prepared model's,
    ``closed_form_sizes``).

    ``clients_per_round``: the clients that train each round, one number for all rounds or one per
    round (a fleet's arrivals, ``workloads.cost.fleet``); ``calibration_clients``: the clients whose
    statistics the calibration gathers (None: all ``num_clients``; a fleet's calibration arrivals).

    Per round and sampled client: down = the layers the method shares that round (its
    ``shared_layer_count``: all; double head with gradual sharing layers 1..p(t) in round t, Li et
    al., "More Industry-friendly: Federated Learning with High Efficient Design", Alg. 2; its local
    head is never sent) + ``trainable_bytes`` per ``extra_downloads`` group, up = the same +
    ``trainable_bytes`` per ``extra_uploads`` group + ``metadata_bytes`` (8 B sample count + the
    method's ``upload_extras``). Calibration:
    every client (or the ``calibration_clients`` that arrive) downloads the feature extractor and
    uploads what the calibration says it sends once (``calibration_client_bytes``).
    """
    hp = hp.with_knobs(method.knobs)  # the method's knobs: their defaults where ``hp`` lacks them
    down = up = 0
    for t in range(1, rounds + 1):
        down_t, up_t = client_round_bytes(method, hp, t, sizes)
        clients = clients_per_round if isinstance(clients_per_round, int) else clients_per_round[t - 1]
        down += clients * down_t
        up += clients * up_t
    if method.calibration:
        down_c, up_c = calibration_client_bytes(method, hp, sizes)
        calibrated = num_clients if calibration_clients is None else calibration_clients
        down += calibrated * down_c
        up += calibrated * up_c
    return {"down_bytes": down, "up_bytes": up, "total_bytes": down + up}

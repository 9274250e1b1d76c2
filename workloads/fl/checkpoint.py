"""Resume: with ``checkpoint=PATH`` the loop's state after every round (``LoopState``: server state,
clients' local parts, ledger, history, samples, torch's RNG states) is written atomically to PATH;
with ``resume=True`` a run starts from the last completed round found there and gives results
identical to an uninterrupted run (nothing of a round depends on anything else). A checkpoint
names the run it belongs to (``fingerprint``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from workloads.fl.comm import Transfer
from workloads.fl.methods.base import ServerState
from workloads.fl.round import LoopState
from workloads.fl.setup import Setup

CHECKPOINT_FORMAT = 1


def fingerprint(setup: Setup, parts: Sequence[np.ndarray]) -> str:
    """What a checkpoint must agree with: method, config, hyper-parameters, execution options
    (device type, not index), the partition and the initial weights."""
    h = hashlib.sha256()
    ex = setup.execution.settings()
    ex["device"] = setup.execution.torch_device.type
    doc = {"method": setup.method.name, "cfg": asdict(setup.cfg), "hp": setup.hp.as_dict(), "execution": ex}
    if setup.arrivals is not None:
        doc["arrivals"] = setup.arrivals
    if setup.staleness:
        doc["staleness"] = [sorted(ages.items()) for ages in setup.staleness]
    h.update(json.dumps(doc, sort_keys=True, default=str).encode())
    for p in parts:
        h.update(np.asarray(p, dtype=np.int64).tobytes() + b"|")
    for key, v in setup.global_model.state_dict().items():
        h.update(key.encode() + v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def save_checkpoint(path: str | Path, state: LoopState, fingerprint: str) -> None:
    """``state`` and torch's RNG states to ``path`` (written to a temporary name, then renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint, "round": state.round,
           "server": {"weights": state.server.weights, "prev_weights": state.server.prev_weights,
                      "momentum": state.server.momentum, "extras": state.server.extras,
                      "num_clients": state.server.num_clients},
           "memory": state.memory, "clients": state.clients, "transfers": [tuple(asdict(t).values()) for t in state.transfers],
           "history": list(state.history), "samples": state.samples, "torch_rng": torch.get_rng_state(),
           "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(doc, tmp)
    os.replace(tmp, path)


def load_checkpoint_document(path: str | Path, device: torch.device | str = "cpu") -> dict:
    """The checkpoint file's contents; a damaged file is one-line ValueError."""
    try:
        doc = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch reports damage through many exception types
        first = (str(err).strip().splitlines() or [""])[0]  # torch's own advice (weights_only=False) is not ours
        raise ValueError(f"checkpoint {path} is unreadable ({type(err).__name__}: {first}); delete it to start "
                         "that method over") from None
    return doc if isinstance(doc, dict) else {}


def load_checkpoint(path: str | Path, fingerprint: str, device: torch.device) -> LoopState:
    """The ``LoopState`` saved at ``path``; restores torch's RNG states. A checkpoint of another
    run (method, config, partition, model, options) is a one-line ValueError."""
    doc = load_checkpoint_document(path, device)
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"checkpoint {path} is not a format-{CHECKPOINT_FORMAT} loop checkpoint; delete it to start over")
    if doc["fingerprint"] != fingerprint:
        raise ValueError(f"checkpoint {path} belongs to another run (method, config, partition, model or "
                         "options differ); resume with the same settings or delete it")
    torch.set_rng_state(doc["torch_rng"].cpu())
    if doc["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in doc["cuda_rng"]])
    server = ServerState(**doc["server"])
    transfers = tuple(Transfer(*row) for row in doc["transfers"])
    return LoopState(doc["round"], server, doc["memory"], transfers, tuple(doc["history"]), doc["samples"],
                     doc.get("clients", {}))

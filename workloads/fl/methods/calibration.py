"""What every classifier calibration (FFC, CCVR) answers about itself.

After federated training every client downloads the final feature extractor, computes statistics
of its local features and uploads them once; the server turns them into a new classifier. A
calibration declares:

* ``knobs``: its own hyper-parameters (``workloads.fl.knob``);
* ``trained_with``: the training method Fig. 5 (d) of SphereFed (Dong et al., ECCV 2022) prices it
  after (CCVR on FedAvg's model, FFC on SphereFed's);
* ``single_class_batches``: whether its statistics need batches that each hold one class;
* ``statistics(feature_dim, num_classes, hp)``: name -> (shape, dtype) of what one client uploads:
  the ledger's closed form charges it (``upload_bytes``) and the pricing builds the server's inputs
  from it;
* ``server_work(...)``: the server's work as the pricing captures it (``ServerWork``): by default
  one capture of ``server_calibrate`` over K clients' statistics; a calibration whose server runs
  a long loop of identical steps (CCVR's re-training) declares that loop so it is priced from two
  captures instead of thousands;

and does ``client_batches``, ``client_statistics`` and ``server_calibrate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from workloads.fl.knob import Knob

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams

Shapes = dict[str, tuple[tuple[int, ...], torch.dtype]]


@dataclass(frozen=True)
class ServerWork:
    """A piece of a calibration's server work for the pricing: ``call(k)`` gives (fn, args, kwargs)
    on ``meta`` tensors that run k steps of a loop of ``steps`` steps, identical from step
    ``steady`` on; it costs cost(steady) + (steps - steady) (cost(steady + 1) - cost(steady))
    (``workloads.cost.calibration.extrapolate``). A single call: ``steps = steady = 1``."""

    call: Callable[[int], tuple[Callable, tuple, dict]]
    steps: int = 1
    steady: int = 1


def meta_tensor(shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


class Calibration:
    knobs: tuple[Knob, ...] = ()
    trained_with = "fedavg"
    single_class_batches = False

    def statistics(self, *, feature_dim: int, num_classes: int, hp: Hparams) -> Shapes:
        raise NotImplementedError

    def upload_bytes(self, *, feature_dim: int, num_classes: int, hp: Hparams) -> int:
        """Bytes one client uploads: numel x itemsize of each of its ``statistics``."""
        shapes = self.statistics(feature_dim=feature_dim, num_classes=num_classes, hp=hp)
        return sum(math.prod(shape) * dtype.itemsize for shape, dtype in shapes.values())

    def meta_statistics(self, *, feature_dim: int, num_classes: int, hp: Hparams) -> dict[str, torch.Tensor]:
        """One client's ``statistics`` as ``meta`` tensors (shapes only, for the pricing)."""
        shapes = self.statistics(feature_dim=feature_dim, num_classes=num_classes, hp=hp)
        return {name: meta_tensor(shape, dtype) for name, (shape, dtype) in shapes.items()}

    def client_batches(self, x, y, batch_size: int):
        """Consecutive batches of the client's samples in their order."""
        return ((x[s:s + batch_size], y[s:s + batch_size]) for s in range(0, len(y), batch_size))

    def client_statistics(self, model, batches, *, num_classes: int, hp: Hparams) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def server_calibrate(self, stats, *, classifier_weight, loss_fn=None, hp: Hparams, generator=None):
        raise NotImplementedError

    def server_work(self, *, feature_dim: int, num_classes: int, num_clients: int, hp: Hparams,
                    loss_fn: Callable[..., Any]) -> tuple[ServerWork, ...]:
        """``server_calibrate`` over ``num_clients`` clients' statistics, captured once."""
        stats = [self.meta_statistics(feature_dim=feature_dim, num_classes=num_classes, hp=hp)
                 for _ in range(num_clients)]
        weight = meta_tensor((num_classes, feature_dim))
        return (ServerWork(lambda k: (self.server_calibrate, (stats,), {"classifier_weight": weight, "hp": hp})),)

"""Know before you wait: a run's projected local-training time, from a few timed steps of a fresh
model in the way the run will train its clients (``workloads.fl.ways.choose``, the run's own
chooser: a run that would fall back is timed as it will train).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from workloads.fl.execution import DeviceData, Execution
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.methods import MethodConfig
from workloads.fl.schedule import clients_per_round, planned_samples
from workloads.fl.setup import build_on_device
from workloads.fl.timing import Timed, step_draws_global
from workloads.fl.ways import Probe, choose


@dataclass(frozen=True)
class Forecast:
    """The projected wall time of a run's local training, from a few timed steps."""

    method: str
    samples: int  # local training samples of the whole run (``planned_samples``)
    samples_per_s: float  # measured on FORECAST_STEPS steps of a fresh model, in the way the run trains
    device: str
    mode: str = ""  # how the timed steps ran where not one client after another ("2 clients at once on threads")

    @property
    def wall_s(self) -> float:
        return self.samples / self.samples_per_s

    def line(self) -> str:
        return (f"{self.method}: projected local training {duration_text(self.wall_s)} ({self.samples:,} samples "
                f"at {self.samples_per_s:,.0f} samples/s on {self.device}{', ' + self.mode if self.mode else ''}; "
                "evaluation not included)")


def forecast(method: MethodConfig, *, model_fn: Callable[[], nn.Module], train, parts: Sequence[np.ndarray],
             cfg: FLConfig, hp: Hparams, execution: Execution = Execution(),
             arrivals: Sequence[Sequence[int]] | None = None) -> Forecast:
    """Time ``FORECAST_STEPS`` local steps (after one warm-up step, where ``compile`` compiles) of
    the model ``loop.train`` would build, on the first client's first batch, and project the local
    training of the whole run (``arrivals``: the clients each round trains where a participation
    plan gives them, as ``RunPlan.arrivals`` holds them). Touches no state of a later ``loop.train`` (it re-seeds).

    The steps run in the way the run will train (``ways.choose``, the run's chooser, and that
    way's ``rate``): together, G copies of that batch as one batched step, G a round's clients;
    on threads, that many clients' steps at once, at most a round's clients; recorded, the
    replayed step after its recording; a run that would fall back is timed as it will train."""
    device = execution.torch_device
    model = build_on_device(method, model_fn, cfg.seed, execution)
    if execution.compile:
        model.compile()
    model.train()
    idx = torch.as_tensor(np.asarray(parts[0]), dtype=torch.long, device=device)
    timed = Timed(model, method, hp.with_knobs(method.knobs), DeviceData.from_dataset(train, device), idx, execution)
    choice = choose(Probe(method, execution, lambda: step_draws_global(timed)))
    rate, mode = choice.way.rate(timed, clients_per_round(len(parts), cfg.participation))
    return Forecast(method.name, planned_samples(parts, cfg, timed.hp, arrivals), rate, execution.device, mode)


def duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"

"""FedNova (Wang et al., NeurIPS 2020): normalized averaging. Each client also sends its
normalizer a_i (one float64), which for SGD with momentum rho over tau_i local steps is
a_i = sum_{t=1..tau_i} (1 - rho^t) / (1 - rho) (Wang et al., NeurIPS 2020, appendix); the server
rescales the averaged normalized update by tau_eff = sum_i p_i a_i. Buffers (BatchNorm statistics) are averaged as in
FedAvg."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from workloads.fl.aggregate import fednova_average, fednova_normalizer, weighted_average
from workloads.fl.methods.base import ClientUpdate, FedAvg, ServerState

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams


class FedNova(FedAvg):
    upload_extras = {"fednova_a": 8}  # a_i, one float64

    def aggregate(self, server: ServerState, updates: Sequence[ClientUpdate], hp: Hparams,
                  keys: Sequence[str]) -> ServerState:
        params = [k for k in updates[0].state if k in keys]
        buffers = [k for k in updates[0].state if k not in keys]
        triples = [(u.state, u.num_examples, fednova_normalizer(u.local_steps, hp.momentum))
                   for u in updates]
        new = fednova_average(server.weights, triples, params)
        if buffers:
            new.update(weighted_average([({k: u.state[k] for k in buffers}, u.num_examples)
                                         for u in updates]))
        return self._advance(server, new)

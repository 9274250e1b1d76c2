"""FedOpt with an SGD server optimizer (Reddi et al., ICLR 2021, Alg. 2) and FedAvgM (Hsu et al.
2019). Both apply server SGD with heavy-ball momentum to the pseudo-gradient
Delta = w_t - avg_k(w_k); they are the same update with different defaults: FedOpt uses
Tab. 16's server lr 1.0 and momentum 0.3, FedAvgM server lr 1.0 and momentum 0.9 (our choice, the
value most used after Hsu et al.'s sweep). Buffers (BatchNorm statistics) are averaged."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from workloads.fl.aggregate import pseudo_gradient, server_sgd_momentum, weighted_average
from workloads.fl.knob import fraction, positive
from workloads.fl.methods.base import ClientUpdate, FedAvg, ServerState

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams


class FedOpt(FedAvg):
    knobs = (positive("server_lr", 1.0, "FedOpt on-server SGD learning rate, Tab. 16"),
             fraction("server_momentum", 0.3, "FedOpt on-server momentum, Tab. 16"))

    def server_momentum(self, hp: Hparams) -> float:
        return hp.server_momentum

    def aggregate(self, server: ServerState, updates: Sequence[ClientUpdate], hp: Hparams,
                  keys: Sequence[str]) -> ServerState:
        averaged = weighted_average([(u.state, u.num_examples) for u in updates])
        params = [k for k in averaged if k in keys]
        delta = pseudo_gradient(server.weights, averaged, params)
        new_w, new_m = server_sgd_momentum(server.weights, delta, server.momentum,
                                           lr=hp.server_lr, momentum=self.server_momentum(hp))
        new = {**averaged, **new_w}
        return self._advance(server, new, momentum=new_m)


class FedAvgM(FedOpt):
    knobs = (*FedOpt.knobs, fraction("avgm_momentum", 0.9, "FedAvgM server momentum: our choice (Hsu et al. "
                                      "sweep; 0.9 common)"))

    def server_momentum(self, hp: Hparams) -> float:
        return hp.avgm_momentum

"""FedBABU (Oh et al., ICLR 2022): the head keeps its random initialization and is frozen
(``requires_grad=False``) during federated training; only the body is trained and communicated.
We report the global model's accuracy with that head ("initial accuracy" in the paper), as
SphereFed's Tab. 2 does; the per-client fine-tuning for personalization is not part of this suite.
"""

from __future__ import annotations

from torch import nn

from workloads.fl.methods.base import FedAvg


class FedBABU(FedAvg):
    own_head = True  # its random frozen head: not SphereFed's

    def prepare_model(self, model: nn.Module, *, seed: int) -> nn.Module:
        model.classifier.weight.requires_grad_(False)
        return model

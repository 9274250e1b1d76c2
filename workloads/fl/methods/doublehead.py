"""Double head + gradual sharing (Li et al., "More Industry-friendly: Federated Learning with High
Efficient Design", Algorithms 1 and 2).

Algorithm 1 (double head): besides the shared global head (``classifier``) each client owns a
local head (``local_classifier``, same shape) that is never sent. Both heads read the same
features; the local loss is the sum of the two heads' losses (the paper writes one loss
l(w'; D_k) over the whole model; summing the heads is our reading). The paper predicts with the
argmax over both heads' softmax outputs (its Eq. 3); ``double_head_predict`` implements that for a
client model. The server has no local head, so the global model's accuracy on the global test set
(what every method here reports) uses the global head.

Algorithm 2 (gradual sharing): in phase p only layers 1..p (shallow to deep) are shared; one more
layer is released every F = ``share_every_rounds`` rounds, p = min(1 + (t - 1) // F, L). Layers
not yet shared stay on the clients (each keeps its own copy between rounds) and at their
initial value on the server. A "layer" is a convolution or linear module together with the
normalization after it (the paper's layers are "conv + pooling" and fully connected layers), in
state_dict order, the global head being the last. F = 0 shares every layer from round 1 (plain
double head).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from workloads.fl.knob import non_negative
from workloads.fl.methods.base import FedAvg, frozen_keys, own_class_test, predictions

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams

LOCAL_HEAD = "local_classifier"


def sharing_phase(round: int, share_every_rounds: int, num_layers: int) -> int:
    """Alg. 2's phase p in round t (1-based): min(1 + (t - 1) // F, L); L when F = 0."""
    if share_every_rounds == 0:
        return num_layers
    return min(1 + (round - 1) // share_every_rounds, num_layers)


def double_head_predict(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Argmax over the concatenated softmax outputs of both heads, mod C (Li et al., "More
    Industry-friendly: Federated Learning with High Efficient Design", Eq. 3)."""
    z = model.features(x)
    probs = torch.cat([model.classifier(z).softmax(1), model.local_classifier(z).softmax(1)], 1)
    return probs.argmax(1) % model.classifier.out_features


@torch.no_grad()
def local_test_accuracy(model: nn.Module, weights: dict, local_states: dict, client_labels, test_x_of,
                        test_y: torch.Tensor, batch_size: int = 1024) -> float | None:
    """The local test mode (Li et al., "More Industry-friendly", Sec. 4.1, with its dispatch split:
    each client is tested on the test samples of its own classes): client k's model is the final
    global ``weights`` with its own never-shared parts ``local_states[k]`` (its local head and any
    layer not yet shared), it predicts by Eq. 3 (``double_head_predict``), and it is tested on the
    test samples whose class occurs in its training labels ``client_labels[k]``. Returns the mean
    over the clients that trained at least once (they own local parts); None if none did.
    ``test_x_of(idx)``: the test images ``idx`` as the model takes them."""
    accuracies = []
    for k, own in sorted(local_states.items()):
        idx = own_class_test(client_labels[k], test_y)
        if not len(idx):
            continue
        model.load_state_dict({**weights, **own})
        predicted = predictions(model, lambda i: double_head_predict(model, test_x_of(idx[i])), len(idx), idx.device,
                                batch_size)
        accuracies.append(int((predicted == test_y[idx]).sum()) / len(idx))
    return sum(accuracies) / len(accuracies) if accuracies else None


class DoubleHead(FedAvg):
    knobs = (non_negative("share_every_rounds", 0, "gradual sharing F (Li et al., \"More Industry-friendly: "
                          "Federated Learning with High Efficient Design\", Alg. 2); 0 = share everything from "
                          "round 1"),)
    own_head = True  # two heads of its own
    calibratable = False  # calibrating the global head of double head is not supported
    local_modules = (LOCAL_HEAD,)
    clients_together = True  # its step hooks batch over clients (tests/test_clients_together.py)

    def local_test_accuracy(self, model, weights, local_states, client_labels, test_x_of, test_y):
        """Li et al.'s local test mode (``local_test_accuracy`` above)."""
        return local_test_accuracy(model, weights, local_states, client_labels, test_x_of, test_y)

    def prepare_model(self, model: nn.Module, *, seed: int) -> nn.Module:
        head = model.classifier
        local = nn.Linear(head.in_features, head.out_features, bias=head.bias is not None)
        gen = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():  # same init rule as nn.Linear (kaiming uniform, a = sqrt(5))
            bound = 1.0 / head.in_features ** 0.5
            local.weight.copy_(torch.empty_like(local.weight).uniform_(-bound, bound, generator=gen))
            if local.bias is not None:
                local.bias.copy_(torch.empty_like(local.bias).uniform_(-bound, bound, generator=gen))
        model.add_module(LOCAL_HEAD, local.to(head.weight.device))
        return model

    def head_outputs(self, model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
        z = model.features(x)
        return [model.classifier(z), model.local_classifier(z)]

    def shared_layer_count(self, round: int, hp: Hparams, num_layers: int) -> int:
        """Alg. 2: layers 1..p(t) are shared in round t (``sharing_phase``)."""
        return sharing_phase(round, hp.share_every_rounds, num_layers)

    def shared_keys(self, model: nn.Module, round: int, hp: Hparams) -> list[str]:
        layers = self.sharing_layers(model)
        phase = self.shared_layer_count(round, hp, len(layers))
        frozen = frozen_keys(model)
        return [k for layer in layers[:phase] for k in layer if k not in frozen]

"""FedAvg, the base every other algorithm derives from by overriding only what differs.

An algorithm answers every question the suite asks about it, so that the federated loop
(``workloads/fl/loop.py``), the communication ledger and its closed form (``workloads/fl/comm.py``),
the pricing (``workloads/cost``) and the Flower app (``workloads/flower``) name no method. What it
declares:

* ``knobs``: its own hyper-parameters, each with default, bounds and source (``workloads.fl.knob``);
* ``upload_extras``: what each client uploads each round beside the model and its sample count,
  name -> bytes (FedNova: its normalizer a_i, one float64); the ledger and the closed form charge it;
* ``extra_downloads(round)`` / ``extra_uploads(round)``: the ledger groups of what the server sends
  each sampled client beside the model (FedCos's d_t, SCAFFOLD's c) and what each client sends back
  beside it (SCAFFOLD's Delta c_i), each group the size of the trainable shared parameters; the
  ledger and the closed form charge them;
* ``anchored``: the method reads w_t during or after local training (the client keeps a copy);
* ``own_head``: it builds its own head, so it does not compose with SphereFed's fixed one;
  ``calibratable``: a calibration may replace its global head after training;
* ``local_modules``: top-level modules each client keeps and never sends (double head's local head);
* ``clients_together``: its step hooks (``STEP_HOOKS``) batch over a round's clients under
  ``torch.func.vmap`` (``workloads.fl.together``); a class that overrides one of them without
  declaring it again is trained one client after another (``trains_together``).

and what it does:

* ``prepare_model(model, seed)``: changes to the freshly built model (FedBABU freezes its head,
  double head adds a local head). Frozen parameters use ``requires_grad=False``.
* ``batch_loss(model, x, y, outputs, loss_fn, ctx, hp)``: the loss of one mini-batch from its
  ``head_outputs`` (the loss hook; default: ``loss_fn`` on every head's logits; MOON adds its
  contrastive term);
  ``penalty(model, ctx, hp)``: extra terms of the local loss that read the parameters only
  (FedProx, FedCos, SCAFFOLD's correction, FedDyn's regularizer); ``None`` for none. Both run
  on the ``meta`` device: tensor ops only, no ``.item()``, no data-dependent branches.
* ``head_outputs(model, x)``: the forward pass whose outputs ``batch_loss`` takes: the logits of
  each head (double head: two), and whatever else its loss reads (MOON: the representation).
* ``initial_client_state(model, hp)``: what a client keeps between rounds, before its first round
  (``model`` holds the w_t it just downloaded; default: nothing); ``after_training(model, ctx,
  steps, hp)``: the hook after local training, returning the client's new state and its
  ``extra_uploads`` (SCAFFOLD's c_i+ and Delta c_i, FedDyn's gradient term, MOON's previous model).
  The client's state lives in its device memory during training: a step that reads it is priced
  with it (``workloads.cost``). ``after_training`` is priced too, so it also runs on ``meta``.
* ``server_extras(server, keys, round, hp)``: the tensors of ``extra_downloads(round)``, from the
  server's state (``ServerState.extras``: SCAFFOLD's c, FedDyn's h, whatever ``aggregate`` keeps).
* ``shared_keys(model, round, hp)``: the state_dict keys the server sends and the clients send back
  this round (default: every key except frozen parameters, which clients rebuild from the seed);
  ``sharing_layers(model)`` / ``shared_layer_count``: the layers, shallow to deep, and how many a
  round sends (default: all), which the closed form (``workloads.fl.comm``) counts too.
* ``aggregate(server, updates, hp, keys)``: the new global state from the client updates;
* ``local_test_accuracy(...)``: the local test mode's accuracy (each client's model on its own
  classes): the global model's for a method without local parts, the double head's own.

FedAvg (McMahan et al. 2017): weighted average of the client states by sample count.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping, Sequence

import torch
from torch import nn

from workloads.fl.aggregate import weighted_average
from workloads.fl.knob import Knob

if TYPE_CHECKING:  # the hyper-parameters' defaults come from the methods' knobs: no import at run time
    from workloads.fl.hparams import Hparams

TensorDict = dict[str, torch.Tensor]


def own_class_test(labels, test_y: torch.Tensor) -> torch.Tensor:
    """The indices of the test samples whose class occurs in a client's training ``labels`` (the
    local test mode's dispatch split, Li et al., "More Industry-friendly", Sec. 4.1)."""
    classes = torch.as_tensor(sorted({int(c) for c in labels}), device=test_y.device)
    return torch.nonzero(torch.isin(test_y, classes)).flatten()


@torch.no_grad()
def predictions(model: nn.Module, predict, n: int, device: torch.device | None = None,
                batch_size: int = 1024) -> torch.Tensor:
    """``predict(idx)`` over the indices 0 .. n - 1 (on ``device``) in batches, ``model`` in eval mode meanwhile."""
    was_training = model.training
    model.eval()
    order = torch.arange(n, device=device)
    out = torch.cat([predict(order[s:s + batch_size]) for s in range(0, n, batch_size)]) if n else torch.empty(0)
    model.train(was_training)
    return out


@dataclass(frozen=True)
class RoundContext:
    """What a client knows at the start of its local training."""

    round: int  # 1-based
    global_params: Mapping[str, torch.Tensor]  # the state as downloaded (w_t; anchored methods only)
    received: Mapping[str, Mapping[str, torch.Tensor]] = field(default_factory=dict)  # extra_downloads, by group
    state: Mapping[str, torch.Tensor] = field(default_factory=dict)  # the client's own state (initial_client_state)
    lr: float = 0.0  # this round's local learning rate
    width: float = 1.0  # the client's largest submodel width (a fleet class's; ``workloads.fl.width``)
    draws: torch.Generator | None = None  # the client's own generator this round (FjORD's per-step widths)


@dataclass(frozen=True)
class ClientUpdate:
    """What one client sends back after local training."""

    client: int
    state: TensorDict  # the shared keys after training
    num_examples: int
    local_steps: int
    extras: Mapping[str, TensorDict] = field(default_factory=dict)  # extra_uploads, by group
    staleness: int = 0  # server steps taken since its client started (FedBuff's clock; 0 in synchronous rounds)


@dataclass(frozen=True)
class ServerState:
    """The server's memory between rounds (a new object every round)."""

    weights: TensorDict  # the full global state_dict
    prev_weights: TensorDict | None = None  # w_{t-1} (FedCos's direction)
    momentum: TensorDict | None = None  # server momentum buffer (FedOpt, FedAvgM)
    extras: dict[str, TensorDict] = field(default_factory=dict)  # a method's own server state (SCAFFOLD's c)
    num_clients: int = 1  # K, the clients of the federation (SCAFFOLD's and FedDyn's server rules divide by it)


def trainable_keys(model: nn.Module) -> list[str]:
    """Names of parameters with ``requires_grad`` (state_dict spelling)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def frozen_keys(model: nn.Module) -> set[str]:
    return {name for name, p in model.named_parameters() if not p.requires_grad}


def model_layers(model: nn.Module, exclude: Sequence[str] = ()) -> list[list[str]]:
    """State_dict keys grouped into layers, shallow to deep, the top-level modules ``exclude`` left
    out: a new layer starts at each convolution or linear module; normalization state joins the
    layer before it."""
    layers: list[list[str]] = []
    owner_seen = None
    for key in model.state_dict():
        owner = key.rsplit(".", 1)[0]
        if owner.split(".")[0] in exclude:
            continue
        starts = isinstance(model.get_submodule(owner), (nn.modules.conv._ConvNd, nn.Linear))
        if not layers or (starts and owner != owner_seen):
            layers.append([])
        layers[-1].append(key)
        owner_seen = owner
    return layers


NOT_IN_STEP = frozenset({
    "knobs", "upload_extras", "own_head", "calibratable",  # parsing, ledger
    "clients_together", "recordable",  # how the loop schedules the step, not the step
    "sharing_layers", "shared_layer_count", "shared_keys", "extra_uploads",  # what is sent, not computed
    "server_extras", "aggregate", "_advance", "local_test_accuracy",  # the server; evaluation
    "after_training",  # after the last step: priced on its own (``workloads.cost.rounds``)
    "sized_to_device", "rates", "width_mix", "payload",  # which width a client trains and what it sends
    "buffered", "server_view",  # which model a client starts from (FedBuff's clock)
})
"""The members of ``FedAvg`` that never change the program of a client's local step. Every other
member, a method's own helpers included, is part of ``step_identity``: a new hook is in the
capture key unless it is listed here."""


def step_identity(algorithm: "FedAvg") -> tuple:
    """What decides the program of ``algorithm``'s local step: every member of its class but
    ``NOT_IN_STEP`` (``dir``: inherited and own), each as the object it resolves to. Two algorithms
    with equal identities run the same step (FedAvg, FedNova); any override of a step hook, or any
    helper of its own, gives a method its own (``workloads.cost.rounds`` keys its captures by it)."""
    cls = type(algorithm)
    members = []
    for name in sorted(dir(cls)):
        if name.startswith("__") or name in NOT_IN_STEP:
            continue
        value = getattr(cls, name)
        try:
            hash(value)
        except TypeError:
            value = repr(value)
        members.append((name, value))
    return tuple(members)


STEP_HOOKS = ("head_outputs", "batch_loss", "penalty")
"""The hooks a local step runs (``workloads.fl.local.ClientTrainer.step``)."""


def trains_together(algorithm: "FedAvg") -> bool:
    """Whether ``algorithm``'s clients may be trained together (``workloads.fl.together``): the
    class that declares its ``clients_together`` says True, and no class below that one overrides
    a ``STEP_HOOKS`` member (a method of yours that changes its step says so itself)."""
    mro = type(algorithm).__mro__
    declaring = next(c for c in mro if "clients_together" in vars(c))
    defining = [next(c for c in mro if hook in vars(c)) for hook in STEP_HOOKS]
    return bool(declaring.clients_together) and all(issubclass(declaring, c) for c in defining)


class FedAvg:
    knobs: tuple[Knob, ...] = ()
    upload_extras: Mapping[str, int] = {}  # name -> bytes per client and round (read-only)
    anchored = False  # the penalty reads w_t (FedProx, FedCos): clients keep a copy of it
    own_head = False
    calibratable = True
    local_modules: tuple[str, ...] = ()
    clients_together = True  # its step hooks are tensor ops that vmap batches over clients
    recordable = True  # its step may be recorded once as a CUDA graph and replayed (--capture-step, workloads.fl.capture)
    sized_to_device = False  # trains a width-scaled submodel sized to each client's device (HeteroFL, FjORD)
    buffered = False  # aggregates buffered updates on a fleet's virtual clock (FedBuff; workloads.cost.buffered)

    def server_view(self, server: ServerState, round: int, staleness: int) -> ServerState:
        """The server state a client of round ``round`` starts from, ``staleness`` server steps
        old (FedBuff's clock): synchronous rounds have none."""
        return server

    def rates(self, hp: Hparams) -> tuple[float, ...]:
        """The submodel widths the method declares, widest first (a fleet class's ``width = "auto"``
        picks among them): FedAvg trains the full model only."""
        return (1.0,)

    def width_mix(self, width: float, hp: Hparams) -> tuple[tuple[float, float], ...]:
        """(width, probability) of the submodels a client of largest width ``width`` trains in its
        local steps, what the pricing weights each width's step by: FedAvg the full model always."""
        return ((1.0, 1.0),)

    def payload(self, model: nn.Module, tensors: TensorDict, ctx: RoundContext) -> TensorDict:
        """What of ``tensors`` (the shared state, down or up) travels between the server and a
        client with context ``ctx``: all of it (a width-scaled method: the client's held prefix)."""
        return tensors

    def sharing_layers(self, model: nn.Module) -> list[list[str]]:
        """The model's state_dict keys grouped into layers, shallow to deep, its ``local_modules`` left
        out (``model_layers``): the unit of ``shared_layer_count`` and of the closed form's
        ``layer_bytes`` (``workloads.fl.comm.closed_form_sizes``)."""
        return model_layers(model, exclude=self.local_modules)

    def shared_layer_count(self, round: int, hp: Hparams, num_layers: int) -> int:
        """How many of the model's sharing layers (shallow to deep) round ``round`` sends: all."""
        return num_layers

    def prepare_model(self, model: nn.Module, *, seed: int) -> nn.Module:
        return model

    def extra_downloads(self, round: int) -> tuple[str, ...]:
        """The ledger groups the server sends each sampled client in round ``round`` beside the
        model, each the size of the trainable shared parameters (``server_extras`` makes them)."""
        return ()

    def extra_uploads(self, round: int) -> tuple[str, ...]:
        """The ledger groups each client sends back beside the model, each the size of the
        trainable shared parameters (``after_training`` makes them)."""
        return ()

    def server_extras(self, server: ServerState, keys: Sequence[str], round: int, hp: Hparams) -> dict[str, TensorDict]:
        """The tensors of ``extra_downloads(round)`` by group, over the trainable shared ``keys``."""
        return {}

    def initial_client_state(self, model: nn.Module, hp: Hparams) -> TensorDict:
        """What a client keeps between rounds before its first round; ``model`` holds w_t."""
        return {}

    def after_training(self, model: nn.Module, ctx: RoundContext, steps: int, hp: Hparams
                       ) -> tuple[TensorDict, dict[str, TensorDict]]:
        """After ``steps`` local steps: (the client's new state, its ``extra_uploads`` by group)."""
        return {}, {}

    def batch_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, outputs: Sequence[torch.Tensor],
                   loss_fn, ctx: RoundContext, hp: Hparams) -> torch.Tensor:
        """The loss of one mini-batch (before ``penalty``) from its ``head_outputs``: ``loss_fn``
        summed over the heads."""
        loss = loss_fn(outputs[0], y)
        for extra in outputs[1:]:
            loss = loss + loss_fn(extra, y)
        return loss

    def penalty(self, model: nn.Module, ctx: RoundContext, hp: Hparams) -> torch.Tensor | None:
        return None

    def head_outputs(self, model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
        """The logits the local loss is computed on (one per head; double head has two)."""
        return [model(x)]

    def shared_keys(self, model: nn.Module, round: int, hp: Hparams) -> list[str]:
        frozen = frozen_keys(model)
        return [k for k in model.state_dict() if k not in frozen]

    def aggregate(self, server: ServerState, updates: Sequence[ClientUpdate], hp: Hparams,
                  keys: Sequence[str]) -> ServerState:
        averaged = weighted_average([(u.state, u.num_examples) for u in updates])
        return self._advance(server, averaged)

    def local_test_accuracy(self, model: nn.Module, weights: Mapping[str, torch.Tensor],
                            local_states: Mapping[int, Mapping[str, torch.Tensor]], client_labels, test_x_of,
                            test_y: torch.Tensor) -> float | None:
        """The local test mode (Li et al., "More Industry-friendly: Federated Learning with High
        Efficient Design", Sec. 4.1: each client tested on the test samples of its own classes):
        ``weights`` the final global state, ``local_states[k]`` client k's never-sent parts,
        ``client_labels[k]`` its training labels, ``test_x_of(idx)`` the test inputs ``idx``. A
        method without local parts has one model for every client, the global one: its accuracy on
        each client's own classes, averaged over the clients that hold data (what Li et al. score
        FedAvg by beside the double head); a method with local parts overrides it. None: no client
        holds data."""
        model.load_state_dict(dict(weights))
        correct = predictions(model, lambda idx: model(test_x_of(idx)).argmax(1), len(test_y), test_y.device) == test_y
        per_client = [correct[own_class_test(labels, test_y)] for labels in client_labels if len(labels)]
        accuracies = [int(c.sum()) / len(c) for c in per_client if len(c)]
        return sum(accuracies) / len(accuracies) if accuracies else None

    @staticmethod
    def _advance(server: ServerState, new_values: Mapping[str, torch.Tensor], **changes) -> ServerState:
        weights = {**server.weights, **new_values}
        return replace(server, weights=weights, prev_weights=server.weights, **changes)

"""The one local step (workloads/fl/local.py, issue 52): ``ClientTrainer.step`` (the mini-batch loss
``Objective.batch_loss`` and the SGD update ``sgd_update`` applied by ``LocalSGD``) captures to the
very trace of a plain training step written out by hand with ``torch.optim.SGD`` (the step as it
was before the two were shared): the same ops, phases, allocations and frees, so the same priced
peak memory. The plain step holds its outputs, its penalty and its loss until its end; the shared
step holds them by its ``BatchLoss``: dropping the penalty there frees it one op early (a 4-byte
0-dim tensor: FedProx's, FedDyn's, SCAFFOLD's captured traces then differ; it happened once)."""

import pytest
import torch

from accel_sim.trace_io import header_to_dict, op_to_dict
from workloads.capture import HeldStep, capture_step
from workloads.fl.hparams import Hparams
from workloads.fl.local import ClientContext, LocalSGD, client_trainer, example_received, prepare_model
from workloads.fl.methods import parse_method
from workloads.models import build_model

HP = Hparams(lr=0.1, batch_size=8)  # momentum 0.9 and weight decay 5e-4 (SphereFed Tab. 16's defaults)


def plain_step(trainer):
    """A training loop's step, written out: zero_grad, forward, the method's loss and penalty,
    backward, ``torch.optim.SGD``; every local lives to the step's end."""
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=trainer.ctx.lr, momentum=trainer.hp.momentum,
                                weight_decay=trainer.hp.weight_decay, foreach=False)
    algo, model, ctx, hp = trainer.algorithm, trainer.model, trainer.ctx, trainer.hp

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        outputs = algo.head_outputs(model, x)
        loss = algo.batch_loss(model, x, y, outputs, trainer.loss_fn, ctx, hp)
        penalty = algo.penalty(model, ctx, hp)
        if penalty is not None:
            loss = loss + penalty
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step


def traces(name):
    method = parse_method(name)
    hp = HP.with_knobs(method.knobs)
    model = prepare_model(build_model("convnet", num_classes=10, image_size=16, head=method.head),
                          method, seed=0)

    def make(shared: bool):
        def make_step(step_model):
            trainer = client_trainer(step_model, step_model.state_dict(), hp, method,
                                     ClientContext(round=2, received=example_received(step_model, method, hp, 2)))
            return HeldStep(trainer.step if shared else plain_step(trainer), trainer.held())
        return make_step

    x, y = torch.zeros(8, 3, 16, 16), torch.zeros(8, dtype=torch.long)
    return [capture_step(make(shared), model, x, y, method=name) for shared in (True, False)]


@pytest.mark.parametrize("name", ["fedavg", "spherefed", "fedprox", "feddyn", "scaffold", "moon"])
def test_the_shared_step_captures_as_the_plain_step(name):
    shared, plain = traces(name)
    assert [op_to_dict(op) for op in shared.ops] == [op_to_dict(op) for op in plain.ops]
    assert header_to_dict(shared.header, len(shared.ops)) == header_to_dict(plain.header, len(plain.ops))


def test_local_sgd_is_torchs_sgd_bit_for_bit():
    # five steps with momentum 0.9 and weight decay 0.1 on random gradients: the same weights and buffers
    torch.manual_seed(0)
    ours, theirs = (torch.nn.Parameter(torch.randn(4, 3)) for _ in range(2))
    theirs.data.copy_(ours.data)
    a = LocalSGD([ours], lr=0.3, momentum=0.9, weight_decay=0.1)
    b = torch.optim.SGD([theirs], lr=0.3, momentum=0.9, weight_decay=0.1, foreach=False)
    for _ in range(5):
        g = torch.randn(4, 3)
        ours.grad, theirs.grad = g.clone(), g.clone()
        a.step()
        b.step()
    assert torch.equal(ours, theirs)
    assert torch.equal(a.state[ours]["momentum_buffer"], b.state[theirs]["momentum_buffer"])

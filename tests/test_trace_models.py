"""The paper's five models, traced at batch 2 on meta: GEMM MACs against independent counts, per
layer, and SphereFed's frozen classifier against FedAvg's trainable one."""

import copy

import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from accel_sim.trace_schema import GemmWork
from workloads.models import MODELS
from workloads.cost.step import method_setup
from workloads.capture import capture_training_step, macs

BATCH, CLASSES, IMAGE = 2, 10, 32


@pytest.fixture(scope="module")
def runs():
    """(model name, method) -> (meta model, loss_fn, trace), built once for the module."""
    cache = {}

    def get(name, method):
        if (name, method) not in cache:
            torch.manual_seed(0)
            model, loss_fn = method_setup(method, name, num_classes=CLASSES, image_size=IMAGE, norm="bn")
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-5)
            x, y = torch.zeros(BATCH, 3, IMAGE, IMAGE), torch.arange(BATCH) % CLASSES
            trace = capture_training_step(model, x, y, loss_fn=loss_fn, optimizer=opt, model_name=name, method=method)
            cache[name, method] = (model, loss_fn, trace)
        return cache[name, method]

    return get


def hand_macs(model: nn.Module, loss_fn) -> dict[str, tuple[int, int]]:
    """Module name -> (forward MACs, backward MACs) of every conv and linear layer, from each
    layer's input/output shapes (recorded by forward hooks on a meta copy):
    conv ``B.P.Q.C_out.(C_in/g).R.S`` per product, linear ``B.in.out``; backward = dX (only if the
    layer's input requires grad) + dW (only if its weight does)."""
    model = copy.deepcopy(model).to("meta")
    seen = {}

    def hook(name):
        def record(mod, inputs, output):
            x = inputs[0]
            if isinstance(mod, nn.Conv2d):
                b, c_out, p, q = output.shape
                per = b * p * q * c_out * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
            else:
                per = x.shape[0] * mod.in_features * mod.out_features
            bwd = per * (int(x.requires_grad) + int(mod.weight.requires_grad))
            seen[name] = (per, bwd)

        return record

    for name, mod in model.named_modules():
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            mod.register_forward_hook(hook(name))
    model(torch.zeros(BATCH, 3, IMAGE, IMAGE, device="meta"))
    return seen


def flop_counter_macs(model: nn.Module, loss_fn) -> tuple[int, int]:
    """(forward, backward) MACs by torch's FlopCounterMode on a meta copy (FLOPs = 2 MACs)."""
    model = copy.deepcopy(model).to("meta")
    x = torch.zeros(BATCH, 3, IMAGE, IMAGE, device="meta")
    y = torch.arange(BATCH, device="meta") % CLASSES
    with FlopCounterMode(display=False) as fwd:
        loss = loss_fn(model(x), y)
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    return fwd.get_total_flops() // 2, bwd.get_total_flops() // 2


def _grouped(model):
    return any(isinstance(m, nn.Conv2d) and m.groups > 1 for m in model.modules())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("method", ["fedavg", "spherefed"])
def test_gemm_macs_equal_independent_counts(runs, name, method):
    model, loss_fn, trace = runs(name, method)
    per_layer = hand_macs(model, loss_fn)
    # per layer: forward attribution by module hooks, backward by autograd sequence numbers
    for layer, (fwd, bwd) in per_layer.items():
        assert macs(trace, phase="fwd", layer=layer) == fwd, layer
        assert macs(trace, phase="bwd", layer=layer) == bwd, layer
    total_fwd = sum(f for f, _ in per_layer.values())
    total_bwd = sum(b for _, b in per_layer.values())
    assert (macs(trace, phase="fwd"), macs(trace, phase="bwd")) == (total_fwd, total_bwd)
    assert macs(trace, phase="update") == 0
    fc_fwd, fc_bwd = flop_counter_macs(model, loss_fn)
    assert macs(trace, phase="fwd") == fc_fwd  # FlopCounterMode's forward is right for groups too
    if _grouped(model):
        # FlopCounterMode counts a grouped conv's weight gradient `groups` times over (torch 2.13)
        assert fc_bwd > macs(trace, phase="bwd")
    else:
        assert macs(trace, phase="bwd") == fc_bwd
    assert not trace.unsupported_ops()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_spherefed_freezes_the_classifier(runs, name):
    model, _, fedavg = runs(name, "fedavg")
    _, _, sphere = runs(name, "spherefed")
    l, c, b = model.feature_dim, CLASSES, BATCH

    def classifier_gemms(trace, role):
        return [o.work for o in trace.ops if o.layer == "classifier" and isinstance(o.work, GemmWork) and o.work.role == role]

    assert classifier_gemms(fedavg, "dw") == [GemmWork(c, l, b, 1, "dw")]
    assert classifier_gemms(sphere, "dw") == []
    # the input gradient dZ = dY . W is still needed: [B, C] x [C, l]
    assert classifier_gemms(sphere, "dx") == classifier_gemms(fedavg, "dx") == [GemmWork(b, l, c, 1, "dx")]
    assert any(o.phase == "update" and o.layer == "classifier" for o in fedavg.ops)
    assert not any(o.phase == "update" and o.layer == "classifier" for o in sphere.ops)
    assert macs(fedavg, phase="bwd") - macs(sphere, phase="bwd") == l * c * b
    assert macs(fedavg, phase="fwd") == macs(sphere, phase="fwd")
    frozen = [s for s in sphere.header.storages if s.kind == "gradient" and not s.live_at_start]
    trainable = [s for s in fedavg.header.storages if s.kind == "gradient" and not s.live_at_start]
    assert sum(s.bytes for s in trainable) - sum(s.bytes for s in frozen) == l * c * 4  # float32 dW


def test_mobilenetv2_depthwise_stays_grouped(runs):
    model, _, trace = runs("mobilenetv2", "fedavg")
    depthwise = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.groups > 1]
    convs = [o.work for o in trace.ops if o.aten == "aten.convolution.default" and o.work.groups > 1]
    assert len(convs) == len(depthwise) > 0
    assert all(w.n == 1 and w.k == 9 for w in convs)  # one output channel, 3x3 taps per group

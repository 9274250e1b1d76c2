"""Width-scaled submodels: what a client of width r holds, trains and sends (HeteroFL, FjORD).

A submodel of rate r keeps the first ``kept(C, r) = ceil(r C)`` channels of every hidden layer:
the output channels of every convolution and linear layer but the model's last (its classes), the
input channels of every one but the first (the image's channels), and the features of every norm
layer (Diao, Ding and Tarokh, "HeteroFL: Computation and Communication Efficient Federated Learning
for Heterogeneous Clients", ICLR 2021, Sec. 3; Flower's HeteroFL baseline,
``baselines/heterofl/heterofl/models.py``: ``hidden_size = ceil(model_rate * x)``). A linear layer
fed by a flattened convolution map (C channels of H x W) keeps the features of the kept channels,
``kept(C, r) H W`` (channel-major order: a prefix). Ordered dropout (Horvath et al., "FjORD: Fair
and Accurate Federated Learning under heterogeneous targets with Ordered Dropout", NeurIPS 2021,
Sec. 3) keeps the same prefix.

Two forms of one submodel:

* ``masked(model, rate)``: the full model trains it. Each hidden layer's output channels past the
  kept prefix are multiplied by zero (after the layer and after its norm), so they feed nothing
  downstream and no kept entry depends on an entry outside the prefix: the kept entries follow the
  submodel's arithmetic (``tests/test_width.py`` compares the two) and the others get no gradient.
  The loop trains one client model whatever the client's width, and the method's hooks do the rest.
* ``submodel(model, rate)``: the sliced model itself, narrower tensors, which the pricing captures
  (a width-r step costs the width-r step's MACs and memory, not the full model's).

The scaler (HeteroFL Sec. 3, its "Scaler" paragraph: the output of each scaled layer divided by r during
training only; Flower's baseline ``_Scaler``: ``inp / rate if self.training``) is ``scale=True``.
Only models of convolutions, linear layers, batch norm and activations with f(0) = 0 (ReLU and
its kin, pooling) are scaled: a group norm mixes kept and dropped channels, which is refused.
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Iterator, Mapping, Sequence

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

FULL_CHANNELS = "full_channels"  # attribute ``submodel`` sets on each sliced module: its channels at width 1
GEMMS = (_ConvNd, nn.Linear)


def kept(channels: int, rate: float) -> int:
    """``ceil(rate x channels)``, at least 1 (the product rounded to 9 digits first, so that
    0.1 x 30 keeps 3, not 4)."""
    return max(1, math.ceil(round(rate * channels, 9)))


def check_rate(rate: float, where: str) -> float:
    """A width in (0, 1]; one-line ValueError naming ``where`` otherwise."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
        raise ValueError(f"{where}: width {rate!r} must be a number in (0, 1] (1: the full model)")
    return float(rate)


def _outputs(module: nn.Module) -> int:
    return module.out_channels if isinstance(module, _ConvNd) else module.out_features


def _inputs(module: nn.Module) -> int:
    return module.in_channels if isinstance(module, _ConvNd) else module.in_features


def _full(module: nn.Module, channels: int) -> int:
    return getattr(module, FULL_CHANNELS, channels)


def held_shapes(model: nn.Module, rate: float) -> dict[str, tuple[int, ...]]:
    """Per state_dict key of ``model`` (at full width), the shape of the prefix a client of width
    ``rate`` holds (module doc): every key, its full shape at rate 1."""
    gemms = [name for name, m in model.named_modules() if isinstance(m, GEMMS)]
    if not gemms:
        raise ValueError("a width-scaled model needs at least one convolution or linear layer")
    first, last = gemms[0], gemms[-1]
    shapes: dict[str, tuple[int, ...]] = {}
    previous = None  # output channels of the last GEMM seen (registration order)
    for name, module in model.named_modules():
        own = {f"{name}.{k}" if name else k: v for k, v in list(module.named_parameters(recurse=False))
               + list(module.named_buffers(recurse=False))}
        if isinstance(module, GEMMS):
            out_full, in_full = _outputs(module), _inputs(module)
            out = out_full if name == last else kept(out_full, rate)
            if name == first:
                inp = in_full
            elif isinstance(module, nn.Linear) and previous and in_full != previous and in_full % previous == 0:
                inp = kept(previous, rate) * (in_full // previous)  # a flattened C x H x W map
            else:
                inp = kept(in_full, rate)
            groups = getattr(module, "groups", 1)
            if groups not in (1, in_full) or (groups > 1 and groups != out_full):
                raise ValueError(f"{name}: a grouped convolution ({groups} groups, {in_full} -> {out_full}) "
                                 "is not width-scaled (only dense and depthwise ones)")
            per_group_in = 1 if groups > 1 else inp
            for key, tensor in own.items():
                shapes[key] = (out, per_group_in, *tensor.shape[2:]) if tensor.dim() > 1 else (out,)
            previous = out_full
        elif isinstance(module, _BatchNorm):
            for key, tensor in own.items():
                shapes[key] = (kept(module.num_features, rate),) if tensor.dim() else ()
        elif isinstance(module, (nn.GroupNorm, nn.LayerNorm)) and own and rate < 1:
            raise ValueError(f"{name}: {type(module).__name__} mixes kept and dropped channels; a width-scaled "
                             "model needs batch norm or none (--norm bn)")
        else:
            shapes.update({key: tuple(tensor.shape) for key, tensor in own.items()})
    return {key: shapes[key] for key in model.state_dict()}


def prefix(shape: Sequence[int]) -> tuple[slice, ...]:
    """The index of a tensor's leading ``shape`` prefix."""
    return tuple(slice(0, n) for n in shape)


def held(tensors: Mapping[str, torch.Tensor], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """Each tensor's held prefix (``held_shapes``): what a client of that width receives and sends."""
    return {key: t[prefix(shapes[key])] if tuple(t.shape) != shapes[key] else t for key, t in tensors.items()}


def _scaled_layers(model: nn.Module) -> Iterator[tuple[nn.Module, int, bool]]:
    """(module, its channels at width 1, whether it is a GEMM) of every layer whose outputs are
    hidden channels: every convolution and linear layer but the last, and every batch norm."""
    gemms = [m for m in model.modules() if isinstance(m, GEMMS)]
    for module in model.modules():
        if isinstance(module, GEMMS) and module is not gemms[-1]:
            yield module, _full(module, _outputs(module)), True
        elif isinstance(module, _BatchNorm):
            yield module, _full(module, module.num_features), False


@contextlib.contextmanager
def masked(model: nn.Module, rate: float, *, scale: bool = True) -> Iterator[nn.Module]:
    """``model``'s forward passes inside the block compute the width-``rate`` submodel (module doc):
    every hidden layer's output past its kept channels multiplied by zero, and with ``scale`` every
    scaled convolution's and linear layer's output divided by ``rate`` (HeteroFL's scaler, in
    training only). Rate 1 changes nothing (no hook is registered). On a sliced ``submodel`` every
    channel is kept, so only the scaler acts."""
    if rate >= 1.0:
        yield model
        return
    held_shapes(model, rate)  # refuses what cannot be scaled
    handles = []
    for module, full, gemm in _scaled_layers(model):
        channels = _outputs(module) if gemm else module.num_features
        keep = kept(full, rate)
        factor = 1.0 / rate if gemm and scale else 1.0
        if keep >= channels and factor == 1.0:
            continue
        handles.append(module.register_forward_hook(_hook(keep, channels, factor)))
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def _hook(keep: int, channels: int, factor: float):
    """A forward hook: the output's channels past ``keep`` times 0, the others times ``factor`` in
    training (the scaler) and 1 in evaluation."""
    def hook(module: nn.Module, inputs, output: torch.Tensor) -> torch.Tensor:
        scale = factor if module.training else 1.0
        if keep >= channels:
            return output * scale if scale != 1.0 else output
        mask = torch.zeros(channels, dtype=output.dtype, device=output.device)
        mask[:keep] = scale
        return output * mask.view(1, channels, *([1] * (output.dim() - 2)))
    return hook


def submodel(model: nn.Module, rate: float) -> nn.Module:
    """A copy of ``model`` sliced to width ``rate``: every parameter and buffer its held prefix
    (``held_shapes``), every layer's channel attributes to match, and each scaled layer told its
    full width (``FULL_CHANNELS``), so that ``masked`` on it only scales. Works on ``meta``."""
    shapes = held_shapes(model, rate)
    small = copy.deepcopy(model)
    if rate >= 1.0:
        return small
    for name, module in small.named_modules():
        if isinstance(module, GEMMS + (_BatchNorm,)):
            full = _outputs(module) if isinstance(module, GEMMS) else module.num_features
            setattr(module, FULL_CHANNELS, full)
        for attr, tensor in list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False)):
            key = f"{name}.{attr}" if name else attr
            sliced = tensor.detach()[prefix(shapes[key])].clone()
            if isinstance(tensor, nn.Parameter):
                setattr(module, attr, nn.Parameter(sliced, requires_grad=tensor.requires_grad))
            else:
                module._buffers[attr] = sliced
        if isinstance(module, _ConvNd):
            weight = shapes[f"{name}.weight"]
            module.out_channels = weight[0]
            module.in_channels = weight[1] * module.groups if module.groups == 1 else weight[0]
            module.groups = 1 if module.groups == 1 else weight[0]
        elif isinstance(module, nn.Linear):
            module.out_features, module.in_features = shapes[f"{name}.weight"]
        elif isinstance(module, _BatchNorm) and module.weight is not None:
            module.num_features = shapes[f"{name}.weight"][0]
        elif isinstance(module, _BatchNorm) and module.running_mean is not None:
            module.num_features = shapes[f"{name}.running_mean"][0]
    return small


def static_batch_norm(model: nn.Module) -> nn.Module:
    """Every batch norm of ``model`` without running statistics: it normalizes by the batch's own
    statistics in training and in evaluation, and has no running mean or variance to send (HeteroFL's
    static batch normalization, sBN, Sec. 3: no running statistics tracked in training; Flower's
    baseline builds its training models with ``track_running_stats=False``). In place."""
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
            module.running_mean = None
            module.running_var = None
            module.num_batches_tracked = None
    return model


def average_by_holders(weights: Mapping[str, torch.Tensor],
                       results: Sequence[tuple[Mapping[str, torch.Tensor], int]]) -> dict[str, torch.Tensor]:
    """HeteroFL's aggregation (Sec. 3; Flower's baseline ``HeteroFL._aggregate_conv``): every
    entry of every key averaged over the clients that hold it, each weighted by its sample count
    n_k (``weighted_average``'s weights restricted to the holders); an entry no client holds keeps
    its value in ``weights``. Each client's tensor is its held prefix (``held``), so its shape says
    what it holds. In float64, cast back like ``weighted_average``: with every client at full width
    this is ``weighted_average`` bit for bit (same products, same order of sums).

        w[i] = sum_{k holds i} (n_k / N_i) w_k[i],    N_i = sum_{k holds i} n_k"""
    if not results:
        raise ValueError("average_by_holders needs at least one client result")
    out = {}
    for key in results[0][0]:
        like = weights[key]
        total = torch.zeros(like.shape, dtype=torch.float64, device=like.device)
        for state, n in results:
            total[prefix(state[key].shape)] += n
        acc = torch.zeros(like.shape, dtype=torch.float64, device=like.device)
        for state, n in results:
            region = prefix(state[key].shape)
            share = torch.full_like(total[region], float(n)) / total[region]  # a true division, as n / N in Python
            acc[region] += state[key].to(torch.float64) * share
        value = torch.where(total > 0, acc, like.to(torch.float64))
        out[key] = value.to(like.dtype) if like.dtype.is_floating_point else value.round().to(like.dtype)
    return out

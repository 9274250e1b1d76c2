"""The five models of SphereFed's experiments, built from the appendix tables.

Source: Dong et al., "SphereFed: Hyperspherical Federated Learning", ECCV 2022, appendix 0.F.1,
Tabs. 11-15: ConvNet (Tab. 11), VGG13 (Tab. 12),
SENet18 (Tab. 13), MobileNetV2 (Tab. 14), ResNet18 (Tab. 15). Every model is an :class:`FLNet`:
a feature extractor ``body`` ending in ``Flatten`` (output ``[B, l]``), an optional
:class:`FeatureNorm` (SphereFed, Eq. 5: ``z / ||z||_2``) and ``classifier = FC(l, C, bias=False)``,
optionally frozen. Which of the two options a model has is its :class:`Head`, chosen by the FL
method that trains it (``workloads.fl.methods``: SphereFed asks for both).

    >>> net = build_model("mobilenetv2", num_classes=100, image_size=32, norm="bn",
    ...                   head=Head(feature_norm=True, fixed_head=True))
    >>> net.feature_dim
    1280

Input sizes: 32 (CIFAR, ``TIN_S = 1``), 64 (TinyImageNet, ``TIN_S = 2``) and 16 (quick CPU runs on
small offline data, treated like CIFAR: ``TIN_S = 1``, smaller maps). ``NormLayer`` is
``BatchNorm2d`` (``norm="bn"``) or ``GroupNorm`` (``norm="gn"``, ``gn_groups`` groups).

Where the tables are silent or wrong (each choice is explained in ``docs/models.md``):

* **ConvNet padding.** Tab. 11 lists no padding, but its ``FC(1024, C)`` needs ``p = 1``: with
  ``p = 1`` the four stride-2 convs take 32 -> 16 -> 8 -> 4 -> 2, so ``l = 256 * 2 * 2 = 1024``;
  with ``p = 0`` the map would vanish (32 -> 30 -> 14 -> 6 -> 4 -> 1 -> < 0). ConvNet has no
  global pooling, so ``l = 256 * (image_size / 16)^2``: 256 at 16, 1024 at 32, 4096 at 64 (the
  paper does not run ConvNet on TinyImageNet, Tab. 2).
* **NormLayer(256) after 512-channel convs** (Tabs. 12, 13, 15) is a typo: a norm layer must have
  its conv's channel count (``NormLayer(256)`` cannot even run on 512 channels).
* **VGG13's pooling.** With only the four MaxPools listed, a 32x32 input leaves a 2x2x512 map
  (2048 features), contradicting ``FC(512, C)``. The standard CIFAR VGG13 (kuangliu/pytorch-cifar
  ``cfg['VGG13']``) has a fifth ``MaxPool(2)`` after the last conv pair; with it the map is 1x1 at
  32 (``l = 512``) and the table's extra ``MaxPool(TIN_S)`` brings 64x64 to 1x1 too. We build the
  fifth pool and the ``MaxPool(TIN_S)``; at 16 the map is already 1x1 after the fourth pool, so
  both are left out. ``AvgPool2d(k=1, s=1)`` and ``MaxPool(TIN_S = 1)`` are identities and are
  not built (they compute nothing; building them would charge the accelerator for copies).
* **Residual shortcuts** (Tabs. 13-15 list only the main path) follow kuangliu/pytorch-cifar,
  which these tables transcribe: ResNet/SENet blocks add the identity, or ``Conv1x1 + Norm`` when
  the stride or channel count changes; the block's second ReLU comes after the addition
  (``relu(norm2(conv2(.)) + shortcut)``). MobileNetV2 blocks add a shortcut only at stride 1:
  identity when channels match, else ``Conv1x1 + Norm``. Shortcuts therefore depend on
  ``TIN_S``: at 64x64 the stride-``TIN_S`` blocks gain (ResNet/SENet B1) or lose (MobileNetV2 B2)
  a shortcut conv.
* **SENet18** uses the post-activation block the table prints (Conv-Norm-ReLU, Conv-Norm, SE),
  i.e. kuangliu's ``senet.BasicBlock`` (kuangliu's own ``SENet18()`` uses a pre-activation
  block, which the table does not show). SE (Hu et al.): global average pool, ``Conv1x1(c,
  c // r)`` with bias, ReLU, ``Conv1x1(c // r, c)`` with bias, sigmoid, channel-wise scale, applied
  before the shortcut addition. The ratio ``r`` is not given: ``se_reduction=16`` (kuangliu, Hu
  et al.) by default.
* **MobileNetV2's projection ReLU.** Tab. 14 prints ``ReLU()`` after every 1x1 projection conv;
  MobileNetV2's linear bottleneck (Sandler et al.; kuangliu) has none. Default follows the table
  (``linear_bottleneck=False``: ``relu(norm3(conv3(.)))``, then the shortcut is added);
  ``linear_bottleneck=True`` drops that ReLU. The stem ``Conv(3, 32, k=3, s=1)`` lists no padding;
  we use ``p = 1`` (kuangliu) like every other 3x3 conv: the final map is 4x4 either way at 32
  (32 -> 30 -> 15 -> 8 -> 4 without padding), so ``l`` and the parameter count do not settle it.
* **Conv bias.** The tables are silent; every conv followed by a NormLayer has ``bias=False``
  (the norm's shift makes a bias redundant; kuangliu's ResNet/SENet/MobileNetV2 do the same,
  its VGG keeps biases: 2,944 more parameters). The SE convs, followed by no norm, keep theirs.
* **Final average pool.** ``AvgPool2d(k=4, s=4)`` (Tabs. 13-15) covers the whole 4x4 final map at
  32 and 64; we set its kernel to the final map size, identical there, 2 at 16.
* **GroupNorm groups** are not given: ``gn_groups=2`` by default, as in widely used FL codebases
  (``norm_layer=lambda c: nn.GroupNorm(2, c)`` for ResNet18, e.g. FLGo's TinyImageNet model and
  Flower-based CIFAR models, one commented "as the LEAF people do"); 2 divides every channel
  count of all five models.

Weights use PyTorch's default initialisation; call ``torch.manual_seed`` first for repeatable
models. A fixed head's weights (SphereFed's orthonormal classifier) are set by the FL method, not here.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

SUPPORTED_IMAGE_SIZES: tuple[int, ...] = (16, 32, 64)
NORMS: tuple[str, ...] = ("bn", "gn")


class FeatureNorm(nn.Module):
    """Row-wise L2 normalisation ``z / max(||z||_2, eps)`` (SphereFed Sec. 4.2, Eq. 5).

    ``eps`` (1e-12, ``torch.nn.functional.normalize``'s default) only guards an all-zero row.
    """

    def __init__(self, eps: float = 1e-12) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2.0, dim=1, eps=self.eps)


@dataclass(frozen=True)
class Head:
    """What an FL method asks of a model's head: ``feature_norm``, a :class:`FeatureNorm` before
    the classifier (else ``nn.Identity``); ``fixed_head``, a classifier that never trains
    (``requires_grad=False`` from construction, so a captured step shows no weight gradient and
    no update for it; its weights are the method's to set, ``prepare_model``)."""

    feature_norm: bool = False
    fixed_head: bool = False

    def __post_init__(self) -> None:
        for name in ("feature_norm", "fixed_head"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")


class FLNet(nn.Module):
    """Feature extractor + (FeatureNorm) + bias-free linear classifier, trained or fixed as
    ``head`` says (docs/models.md)."""

    def __init__(self, body: nn.Module, feature_dim: int, num_classes: int, head: Head = Head()) -> None:
        super().__init__()
        _check_head(head)
        self.body = body
        self.feature_norm = FeatureNorm() if head.feature_norm else nn.Identity()
        self.classifier = nn.Linear(feature_dim, num_classes, bias=False)
        self.classifier.weight.requires_grad_(not head.fixed_head)
        self.feature_dim = feature_dim

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.feature_norm(self.body(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


NormFactory = Callable[[int], nn.Module]


def _norm_factory(norm: str, gn_groups: int) -> NormFactory:
    """``NormLayer(c)`` of the tables: BatchNorm2d(c) or GroupNorm(gn_groups, c)."""
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; choose one of {list(NORMS)}")
    if isinstance(gn_groups, bool) or not isinstance(gn_groups, int) or gn_groups < 1:
        raise ValueError(f"gn_groups must be a positive integer, got {gn_groups!r}")
    if norm == "bn":
        return nn.BatchNorm2d

    def group_norm(channels: int) -> nn.Module:
        if channels % gn_groups:
            raise ValueError(
                f"gn_groups={gn_groups} does not divide {channels} channels of this model; "
                "choose a divisor of every channel count (the default 2 always works)"
            )
        return nn.GroupNorm(gn_groups, channels)

    return group_norm


def _check_common(num_classes: int, image_size: int, head: Head) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    if image_size not in SUPPORTED_IMAGE_SIZES:
        raise ValueError(
            f"unsupported image_size {image_size!r}; choose one of {list(SUPPORTED_IMAGE_SIZES)} "
            "(32 = CIFAR, 64 = TinyImageNet, 16 = quick runs)"
        )
    _check_head(head)


def _check_head(head: Head) -> None:
    if not isinstance(head, Head):
        raise ValueError(f"head must be a workloads.models.Head (the method's: MethodConfig.head), got {head!r}")


def tin_stride(image_size: int) -> int:
    """The tables' ``TIN_S``: 2 for TinyImageNet (64x64), 1 for CIFAR (32x32) and for 16x16."""
    return 2 if image_size == 64 else 1


def conv_out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output side of a convolution or pooling: ``floor((size + 2p - k) / s) + 1``."""
    return (size + 2 * padding - kernel) // stride + 1


def conv_norm_act(c_in: int, c_out: int, kernel: int, stride: int, norm: NormFactory, *,
                  groups: int = 1, relu: bool = True) -> nn.Sequential:
    """``Conv(c_in, c_out, k, s, p=k//2, g), NormLayer(c_out)[, ReLU()]``: one row of a table."""
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        conv=nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False),
        norm=norm(c_out),
    )
    if relu:
        layers["relu"] = nn.ReLU()
    return nn.Sequential(layers)


# ---------------------------------------------------------------- ConvNet (Tab. 11)

CONVNET_LAYERS: tuple[tuple[int, int, int], ...] = (
    # (c_in, c_out, stride), all k=3, p=1 (see module docstring)
    (3, 32, 1), (32, 64, 2), (64, 64, 2), (64, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2),
)


def convnet(*, num_classes: int = 100, image_size: int = 32, norm: str = "bn", head: Head = Head(),
            gn_groups: int = 2) -> FLNet:
    """Seven-layer ConvNet, SphereFed Tab. 11 (``l = 1024`` at 32x32)."""
    _check_common(num_classes, image_size, head)
    make_norm = _norm_factory(norm, gn_groups)
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    size = image_size
    for i, (c_in, c_out, stride) in enumerate(CONVNET_LAYERS, start=1):
        layers[f"conv{i}"] = conv_norm_act(c_in, c_out, 3, stride, make_norm)
        size = conv_out_size(size, 3, stride, 1)
    layers["flatten"] = nn.Flatten()
    return FLNet(nn.Sequential(layers), CONVNET_LAYERS[-1][1] * size * size, num_classes, head)


# ---------------------------------------------------------------- VGG13 (Tab. 12)

VGG13_CONFIG: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512)


def vgg13(*, num_classes: int = 100, image_size: int = 32, norm: str = "bn", head: Head = Head(),
          gn_groups: int = 2) -> FLNet:
    """VGG13, SphereFed Tab. 12, with the standard fifth MaxPool(2) (``l = 512``)."""
    _check_common(num_classes, image_size, head)
    make_norm = _norm_factory(norm, gn_groups)
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    size, c_in, n_conv, n_pool = image_size, 3, 0, 0
    for item in VGG13_CONFIG:
        if item == "M":
            n_pool += 1
            layers[f"pool{n_pool}"] = nn.MaxPool2d(2, 2)
            size //= 2
        else:
            n_conv += 1
            layers[f"conv{n_conv}"] = conv_norm_act(c_in, int(item), 3, 1, make_norm)
            c_in = int(item)
    if size > 1:  # the standard CIFAR VGG13's fifth pool, missing from Tab. 12
        layers["pool5"] = nn.MaxPool2d(2, 2)
        size //= 2
    if size > 1:  # Tab. 12's MaxPool2d(k=TIN_S, s=TIN_S)
        layers["pool_tin"] = nn.MaxPool2d(size, size)
        size = 1
    layers["flatten"] = nn.Flatten()
    return FLNet(nn.Sequential(layers), c_in, num_classes, head)


# ---------------------------------------------------------------- ResNet18 / SENet18 (Tabs. 15, 13)

class SqueezeExcitation(nn.Module):
    """SE module (Hu et al., CVPR 2018): ``x * sigmoid(fc2(relu(fc1(avgpool(x)))))``.

    ``fc1 = Conv1x1(c, c // reduction)``, ``fc2 = Conv1x1(c // reduction, c)``, both with bias,
    as in kuangliu/pytorch-cifar ``models/senet.py``.
    """

    def __init__(self, channels: int, reduction: int) -> None:
        super().__init__()
        hidden = channels // reduction
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, hidden, 1)
        self.relu = nn.ReLU()
        self.fc2 = nn.Conv2d(hidden, channels, 1)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.sigmoid(self.fc2(self.relu(self.fc1(self.pool(x)))))


class BasicBlock(nn.Module):
    """Two 3x3 Conv-Norm rows, optional SE, shortcut, ReLU after the addition (kuangliu)."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm: NormFactory, se_reduction: int | None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = norm(c_out)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=False)
        self.norm2 = norm(c_out)
        self.se = SqueezeExcitation(c_out, se_reduction) if se_reduction else nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut: nn.Module = nn.Sequential(OrderedDict(
                conv=nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), norm=norm(c_out)))
        else:
            self.shortcut = nn.Identity()
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.norm1(self.conv1(x)))
        out = self.se(self.norm2(self.conv2(out)))
        return self.relu2(out + self.shortcut(x))


RESNET18_STAGES: tuple[tuple[int, int], ...] = ((64, 1), (128, 2), (256, 2), (512, 2))  # (channels, stride)


def _resnet_like(num_classes: int, image_size: int, norm: str, head: Head, gn_groups: int,
                 se_reduction: int | None) -> FLNet:
    _check_common(num_classes, image_size, head)
    make_norm = _norm_factory(norm, gn_groups)
    layers: OrderedDict[str, nn.Module] = OrderedDict(stem=conv_norm_act(3, 64, 3, 1, make_norm))
    size, c_in = image_size, 64
    for i, (c_out, stride) in enumerate(RESNET18_STAGES, start=1):
        stride = tin_stride(image_size) if i == 1 else stride  # B1's first conv has s=TIN_S
        layers[f"layer{i}"] = nn.Sequential(
            BasicBlock(c_in, c_out, stride, make_norm, se_reduction),
            BasicBlock(c_out, c_out, 1, make_norm, se_reduction),
        )
        size, c_in = conv_out_size(size, 3, stride, 1), c_out
    layers["pool"] = nn.AvgPool2d(size, size)  # Tabs. 13/15: AvgPool2d(k=4, s=4) = whole 4x4 map
    layers["flatten"] = nn.Flatten()
    return FLNet(nn.Sequential(layers), c_in, num_classes, head)


def resnet18(*, num_classes: int = 100, image_size: int = 32, norm: str = "bn", head: Head = Head(),
             gn_groups: int = 2) -> FLNet:
    """ResNet18 for CIFAR, SphereFed Tab. 15 (``l = 512``)."""
    return _resnet_like(num_classes, image_size, norm, head, gn_groups, se_reduction=None)


def senet18(*, num_classes: int = 100, image_size: int = 32, norm: str = "bn", head: Head = Head(),
            gn_groups: int = 2, se_reduction: int = 16) -> FLNet:
    """SENet18, SphereFed Tab. 13: ResNet18 with an SE module in every block (``l = 512``)."""
    if isinstance(se_reduction, bool) or not isinstance(se_reduction, int) or not 1 <= se_reduction <= 64:
        raise ValueError(f"se_reduction must be an integer in 1..64 (64 = narrowest SE input), got {se_reduction!r}")
    return _resnet_like(num_classes, image_size, norm, head, gn_groups, se_reduction=se_reduction)


# ---------------------------------------------------------------- MobileNetV2 (Tab. 14)

class InvertedResidual(nn.Module):
    """Expand 1x1, depthwise 3x3, project 1x1; shortcut added at stride 1 only (kuangliu)."""

    def __init__(self, c_in: int, c_out: int, expansion: int, stride: int, norm: NormFactory,
                 linear_bottleneck: bool) -> None:
        super().__init__()
        hidden = expansion * c_in
        self.stride = stride
        self.expand = conv_norm_act(c_in, hidden, 1, 1, norm)
        self.depthwise = conv_norm_act(hidden, hidden, 3, stride, norm, groups=hidden)
        self.project = conv_norm_act(hidden, c_out, 1, 1, norm, relu=not linear_bottleneck)
        if stride == 1 and c_in != c_out:
            self.shortcut: nn.Module | None = conv_norm_act(c_in, c_out, 1, 1, norm, relu=False)
        elif stride == 1:
            self.shortcut = nn.Identity()
        else:
            self.shortcut = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.project(self.depthwise(self.expand(x)))
        return out if self.shortcut is None else out + self.shortcut(x)


MOBILENETV2_STAGES: tuple[tuple[int, int, int, int | str], ...] = (
    # (expansion, c_out, blocks, first stride) for B1..B7; "TIN_S" resolved per image size
    (1, 16, 1, 1), (6, 24, 2, "TIN_S"), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)


def mobilenetv2(*, num_classes: int = 100, image_size: int = 32, norm: str = "bn", head: Head = Head(),
                gn_groups: int = 2, linear_bottleneck: bool = False) -> FLNet:
    """MobileNetV2 for CIFAR, SphereFed Tab. 14 (``l = 1280``)."""
    _check_common(num_classes, image_size, head)
    if not isinstance(linear_bottleneck, bool):
        raise ValueError(f"linear_bottleneck must be True or False, got {linear_bottleneck!r}")
    make_norm = _norm_factory(norm, gn_groups)
    blocks: list[nn.Module] = []
    size, c_in = image_size, 32
    for expansion, c_out, n_blocks, first_stride in MOBILENETV2_STAGES:
        for j in range(n_blocks):
            stride = (tin_stride(image_size) if first_stride == "TIN_S" else int(first_stride)) if j == 0 else 1
            blocks.append(InvertedResidual(c_in, c_out, expansion, stride, make_norm, linear_bottleneck))
            size, c_in = conv_out_size(size, 3, stride, 1), c_out
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        stem=conv_norm_act(3, 32, 3, 1, make_norm),
        blocks=nn.Sequential(*blocks),
        head=conv_norm_act(c_in, 1280, 1, 1, make_norm),
        pool=nn.AvgPool2d(size, size),  # Tab. 14: AvgPool2d(k=4, s=4) = whole 4x4 map
        flatten=nn.Flatten(),
    )
    return FLNet(nn.Sequential(layers), 1280, num_classes, head)


# ---------------------------------------------------------------- published FPGA accelerators' networks
# Not SphereFed's models (not in MODELS: ImageNet-sized inputs, no FLNet head). They are the
# networks two measured FPGA accelerators ran, for holding the cycle model against them
# (bench.lib.anchors, docs/accel_sim.md "Held against measured FPGAs"). Name them as any model:
# --model workloads.models:alexnet_zhang2015 --input-shape 3,227,227 --classes 1000.

ALEXNET_CONVS: tuple[tuple[int, int, int, int, int, int], ...] = (
    # (c_in, c_out, kernel, stride, padding, groups): Krizhevsky et al., NIPS 2012, Fig. 2 (two GPU halves)
    (3, 96, 11, 4, 0, 1), (96, 256, 5, 1, 2, 2), (256, 384, 3, 1, 1, 1), (384, 384, 3, 1, 1, 2), (384, 256, 3, 1, 1, 2),
)
ALEXNET_INPUT_SIZE = 227  # (227 - 11) / 4 + 1 = 55: the 55 x 55 map of Zhang et al.'s layer 1
ALEXNET_POOL_AFTER = (1, 2, 5)  # MaxPool(3, 2) after conv1, conv2, conv5 (Krizhevsky et al.)


def alexnet_zhang2015(*, num_classes: int = 1000) -> nn.Sequential:
    """AlexNet as Zhang et al. ran it ("Optimizing FPGA-based Accelerator Design for Deep
    Convolutional Neural Networks", FPGA 2015): Krizhevsky et al.'s two-GPU network ("ImageNet
    Classification with Deep Convolutional Neural Networks", NIPS 2012), whose layers Zhang's table
    lists per half ("set"): layer 1 N=3 -> M=48 (55x55, K=11, S=4), layer 2 48 -> 128 (27x27, K=5),
    layer 3 256 -> 192 (13x13, K=3: it reads both halves), layers 4 and 5 192 -> 192 and 192 -> 128
    (13x13, K=3), two sets each. As one network: conv1 3 -> 96 (one group: both halves read the
    whole image), conv2 96 -> 256 in 2 groups, conv3 256 -> 384, conv4 384 -> 384 and conv5
    384 -> 256 in 2 groups; input 3x227x227 (no padding: 55 = (227 - 11) / 4 + 1), ReLU after
    every layer, MaxPool(3, 2) after conv1, conv2, conv5, then FC 9216 -> 4096 -> 4096 -> C.
    Local response normalization is left out (Zhang priced the convolutions only). Convolution
    layers are named ``conv1`` ... ``conv5``."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    size = ALEXNET_INPUT_SIZE
    for i, (c_in, c_out, kernel, stride, padding, groups) in enumerate(ALEXNET_CONVS, start=1):
        layers[f"conv{i}"] = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, groups=groups)
        layers[f"relu{i}"] = nn.ReLU()
        size = conv_out_size(size, kernel, stride, padding)
        if i in ALEXNET_POOL_AFTER:
            layers[f"pool{i}"] = nn.MaxPool2d(3, 2)
            size = conv_out_size(size, 3, 2, 0)
    features = ALEXNET_CONVS[-1][1] * size * size  # 256 x 6 x 6 = 9216
    layers["flatten"] = nn.Flatten()
    layers["fc6"], layers["relu6"] = nn.Linear(features, 4096), nn.ReLU()
    layers["fc7"], layers["relu7"] = nn.Linear(4096, 4096), nn.ReLU()
    layers["fc8"] = nn.Linear(4096, num_classes)
    return nn.Sequential(layers)


VGG16_CONFIG: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                       512, 512, 512, "M", 512, 512, 512, "M")
VGG16_INPUT_SIZE = 224


def vgg16_eftrain(*, num_classes: int = 1000) -> nn.Sequential:
    """VGG16 as EF-Train's released program trains it (Tang et al., "EF-Train: Enable Efficient
    On-device CNN Training on FPGA Through Data Reshaping for Online Adaptation or
    Personalization", ACM TODAES 2022; repository tangyuelm/EF-Train, ``sdk/main.cc``): 3x224x224
    input, VGG16's 13 3x3 convolutions (Simonyan and Zisserman, ICLR 2015), each followed by
    batch normalization (its per-layer ``gama`` / ``beta``) and ReLU, MaxPool(2) after each block,
    then the 7x7x512 map pooled to 1x1x512 (its ``output19``) and one FC 512 -> C (its
    ``weights_fc1``, 1000 x 512). The pooling to 1x1 is taken as a global average (assumption: the
    program names only the sizes). Convolutions have no bias (the batch norm's shift replaces it);
    they are named ``conv1`` ... ``conv13``."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    c_in, conv, pool = 3, 0, 0
    for v in VGG16_CONFIG:
        if v == "M":
            pool += 1
            layers[f"pool{pool}"] = nn.MaxPool2d(2)
            continue
        conv += 1
        layers[f"conv{conv}"] = nn.Conv2d(c_in, int(v), 3, padding=1, bias=False)
        layers[f"bn{conv}"], layers[f"relu{conv}"] = nn.BatchNorm2d(int(v)), nn.ReLU()
        c_in = int(v)
    layers["gap"], layers["flatten"] = nn.AdaptiveAvgPool2d(1), nn.Flatten()
    layers["fc"] = nn.Linear(c_in, num_classes)
    return nn.Sequential(layers)


# ---------------------------------------------------------------- registry

MODELS: dict[str, Callable[..., FLNet]] = {
    "convnet": convnet,
    "vgg13": vgg13,
    "resnet18": resnet18,
    "senet18": senet18,
    "mobilenetv2": mobilenetv2,
}


def build_model(name: str, *, num_classes: int = 100, image_size: int = 32, norm: str = "bn",
                head: Head = Head(), **options: object) -> FLNet:
    """Build model ``name`` of :data:`MODELS`.

    ``options`` are the model's own keywords: ``gn_groups`` (all), ``se_reduction`` (senet18),
    ``linear_bottleneck`` (mobilenetv2). Unknown names or options raise ``ValueError``.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    builder = MODELS[name]
    accepted = sorted(set(inspect.signature(builder).parameters) - {"num_classes", "image_size", "norm", "head"})
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"model {name!r} does not take option(s) {unknown}; its options are {accepted}")
    return builder(num_classes=num_classes, image_size=image_size, norm=norm, head=head, **options)

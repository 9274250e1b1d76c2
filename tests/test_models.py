"""The five models against the SphereFed appendix tables (0.F.1, Tabs. 11-15).

Parameter counts are computed here from the tables transcribed as data, with arithmetic that
shares nothing with workloads/models.py. A conv row is (c_in, c_out, k, groups, repeat): its
weight has c_in/groups * c_out * k*k entries and its NormLayer (BN or GN, both affine) 2*c_out;
convs followed by a NormLayer have no bias (docs/models.md). The typo NormLayer(256) after
512-channel convs is transcribed as 512.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from workloads.models import MODELS, FeatureNorm, FLNet, build_model
from workloads.fl.methods.spherefed import SphereFed

# ---------------------------------------------------------------- the tables as data

# Tab. 11, ConvNet: every row Conv(k=3) + NormLayer + ReLU.
CONVNET_ROWS = [(3, 32, 3, 1, 1), (32, 64, 3, 1, 1), (64, 64, 3, 1, 1), (64, 64, 3, 1, 1),
                (64, 128, 3, 1, 1), (128, 128, 3, 1, 1), (128, 256, 3, 1, 1)]

# Tab. 12, VGG13.
VGG13_ROWS = [(3, 64, 3, 1, 1), (64, 64, 3, 1, 1), (64, 128, 3, 1, 1), (128, 128, 3, 1, 1),
              (128, 256, 3, 1, 1), (256, 256, 3, 1, 1), (256, 512, 3, 1, 1), (512, 512, 3, 1, 1),
              (512, 512, 3, 1, 2)]

# Tab. 15, ResNet18 (main path); Tab. 13, SENet18, has the same convs.
RESNET18_ROWS = [(3, 64, 3, 1, 1),
                 (64, 64, 3, 1, 4),                                        # B1: 2 blocks x 2 convs
                 (64, 128, 3, 1, 1), (128, 128, 3, 1, 3),                  # B2
                 (128, 256, 3, 1, 1), (256, 256, 3, 1, 3),                 # B3
                 (256, 512, 3, 1, 1), (512, 512, 3, 1, 3)]                 # B4
# Shortcut Conv1x1 + NormLayer where stride or channels change (kuangliu/pytorch-cifar):
# B2, B3, B4 first blocks; at 64x64 also B1's first block (its stride is TIN_S = 2).
RESNET18_SHORTCUTS_32 = [(64, 128, 1, 1, 1), (128, 256, 1, 1, 1), (256, 512, 1, 1, 1)]
RESNET18_SHORTCUTS_64 = RESNET18_SHORTCUTS_32 + [(64, 64, 1, 1, 1)]
# SE module per block (Tab. 13): two 1x1 convs with bias, c -> c//16 -> c; 2 blocks per stage.
SENET18_SE_CHANNELS = [64, 64, 128, 128, 256, 256, 512, 512]

# Tab. 14, MobileNetV2: (c_in, c_out, k, groups, repeat), each row + NormLayer.
MOBILENETV2_ROWS = [
    (3, 32, 3, 1, 1),
    (32, 32, 1, 1, 1), (32, 32, 3, 32, 1), (32, 16, 1, 1, 1),                    # B1
    (16, 96, 1, 1, 1), (96, 96, 3, 96, 1), (96, 24, 1, 1, 1),                    # B2
    (24, 144, 1, 1, 1), (144, 144, 3, 144, 1), (144, 24, 1, 1, 1),
    (24, 144, 1, 1, 1), (144, 144, 3, 144, 1), (144, 32, 1, 1, 1),               # B3
    (32, 192, 1, 1, 2), (192, 192, 3, 192, 2), (192, 32, 1, 1, 2),
    (32, 192, 1, 1, 1), (192, 192, 3, 192, 1), (192, 64, 1, 1, 1),               # B4
    (64, 384, 1, 1, 3), (384, 384, 3, 384, 3), (384, 64, 1, 1, 3),
    (64, 384, 1, 1, 1), (384, 384, 3, 384, 1), (384, 96, 1, 1, 1),               # B5
    (96, 576, 1, 1, 2), (576, 576, 3, 576, 2), (576, 96, 1, 1, 2),
    (96, 576, 1, 1, 1), (576, 576, 3, 576, 1), (576, 160, 1, 1, 1),              # B6
    (160, 960, 1, 1, 2), (960, 960, 3, 960, 2), (960, 160, 1, 1, 2),
    (160, 960, 1, 1, 1), (960, 960, 3, 960, 1), (960, 320, 1, 1, 1),             # B7
    (320, 1280, 1, 1, 1),
]
# Shortcut Conv1x1 + NormLayer in stride-1 blocks whose channels change (kuangliu): B1 (32->16),
# B2's first block (16->24) only while TIN_S = 1, B5's first (64->96), B7 (160->320).
MOBILENETV2_SHORTCUTS_32 = [(32, 16, 1, 1, 1), (16, 24, 1, 1, 1), (64, 96, 1, 1, 1), (160, 320, 1, 1, 1)]
MOBILENETV2_SHORTCUTS_64 = [(32, 16, 1, 1, 1), (64, 96, 1, 1, 1), (160, 320, 1, 1, 1)]


def rows_params(rows) -> int:
    """Conv weights plus the following NormLayer's weight and bias, summed over table rows."""
    return sum(rep * (c_in // g * c_out * k * k + 2 * c_out) for c_in, c_out, k, g, rep in rows)


def se_params(channels, reduction=16) -> int:
    """fc1: c*(c//r) + c//r bias; fc2: (c//r)*c + c bias."""
    return sum(2 * c * (c // reduction) + c // reduction + c for c in channels)


def expected_params(name: str, image_size: int, num_classes: int) -> int:
    big = image_size == 64
    if name == "convnet":
        feature_dim = 256 * (image_size // 16) ** 2
        return rows_params(CONVNET_ROWS) + feature_dim * num_classes
    if name == "vgg13":
        return rows_params(VGG13_ROWS) + 512 * num_classes
    if name in ("resnet18", "senet18"):
        shortcuts = RESNET18_SHORTCUTS_64 if big else RESNET18_SHORTCUTS_32
        se = se_params(SENET18_SE_CHANNELS) if name == "senet18" else 0
        return rows_params(RESNET18_ROWS) + rows_params(shortcuts) + se + 512 * num_classes
    shortcuts = MOBILENETV2_SHORTCUTS_64 if big else MOBILENETV2_SHORTCUTS_32
    return rows_params(MOBILENETV2_ROWS) + rows_params(shortcuts) + 1280 * num_classes


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- parameter counts

def test_convnet_parameter_count_by_hand():
    # Conv weights, c_in*c_out*9:  3*32*9 = 864, 32*64*9 = 18,432, 64*64*9 = 36,864 (twice),
    #   64*128*9 = 73,728, 128*128*9 = 147,456, 128*256*9 = 294,912  -> sum 609,120
    # NormLayers, 2*c_out: 2*(32+64+64+64+128+128+256) = 2*736 = 1,472
    # Classifier FC(1024, 100, bias=False): 102,400
    # Total 609,120 + 1,472 + 102,400 = 712,992
    for norm in ("bn", "gn"):
        assert n_params(build_model("convnet", num_classes=100, norm=norm)) == 712_992


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("image_size", [16, 32, 64])
def test_parameter_count_matches_table(name, image_size):
    for norm, num_classes in (("bn", 100), ("gn", 200)):
        model = build_model(name, num_classes=num_classes, image_size=image_size, norm=norm)
        assert n_params(model) == expected_params(name, image_size, num_classes)


def test_parameter_counts_match_kuangliu_cifar10():
    # Independent check: the kuangliu/pytorch-cifar CIFAR-10 models have 11,173,962 (ResNet18)
    # and 2,296,922 (MobileNetV2) parameters, 10 of them the linear layer's bias we drop
    # (FC(l, C, bias=False)). Here via our table arithmetic, which must agree.
    assert expected_params("resnet18", 32, 10) == 11_173_962 - 10
    assert expected_params("mobilenetv2", 32, 10) == 2_296_922 - 10


def test_se_reduction_option_changes_se_only():
    # r = 8: each SE has 2*c*(c//8) + c//8 + c parameters instead of the r = 16 count.
    model = build_model("senet18", num_classes=100, se_reduction=8)
    base = expected_params("resnet18", 32, 100)
    assert n_params(model) == base + se_params(SENET18_SE_CHANNELS, reduction=8)


# ---------------------------------------------------------------- shapes

FEATURE_DIM_32 = {"convnet": 1024, "vgg13": 512, "resnet18": 512, "senet18": 512, "mobilenetv2": 1280}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("norm", ["bn", "gn"])
def test_feature_dim_at_32(name, norm):
    model = build_model(name, norm=norm).to("meta")
    assert model.feature_dim == FEATURE_DIM_32[name]
    assert model.body(torch.empty(2, 3, 32, 32, device="meta")).shape == (2, FEATURE_DIM_32[name])


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("image_size,num_classes", [(16, 10), (32, 100), (64, 200), (64, 10)])
def test_output_shape(name, image_size, num_classes):
    # Shapes on the meta device (same shapes, no arithmetic, keeps the suite fast); real CPU
    # forwards run at 16x16 in test_classifier_and_feature_norm.
    model = build_model(name, num_classes=num_classes, image_size=image_size, norm="gn", head=SphereFed.head).to("meta")
    x = torch.empty(2, 3, image_size, image_size, device="meta")
    assert model.body(x).shape == (2, model.feature_dim)
    assert model(x).shape == (2, num_classes)


def test_feature_dim_other_sizes():
    # ConvNet has no global pool: l = 256 * (s/16)^2 -> 256 at 16, 4096 at 64. The others pool
    # to 1x1 at every supported size.
    assert build_model("convnet", image_size=16).feature_dim == 256
    assert build_model("convnet", image_size=64).feature_dim == 4096
    for name in ("vgg13", "resnet18", "senet18", "mobilenetv2"):
        for size in (16, 64):
            assert build_model(name, image_size=size).feature_dim == FEATURE_DIM_32[name]


def test_vgg13_pools():
    # 32: four table pools + the standard fifth (2x2 -> 1x1); 64: also MaxPool(TIN_S = 2);
    # 16: the map is 1x1 after the fourth pool, so neither is built.
    def pools(size):
        return [m.kernel_size for m in build_model("vgg13", image_size=size).modules() if isinstance(m, nn.MaxPool2d)]
    assert pools(16) == [2, 2, 2, 2]
    assert pools(32) == [2, 2, 2, 2, 2]
    assert pools(64) == [2, 2, 2, 2, 2, 2]


def test_final_avgpool_covers_final_map():
    # Tabs. 13-15: AvgPool2d(k=4) on the 4x4 map at 32 and 64; at 16 the map is 2x2.
    for name in ("resnet18", "senet18", "mobilenetv2"):
        for size, kernel in ((16, 2), (32, 4), (64, 4)):
            assert build_model(name, image_size=size).body.pool.kernel_size == kernel


def test_norm_layers():
    bn = build_model("vgg13", norm="bn")
    gn = build_model("vgg13", norm="gn", gn_groups=4)
    assert not any(isinstance(m, nn.GroupNorm) for m in bn.modules())
    groups = [m for m in gn.modules() if isinstance(m, nn.GroupNorm)]
    assert not any(isinstance(m, nn.BatchNorm2d) for m in gn.modules())
    assert len(groups) == 10 and all(m.num_groups == 4 for m in groups)
    # Each norm has its conv's channel count (Tab. 12's NormLayer(256) after 512-channel convs is a typo).
    for block in gn.body:
        if isinstance(block, nn.Sequential):
            assert block.norm.num_channels == block.conv.out_channels
    assert all(m.num_groups == 2 for m in build_model("resnet18", norm="gn").modules() if isinstance(m, nn.GroupNorm))


# ---------------------------------------------------------------- block wiring

def test_basic_block_adds_shortcut_before_relu():
    torch.manual_seed(0)
    model = build_model("resnet18").eval()
    block = model.body.layer1[1]  # 64 -> 64, stride 1: identity shortcut
    x = torch.randn(2, 64, 8, 8)
    main = block.norm2(block.conv2(torch.relu(block.norm1(block.conv1(x)))))
    with torch.no_grad():
        torch.testing.assert_close(block(x), torch.relu(main + x))
    assert isinstance(model.body.layer1[0].shortcut, nn.Identity)
    down = build_model("resnet18", image_size=64).body.layer1[0].shortcut.conv
    assert (down.in_channels, down.out_channels, down.stride) == (64, 64, (2, 2))


def test_mobilenetv2_projection_relu_option():
    # Table default: ReLU after every conv: stem 1 + 17 blocks x 3 + head 1 = 53.
    # Linear bottleneck drops the 17 projection ReLUs: 36.
    def relus(**kw):
        return sum(isinstance(m, nn.ReLU) for m in build_model("mobilenetv2", **kw).modules())
    assert relus() == 53
    assert relus(linear_bottleneck=True) == 36
    torch.manual_seed(0)
    table = build_model("mobilenetv2", image_size=16).eval()
    torch.manual_seed(0)
    linear = build_model("mobilenetv2", image_size=16, linear_bottleneck=True).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert not torch.allclose(table(x), linear(x))  # same weights, different function


# ---------------------------------------------------------------- FeatureNorm and classifier

@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=6, max_size=6), st.integers(1, 3))
def test_feature_norm_unit_rows(values, rows):
    x = torch.tensor(values, dtype=torch.float64).reshape(1, 6).repeat(rows, 1) * torch.arange(1, rows + 1).unsqueeze(1)
    norm = x.norm(dim=1, keepdim=True)
    y = FeatureNorm()(x)
    nonzero = norm.squeeze(1) > 1e-6
    torch.testing.assert_close(y[nonzero].norm(dim=1), torch.ones(int(nonzero.sum()), dtype=torch.float64))
    torch.testing.assert_close(y[nonzero] * norm[nonzero], x[nonzero])  # direction kept


def test_feature_norm_zero_row_stays_zero():
    assert torch.equal(FeatureNorm()(torch.zeros(2, 4)), torch.zeros(2, 4))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_classifier_and_feature_norm(name):
    sphere = build_model(name, num_classes=10, image_size=16, head=SphereFed.head).eval()
    plain = build_model(name, num_classes=10, image_size=16)
    for model in (sphere, plain):
        assert isinstance(model, FLNet)
        assert model.classifier.bias is None
        assert model.classifier.weight.shape == (10, model.feature_dim)
        assert [k for k in model.state_dict() if k.startswith("classifier")] == ["classifier.weight"]
    assert isinstance(sphere.feature_norm, FeatureNorm)
    assert isinstance(plain.feature_norm, nn.Identity)
    assert not any(isinstance(m, FeatureNorm) for m in plain.modules())
    with torch.no_grad():
        z = sphere.features(torch.randn(3, 3, 16, 16))
        y = sphere(torch.randn(3, 3, 16, 16))
    torch.testing.assert_close(z.norm(dim=1), torch.ones(3))
    assert y.shape == (3, 10) and torch.isfinite(y).all()


def test_same_seed_same_model():
    torch.manual_seed(7)
    a = build_model("senet18", num_classes=10).state_dict()
    torch.manual_seed(7)
    b = build_model("senet18", num_classes=10).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs,match", [
    ({"name": "resnet50"},
     r"unknown model 'resnet50'; choose one of \['convnet', 'mobilenetv2', 'resnet18', 'senet18', 'vgg13'\]"),
    ({"name": "vgg13", "norm": "ln"}, r"unknown norm 'ln'; choose one of \['bn', 'gn'\]"),
    ({"name": "vgg13", "image_size": 28}, r"unsupported image_size 28; choose one of \[16, 32, 64\]"),
    ({"name": "vgg13", "num_classes": 0}, r"num_classes must be a positive integer"),
    ({"name": "vgg13", "head": "yes"}, r"head must be a workloads.models.Head"),
    ({"name": "vgg13", "se_reduction": 16},
     r"does not take option\(s\) \['se_reduction'\]; its options are \['gn_groups'\]"),
    ({"name": "senet18", "se_reduction": 0}, r"se_reduction must be an integer in 1..64"),
    ({"name": "mobilenetv2", "linear_bottleneck": 1}, r"linear_bottleneck must be True or False"),
    ({"name": "mobilenetv2", "norm": "gn", "gn_groups": 32}, r"gn_groups=32 does not divide 16 channels"),
    ({"name": "convnet", "gn_groups": 0}, r"gn_groups must be a positive integer"),
])
def test_bad_input_raises_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_model(**kwargs)

"""Training in a number format (workloads.numerics, docs/numerics.md): the quantizers against
independent references and hand-worked cases, their properties, and the emulation reaching every
GEMM of a real step (the captured trace is the oracle)."""

from __future__ import annotations

from collections import Counter

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_sim.formats import NumberFormat, NumberFormatError
from accel_sim.trace_schema import GemmWork
from workloads.capture.step import capture_step
from workloads.fl.execution import Execution, execution_of, preset_options
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.methods import parse_method
from workloads.models import build_model
from workloads.numerics.emulate import GEMM_OPS, Arithmetic
from workloads.numerics.quantize import binade, bfp_unit, round_bfp, round_to_format

ML_DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
             "e5m2": ml_dtypes.float8_e5m2}


def awkward_values(seed: int = 0) -> torch.Tensor:
    """Normal values over many binades, FP32 subnormals, the formats' own subnormal and overflow
    regions, exact ties, zeros of both signs, infinities and NaN."""
    g = torch.Generator().manual_seed(seed)
    wide = torch.randn(4000, generator=g) * torch.exp2(torch.randint(-30, 30, (4000,), generator=g).float())
    tiny = torch.randn(500, generator=g) * 2.0 ** -130  # FP32 subnormals
    fp8_sub = torch.randn(500, generator=g) * 2.0 ** -8  # E4M3 / E5M2 subnormals
    ties = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -4, 1.125 + 2 ** -5, 2 ** -10, 3 * 2 ** -11])
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 440.0, 460.0, 65504.0, 65520.0])
    return torch.cat([wide, tiny, fp8_sub, ties, -ties, special])


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3", "e5m2"])
def test_round_to_nearest_even_equals_ml_dtypes_cast(name):
    x = awkward_values()
    ours = round_to_format(x, NumberFormat.parse(name)).numpy()
    with np.errstate(over="ignore"):
        ref = x.numpy().astype(ML_DTYPES[name]).astype(np.float32)
    if name == "e4m3":
        # E4M3 has no infinity: beyond 448 + half a unit torch's cast saturates at +-448 (the
        # saturating conversion Micikevicius et al. 2022 discuss in Sec. 2), ml_dtypes
        # gives NaN. Element by element everywhere else, and the saturation checked on its own.
        over = ~np.isnan(x.numpy()) & (np.abs(x.numpy()) >= 464)
        assert over.sum() > 10
        assert np.array_equal(ours[over], np.sign(x.numpy()[over]) * 448)
        ours, ref = ours[~over], ref[~over]
    np.testing.assert_array_equal(ours, ref)  # NaN where NaN, signed zeros and infinities equal


def test_bfp_by_hand():
    # bfp_m2_g4 on [1.0, 0.3, -0.26, 0.01 | 6.0, -5.0, 0.7, 0.0]:
    # group 1: max 1.0 = 2^0 -> unit 2^(0 - 2 + 1) = 0.5; 1.0 / 0.5 = 2 fits in 2 bits (<= 3);
    #   0.3 / 0.5 = 0.6 -> 1 (0.5); -0.26 / 0.5 = -0.52 -> -1 (-0.5); 0.01 / 0.5 = 0.02 -> 0
    # group 2: max 6.0 in [2^2, 2^3) -> unit 2^(2 - 1) = 2; 6 / 2 = 3 <= 3 fits;
    #   -5 / 2 = -2.5 -> -2 (ties to even: -4.0); 0.7 / 2 = 0.35 -> 0
    x = torch.tensor([1.0, 0.3, -0.26, 0.01, 6.0, -5.0, 0.7, 0.0])
    assert round_bfp(x, 2, 4).tolist() == [1.0, 0.5, -0.5, 0.0, 6.0, -4.0, 0.0, 0.0]
    # a group that would round past the largest mantissa takes the next exponent: max 7.8 in
    # [4, 8) -> unit 2; 7.8 / 2 = 3.9 > 3, so unit 4: 7.8 / 4 = 1.95 -> 2 (8.0); 1.0 / 4 = 0.25 -> 0
    assert round_bfp(torch.tensor([7.8, 1.0]), 2, 4).tolist() == [8.0, 0.0]
    # groups run along the given dim, a last short group where g does not divide it
    y = torch.tensor([[1.0, 3.0], [0.3, 0.26], [0.1, 1.0]])  # dim 0, g = 2: groups (1.0, 0.3) and (0.1)
    assert round_bfp(y, 2, 2, dim=0)[:, 0].tolist() == [1.0, 0.5, 0.125]
    # 0.1 alone: max 0.1 in [2^-4, 2^-3) -> unit 2^-5; 0.1 / 2^-5 = 3.2 > 3, so the next exponent:
    # unit 2^-4, 0.1 / 2^-4 = 1.6 -> 2 -> 0.125


def test_bfp_non_finite_group_is_nan_and_zero_group_stays_zero():
    out = round_bfp(torch.tensor([1.0, float("inf"), 0.0, 0.0]), 4, 2)
    assert torch.isnan(out[:2]).all() and out[2:].tolist() == [0.0, 0.0]


finite = st.floats(min_value=-2.0 ** 100, max_value=2.0 ** 100, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=40), st.integers(1, 10), st.sampled_from([1, 2, 3, 16, 32]))
def test_bfp_nearest_is_idempotent_and_within_half_a_unit(values, m, g):
    x = torch.tensor(values, dtype=torch.float32)
    once = round_bfp(x, m, g)
    assert torch.equal(round_bfp(once, m, g), once)
    pad = (-len(values)) % g
    groups = torch.nn.functional.pad(x, (0, pad)).reshape(-1, g)
    q = torch.nn.functional.pad(once, (0, pad)).reshape(-1, g)
    for xs, qs in zip(groups, q):
        top = float(xs.abs().max())
        if top < 2.0 ** -126:
            continue
        e = np.floor(np.log2(top))
        unit = 2.0 ** (e - m + 1)
        if top / unit > 2 ** m - 1:
            unit *= 2
        assert float((xs - qs).abs().max()) <= unit / 2
        assert float(qs.abs().max()) <= (2 ** m - 1) * unit


@settings(max_examples=40, deadline=None)
@given(st.lists(finite, min_size=1, max_size=40), st.sampled_from(["bf16", "fp16", "e4m3", "e5m2"]))
def test_element_rounding_is_idempotent(values, name):
    x = torch.tensor(values, dtype=torch.float32)
    for fmt in (NumberFormat.parse(name), NumberFormat.parse(name + "_sr")):
        gen = torch.Generator().manual_seed(1)
        once = round_to_format(x, fmt, generator=gen)
        assert torch.equal(round_to_format(once, fmt, generator=gen), once)


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3", "e5m2"])
def test_stochastic_rounding_of_every_grid_value_2_to_the_22_times_over_moves_none(name):
    # every finite value of the format (ml_dtypes' bit patterns), tiled to 2^22 values, rounded
    # stochastically: a value on the grid stays. With float32 draws of 24 bits, floor(v / ulp + u)
    # rounded q + u up to q + 1 for u within 2^(p - 25) of 1 (fp16: about 1 value in 2^14 moved)
    bits = np.arange(1 << (16 if name in ("bf16", "fp16") else 8), dtype=np.uint16 if name in ("bf16", "fp16") else np.uint8)
    grid = torch.from_numpy(bits.view(ML_DTYPES[name]).astype(np.float32))
    grid = grid[torch.isfinite(grid)]
    x = grid.repeat(-(-(1 << 22) // len(grid)))[: 1 << 22]
    out = round_to_format(x, NumberFormat.parse(name + "_sr"), generator=torch.Generator().manual_seed(1))
    assert torch.equal(out, x)


@pytest.mark.parametrize("name", ["bf16_sr", "fp16_sr", "e4m3_sr", "e5m2_sr", "bfp_m4_g16_sr", "bfp_m2_g16_sr"])
def test_stochastic_rounding_is_unbiased(name):
    # 20,000 draws of each of 16 values; each draw is one of two neighbours, so the mean's standard
    # error is at most unit / 2 / sqrt(20,000) ~ 0.0035 units: we allow 0.02 units (> 5 sigma)
    fmt = NumberFormat.parse(name)
    base = torch.tensor([0.3, -0.7, 1.1, 2.9, 0.01, -0.05, 100.3, 0.77, 3.3, -1.6, 0.12, 0.9, -2.2, 5.5, 0.4, 0.6])
    draws = base.repeat(20000, 1)  # BFP groups of 16 run along the last dim: the same group every draw
    gen = torch.Generator().manual_seed(0)
    out = round_to_format(draws, fmt, generator=gen)
    nearest = round_to_format(base, NumberFormat(fmt.kind, fmt.mantissa_bits, fmt.group_size))
    # the two neighbours of each value differ by one unit: the group's (BFP: bfp_unit of the group's
    # largest magnitude, 100.3: 2^6 x 2^(1 - m), doubled for m = 2 as 100.3 > 3 x 32), else the
    # value's ulp in the element format. (Taken from the draws' spread, it was 0 where all 20,000
    # draws landed on one neighbour: 0.01 in bfp_m2_g16 rounds up with probability 0.01 / 64.)
    if fmt.kind == "bfp":
        unit = bfp_unit(base.abs().amax().reshape(1), fmt.mantissa_bits).expand(16)
    else:
        spec = fmt.element
        unit = binade(base).clamp_min(2.0 ** spec.min_normal_exponent) * 2.0 ** (1 - spec.significand_bits)
    assert bool(((out == out.min(0).values) | (out == out.min(0).values + unit)).all())
    bias = ((out.double().mean(0) - base.double()).abs() / unit.double())
    assert bias.max() < 0.02, (bias.max(), name)
    assert (out != nearest).any()  # it is not round to nearest in disguise


def test_fp32_leaves_a_training_step_bitwise_unchanged():
    x, y = torch.randn(8, 3, 16, 16), torch.arange(8) % 10
    method = parse_method("fedavg")
    states = []
    for arithmetic in (None, Arithmetic("fp32")):
        torch.manual_seed(0)
        model = prepare_model(build_model("convnet", num_classes=10, image_size=16), method, seed=0)
        trainer = client_trainer(model, model.state_dict(), Hparams(lr=0.1), method, arithmetic=arithmetic)
        trainer.step(x, y)
        trainer.step(x, y)
        states.append(model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


class Mixer(torch.nn.Module):
    """A user's module with the GEMMs the paper's models lack: a biased linear (addmm), a batched
    product (bmm) and a transposed convolution."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(3, 4, 2, stride=2)
        self.proj = torch.nn.Linear(16, 16)
        self.classifier = torch.nn.Linear(64, 10, bias=False)

    def forward(self, x):
        h = torch.nn.functional.avg_pool2d(self.up(x), 8)  # [B, 4, 4, 4]
        t = self.proj(h.flatten(2))  # [B, 4, 16]
        a = torch.bmm(t, t.transpose(1, 2)).softmax(-1)  # [B, 4, 4]
        return self.classifier(torch.bmm(a, t).flatten(1))


@pytest.mark.parametrize("model_name, method_name", [("convnet", "fedavg"), ("mobilenetv2", "spherefed"),
                                                     ("mixer", "fedavg")])
def test_the_emulation_reaches_every_gemm_of_a_captured_step(model_name, method_name):
    # the trace is the oracle: two rounded operands per GEMM it records (forward, dX, dW), by op
    method = parse_method(method_name)
    torch.manual_seed(0)
    net = Mixer() if model_name == "mixer" else build_model(model_name, num_classes=10, image_size=16,
                                                            head=method.head)
    model = prepare_model(net, method, seed=0)
    hp = Hparams(lr=0.01)
    x, y = torch.randn(4, 3, 16, 16), torch.arange(4)
    trace = capture_step(lambda m: client_trainer(m, m.state_dict(), hp, method).step, model, x, y)
    expected = Counter()
    for op in trace.ops:
        if isinstance(op.work, GemmWork):
            expected[".".join(op.aten.split(".")[:2])] += 2  # aten.mm.default -> aten.mm
    arithmetic = Arithmetic("bfp_m4_g16")
    trainer = client_trainer(model, model.state_dict(), hp, method, arithmetic=arithmetic)
    trainer.step(x, y)  # the warm-up step the capture also runs, then the captured one
    arithmetic.rounded_operands.clear()
    trainer.step(x, y)
    assert sum(expected.values()) > 10
    assert dict(arithmetic.rounded_operands) == dict(expected)
    assert set(expected) <= set(GEMM_OPS)


def test_rounding_keeps_a_tensors_layout():
    # a rounded operand keeps its strides, so the ops after it take the kernels they would take
    # in FP32 (a channels-last result would turn a later linear's addmm into matmul + add)
    # and the groups do not depend on the layout: each channel's values over batch and pixels are
    # grouped in (batch, row, column) order whether the tensor is NCHW or channels-last
    x = torch.randn(32, 8, 5, 5)
    per_channel = round_bfp(x.transpose(0, 1).reshape(8, -1), 4, 16).reshape(8, 32, 5, 5).transpose(0, 1)
    along_channels = round_bfp(x.movedim(1, -1).contiguous(), 4, 16).movedim(-1, 1)
    for t in (x, x.contiguous(memory_format=torch.channels_last)):
        assert torch.equal(round_bfp(t, 4, 16, dim=(0, 2, 3)), per_channel)
        assert torch.equal(round_bfp(t, 4, 16, dim=1), along_channels)
    for t in (x, x.contiguous(memory_format=torch.channels_last), x.transpose(2, 3)):
        for dim in (0, 1, -1, (0, 2, 3)):
            assert round_bfp(t, 4, 16, dim=dim).stride() == t.stride()


def test_a_format_changes_training_and_the_same_seed_repeats_it():
    x, y = torch.randn(16, 3, 16, 16), torch.arange(16) % 10
    method = parse_method("fedavg")

    def train(fmt: str, seed: int) -> torch.Tensor:
        torch.manual_seed(0)
        model = prepare_model(build_model("convnet", num_classes=10, image_size=16), method, seed=0)
        gen = torch.Generator().manual_seed(seed)
        arithmetic = None if fmt == "fp32" else Arithmetic(fmt, generator=gen)
        trainer = client_trainer(model, model.state_dict(), Hparams(lr=0.05), method, arithmetic=arithmetic)
        for _ in range(3):
            trainer.step(x, y)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    fp32, sr_a, sr_b, sr_c = train("fp32", 0), train("bfp_m4_g16_sr", 0), train("bfp_m4_g16_sr", 0), train(
        "bfp_m4_g16_sr", 1)
    assert torch.equal(sr_a, sr_b)  # same seed, same format: bitwise the same
    assert not torch.equal(sr_a, sr_c)  # another rounding stream
    assert not torch.equal(fp32, sr_a)


def test_a_run_names_its_format_once_and_refuses_bad_ones():
    assert Execution(number_format="bfp_m4_g16_sr").describe()["number_format"] == "bfp_m4_g16_sr"
    assert "number_format" not in Execution().settings()  # FP32 runs keep the identity they had
    assert Execution(number_format="e4m3").settings()["number_format"] == "e4m3"
    assert execution_of("cpu", {"number_format": None}, {"number_format": "bf16"}).number_format == "bf16"
    assert execution_of("cpu", {"number_format": "fp16"}, {"number_format": "bf16"}).number_format == "fp16"
    with pytest.raises(NumberFormatError, match="number format 'fp64': expected one of fp32, bf16, fp16, e4m3, e5m2"):
        Execution(number_format="fp64")
    with pytest.raises(NumberFormatError, match="fp32_sr: fp32 is the accumulator's format"):
        Execution(number_format="fp32_sr")
    with pytest.raises(ValueError, match="--bf16 .autocast. and --number-format bf16 both set the arithmetic"):
        Execution(bf16=True, number_format="bf16")
    with pytest.raises(ValueError, match=r"p.toml \[execution\]: number format 'int8'"):
        preset_options({"number_format": "int8"}, where="p.toml")
    with pytest.raises(ValueError, match="stochastic rounding needs a generator"):
        Arithmetic("bf16_sr")


def test_a_grid_point_takes_a_number_format():
    from bench.lib.run.config import resolved_runs
    from bench.lib.run.study import point_config

    cfg = point_config({"model": "convnet", "number_format": "bfp_m4_g16", "preset": "smoke", "device": "cpu"})
    resolved = resolved_runs(cfg)[0]
    assert resolved.execution.number_format == "bfp_m4_g16"
    # priced on the hardware computing in the format: 1-byte words, BFP's MAC energy
    assert resolved.hw.word_bytes == 1 and resolved.hw.energy.mac_pj < 0.2
    with pytest.raises(ValueError, match="number format 'int8'"):
        resolved_runs(point_config({"model": "convnet", "number_format": "int8", "preset": "smoke", "device": "cpu"}))

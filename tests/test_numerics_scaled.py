"""Scaled FP8 and the OCP Microscaling (MX) formats (accel_sim.formats, workloads.numerics; MX
specification v1.0, 2023; Micikevicius et al., "FP8 Formats for Deep Learning", 2022): element
casts against ml_dtypes (an independent implementation) element by element, the block scale rule
and the per-tensor factor on hand-worked values (the arithmetic in the comments), and what scaling
does to a training step."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from accel_sim.formats import ELEMENT_FORMATS, MX_ELEMENTS, NumberFormat, NumberFormatError
from workloads.numerics.emulate import AMAX_HISTORY, Arithmetic
from workloads.numerics.quantize import round_to_format, round_to_grid

ML_DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e3m2": ml_dtypes.float6_e3m2fn,
             "e2m3": ml_dtypes.float6_e2m3fn, "e2m1": ml_dtypes.float4_e2m1fn}


def element_values(element: str, seed: int = 0) -> torch.Tensor:
    """Values over the element's whole finite range: normals, subnormals, exact ties (midpoints of
    neighbouring grid values) and signed zeros."""
    spec = ELEMENT_FORMATS[element]
    g = torch.Generator().manual_seed(seed)
    low, high = spec.min_normal_exponent - spec.significand_bits - 1, int(np.log2(spec.max_finite))
    wide = torch.rand(4000, generator=g) * 2 * torch.exp2(torch.randint(low, high, (4000,), generator=g).float())
    grid = torch.from_numpy(np.arange(256, dtype=np.uint8).view(ML_DTYPES[element]).astype(np.float32)) \
        if spec.bits == 8 else torch.from_numpy(np.arange(2 ** spec.bits, dtype=np.uint8).view(ML_DTYPES[element])
                                                .astype(np.float32))
    grid = grid[torch.isfinite(grid)].abs().unique()
    ties = (grid[1:] + grid[:-1]) / 2
    values = torch.cat([wide, ties, grid, torch.tensor([0.0, -0.0])])
    values = values[values <= spec.max_finite]
    return torch.cat([values, -values])


@pytest.mark.parametrize("element", list(ML_DTYPES))
def test_element_grid_equals_ml_dtypes_cast(element):
    x = element_values(element)
    ours = round_to_grid(x, ELEMENT_FORMATS[element]).numpy()
    ref = x.numpy().astype(ML_DTYPES[element]).astype(np.float32)
    np.testing.assert_array_equal(ours, ref)
    assert np.array_equal(np.signbit(ours), np.signbit(ref))  # signed zeros too
    # beyond the largest value: saturated (the MX conversion's clamp, and ml_dtypes' own for the
    # FP6 / FP4 types, which have no NaN)
    over = torch.tensor([1.01, 3.0, 1e6]) * ELEMENT_FORMATS[element].max_finite
    assert round_to_grid(over, ELEMENT_FORMATS[element]).tolist() == [ELEMENT_FORMATS[element].max_finite] * 3


@pytest.mark.parametrize("name", list(MX_ELEMENTS))
def test_mx_blocks_equal_an_independent_numpy_cast(name):
    # per block of 32: the scale 2^(floor(log2 amax) - emax) computed with numpy's log2, the
    # elements cast with ml_dtypes (INT8: np.rint of x / X * 64, clipped to +-127), times the scale
    fmt = NumberFormat.parse(name)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 32, generator=g) * torch.exp2(torch.randint(-20, 20, (64, 1), generator=g).float())
    ours = round_to_format(x, fmt).numpy()
    xs = x.numpy().astype(np.float64)
    element = MX_ELEMENTS[name]
    emax = {"e4m3": 8, "e5m2": 15, "e3m2": 4, "e2m3": 2, "e2m1": 2, "int8": 0}[element]
    scale = 2.0 ** (np.floor(np.log2(np.abs(xs).max(axis=1, keepdims=True))) - emax)
    v = (xs / scale).astype(np.float32)
    if element == "int8":
        cast = np.clip(np.rint(v * 64), -127, 127) / 64
    else:
        with np.errstate(over="ignore"):
            cast = np.clip(v, -ELEMENT_FORMATS[element].max_finite, ELEMENT_FORMATS[element].max_finite) \
                .astype(ML_DTYPES[element]).astype(np.float32)
    np.testing.assert_array_equal(ours, (cast * scale).astype(np.float32))


def test_mx_scale_rule_by_hand_including_the_clipped_largest_value():
    # MXFP8 E4M3, emax 8, largest 448 = 1.75 x 2^8. A block [1.9, 0.3, 0 x 30]:
    # spec: X = 2^(floor(log2 1.9) - 8) = 2^-8; 1.9 / X = 486.4 > 448 -> clipped to 448: 448 / 256 = 1.75.
    #   0.3 / X = 76.8: binade 64, unit 64 / 8 = 8, 76.8 / 8 = 9.6 -> 10 -> 80 -> 80 / 256 = 0.3125.
    # round-up: 1.9 > 448 x 2^-8, so X = 2^-7: 1.9 x 128 = 243.2, unit 16, 15.2 -> 15 -> 240 -> 1.875;
    #   0.3 x 128 = 38.4, unit 4, 9.6 -> 10 -> 40 -> 0.3125.
    block = torch.tensor([1.9, 0.3] + [0.0] * 30)
    assert round_to_format(block, NumberFormat.parse("mxfp8_e4m3"))[:2].tolist() == [1.75, 0.3125]
    assert round_to_format(block, NumberFormat.parse("mxfp8_e4m3_ru"))[:2].tolist() == [1.875, 0.3125]
    # MXFP4 E2M1, emax 2, largest 6 = 1.5 x 2^2. [5.0, 1.0, 0.3, -0.76]: X = 2^(2 - 2) = 1;
    # 5: binade 4, unit 2, 2.5 -> 2 (ties to even) -> 4; 1.0 -> 1; 0.3: unit 0.5 (the subnormal
    # grid), 0.6 -> 1 -> 0.5; -0.76: 1.52 -> 2 -> -1.0.
    assert round_to_format(torch.tensor([5.0, 1.0, 0.3, -0.76]), NumberFormat.parse("mxfp4_e2m1")).tolist() == \
        [4.0, 1.0, 0.5, -1.0]
    # [7.0, 1.0]: spec X = 1, 7 / 2 = 3.5 -> 4 -> 8 > 6: clipped to 6. Round-up: 7 > 6 x 1 so X = 2:
    # 3.5, unit 1, -> 4 (even) -> 8; 1.0 / 2 = 0.5 -> 0.5 -> 1.0.
    assert round_to_format(torch.tensor([7.0, 1.0]), NumberFormat.parse("mxfp4_e2m1")).tolist() == [6.0, 1.0]
    assert round_to_format(torch.tensor([7.0, 1.0]), NumberFormat.parse("mxfp4_e2m1_ru")).tolist() == [8.0, 1.0]
    # MXINT8, emax 0, elements k / 64 with |k| <= 127. [1.5, 0.01, -1.0]: X = 1; 96 / 64 = 1.5;
    # 0.64 -> 1 -> 0.015625; -1.0. [1.999]: 127.94 -> 128 > 127: clipped to 127 / 64 = 1.984375;
    # round-up: X = 2, 0.9995 x 64 = 63.97 -> 64 -> 1.0 x 2 = 2.0.
    assert round_to_format(torch.tensor([1.5, 0.01, -1.0]), NumberFormat.parse("mxint8")).tolist() == \
        [1.5, 0.015625, -1.0]
    assert round_to_format(torch.tensor([1.999]), NumberFormat.parse("mxint8")).tolist() == [1.984375]
    assert round_to_format(torch.tensor([1.999]), NumberFormat.parse("mxint8_ru")).tolist() == [2.0]
    # blocks are 32 values: a large value in the second block does not scale the first
    two = torch.cat([torch.full((32,), 0.3), torch.full((32,), 1000.0)])
    assert round_to_format(two, NumberFormat.parse("mxfp8_e4m3"))[:32].unique().tolist() == [0.3125]
    # a block with an infinity is NaN, an all-zero block stays zero
    out = round_to_format(torch.tensor([1.0, float("inf")] + [0.0] * 30 + [0.0] * 32), NumberFormat.parse("mxint8"))
    assert torch.isnan(out[:32]).all() and out[32:].eq(0).all()


def test_scaled_e4m3_by_hand():
    # [0.001, 0.0005, -0.0002]: amax 0.001 = 1.024 x 2^-10; 1.024 <= 1.75, so 2^s = 2^(8 + 10) = 2^18.
    # 0.001 x 2^18 = 262.144: binade 256, unit 32, 8.19 -> 8 -> 256 -> 2^-10 = 0.0009765625;
    # 0.0005 x 2^18 = 131.07: unit 16, 8.19 -> 8 -> 128 -> 2^-11; -0.0002 x 2^18 = -52.43: binade 32,
    # unit 4, 13.1 -> 13 -> -52 -> -52 / 2^18.
    x = torch.tensor([0.001, 0.0005, -0.0002])
    assert round_to_format(x, NumberFormat.parse("e4m3_cs")).tolist() == [2 ** -10, 2 ** -11, -52 / 2 ** 18]
    # unscaled, the same tensor is mostly lost: E4M3's smallest subnormal is 2^-9 = 0.00195;
    # 0.001 / 2^-9 = 0.512 -> 1; 0.0005 -> 0.256 -> 0; -0.0002 -> -0.
    assert round_to_format(x, NumberFormat.parse("e4m3")).tolist() == [2 ** -9, 0.0, -0.0]
    # amax 1.9: 1.9 > 1.75, so 2^s = 2^(8 - 0 - 1) = 2^7; 1.9 x 128 = 243.2 -> 240 -> 1.875: never clipped
    assert round_to_format(torch.tensor([1.9]), NumberFormat.parse("e4m3_cs")).tolist() == [1.875]
    # a given amax (delayed scaling) smaller than the tensor's: the excess saturates at 448 / 2^s.
    # amax 1.0 -> 2^8: 1.9 x 256 = 486.4 -> 448 -> 1.75
    assert round_to_format(torch.tensor([1.9]), NumberFormat.parse("e4m3_ds"), amax=torch.tensor(1.0)).tolist() == [1.75]
    # E5M2, emax 15, largest 1.75 x 2^15: amax 3.0 = 1.5 x 2^1: 2^s = 2^14; 3 x 2^14 exact;
    # 0.1 x 2^14 = 1638.4: binade 1024, unit 256, 6.4 -> 6 -> 1536 -> 1536 / 2^14 = 0.09375
    assert round_to_format(torch.tensor([3.0, 0.1]), NumberFormat.parse("e5m2_cs")).tolist() == [3.0, 0.09375]


def test_scaled_tensor_equals_ml_dtypes_cast_of_the_scaled_values():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2000, generator=g) * 1e-4
    amax = x.abs().max()
    s = 2.0 ** np.floor(np.log2(448.0 / amax.item()))
    ref = (x.numpy() * s).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) / s
    np.testing.assert_array_equal(round_to_format(x, NumberFormat.parse("e4m3_cs")).numpy(), ref)


def _linear_step(fmt: str, scale: float):
    """One step of a bias-free linear layer y = x W^T with loss sum(y * c): dy = c, dW = c^T x."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 4, bias=False)
    x, c = torch.randn(8, 16) * scale, torch.randn(8, 4) * scale
    with Arithmetic(fmt):
        (layer(x) * c).sum().backward()
    return layer, x, c


def test_a_scaled_fp8_step_that_was_all_zeros_unscaled_is_not():
    # gradients of order 1e-4 (|dy| < 5e-4 here) are below half of E4M3's smallest subnormal (2^-9): unscaled, dy rounds to
    # zero and so does every weight gradient; scaled, the tensor is moved into E4M3's range first
    unscaled = _linear_step("e4m3", 1e-4)[0].weight.grad
    assert unscaled.eq(0).all()
    for name in ("e4m3_cs", "e4m3_ds", "fp8_hybrid_cs", "fp8_hybrid_ds"):
        grad = _linear_step(name, 1e-4)[0].weight.grad
        assert grad.ne(0).float().mean() > 0.9, name


def test_the_hybrid_rounds_gradients_to_e5m2_and_the_rest_to_e4m3():
    layer, x, c = _linear_step("fp8_hybrid_cs", 1.0)
    fmt = NumberFormat.parse("fp8_hybrid_cs")
    dy = round_to_format(c, fmt, gradient=True)  # E5M2, scaled
    expected = dy.t() @ round_to_format(x, fmt)  # x: an activation, E4M3
    torch.testing.assert_close(layer.weight.grad, expected, rtol=0, atol=1e-6)
    e4m3_everywhere = round_to_format(c, NumberFormat.parse("e4m3_cs")).t() @ round_to_format(x, fmt)
    assert not torch.allclose(layer.weight.grad, e4m3_everywhere)


def test_delayed_scaling_takes_the_previous_steps_amax():
    # step 1 has no history: current scaling; step 2 scales the same operand by step 1's amax
    fmt = NumberFormat.parse("e4m3_ds")
    arithmetic = Arithmetic(fmt)
    w = torch.ones(1, 1)
    with arithmetic:
        torch.mm(torch.tensor([[1.0]]), w)  # operand 0's amax: 1.0
    with arithmetic:
        out = torch.mm(torch.tensor([[1.9]]), w)  # scaled by amax 1.0: 2^8, 486.4 saturates at 448 -> 1.75
    assert out.item() == 1.75
    assert round_to_format(torch.tensor([1.9]), NumberFormat.parse("e4m3_cs")).item() == 1.875  # current: no clip
    assert len(arithmetic.amax_history) == 2 and len(arithmetic.amax_history[0]) == 2


def test_names_parse_round_trip_and_refuse_what_does_not_exist():
    for name in ("e4m3_cs", "e5m2_ds", "fp8_hybrid_ds_sr", "mxfp8_e5m2", "mxfp6_e3m2_ru", "mxfp6_e2m3_sr",
                 "mxfp4_e2m1_ru_sr", "mxint8"):
        assert NumberFormat.parse(name).name == name
    for bad in ("fp8_hybrid", "bf16_cs", "mxfp4", "mxfp4_e2m1_cs", "bfp_m4_g16_ru", "e4m3_ru"):
        with pytest.raises(NumberFormatError):
            NumberFormat.parse(bad)
    assert NumberFormat.parse("mxfp4_e2m1").bits_per_value == 4.25  # 4 + 8 / 32
    assert NumberFormat.parse("mxfp8_e4m3").payload_bytes(64) == 66  # 64 B + two 1-byte scales


def test_e4m3s_grid_rounding_is_torchs_cast_bit_for_bit():
    # e4m3 rounds on the grid (faster on the CPU than torch's float8_e4m3fn cast): the same bits as
    # that cast, infinities (to +-448), NaN, FP32 subnormals and signed zeros included
    from tests.test_numerics import awkward_values

    g = torch.Generator().manual_seed(3)
    x = torch.cat([awkward_values(), torch.randn(20000, generator=g) * 100, torch.randn(20000, generator=g) * 1e-3])
    ours, cast = round_to_format(x, NumberFormat.parse("e4m3")), x.to(torch.float8_e4m3fn).float()
    assert torch.equal(ours.view(torch.int32)[~cast.isnan()], cast.view(torch.int32)[~cast.isnan()])
    assert torch.equal(ours.isnan(), cast.isnan())


def test_delayed_scaling_past_its_history_length_takes_the_last_windows_amax():
    # 24 steps of one operand (more than the AMAX_HISTORY = 16 amaxes a history holds): each step is scaled by the
    # largest of the previous (up to) 16 steps' amaxes, its own on the first; the kept floats
    # (Arithmetic._history_values) follow the deque as its oldest amaxes drop out
    magnitudes = [2.0 ** (k % 7 - 3) * (1 + k % 3 / 4) for k in range(24)]
    magnitudes[20] = 64.0  # enters the window late: scales the last three steps
    arithmetic, w = Arithmetic(NumberFormat.parse("e4m3_ds")), torch.ones(1, 1)
    for step, m in enumerate(magnitudes):
        with arithmetic:
            torch.mm(torch.tensor([[m]]), w)
        window = magnitudes[max(0, step - AMAX_HISTORY):step] or [m]
        assert float(arithmetic.scaled_by[0]) == max(window), step
        assert [float(a) for a in arithmetic.amax_history[0]] == magnitudes[max(0, step + 1 - AMAX_HISTORY):step + 1]

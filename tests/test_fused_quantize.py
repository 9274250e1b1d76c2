"""The fused quantizer (workloads.numerics.fused) and its counter-based draws (workloads.numerics.splitmix):
SplitMix64 against its published outputs, the kernel bit for bit against the torch operations
on the layouts a training step rounds, stochastic rounding on the two neighbouring grid points and
unbiased (tolerances stated), its streams independent across clients and steps, and the fallback
said in one line. The reference quantizers (tests/test_quantize_reference.py) cover every format
and awkward layout."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

from accel_sim.formats import NumberFormat
from workloads.fl.execution import Execution
from workloads.fl.loop import arithmetic_of
from workloads.numerics import fused, splitmix
from workloads.numerics.quantize import round_to_format

needs_kernel = pytest.mark.skipif(fused.kernel() is None, reason=f"the fused kernel is not available: {fused.fallback_reason}")

# SplitMix64 seeded with 1234567: its first five outputs (Rosetta Code, "Pseudo-random
# numbers/Splitmix64", from Vigna's splitmix64.c); seeded with 0, its first (0xE220A8397B1DCDAF);
# seeded with 2^64 - 1 and with 0x243F6A8885A308D3 (a stream in the high word), its first two, from
# Vigna's splitmix64.c compiled with gcc -O2. Output number c + 1 is splitmix64(counter c) under
# the seed stream x 2^32 + key.
SEED_1234567 = [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431,
                16408922859458223821]
KNOWN_ANSWERS = [(c, 0, 1234567, out) for c, out in enumerate(SEED_1234567)] + [(0, 0, 0, 0xE220A8397B1DCDAF)] + \
    [(0, 0xFFFFFFFF, 0xFFFFFFFF, 0xE4D971771B652C20), (1, 0xFFFFFFFF, 0xFFFFFFFF, 0xE99FF867DBF682C9),
     (0, 0x243F6A88, 0x85A308D3, 0x2CB0F69F4ABEA221), (1, 0x243F6A88, 0x85A308D3, 0x9417034723148989)]


@pytest.mark.parametrize("counter, stream, key, expected", KNOWN_ANSWERS)
def test_splitmix64_gives_its_published_outputs(counter, stream, key, expected):
    word = splitmix.splitmix64(torch.tensor([counter]), stream, key).item()
    assert word & (2 ** 64 - 1) == expected  # the int64 holding the 64-bit pattern


@needs_kernel
@pytest.mark.parametrize("counter, stream, key, expected", KNOWN_ANSWERS)
def test_the_kernels_splitmix64_gives_its_published_outputs(counter, stream, key, expected):
    from workloads.numerics._fused_kernel import _splitmix64
    assert _splitmix64(np.uint64(counter), np.uint64((stream << 32) | key)) == expected


def test_uniform_of_words_keeps_the_top_bits():
    # 0xFFFFFFFF cut to 20 bits: (2^20 - 1) / 2^20; 0x80000000 cut to 1 bit: 1/2
    words = torch.tensor([0xFFFFFFFF, 0x80000000, 0], dtype=torch.int64)
    assert splitmix.uniform_of_words(words, 20).tolist() == [(2 ** 20 - 1) / 2 ** 20, 0.5, 0.0]
    assert splitmix.uniform_of_words(words, 1).tolist() == [0.5, 0.5, 0.0]


@pytest.mark.parametrize("stream, key", [(0, 0), (0x243F6A88, 0x85A308D3)])
def test_the_draws_are_uniform_and_neighbours_uncorrelated(stream, key):
    # n = 2^20 draws of 8 bits, positions 0 .. n - 1 of one stream: the counts of the 256 values give
    # a chi-square statistic (255 degrees of freedom) below 377.08, its 10^-6 upper quantile
    # (scipy.stats.chi2.isf(1e-6, 255)); neighbouring draws, the two words of one output (j even,
    # j + 1) and two outputs' adjacent words (j odd, j + 1), correlate within 5 standard deviations
    # of independence, 5 / sqrt(n / 2) = 0.0069
    n = 1 << 20
    u = splitmix.counter_uniform((n,), stream, key, 8).double()
    counts = torch.bincount((u * 256).long(), minlength=256).double()
    assert counts.numel() == 256
    assert ((counts - n / 256) ** 2 / (n / 256)).sum().item() < 377.08
    for a, b in ((u[0::2], u[1::2]), (u[1:-1:2], u[2::2])):
        assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 5 / math.sqrt(n / 2)


# the layouts a MobileNetV2 step rounds (NCHW and channels-last activations along channels and
# along pixels, a depthwise weight, a linear layer's operands)
STEP_LAYOUTS = [
    ((32, 96, 8, 8), False, 1), ((32, 96, 8, 8), False, (0, 2, 3)), ((32, 96, 2, 2), False, (0, 2, 3)),
    ((32, 96, 8, 8), True, 1), ((32, 96, 8, 8), True, (0, 2, 3)), ((96, 1, 3, 3), False, 0),
    ((32, 1280), False, -1), ((1280, 10), False, -2), ((32, 24, 1, 1), False, 1),
]
KERNEL_FORMATS = ["bfp_m4_g16", "bfp_m4_g16_sr", "bfp_m8_g16", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3",
                  "mxfp4_e2m1", "mxint8", "mxfp8_e4m3_ru", "mxfp4_e2m1_sr", "e4m3_cs", "e5m2_cs", "e4m3_cs_sr"]


@needs_kernel
@pytest.mark.parametrize("name", KERNEL_FORMATS)
def test_the_kernel_equals_the_torch_operations_on_a_steps_layouts(name, monkeypatch):
    fmt = NumberFormat.parse(name)
    for i, (shape, channels_last, dim) in enumerate(STEP_LAYOUTS):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(i)) * 3
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        results = []
        for enabled in (True, False):
            monkeypatch.setattr(fused, "_kernel_enabled", enabled)
            results.append(round_to_format(x, fmt, dim=dim, generator=torch.Generator().manual_seed(7)))
        assert torch.equal(results[0].view(torch.int32), results[1].view(torch.int32)), (name, shape, dim)
        assert results[0].stride() == x.stride()


# Runs of adjacent draw positions that start at an odd position, where the kernel's first random
# word is the high half of a SplitMix64 output (_fused_kernel._hash_pairs): groups of 11 adjacent
# values (batches of floor(1024 / 11) = 93 groups, so the second batch starts at position 1023), and
# a permuted tensor rounded under one scale whose memory rows of 5 values start at positions
# 5 x (odd) (x[i, j, k] at 20 i + 5 j + k after permute(1, 0, 2) of a (3, 4, 5) tensor)
ODD_STARTS = [("bfp_m4_g11_sr", (300, 11), None, -1), ("bfp_m2_g11_sr", (300, 11), None, -1),
              ("e4m3_cs_sr", (3, 4, 5), (1, 0, 2), -1), ("e5m2_cs_sr", (40, 6, 5), (1, 0, 2), -1)]


@needs_kernel
@pytest.mark.parametrize("name, shape, permutation, dim", ODD_STARTS)
def test_the_kernel_equals_the_torch_operations_where_draws_start_at_an_odd_position(name, shape, permutation, dim,
                                                                                      monkeypatch):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(5)) * 3
    if permutation is not None:
        x = x.permute(permutation)
    calls = []
    real = fused.kernel()
    monkeypatch.setattr(fused, "_kernel", lambda *args: calls.append(args[2]) or real(*args))
    results = []
    for enabled in (True, False):
        monkeypatch.setattr(fused, "_kernel_enabled", enabled)
        results.append(round_to_format(x, NumberFormat.parse(name), dim=dim, generator=torch.Generator().manual_seed(7)))
    assert calls == [x.numel()]  # the kernel rounded every value once, then torch's operations
    assert torch.equal(results[0].view(torch.int32), results[1].view(torch.int32))


def neighbours_of(x: torch.Tensor, unit: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.floor(x / unit) * unit, torch.ceil(x / unit) * unit


@pytest.mark.parametrize("name, unit", [("bfp_m4_g16_sr", 2.0 ** -3), ("mxfp8_e4m3_sr", 2.0 ** -3)])
def test_stochastic_rounding_lands_on_a_neighbour_and_is_unbiased(name, unit):
    # 2^16 groups of 16 values, each group's largest 1.75 (BFP m=4: shared exponent 0, unit
    # 2^(0 - 4 + 1) = 1/8; MX E4M3: scale 2^(0 - 8), the elements in [1, 2) have unit 2^-3 x 2^8,
    # times the scale 1/8). The other 15 values lie a fraction f = 0.3 of a unit above a grid point
    # in [1, 1.75): each rounds up with probability 0.3. Over n = 15 x 2^16 values the mean of the
    # rounding error is 0 within 5 standard deviations, 5 sqrt(0.3 x 0.7 / n) = 0.0023 units; the
    # fraction rounded up is 0.3 within the same tolerance.
    groups, f = 1 << 16, 0.3
    g = torch.Generator().manual_seed(0)
    lower = 1 + torch.randint(0, 6, (groups, 15), generator=g) * unit
    x = torch.cat([torch.full((groups, 1), 1.75), lower + f * unit], dim=1)
    out = round_to_format(x, NumberFormat.parse(name), dim=-1, generator=torch.Generator().manual_seed(1))
    down, up = neighbours_of(x[:, 1:], unit)
    rounded = out[:, 1:]
    assert bool(((rounded == down) | (rounded == up)).all())
    n = rounded.numel()
    tolerance = 5 * math.sqrt(f * (1 - f) / n)
    assert abs(((rounded - x[:, 1:]) / unit).mean().item()) < tolerance
    assert abs((rounded == up).double().mean().item() - f) < tolerance
    assert torch.equal(out[:, 0], x[:, 0])  # on the grid: stays


def test_scaled_fp8_stochastic_rounding_is_unbiased():
    # e4m3_cs_sr of 2^20 values in [1, 2) x 2^-8: amax below 2^-7, so the scale is 2^15
    # (floor(log2(448 / amax)) with amax x 2^15 < 256 x 1.75) and the scaled values lie in
    # [2^7, 2^8), where E4M3's unit is 2^(7 - 3) = 16, that is 2^-11 = 1/8 x 2^-8 after scaling back.
    # Each value lies a fraction f = 0.7 of that unit above a grid point: it rounds to one of the
    # two, and the mean error is 0 within 5 sqrt(0.21 / n) units.
    n, f, unit = 1 << 20, 0.7, 2.0 ** -11
    g = torch.Generator().manual_seed(2)
    x = (1 + torch.randint(0, 8, (n,), generator=g) * 0.125 + f * 0.125) * 2.0 ** -8
    out = round_to_format(x, NumberFormat.parse("e4m3_cs_sr"), generator=torch.Generator().manual_seed(3))
    down, up = neighbours_of(x, unit)
    assert bool(((out == down) | (out == up)).all())
    assert abs(((out - x) / unit).mean().item()) < 5 * math.sqrt(f * (1 - f) / n)


def rounded_up(generator: torch.Generator) -> torch.Tensor:
    """Which of 2^18 values half a unit above the BFP m=4 grid round up (groups led by 1.75)."""
    x = torch.full((1 << 14, 16), 1 + 0.5 * 2.0 ** -3)
    x[:, 0] = 1.75
    return round_to_format(x, NumberFormat.parse("bfp_m4_g16_sr"), generator=generator)[:, 1:] > x[:, 1:]


def test_stochastic_rounding_streams_are_independent_across_clients_and_steps():
    # the draws of two clients of a round (arithmetic_of: generators seeded by derived_seed(seed,
    # round, client, ...)) and of one client's two successive roundings (steps): each rounds up half
    # its 15 x 2^14 = 245760 values, and the two agree on 1/2 of them, as independent coin flips do,
    # within 5 standard deviations (5 x 0.5 / sqrt(245760) = 0.005); the same seed gives the same bits
    execution = Execution(device="cpu", number_format="bfp_m4_g16_sr")
    a = arithmetic_of(execution, 0, 3, 0).generator
    b = arithmetic_of(execution, 0, 3, 1).generator
    first, second = rounded_up(a), rounded_up(a)
    other_client = rounded_up(b)
    tolerance = 5 * 0.5 / math.sqrt(first.numel())
    for u, v in ((first, second), (first, other_client)):
        assert abs(u.double().mean().item() - 0.5) < tolerance
        assert abs((u == v).double().mean().item() - 0.5) < tolerance
    assert torch.equal(rounded_up(arithmetic_of(execution, 0, 3, 0).generator), first)


def test_a_missing_numba_falls_back_to_torch_saying_so_once(monkeypatch, capsys):
    import workloads.numerics
    x = torch.randn(4, 32, 3, 3, generator=torch.Generator().manual_seed(0))
    fmt = NumberFormat.parse("mxfp4_e2m1_sr")
    expected = round_to_format(x, fmt, dim=1, generator=torch.Generator().manual_seed(1))
    monkeypatch.setattr(fused, "_kernel", None)
    monkeypatch.setattr(fused, "fallback_reason", None)
    monkeypatch.delitem(sys.modules, "workloads.numerics._fused_kernel", raising=False)
    monkeypatch.delattr(workloads.numerics, "_fused_kernel", raising=False)
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    capsys.readouterr()
    first = round_to_format(x, fmt, dim=1, generator=torch.Generator().manual_seed(1))
    again = round_to_format(x, fmt, dim=1, generator=torch.Generator().manual_seed(1))
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and "fused quantizer is not available" in said[0] and "numba" in said[0]
    assert torch.equal(first.view(torch.int32), expected.view(torch.int32)) and torch.equal(first, again)

"""Stochastic rounding's random bits from a counter-based generator: SplitMix64 (Steele, Lea and
Flood, "Fast Splittable Pseudorandom Number Generators", OOPSLA 2014; the fixed-increment form of
Java 8's ``SplittableRandom``, Vigna's reference ``splitmix64.c``). Its ``n``-th output is
``mix64(seed + n x GAMMA)``: a hash of a counter, so any output is computed from its number alone.
Steele et al. test the generator with DieHarder and TestU01's BigCrush, which it passes (Vigna:
"a very fast generator passing BigCrush"); ``mix64`` is Stafford's "variant 13" of MurmurHash3's
64-bit finaliser.

A draw is a pure function of a seed and a counter: the uniform number of the value at position
``j`` of a rounding (the position its draw had in ``torch.rand``'s tensor before, ``quantize``) is
32-bit word ``j mod 2`` (0: the low half, 1: the high half) of ``splitmix64(floor(j / 2), stream,
key)``, the ``floor(j / 2) + 1``-th output of SplitMix64 seeded with ``stream x 2^32 + key``, cut
to its top ``b`` bits (``uniform_of_words``): one call serves two adjacent positions. ``key`` and
``stream`` (32 bits each) are drawn once per rounded tensor from the run's ``torch.Generator``
(``stream_key``), so a run is reproducible from its seed, and two clients, steps or tensors draw
from unrelated places of SplitMix64's sequence (two tensors' draws overlap only where their seeds
lie within their lengths' ``GAMMA`` steps of each other: about ``2 n / 2^64`` for ``n`` draws).
A kernel can compute any draw where it needs it, without a pass that fills a tensor of them
(``workloads.numerics.fused``).

Why SplitMix64 (issue 55: stochastic rounding's draws took ~25 ms of a ``bfp_m4_g16_sr`` step's
56-64 ms of rounding): Philox2x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel Random Numbers: As
Easy as 1, 2, 3", SC 2011), the generator before, takes ten 32 x 32-bit multiplies for two words;
SplitMix64 two 64-bit multiplies and three shift-xors for the same two words. In the fused kernel,
on five operands of a MobileNetV2 step's layouts, a draw cost 0.32-0.51 ns with Philox2x32-10 and
0.13-0.21 ns with SplitMix64 (``benchmarks/bench_sr_kernel.py``, best of 25, the 2-core AMD EPYC VM
under load 2; ``docs/numerics.md``, "Stochastic rounding in the kernel alone"). Philox with fewer
rounds (Salmon et al., Table 2, gives the fewest that pass BigCrush) would still pay a multiply per
round. Each draw is ``24 - p <= 23`` bits, so a 64-bit output cannot serve three.

This module is the torch definition (the fallback where the kernel is not built, a GPU tensor, and
the tests' reference); ``fused`` computes the same words in its kernel, and
``tests/test_fused_quantize.py`` checks both against SplitMix64's published outputs."""

from __future__ import annotations

import torch

GAMMA = 0x9E3779B97F4A7C15
"""SplitMix64's counter increment, the golden ratio's first 64 fractional bits, odd (Steele et
al. 2014's ``GOLDEN_GAMMA``)."""
MIX_MULTIPLIERS = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
MIX_SHIFTS = (30, 27, 31)
"""``mix64``'s multipliers and shifts (Steele et al. 2014; Stafford's variant 13)."""
MASK32 = 0xFFFFFFFF


def stream_key(generator: torch.Generator) -> tuple[int, int]:
    """One rounding's ``(stream, key)``, 32 bits each, drawn from ``generator`` (the run's)."""
    words = torch.randint(0, 1 << 32, (2,), generator=generator, device=generator.device, dtype=torch.int64)
    stream, key = words.tolist()
    return stream, key


def _as_int64(value: int) -> int:
    """A 64-bit pattern as the int64 that holds it (torch has no uint64 arithmetic on every device)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """``z >> bits`` on the 64-bit pattern ``z`` holds (a logical shift: int64's is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 tensors holding 64-bit patterns (multiplies wrap mod 2^64):
    ``z ^= z >> 30; z *= M1; z ^= z >> 27; z *= M2; z ^= z >> 31`` (Steele et al. 2014's ``mix64``)."""
    (m1, m2), (a, b, c) = MIX_MULTIPLIERS, MIX_SHIFTS
    z = (z ^ _shift_right(z, a)) * _as_int64(m1)
    z = (z ^ _shift_right(z, b)) * _as_int64(m2)
    return z ^ _shift_right(z, c)


def splitmix64(counter: torch.Tensor, stream: int, key: int) -> torch.Tensor:
    """SplitMix64's output number ``counter + 1`` seeded with ``stream x 2^32 + key``,
    ``mix64(seed + (counter + 1) GAMMA)``, as int64 tensors holding the 64-bit patterns."""
    seed = ((stream & MASK32) << 32) | (key & MASK32)
    return mix64((counter.to(torch.int64) + 1) * _as_int64(GAMMA) + _as_int64(seed))


def uniform_of_words(words: torch.Tensor, fraction_bits: int) -> torch.Tensor:
    """Uniform numbers in [0, 1) with ``fraction_bits`` bits (float32) from 32-bit words: the top
    bits, ``floor(w / 2^(32 - b)) / 2^b``; each of the ``2^b`` values equally likely. With ``b = 24 -
    p`` for a grid of ``p`` significant bits, ``v / ulp + u`` is exact in float32 (``quantize``'s
    ``uniform_draws`` explains why that keeps stochastic rounding exactly unbiased)."""
    return (words >> (32 - fraction_bits)).to(torch.float32).mul_(2.0 ** -fraction_bits)


def counter_uniform(shape, stream: int, key: int, fraction_bits: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The uniform numbers of positions ``0 .. numel - 1`` of a tensor of ``shape`` (contiguous
    order): position ``j``'s from word ``j mod 2`` (low, high) of ``splitmix64(floor(j / 2), stream,
    key)``."""
    n = 1
    for s in shape:
        n *= s
    pairs = splitmix64(torch.arange((n + 1) // 2, device=device, dtype=torch.int64), stream, key)
    words = torch.stack([pairs & MASK32, _shift_right(pairs, 32)], dim=-1).view(-1)[:n]
    return uniform_of_words(words, fraction_bits).view(shape)

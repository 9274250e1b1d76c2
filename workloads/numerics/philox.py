"""Stochastic rounding's random bits from a counter-based generator: Philox2x32-10 (Salmon, Moraes,
Dror and Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011, Sec. 3.3 and Table 2; the
Random123 library's ``philox2x32`` with its default 10 rounds).

A draw is a pure function of a key and a counter: the uniform number of the value at position ``j``
of a rounding (the position its draw had in ``torch.rand``'s tensor before, ``quantize``) is output
word ``j mod 2`` of ``philox2x32(counter = (floor(j / 2), stream), key)``, cut to its top ``b``
bits (``uniform_of_words``): one Philox call serves two adjacent positions. ``key`` and ``stream`` (32 bits each) are drawn once per rounded tensor
from the run's ``torch.Generator`` (``stream_key``), so a run is reproducible from its seed, and two
clients, steps or tensors draw from unrelated streams. A kernel can compute any draw where it needs
it, without a pass that fills a tensor of them (``workloads.numerics.fused``).

This module is the torch definition (the fallback where the kernel is not built, a GPU tensor, and
the tests' reference); ``fused`` computes the same words in its kernels, and
``tests/test_fused_quantize.py`` checks both against Random123's known-answer vectors."""

from __future__ import annotations

import torch

PHILOX_M2x32 = 0xD256D193
"""Philox2x32's multiplier (Salmon et al. 2011, Table 2; Random123's ``PHILOX_M2x32_0``)."""
PHILOX_W32 = 0x9E3779B9
"""The key's increment per round (the golden ratio's first 32 fractional bits; Random123's
``PHILOX_W32_0``)."""
PHILOX_ROUNDS = 10
MASK32 = 0xFFFFFFFF


def stream_key(generator: torch.Generator) -> tuple[int, int]:
    """One rounding's ``(stream, key)``, 32 bits each, drawn from ``generator`` (the run's)."""
    words = torch.randint(0, 1 << 32, (2,), generator=generator, device=generator.device, dtype=torch.int64)
    stream, key = words.tolist()
    return stream, key


def _mulhilo(a: torch.Tensor, multiplier: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The high and low 32-bit words of ``a x multiplier`` (``a`` in [0, 2^32), int64), without
    overflowing int64: the multiplier taken in 16-bit halves."""
    high16, low16 = multiplier >> 16, multiplier & 0xFFFF
    low_part = a * low16  # < 2^48
    high_part = a * high16  # < 2^48
    middle = low_part + ((high_part & 0xFFFF) << 16)  # < 2^49
    return (high_part >> 16) + (middle >> 32), middle & MASK32


def philox2x32(counter_low: torch.Tensor, counter_high: int, key: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Philox2x32-10's two output words (int64 tensors holding 32-bit values) for the counters
    ``(counter_low, counter_high)`` under ``key`` (Salmon et al. 2011, Sec. 3.3; Random123's
    ``philox2x32round``: each round ``(L, R) -> (hi(M L) xor k xor R, lo(M L))``, the key bumped by
    ``PHILOX_W32`` between rounds)."""
    left = counter_low.to(torch.int64) & MASK32
    right = torch.full_like(left, counter_high & MASK32)
    k = key & MASK32
    for r in range(PHILOX_ROUNDS):
        if r:
            k = (k + PHILOX_W32) & MASK32
        hi, lo = _mulhilo(left, PHILOX_M2x32)
        left, right = hi ^ k ^ right, lo
    return left, right


def uniform_of_words(words: torch.Tensor, fraction_bits: int) -> torch.Tensor:
    """Uniform numbers in [0, 1) with ``fraction_bits`` bits (float32) from 32-bit words: the top
    bits, ``floor(w / 2^(32 - b)) / 2^b``; each of the ``2^b`` values equally likely. With ``b = 24 -
    p`` for a grid of ``p`` significant bits, ``v / ulp + u`` is exact in float32 (``quantize``'s
    ``uniform_draws`` explains why that keeps stochastic rounding exactly unbiased)."""
    return (words >> (32 - fraction_bits)).to(torch.float32).mul_(2.0 ** -fraction_bits)


def philox_uniform(shape, stream: int, key: int, fraction_bits: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The uniform numbers of positions ``0 .. numel - 1`` of a tensor of ``shape`` (contiguous
    order): position ``j``'s from word ``j mod 2`` of ``philox2x32((floor(j / 2), stream), key)``."""
    n = 1
    for s in shape:
        n *= s
    left, right = philox2x32(torch.arange((n + 1) // 2, device=device, dtype=torch.int64), stream, key)
    words = torch.stack([left, right], dim=-1).view(-1)[:n]
    return uniform_of_words(words, fraction_bits).view(shape)

"""One pass per rounded tensor on the CPU: BFP, MX and scaled FP8 (``quantize``) as numba kernels.

``quantize`` rounds a block format with a handful of torch operations per group (the largest
magnitude, the shared exponent or scale, the division, the rounding, the product: 5 passes over the
values for BFP, 11 for MX) and draws stochastic rounding's uniform numbers into a tensor of their
own first. The kernel here reads each block of groups once and writes it once: it takes the
block's largest magnitudes (as FP32 bit patterns: an integer maximum, infinity and NaN above every
finite value), the group's unit or scale, and rounds every value, computing its uniform number on
the spot from its position (``workloads.numerics.splitmix``: a counter-based generator needs no state
and no pass of its own). The arithmetic is ``quantize``'s, operation for operation in float32
(``tests/test_fused_quantize.py`` and ``tests/test_quantize_reference.py`` compare them bit for bit).

Why numba (Lam, Pitrou and Seibert, "Numba: a LLVM-based Python JIT compiler", LLVM-HPC 2015): it
compiles these loops with LLVM for the machine they run on (its vector units included) from plain
Python, installs as a wheel with no compiler on the machine (a C++ extension needs one, and a build
step in the install), and caches the compiled kernels beside this file, so only the first run of a
fresh checkout compiles (a few seconds). ``torch.compile`` needs a C++ compiler on the CPU as well,
recompiles per operand shape, and its generated code would have to be shown to give these bits.

Where numba is missing or fails to compile, on a GPU, and for a layout the kernel does not take,
``quantize``'s torch operations round instead, with the same values and the same random bits (the
draws are a function of position, ``splitmix``); the first such fallback for a missing kernel says
so in one line (``fallback_reason``).
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass

import numpy as np
import torch

from accel_sim.formats import ElementFormat, element_emax

BFP, MX, SCALED = 0, 1, 2
"""What a kernel call rounds: BFP groups, MX blocks, or a tensor under one scale."""

MAX_OUTER, MAX_INNER = 3, 2
"""The kernel's loop nest: up to 3 dims outside a group, the group, up to 2 dims inside it (memory
order, after merging dims that are adjacent in memory)."""


@dataclass(frozen=True)
class Rule:
    """How a kernel call rounds: ``kind`` (``BFP``, ``MX``, ``SCALED``), the grid's significand bits
    ``p`` (BFP: its mantissa bits), and for MX and scaled FP8 the element format, MX's scale rule
    (``round_up``) and the per-tensor scale of scaled FP8."""

    kind: int
    significand_bits: int
    element: ElementFormat | None = None
    round_up: bool = False
    scale: float = 1.0

    @functools.lru_cache(maxsize=64)
    def floats(self) -> np.ndarray:
        """The float32 constants the kernel reads (``_fused_kernel.round_blocks``): the grid's
        ``2^(1 - p)``, ``2^e_min``, largest element and largest result (BFP: a grid of unit 1 and
        nothing clamped), the element's ``2^-emax``, the factor of scaled FP8 (``2^-s``: the kernel
        divides by it), ``2^-b`` of the uniform numbers' ``b = 24 - p`` bits, BFP's ``2^(1 - m)``, and
        scaled FP8's ``2^s`` and ``2^(p - 1)`` (the inverses of its factor and of the grid's
        ``2^(1 - p)``, powers of two: the kernel multiplies by them instead of dividing)."""
        p, spec = self.significand_bits, self.element
        if self.kind == BFP:
            grid = (2.0 ** -23, 2.0 ** 23, math.inf, math.inf)
        else:
            largest = (2 - 2.0 ** (1 - p)) * 2.0 ** 127 if self.kind == SCALED or self.round_up else math.inf
            grid = (2.0 ** (1 - p), 2.0 ** spec.min_normal_exponent, spec.max_finite, largest)
        return np.array([*grid, 2.0 ** -element_emax(spec) if spec else 0.0, 1 / self.scale,
                         2.0 ** (p - 24), 2.0 ** (1 - p), self.scale, 2.0 ** (p - 1)], dtype=np.float32)

    @functools.lru_cache(maxsize=64)
    def ints(self, stream_key: tuple[int, int] | None) -> np.ndarray:
        """The integer constants the kernel reads: kind, BFP's carry ``2^(24 - m) - 1``
        (``quantize.bfp_unit``), the scale rule, the generator's stream and key (``splitmix``), and the uniform numbers'
        bits ``24 - p`` (0: round to nearest)."""
        stream, key = stream_key or (0, 0)
        bits = 24 - self.significand_bits if stream_key else 0
        return np.array([self.kind, (1 << (24 - self.significand_bits)) - 1, int(self.round_up), stream, key, bits],
                        dtype=np.int64)


def bfp_rule(mantissa_bits: int) -> Rule:
    return Rule(BFP, mantissa_bits)


def mx_rule(spec: ElementFormat, scale_rule: str) -> Rule:
    return Rule(MX, spec.significand_bits, spec, scale_rule == "up")


def scaled_rule(spec: ElementFormat, scale: float) -> Rule:
    return Rule(SCALED, spec.significand_bits, spec, scale=float(scale))


_kernel = None
_kernel_enabled = True  # tests and benchmarks switch the kernel off to compare with the torch operations
fallback_reason: str | None = None
"""Why the kernel is not in use (None while it is, or before it was first asked for)."""


def kernel():
    """The compiled kernel (``_fused_kernel.round_at``), or None (said once, in one line) where numba
    is missing or fails."""
    global _kernel, fallback_reason
    if _kernel is None and fallback_reason is None:
        try:
            from workloads.numerics import _fused_kernel
            x, out = torch.ones(2), torch.empty(2)  # a group of two values: compiles (or loads the cached builds)
            _fused_kernel.round_at(x.data_ptr(), out.data_ptr(), 2, _TRY_NEST, Rule(BFP, 4).floats(), Rule(BFP, 4).ints(None))
            _fused_kernel.largest_bits_at(x.data_ptr(), 2)  # a failure here falls back too
            _kernel = _fused_kernel.round_at
        except Exception as e:  # noqa: BLE001 - any failure to import or compile: torch rounds instead
            fallback_reason = f"{type(e).__name__}: {e}".splitlines()[0]
            print(f"number formats: the fused quantizer is not available ({fallback_reason}); rounding with "
                  "torch operations instead (the same values, slower; pip install numba)", file=sys.stderr)
    return _kernel


_TRY_NEST = np.array([[0, 0, 1, 1, 1, 2, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0]], np.uint64)
"""The loop nest of a group of two values (``geometry``), rounded when the kernel is first asked for."""


def geometry(piece: torch.Tensor, axis: int | None, base: torch.Tensor,
             counters: torch.Tensor | None = None) -> np.ndarray | None:
    """The kernel's loop nest over ``piece`` (a view of the dense tensor ``base``, its dims in memory
    order, ``axis`` running within a group; ``counters``: a view of the same shape whose element
    offsets are the values' draw positions), as ``[offset, counter offset, 6 sizes, 6 strides,
    6 counter strides]`` (dims outside the group, padded to ``MAX_OUTER``; the group; dims inside,
    padded to ``MAX_INNER``; the padding outermost). ``axis`` None: no groups (scaled FP8), the
    innermost run of merged dims serves as the group. None where the piece needs more dims than that."""
    sizes, strides = list(piece.shape), list(piece.stride())
    cstrides = list(counters.stride()) if counters is not None else strides[:]
    dims = [[sizes[d], strides[d], cstrides[d], d == axis] if sizes[d] > 1 else [1, 1, 0, True]  # any stride serves a dim of one
            for d in range(piece.dim()) if sizes[d] > 1 or d == axis] or [[1, 1, 0, False]]
    merged: list[list] = []
    for d in dims:  # merge a dim into the one outside it where both are plain runs of memory and counters
        if merged and not d[3] and not merged[-1][3] and merged[-1][1] == d[0] * d[1] and merged[-1][2] == d[0] * d[2]:
            merged[-1] = [merged[-1][0] * d[0], d[1], d[2], False]
        else:
            merged.append(d)
    if axis is None:
        merged[-1][3] = True
    at = next(i for i, d in enumerate(merged) if d[3])
    outer, inner = merged[:at], merged[at + 1:]
    if len(outer) > MAX_OUTER or len(inner) > MAX_INNER or merged[-1][1] != 1:
        return None  # the kernel runs along adjacent values: the innermost dim's stride is 1
    nest = [[1, 0, 0]] * (MAX_OUTER - len(outer)) + [d[:3] for d in outer] + [merged[at][:3]] + \
        [[1, 0, 0]] * (MAX_INNER - len(inner)) + [d[:3] for d in inner]  # padded outside: the innermost dim stays last
    offset = piece.storage_offset() - base.storage_offset()
    coffset = counters.storage_offset() if counters is not None else 0
    return np.array([offset, coffset, *(d[0] for d in nest), *(d[1] for d in nest), *(d[2] for d in nest)], dtype=np.uint64)


def largest_magnitude(x: torch.Tensor) -> torch.Tensor | None:
    """``max |x|`` of a dense float32 CPU tensor in one pass over its bit patterns (NaN where a NaN
    is; ``quantize.largest_magnitude``'s ``x.abs().amax()`` writes ``|x|`` first), or None where the
    kernel does not run."""
    if not _kernel_enabled or x.device.type != "cpu" or x.dtype != torch.float32 or kernel() is None \
            or torch.empty_like(x).stride() != x.stride():
        return None
    from workloads.numerics._fused_kernel import largest_bits_at
    return torch.tensor(int(largest_bits_at(x.data_ptr(), x.numel())), dtype=torch.int32).view(torch.float32)


_plans: dict[tuple, np.ndarray] = {}
"""The loop nests of layouts rounded before, by ``plan_key``: a step rounds operands of the same
shapes and strides every time, and working out their groups costs more than small ones' rounding."""
MAX_PLANS = 4096


def plan_key(x: torch.Tensor, group_size: int, dim, stochastic: bool) -> tuple | None:
    """What a layout's loop nests depend on (None: the kernel does not run here)."""
    if not _kernel_enabled or x.device.type != "cpu" or kernel() is None:
        return None
    return (tuple(x.shape), x.stride(), dim, group_size, stochastic)


def round_planned(rule: Rule, x: torch.Tensor, key: tuple | None,
                  stream_key: tuple[int, int] | None) -> torch.Tensor | None:
    """``x`` rounded by the kernel along the loop nests remembered for ``key``; None if none are."""
    planned = _round_planned(rule, x, key, stream_key)
    return None if planned is None else planned[0]


def _round_planned(rule: Rule, x: torch.Tensor, key: tuple | None,
                   stream_key: tuple[int, int] | None) -> tuple[torch.Tensor, int | None] | None:
    """``round_planned`` with what the kernel returns (``_fused_kernel.round_at``)."""
    nests = _plans.get(key) if key is not None else None
    if nests is None:
        return None
    out = torch.empty_like(x)
    return out, _run(rule, x, out, nests, stream_key)


def round_whole(spec: ElementFormat, scale: float, x: torch.Tensor,
                stream_key: tuple[int, int] | None) -> tuple[torch.Tensor, int | None] | None:
    """``x`` rounded to the element ``spec`` under one scaling factor ``scale`` (a power of two:
    scaled FP8, ``quantize.round_scaled``), each value's draw at its position in ``x``'s own
    (contiguous) order, and the bit pattern of ``x``'s largest magnitude (``largest_magnitude``'s,
    NaN's where a NaN is), read in the same pass (None where ``_run`` gave none back: a wrapped
    one); None where the kernel does not run."""
    if not _kernel_enabled or x.device.type != "cpu":
        return None
    rule = scaled_rule(spec, scale)
    key = plan_key(x, 0, None, stream_key is not None)
    planned = _round_planned(rule, x, key, stream_key)  # a layout rounded before
    if planned is None:
        out = torch.empty_like(x)
        dense_as_given = out.stride() == x.stride()
        dense = x if dense_as_given else torch.empty_like(x).copy_(x)  # a slice, an expanded tensor: a dense copy
        order = sorted(range(x.dim()), key=lambda d: -dense.stride(d))  # memory order
        positions = None if stream_key is None else [torch.empty(x.shape, device="meta").permute(order)]
        rows = [geometry(dense.permute(order), None, dense, positions[0] if positions else None)]
        if x.numel() >= 1 << 31 or kernel() is None or rows[0] is None:
            return None
        nests = np.stack(rows)
        planned = out, _run(rule, dense, out, nests, stream_key)
        if dense_as_given:
            _remember(key, nests)
    return planned  # the nests cover every value of x (or of its dense copy)


def round_pieces(rule: Rule, src: torch.Tensor, dst: torch.Tensor, pieces, counters,
                 stream_key: tuple[int, int] | None, remember: tuple | None = None) -> bool:
    """Round ``pieces`` (``(groups, axis)``: views of the dense ``src``, dims in memory order) into
    the same views of ``dst`` (``src``'s strides) with the kernel, ``counters`` (views of the
    layout's draw positions, or None for round to nearest) giving each value's draw position; the
    loop nests remembered under ``remember`` (``plan_key``) where given. False, with nothing
    written, where the kernel is not available or a piece's layout does not fit it: the caller
    rounds with torch."""
    if not _kernel_enabled or src.device.type != "cpu" or src.numel() >= 1 << 31 or kernel() is None:
        return False
    rows = [geometry(p, axis, src, c) for (p, axis), c in zip(pieces, counters or [None] * len(pieces))]
    if any(n is None for n in rows):
        return False
    nests = np.stack(rows)
    _run(rule, src, dst, nests, stream_key)
    if remember is not None:
        _remember(remember, nests)
    return True


def _remember(key: tuple, nests: np.ndarray) -> None:
    """Keep a layout's loop ``nests`` under its ``plan_key``."""
    if len(_plans) >= MAX_PLANS:
        _plans.clear()
    _plans[key] = nests


def _run(rule: Rule, src: torch.Tensor, dst: torch.Tensor, nests: np.ndarray,
         stream_key: tuple[int, int] | None) -> int:
    """Round the dense ``src`` into ``dst`` (its strides) along the loop ``nests`` (a row each);
    for scaled FP8, the largest magnitude's bit pattern among the values rounded."""
    return _kernel(src.data_ptr(), dst.data_ptr(), src.numel(), nests, rule.floats(), rule.ints(stream_key))

"""Rounding a float32 tensor to a number format (``accel_sim.formats``), the result kept in float32.

* Element formats (``bf16``, ``fp16``, ``e4m3``, ``e5m2``), round to nearest, ties to even: torch's
  own cast to the format's dtype and back (``torch.bfloat16``, ``torch.float16``,
  ``torch.float8_e4m3fn``, ``torch.float8_e5m2``): subnormals as the format has them, overflow to
  infinity where the format has one and saturating at 448 in E4M3 (torch's cast; Micikevicius et
  al., "FP8 Formats for Deep Learning", 2022, Sec. 2, discuss saturating conversions). ``tests/test_numerics.py``
  checks it against ``ml_dtypes`` (an independent implementation) element by element.
* Element formats, stochastic rounding: ``|x|`` is rounded down or up to the two neighbouring
  values of the format, up with probability equal to the distance from the lower one in units in
  the last place, so the result is unbiased (Gupta et al., "Deep Learning with Limited Numerical
  Precision", ICML 2015, Sec. 2). The unit in the last place of ``x`` is ``2^(max(e, e_min) - p + 1)``
  with ``e = floor(log2 |x|)``, ``p`` the significand bits and ``e_min`` the smallest normal
  exponent, so subnormals are rounded on the subnormal grid. Values beyond the largest finite one
  round as the nearest-even cast does. For ``bf16`` (FP32's upper half) this is adding 16 random
  bits below the kept ones and dropping them; for the others it is ``floor(|x| / ulp + u)`` in
  float32, where ``|x| / ulp`` keeps ``24 - p`` fractional bits and ``u`` has as many
  (``uniform_draws``): the sum is exact, so a value already on the grid stays there and one a
  fraction ``f`` of a unit above it rounds up with probability exactly ``f`` (below the format's
  normal range ``|x| / ulp`` holds more bits, which the sum rounds to ``24 - p``).
* Block floating point ``bfp_m<m>_g<g>`` along a dimension (or several, taken together): the values
  are cut into groups of ``g`` consecutive values along it (a last, shorter group where ``g`` does
  not divide its length); a group shares the exponent ``e = floor(log2 max|x|)`` of its largest
  magnitude, and each value becomes ``sign x q x 2^(e - m + 1)`` with an integer ``q`` in
  ``[0, 2^m - 1]`` (a sign and ``m`` mantissa bits, ``accel_sim.formats``); a group whose largest
  magnitude is below FP32's smallest normal number (2^-126) takes that number's exponent. Where
  ``max|x| / 2^(e - m + 1)`` exceeds ``2^m - 1`` (it could round past the largest mantissa) the
  group takes the next exponent, so no value is ever clipped: round to nearest errs by at most half
  the group's unit ``2^(e - m + 1)``, and stochastic rounding (of the signed value,
  ``floor(x / unit + u)``, ``u`` with ``24 - m`` bits: ``uniform_draws``) leaves values on the grid
  where they are and is unbiased up to float32's resolution of ``x / unit`` (``24 - m`` fractional
  bits for the group's largest value). An all-zero group stays zero; a group holding an infinity
  or NaN becomes NaN (the shared exponent overflows), and so does a finite group whose largest
  value needs the next exponent above FP32's largest binade (beyond ``(2 - 2^(1 - m)) 2^127``):
  the shared exponent has FP32's 8 bits and range (``BFP_EXPONENT_BITS``).

* OCP MX formats (``round_mx``): blocks of 32 consecutive values along ``dim`` (cut as BFP's groups)
  share a power-of-two scale (``mx_scale``: the specification's rule, or rounded up), each value
  divided by it and rounded to the element (``round_to_grid``: nearest even or stochastic,
  saturating at the element's largest value).
* Scaled FP8 (``round_scaled``): the whole tensor multiplied by a power of two (``tensor_scale``)
  from its largest magnitude (current scaling) or a history of them (delayed scaling, kept by
  ``workloads.numerics.emulate.Arithmetic``), rounded to the element with saturation, divided back.

Stochastic rounding draws its uniform numbers from the ``torch.Generator`` given, so a run is
reproducible from its seed: element formats with ``torch.rand``; BFP, MX and scaled FP8 from a
counter-based generator keyed once per tensor from it (``workloads.numerics.splitmix``: the draw of a
value is a function of its position, the one its ``torch.rand`` draw had), which the fused kernel
(``workloads.numerics.fused``: one pass per tensor on the CPU) computes in its pass; the torch
operations here are its fallback, with the same values and draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch

from accel_sim.formats import ELEMENT_FORMATS, ElementFormat, NumberFormat, element_emax
from workloads.numerics import fused, splitmix

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def round_to_format(x: torch.Tensor, fmt: NumberFormat, *, dim: int | tuple[int, ...] = -1,
                    generator: torch.Generator | None = None, amax: torch.Tensor | None = None,
                    gradient: bool = False) -> torch.Tensor:
    """``x`` (float32) rounded to ``fmt``, as float32 values; BFP and MX blocks run along ``dim``.
    Stochastic rounding needs ``generator``. A scaled FP8 format scales by ``amax`` (delayed
    scaling: the history's, ``workloads.numerics.emulate``), by default ``x``'s own (current
    scaling); the hybrid rounds a ``gradient`` to E5M2, anything else to E4M3. The result carries
    no gradient (rounding's is zero almost everywhere): a tensor that requires one, such as a
    parameter, is rounded as its detached values."""
    if fmt.is_identity:
        return x
    if x.dtype != torch.float32:
        raise TypeError(f"number format {fmt.name}: rounds float32 tensors, not {x.dtype} (convert with .float())")
    if x.numel() == 0:
        return x
    if x.dim() == 0:  # a scalar: a group of one
        return round_to_format(x.reshape(1), fmt, dim=0, generator=generator, amax=amax, gradient=gradient).reshape(())
    if x.requires_grad:  # the rounding kernels write into their outputs (out=), which autograd refuses
        return round_to_format(x.detach(), fmt, dim=dim, generator=generator, amax=amax, gradient=gradient)
    if fmt.rounding == "stochastic" and generator is None:
        raise ValueError(f"number format {fmt.name}: stochastic rounding needs a generator")
    if fmt.kind == "bfp":
        return round_bfp(x, fmt.mantissa_bits, fmt.group_size, dim=dim,
                         generator=generator if fmt.rounding == "stochastic" else None)
    if fmt.kind == "mx":
        return round_mx(x, fmt, dim=dim, generator=generator if fmt.rounding == "stochastic" else None)
    if fmt.scaling != "none":
        return round_scaled(x, scaled_element(fmt, gradient), largest_magnitude(x) if amax is None else amax,
                            generator if fmt.rounding == "stochastic" else None)
    if fmt.rounding == "stochastic":
        return round_element_stochastic(x, fmt, generator)
    if fmt.kind == "e4m3":  # the same values as torch's float8_e4m3fn cast, saturating (an infinity to +-448), faster on the CPU
        spec = fmt.element
        return _onto_grid_(x.clamp(-2 * spec.max_finite, 2 * spec.max_finite), spec)
    return x.to(TORCH_DTYPES[fmt.kind]).to(x.dtype)


def scaled_element(fmt: NumberFormat, gradient: bool) -> ElementFormat:
    """The element a per-tensor scaled FP8 format rounds to: the hybrid's E5M2 for a ``gradient``,
    its E4M3 otherwise (Micikevicius et al., "FP8 Formats for Deep Learning", 2022, Section 3)."""
    return ELEMENT_FORMATS["e5m2"] if gradient and fmt.kind == "fp8_hybrid" else fmt.element


def round_measured(x: torch.Tensor, fmt: NumberFormat, amax: torch.Tensor, *,
                   generator: torch.Generator | None = None, gradient: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``round_to_format(x, fmt, amax=amax, ...)`` of a per-tensor scaled format and
    ``largest_magnitude(x)``: both from the fused kernel's one pass over ``x`` where it rounds it (a
    CPU tensor; the largest magnitude is the integer maximum of the same bit patterns, in any order,
    so the same value), each its own pass elsewhere. Delayed scaling's rounding
    (``emulate.Arithmetic``): past an operand's first step its scale comes from its history, and its
    own amax only enters the history after the rounding."""
    if fmt.scaling == "none" or x.dtype != torch.float32 or x.dim() == 0 or not x.numel() \
            or (fmt.rounding == "stochastic" and generator is None):
        return round_to_format(x, fmt, generator=generator, amax=amax, gradient=gradient), largest_magnitude(x)
    return _round_scaled(x.detach(), scaled_element(fmt, gradient), amax,
                         generator if fmt.rounding == "stochastic" else None, measure=True)


EXPONENT_MASK = 0x7F800000  # an FP32's exponent field: masking the rest leaves 2^floor(log2 |x|)
SMALLEST_NORMAL = 2.0 ** -126


def round_tensors(tensors, fmt: NumberFormat, *, generator: torch.Generator | None = None) -> dict:
    """A dict of tensors as sent in ``fmt`` (communication in a format): each float32 tensor rounded
    (BFP groups of consecutive values in its flattened order, the order it is sent in), every other
    tensor (integer buffers such as BatchNorm's step count) as it is."""
    if fmt.is_identity:
        return dict(tensors)
    return {k: round_to_format(v.reshape(-1), fmt, dim=0, generator=generator).view_as(v)
            if v.dtype == torch.float32 else v for k, v in tensors.items()}


def uniform_draws(shape, generator: torch.Generator, device: torch.device, fraction_bits: int) -> torch.Tensor:
    """Stochastic rounding's uniform numbers in [0, 1): ``torch.rand``'s float32 draws cut to their
    top ``fraction_bits`` bits, ``floor(u x 2^b) / 2^b``, each of the ``2^b`` values equally likely
    (``torch.rand`` draws multiples of 2^-24 on the CPU). With ``b = 24 - p`` for a grid of ``p``
    significant bits, ``v / ulp + u`` is exact in float32 wherever ``v / ulp`` is (it needs ``p``
    integer and ``24 - p`` fractional bits), so ``floor(v / ulp + u)`` leaves a value already on the
    grid where it is (a full 24-bit ``u`` near 1 rounded ``q + u`` up to ``q + 1``), and rounds up
    with probability exactly the fraction of a unit ``v`` lies above ``q``: unbiased (module doc)."""
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
    return u.mul_(2.0 ** fraction_bits).floor_().mul_(2.0 ** -fraction_bits)


def _uniform(like: torch.Tensor, generator: torch.Generator, significand_bits: int) -> torch.Tensor:
    """``uniform_draws`` shaped as ``like``, for a grid of ``significand_bits`` significant bits."""
    return uniform_draws(like.shape, generator, like.device, 24 - significand_bits)


def binade(x: torch.Tensor) -> torch.Tensor:
    """``2^floor(log2 |x|)`` of float32 ``x`` (infinity for inf and NaN, 0 for 0 and subnormals),
    read off the exponent field: exact and one pass."""
    return (x.view(torch.int32) & EXPONENT_MASK).view(torch.float32)


def round_element_stochastic(x: torch.Tensor, fmt: NumberFormat, generator: torch.Generator) -> torch.Tensor:
    """Stochastic rounding to an element format (module doc)."""
    spec = fmt.element
    if fmt.kind == "bf16":  # bfloat16 is FP32's upper half: add 16 random low bits, drop them
        noise = torch.randint(0, 1 << 16, x.shape, generator=generator, device=x.device, dtype=torch.int32)
        return ((x.view(torch.int32) + noise) & -65536).view(torch.float32)
    magnitude = x.abs()
    ulp = torch.clamp_min(binade(magnitude), 2.0 ** spec.min_normal_exponent) * 2.0 ** (1 - spec.significand_bits)
    rounded = torch.floor(magnitude / ulp + _uniform(x, generator, spec.significand_bits)).mul_(ulp)
    nearest = x.to(TORCH_DTYPES[fmt.kind]).to(x.dtype)  # beyond the finite range, and NaN: as the cast
    return torch.where(rounded <= spec.max_finite, torch.copysign(rounded, x), nearest)


@dataclass(frozen=True)
class _Groups:
    """How ``_in_groups`` cuts a tensor into groups of ``group_size`` consecutive values along some
    of its dims: ``t.permute(order)`` brings those dims together (outermost first), ``outer`` and
    ``inner`` are the sizes of the dims before and after them, ``chunks`` their sizes merged as far
    as memory allows (one chunk: they are adjacent in memory; their product is the group length).

    ``shape`` is the groups' shape, ``(*outer, ceil(length / group_size), group_size, *inner)``:
    stochastic rounding draws one uniform number per position of it, the short last group's
    padding included, in its order (the draws of the copy-and-pad implementation this replaced,
    ``tests/test_quantize_reference.py``)."""

    order: tuple[int, ...]
    outer: tuple[int, ...]
    chunks: tuple[int, ...]
    inner: tuple[int, ...]
    group_size: int
    copy: bool  # the grouped dims do not merge in memory, and groups straddle their runs: a copy brings them together

    @property
    def length(self) -> int:
        return math.prod(self.chunks)

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.outer, -(-self.length // self.group_size), self.group_size, *self.inner)

    def views(self, t: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
        """Views of ``t`` (laid out as the tensor cut) as ``(groups, axis)``: the full groups, then a
        short last group where ``group_size`` does not divide the length; ``axis`` runs within a group."""
        g, n = self.group_size, len(self.outer)
        p = t.permute(self.order).view(*self.outer, *self.chunks, *self.inner)
        if len(self.chunks) > 1:  # groups within the innermost chunk (its length a multiple of g)
            return [(p.view(*self.outer, *self.chunks[:-1], self.chunks[-1] // g, g, *self.inner), n + len(self.chunks))]
        full, short = divmod(self.length, g)
        pieces = [(p.narrow(n, 0, full * g).view(*self.outer, full, g, *self.inner), n + 1)] if full else []
        if short:
            pieces.append((p.narrow(n, full * g, short).unsqueeze(n), n + 1))
        return pieces

    def draw_views(self, u: torch.Tensor) -> list[torch.Tensor]:
        """``u`` (contiguous, ``shape``) cut as ``views`` cuts a tensor: the same positions."""
        g, n = self.group_size, len(self.outer)
        if len(self.chunks) > 1:
            return [u.view(*self.outer, *self.chunks[:-1], self.chunks[-1] // g, g, *self.inner)]
        full, short = divmod(self.length, g)
        return ([u.narrow(n, 0, full)] if full else []) + ([u.narrow(n, full, 1).narrow(n + 1, 0, short)] if short else [])


def _grouping(x: torch.Tensor, group_size: int, dim: int | tuple[int, ...], memory: torch.Tensor) -> _Groups:
    """The groups of ``x`` along ``dim`` (``_in_groups``; their order from ``x``'s strides) in the
    memory of ``memory`` (``x`` or a dense copy of it), as far as possible without a copy: the
    grouped dims' merged chunks, one unless the dims are not adjacent in memory (an NCHW tensor's
    batch and pixels); several chunks serve where the innermost one holds whole groups."""
    dims = {d % x.dim() for d in ((dim,) if isinstance(dim, int) else dim)}
    order = sorted(range(x.dim()), key=lambda d: (-x.stride(d), d))  # outermost first
    where = [i for i, d in enumerate(order) if d in dims]
    if where != list(range(where[0], where[0] + len(where))):  # not adjacent in memory: move them together
        order = [d for d in order if d not in dims][:where[0]] + sorted(dims, key=order.index) + \
            [d for d in order if d not in dims][where[0]:]
        where = list(range(where[0], where[0] + len(where)))
    chunks: list[list[int]] = []  # [size, stride], innermost first
    for d in reversed([order[i] for i in where]):
        size, stride = memory.shape[d], memory.stride(d)
        if size == 1:
            continue
        if chunks and stride == chunks[-1][0] * chunks[-1][1]:
            chunks[-1][0] *= size
        else:
            chunks.append([size, stride])
    sizes = tuple(c[0] for c in reversed(chunks)) or (1,)
    copy = len(sizes) > 1 and sizes[-1] % group_size != 0
    return _Groups(tuple(order), tuple(x.shape[d] for d in order[:where[0]]), (math.prod(sizes),) if copy else sizes,
                   tuple(x.shape[d] for d in order[where[-1] + 1:]), group_size, copy)


def _in_groups(x: torch.Tensor, group_size: int, dim: int | tuple[int, ...],
               round_groups: Callable[[torch.Tensor, torch.Tensor, int, torch.Tensor | None], None],
               generator: torch.Generator | None = None, significand_bits: int = 24,
               rule: fused.Rule | None = None) -> torch.Tensor:
    """``x`` cut into groups of ``group_size`` consecutive values along ``dim`` (or several dims taken
    together in their memory order), ``round_groups(groups, out, axis, uniform)`` writing each
    piece's rounded groups into ``out`` (``axis`` runs within a group; a last, shorter group is a
    piece of its own; ``uniform``: stochastic rounding's draws for the piece, from ``generator``:
    ``splitmix.counter_uniform`` for a grid of ``significand_bits``, one per position of
    ``_Groups.shape``), the result with ``x``'s shape and strides (``torch.empty_like``). Where the
    fused kernel takes the pieces (``fused.round_pieces``, rounding as ``rule`` says), it writes
    them instead, with the same values and draws.

    Groups are cut in memory order: a channels-last tensor's channels are its innermost values, as
    are an NCHW tensor's pixels. The groups are views of ``x`` and of the result, no copy, wherever
    the grouped values are adjacent in memory or each run of adjacent ones holds whole groups (an
    NCHW tensor's batch and pixels, with ``group_size`` dividing the pixels); otherwise the grouped
    dims are brought together by one copy, and the result copied back."""
    if x.numel() == 0:
        return x
    key = None if rule is None else fused.plan_key(x, group_size, dim, generator is not None)
    stream_key = None if generator is None else splitmix.stream_key(generator)
    planned = fused.round_planned(rule, x, key, stream_key)  # a layout the kernel rounded before
    if planned is not None:
        return planned
    out = torch.empty_like(x)
    dense_as_given = out.stride() == x.stride()
    dense = x if dense_as_given else torch.empty_like(x).copy_(x)  # a slice, an expanded tensor: a dense copy
    layout = _grouping(x, group_size, dim, dense)
    x = dense
    src, dst, cut = x, out, layout
    if layout.copy:
        src = x.permute(layout.order).contiguous()
        dst = torch.empty_like(src)
        cut = replace(layout, order=tuple(range(x.dim())))
    pieces, targets = cut.views(src), cut.views(dst)
    orders = [sorted(range(groups.dim()), key=lambda d: -groups.stride(d)) for groups, _ in pieces]  # memory order
    pieces = [(groups.permute(order), order.index(axis)) for (groups, axis), order in zip(pieces, orders)]
    positions = None  # each value's draw: its position in the layout (a meta tensor's views: strides, no memory)
    if stream_key is not None:
        positions = [c.permute(order) for c, order in zip(layout.draw_views(torch.empty(layout.shape, device="meta")), orders)]
    remember = key if dense_as_given and dst is out else None  # no copy: the nests serve any tensor of x's layout
    if rule is None or not fused.round_pieces(rule, src, dst, pieces, positions, stream_key, remember):
        draws = [None] * len(pieces)
        if stream_key is not None:
            uniform = splitmix.counter_uniform(layout.shape, *stream_key, 24 - significand_bits, device=x.device)
            draws = [u.permute(order) for u, order in zip(layout.draw_views(uniform), orders)]
        for (groups, axis), (into, _), u, order in zip(pieces, targets, draws, orders):  # torch's kernels run fastest in memory order
            round_groups(groups, into.permute(order), axis, u)
    if dst is not out:
        out.permute(layout.order).copy_(dst)
    return out


def round_bfp(x: torch.Tensor, mantissa_bits: int, group_size: int, *, dim: int | tuple[int, ...] = -1,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """Block floating point along ``dim`` (module doc), or along several dims taken together in
    their memory order (``(0, 2, 3)``: each channel's values over batch and pixels; ``_in_groups``);
    stochastic with ``generator``, else to nearest, ties to even. The result has ``x``'s shape and
    strides."""

    def round_groups(groups: torch.Tensor, out: torch.Tensor, axis: int, uniform: torch.Tensor | None) -> None:
        unit = bfp_unit(largest_magnitude(groups, axis), mantissa_bits)
        torch.div(groups, unit, out=out)  # exact: division by a power of two
        (out.round_() if uniform is None else out.add_(uniform).floor_()).mul_(unit)  # half to even

    return _in_groups(x, group_size, dim, round_groups, generator, mantissa_bits, fused.bfp_rule(mantissa_bits))


def largest_magnitude(x: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """``max |x|`` along ``axis`` (kept; None: over the whole tensor, 0 for an empty one), NaN where a NaN is. A reduction
    along a tensor's innermost dim, which torch's CPU kernels run one short row at a time, is a max
    pooling over its rows instead (the same maxima, NaN included; ``tests/test_quantize_reference.py``)."""
    if axis is None:  # an empty tensor's: 0 (a GEMM on an empty batch)
        if not x.numel():
            return x.new_zeros(())
        fast = fused.largest_magnitude(x)
        return x.abs().amax() if fast is None else fast
    magnitude = x.abs()
    if axis == x.dim() - 1 and x.shape[axis] > 1:  # rows of the groups along the last two dims, pooled group by group
        row = x.shape[-1] * (x.shape[-2] if x.dim() > 1 else 1)
        pooled = torch.nn.functional.max_pool1d(magnitude.reshape(-1, 1, row), x.shape[-1])
        return pooled.view(*x.shape[:-1], 1)
    return magnitude.amax(axis, keepdim=True)


def bfp_unit(top: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """A BFP group's unit ``2^(e - m + 1)`` from its largest magnitude ``top`` (module doc): ``e =
    floor(log2 top)``, at least FP32's smallest normal exponent, plus one where ``top`` exceeds
    ``(2^m - 1) 2^(e - m + 1)``; infinity for a group holding an infinity or NaN.

    On the FP32 bit pattern ``T`` of ``top`` (sign cleared, NaN as infinity, below 2^-126 as
    2^-126): ``top > (2 - 2^(1 - m)) 2^e`` exactly where its 23-bit significand field exceeds
    ``2^23 - 2^(24 - m)``, that is where adding ``2^(24 - m) - 1`` carries into the exponent field;
    so the exponent of the unit is that of ``T + 2^(24 - m) - 1`` (``tests/test_quantize_reference.py``
    checks it against the comparison, written out)."""
    bits = top.view(torch.int32).bitwise_and_(0x7FFFFFFF).clamp_(0x00800000, EXPONENT_MASK)
    bits.add_((1 << (24 - mantissa_bits)) - 1).bitwise_and_(EXPONENT_MASK)
    return bits.view(torch.float32).mul_(2.0 ** (1 - mantissa_bits))


def _onto_grid_(v: torch.Tensor, spec: ElementFormat, uniform: torch.Tensor | None = None) -> torch.Tensor:
    """``round_to_grid`` in place on ``v`` (``uniform``: stochastic rounding's draws, else nearest)."""
    ulp = binade(v).clamp_min_(2.0 ** spec.min_normal_exponent).mul_(2.0 ** (1 - spec.significand_bits))
    v.div_(ulp)
    v = v.round_() if uniform is None else v.add_(uniform).floor_()
    return v.mul_(ulp).clamp_(-spec.max_finite, spec.max_finite)


def round_to_grid(v: torch.Tensor, spec: ElementFormat, generator: torch.Generator | None = None) -> torch.Tensor:
    """``v`` rounded to the values of the element format ``spec`` (its subnormals included),
    saturating at ``+-max_finite``: to nearest, ties to even, or stochastically with ``generator``
    (``floor(v / ulp + u)``, ``u`` uniform in [0, 1): unbiased, as BFP's). The unit in the last place
    is ``2^(max(e, e_min) - p + 1)``, ``e = floor(log2 |v|)`` (``binade`` ignores the sign); dividing
    by it is exact, and rounding the signed quotient keeps signed zeros. NaN and infinities become
    NaN. MX elements use it (the MX specification v1.0, Sec. 6.3: conversions to the element round to
    nearest even and clamp to its largest normal), and the scaled FP8 formats (a saturating cast,
    Micikevicius et al. 2022, Sec. 2)."""
    return _onto_grid_(v.clone(), spec, None if generator is None else _uniform(v, generator, spec.significand_bits))


def mx_scale(top: torch.Tensor, spec: ElementFormat, rule: str) -> torch.Tensor:
    """The E8M0 scale ``X`` of blocks whose largest magnitude is ``top``: the MX specification's
    (v1.0, Sec. 6.3) ``2^(floor(log2 top) - emax_elem)`` (``rule = "floor"``), which leaves the
    largest value ``top / X`` in ``[2^emax, 2^(emax + 1))`` and so clips it to the element's largest
    value where its significand exceeds the element's (E4M3: above 448 = 1.75 x 2^8); or rounded up,
    ``2^ceil(log2(top / max_elem))`` (``rule = "up"``): the same scale, doubled exactly where the
    specification's would clip, so nothing clips. A block below FP32's smallest normal takes that
    exponent; the scale is kept within E8M0's ``[2^-127, 2^127]``, and is NaN for a block holding an
    infinity or NaN (the specification's NaN scale)."""
    scale = torch.clamp_min(binade(top), SMALLEST_NORMAL) * 2.0 ** -element_emax(spec)
    if rule == "up":
        scale = torch.where(top > spec.max_finite * scale, scale * 2, scale)
    return scale.clamp_(2.0 ** -127, 2.0 ** 127).add_(top * 0)  # NaN where the block holds an infinity or NaN


def round_mx(x: torch.Tensor, fmt: NumberFormat, *, dim: int | tuple[int, ...] = -1,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """An MX format (``accel_sim.formats``) along ``dim``: blocks of 32 values (``_in_groups``), each
    divided by its scale (``mx_scale``), rounded to the element (``round_to_grid``) and multiplied
    back. A block holding an infinity or NaN becomes NaN (its scale is NaN)."""
    spec = fmt.element

    largest = (2 - 2.0 ** (1 - spec.significand_bits)) * 2.0 ** 127

    def round_groups(groups: torch.Tensor, out: torch.Tensor, axis: int, uniform: torch.Tensor | None) -> None:
        scale = mx_scale(largest_magnitude(groups, axis), spec, fmt.scale_rule)
        _onto_grid_(torch.div(groups, scale, out=out), spec, uniform).mul_(scale)
        if fmt.scale_rule == "up":  # a block of FP32's largest values can round to 2^128: saturated, as round_scaled
            out.clamp_(-largest, largest)

    return _in_groups(x, fmt.group_size, dim, round_groups, generator, spec.significand_bits,
                      fused.mx_rule(spec, fmt.scale_rule))


MAX_SCALE_EXPONENT = 127
"""The largest per-tensor scaling factor is ``2^127``, FP32's largest power of two: Transformer
Engine replaces a factor that overflows FP32 by FP32's largest finite value and, with power-of-two
factors, keeps only its exponent, ``2^127`` (``compute_scale_from_amax`` in
``transformer_engine/common/recipe/recipe_common.cuh``, NVIDIA Transformer Engine v2). Beyond it,
``2^s`` is infinite for every ``amax <= max_finite x 2^-128`` (FP32 subnormals included) and the
scaled tensor all NaN; at the cap such a tensor's largest value lands below the format's largest
one, and values below ``2^-127`` times the format's smallest flush to zero."""


def tensor_scale(amax: torch.Tensor, spec: ElementFormat) -> torch.Tensor:
    """A per-tensor scaling factor: the largest power of two ``2^s`` with ``amax x 2^s`` within the
    element's range, ``s = floor(log2(max_finite / amax))`` (Micikevicius et al. 2022, Sec. 2 and 4:
    the factor maps the tensor's largest magnitude near the format's largest value; a power of two
    keeps the scaling exact, so the values are the format's times ``2^-s``), at most
    ``2^MAX_SCALE_EXPONENT``. Computed exactly from the exponents and significands of ``max_finite``
    and ``amax``; 1 where ``amax`` is 0 or not finite."""
    top = torch.clamp_min(binade(amax), SMALLEST_NORMAL)
    significand = amax / top  # in [1, 2); below 1 for an FP32 subnormal
    exponent = element_emax(spec) - torch.log2(top)  # exact: top is a power of two
    fits = significand <= spec.max_finite / 2.0 ** element_emax(spec)
    scale = torch.exp2(torch.where(fits, exponent, exponent - 1).clamp_max_(MAX_SCALE_EXPONENT))
    return torch.where((amax > 0) & torch.isfinite(amax), scale, torch.ones_like(scale))


def tensor_scale_value(amax: float, spec: ElementFormat) -> float:
    """``tensor_scale`` of one amax given as a Python float (a float32 value), computed with Python
    numbers: the same power of two, without the handful of small torch operations (about 40 us an
    operand on the CPU, where the fused kernel takes the scale as a number anyway). ``frexp`` gives
    ``amax = m 2^e`` with ``m`` in [1/2, 1), so its binade is ``2^(e - 1)``, at least FP32's smallest
    normal; the significand ``amax / 2^(e - 1)`` is exact, and so is its comparison with
    ``max_finite / 2^emax`` (exact in float32 for every element format)."""
    if not (amax > 0 and math.isfinite(amax)):
        return 1.0
    significand, e = math.frexp(amax)
    top = max(e - 1, -126)
    exponent = element_emax(spec) - top
    fits = math.ldexp(significand, e - top) <= spec.max_finite / 2.0 ** element_emax(spec)
    return 2.0 ** min(exponent if fits else exponent - 1, MAX_SCALE_EXPONENT)


def round_scaled(x: torch.Tensor, spec: ElementFormat, amax: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` in a per-tensor scaled FP8 format: ``round(x x 2^s) / 2^s`` with ``2^s =
    tensor_scale(amax)`` and a saturating rounding (``round_to_grid``: under delayed scaling a value
    beyond the history's ``amax`` saturates, one whose scaled value overflows FP32 included); an
    infinity or NaN of ``x`` becomes NaN. A value within half a unit of the format below 2^128
    (FP32's largest values) rounds to 2^128, which FP32 cannot hold: it saturates at FP32's largest
    value on the format's grid, ``(2 - 2^(1 - p)) 2^127``, so the result is finite wherever ``x``
    is."""
    return _round_scaled(x, spec, amax, generator, measure=False)[0]


def _round_scaled(x: torch.Tensor, spec: ElementFormat, amax: torch.Tensor, generator: torch.Generator | None,
                  measure: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``round_scaled`` and, where ``measure``, ``largest_magnitude(x)`` (``round_measured``)."""
    stream_key = None if generator is None else splitmix.stream_key(generator)
    if x.device.type == "cpu" and amax.device.type == "cpu":  # the kernel, where it runs, takes the scale as a number
        rounded = fused.round_whole(spec, tensor_scale_value(float(amax), spec), x, stream_key)
        if rounded is not None:
            out, largest_bits = rounded
            if measure and largest_bits is not None:
                return out, torch.tensor(int(largest_bits), dtype=torch.int32).view(torch.float32)
            return out, largest_magnitude(x) if measure else None
    own = largest_magnitude(x) if measure else None
    scale = tensor_scale(amax, spec)
    bits = 24 - spec.significand_bits
    scaled = torch.mul(x, scale).clamp_(-spec.max_finite, spec.max_finite)
    scaled.addcmul_(x, scaled.new_zeros(()))  # + x * 0: NaN where x is infinite, exactly + 0 elsewhere
    uniform = None if stream_key is None else splitmix.counter_uniform(x.shape, *stream_key, bits, device=x.device)
    largest = (2 - 2.0 ** (1 - spec.significand_bits)) * 2.0 ** 127
    return _onto_grid_(scaled, spec, uniform).div_(scale).clamp_(-largest, largest), own

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
  bits below the kept ones and dropping them; for the others it is computed in float32, where
  ``|x| / ulp`` keeps ``24 - p`` fractional bits (a bias below 2^-13 of a unit in FP16, 2^-20 in FP8).
* Block floating point ``bfp_m<m>_g<g>`` along a dimension (or several, taken together): the values
  are cut into groups of ``g`` consecutive values along it (a last, shorter group where ``g`` does
  not divide its length); a group shares the exponent ``e = floor(log2 max|x|)`` of its largest
  magnitude, and each value becomes ``sign x q x 2^(e - m + 1)`` with an integer ``q`` in
  ``[0, 2^m - 1]`` (a sign and ``m`` mantissa bits, ``accel_sim.formats``); a group whose largest
  magnitude is below FP32's smallest normal number (2^-126) takes that number's exponent. Where
  ``max|x| / 2^(e - m + 1)`` exceeds ``2^m - 1`` (it could round past the largest mantissa) the
  group takes the next exponent, so no value is ever clipped: round to nearest errs by at most half
  the group's unit ``2^(e - m + 1)``, and stochastic rounding (of the signed value,
  ``floor(x / unit + u)``) stays unbiased up to float32's resolution of ``x / unit`` (``24 - m``
  fractional bits). An all-zero group stays zero; a group holding an infinity or NaN becomes NaN
  (the shared exponent overflows). The shared exponent is not limited to 8 bits: FP32's range is
  kept (``BFP_EXPONENT_BITS``).

Stochastic rounding draws its uniform numbers from the ``torch.Generator`` given, so a run is
reproducible from its seed.
"""

from __future__ import annotations

import math

import torch

from accel_sim.formats import NumberFormat

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def round_to_format(x: torch.Tensor, fmt: NumberFormat, *, dim: int | tuple[int, ...] = -1,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` (float32) rounded to ``fmt``, as float32 values; BFP groups run along ``dim``.
    Stochastic rounding needs ``generator``."""
    if fmt.is_identity:
        return x
    if fmt.rounding == "stochastic" and generator is None:
        raise ValueError(f"number format {fmt.name}: stochastic rounding needs a generator")
    if fmt.kind == "bfp":
        return round_bfp(x, fmt.mantissa_bits, fmt.group_size, dim=dim,
                         generator=generator if fmt.rounding == "stochastic" else None)
    if fmt.rounding == "stochastic":
        return round_element_stochastic(x, fmt, generator)
    return x.to(TORCH_DTYPES[fmt.kind]).to(x.dtype)


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


def _uniform(like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return torch.rand(like.shape, generator=generator, device=like.device, dtype=like.dtype)


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
    rounded = torch.floor(magnitude / ulp + _uniform(x, generator)).mul_(ulp)
    nearest = x.to(TORCH_DTYPES[fmt.kind]).to(x.dtype)  # beyond the finite range, and NaN: as the cast
    return torch.where(rounded <= spec.max_finite, torch.copysign(rounded, x), nearest)


def round_bfp(x: torch.Tensor, mantissa_bits: int, group_size: int, *, dim: int | tuple[int, ...] = -1,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """Block floating point along ``dim`` (module doc), or along several dims taken together in
    their memory order (``(0, 2, 3)``: each channel's values over batch and pixels); stochastic with
    ``generator``, else to nearest, ties to even. The result has ``x``'s shape and strides.

    Groups are cut in memory order: a channels-last tensor's channels are its innermost values and
    group without a copy, as do an NCHW tensor's; dims that are not adjacent in memory (an NCHW
    tensor's batch and pixels) are brought together by one copy."""
    if x.numel() == 0:
        return x
    dims = {d % x.dim() for d in ((dim,) if isinstance(dim, int) else dim)}
    order = sorted(range(x.dim()), key=lambda d: (-x.stride(d), d))  # outermost first
    where = [i for i, d in enumerate(order) if d in dims]
    if where != list(range(where[0], where[0] + len(where))):  # not adjacent in memory: move them together
        order = [d for d in order if d not in dims][:where[0]] + sorted(dims, key=order.index) + \
            [d for d in order if d not in dims][where[0]:]
        where = list(range(where[0], where[0] + len(where)))
    p = x.permute(order)
    if not p.is_contiguous():
        p = p.contiguous()
    outer, inner = p.shape[:where[0]], p.shape[where[-1] + 1:]
    length = math.prod(p.shape[where[0]:where[-1] + 1])
    flat = p.reshape(*outer, length, *inner)
    pad = (-length) % group_size
    if pad:
        flat = torch.cat([flat, flat.new_zeros(*outer, pad, *inner)], len(outer))
    groups = flat.view(*outer, (length + pad) // group_size, group_size, *inner)
    axis = len(outer) + 1
    top = groups.abs().amax(dim=axis, keepdim=True)
    unit = torch.clamp_min(binade(top), SMALLEST_NORMAL) * 2.0 ** (1 - mantissa_bits)  # 2^(e - m + 1)
    unit = torch.where(top > (2.0 ** mantissa_bits - 1) * unit, unit * 2, unit)  # else it could round past 2^m - 1
    scaled = groups / unit  # exact: division by a power of two
    if generator is None:
        q = scaled.round_()  # half to even
    else:
        q = scaled.add_(_uniform(scaled, generator)).floor_()
    out = q.mul_(unit).view(flat.shape)
    if pad:
        out = out.narrow(len(outer), 0, length)
    out = out.reshape(p.shape).permute([order.index(d) for d in range(x.dim())])
    return out if out.stride() == x.stride() else torch.empty_like(x).copy_(out)

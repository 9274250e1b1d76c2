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

* OCP MX formats (``round_mx``): blocks of 32 consecutive values along ``dim`` (cut as BFP's groups)
  share a power-of-two scale (``mx_scale``: the specification's rule, or rounded up), each value
  divided by it and rounded to the element (``round_to_grid``: nearest even or stochastic,
  saturating at the element's largest value).
* Scaled FP8 (``round_scaled``): the whole tensor multiplied by a power of two (``tensor_scale``)
  from its largest magnitude (current scaling) or a history of them (delayed scaling, kept by
  ``workloads.numerics.emulate.Arithmetic``), rounded to the element with saturation, divided back.

Stochastic rounding draws its uniform numbers from the ``torch.Generator`` given, so a run is
reproducible from its seed.
"""

from __future__ import annotations

import math

import torch

from typing import Callable

from accel_sim.formats import ELEMENT_FORMATS, ElementFormat, NumberFormat, element_emax

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def round_to_format(x: torch.Tensor, fmt: NumberFormat, *, dim: int | tuple[int, ...] = -1,
                    generator: torch.Generator | None = None, amax: torch.Tensor | None = None,
                    gradient: bool = False) -> torch.Tensor:
    """``x`` (float32) rounded to ``fmt``, as float32 values; BFP and MX blocks run along ``dim``.
    Stochastic rounding needs ``generator``. A scaled FP8 format scales by ``amax`` (delayed
    scaling: the history's, ``workloads.numerics.emulate``), by default ``x``'s own (current
    scaling); the hybrid rounds a ``gradient`` to E5M2, anything else to E4M3."""
    if fmt.is_identity:
        return x
    if fmt.rounding == "stochastic" and generator is None:
        raise ValueError(f"number format {fmt.name}: stochastic rounding needs a generator")
    if fmt.kind == "bfp":
        return round_bfp(x, fmt.mantissa_bits, fmt.group_size, dim=dim,
                         generator=generator if fmt.rounding == "stochastic" else None)
    if fmt.kind == "mx":
        return round_mx(x, fmt, dim=dim, generator=generator if fmt.rounding == "stochastic" else None)
    if fmt.scaling != "none":
        spec = ELEMENT_FORMATS["e5m2"] if gradient and fmt.kind == "fp8_hybrid" else fmt.element
        return round_scaled(x, spec, x.abs().amax() if amax is None else amax,
                            generator if fmt.rounding == "stochastic" else None)
    if fmt.rounding == "stochastic":
        return round_element_stochastic(x, fmt, generator)
    if fmt.kind == "e4m3":  # the same values as torch's float8_e4m3fn cast, saturating (an infinity to +-448), faster on the CPU
        spec = fmt.element
        return round_to_grid(x.clamp(-2 * spec.max_finite, 2 * spec.max_finite), spec)
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


def _in_groups(x: torch.Tensor, group_size: int, dim: int | tuple[int, ...],
               round_groups: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
    """``x`` cut into groups of ``group_size`` consecutive values along ``dim`` (or several dims taken
    together in their memory order), ``round_groups(groups, axis)`` applied to the groups (``axis``
    runs within a group; a last, shorter group is padded with zeros), the result with ``x``'s shape
    and strides.

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
    out = round_groups(groups, len(outer) + 1).view(flat.shape)
    if pad:
        out = out.narrow(len(outer), 0, length)
    out = out.reshape(p.shape).permute([order.index(d) for d in range(x.dim())])
    return out if out.stride() == x.stride() else torch.empty_like(x).copy_(out)


def round_bfp(x: torch.Tensor, mantissa_bits: int, group_size: int, *, dim: int | tuple[int, ...] = -1,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """Block floating point along ``dim`` (module doc), or along several dims taken together in
    their memory order (``(0, 2, 3)``: each channel's values over batch and pixels; ``_in_groups``);
    stochastic with ``generator``, else to nearest, ties to even. The result has ``x``'s shape and
    strides."""

    def round_groups(groups: torch.Tensor, axis: int) -> torch.Tensor:
        top = groups.abs().amax(dim=axis, keepdim=True)
        unit = torch.clamp_min(binade(top), SMALLEST_NORMAL) * 2.0 ** (1 - mantissa_bits)  # 2^(e - m + 1)
        unit = torch.where(top > (2.0 ** mantissa_bits - 1) * unit, unit * 2, unit)  # else it could round past 2^m - 1
        scaled = groups / unit  # exact: division by a power of two
        if generator is None:
            q = scaled.round_()  # half to even
        else:
            q = scaled.add_(_uniform(scaled, generator)).floor_()
        return q.mul_(unit)

    return _in_groups(x, group_size, dim, round_groups)


def round_to_grid(v: torch.Tensor, spec: ElementFormat, generator: torch.Generator | None = None) -> torch.Tensor:
    """``v`` rounded to the values of the element format ``spec`` (its subnormals included),
    saturating at ``+-max_finite``: to nearest, ties to even, or stochastically with ``generator``
    (``floor(v / ulp + u)``, ``u`` uniform in [0, 1): unbiased, as BFP's). The unit in the last place
    is ``2^(max(e, e_min) - p + 1)``, ``e = floor(log2 |v|)`` (``binade`` ignores the sign); dividing
    by it is exact, and rounding the signed quotient keeps signed zeros. NaN and infinities become
    NaN. MX elements use it (the MX specification v1.0, Sec. 6.3: conversions to the element round to
    nearest even and clamp to its largest normal), and the scaled FP8 formats (a saturating cast,
    Micikevicius et al. 2022, Sec. 2)."""
    ulp = binade(v).clamp_min_(2.0 ** spec.min_normal_exponent).mul_(2.0 ** (1 - spec.significand_bits))
    q = v / ulp
    q = q.round_() if generator is None else q.add_(_uniform(q, generator)).floor_()
    return q.mul_(ulp).clamp_(-spec.max_finite, spec.max_finite)


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

    def round_groups(groups: torch.Tensor, axis: int) -> torch.Tensor:
        scale = mx_scale(groups.abs().amax(dim=axis, keepdim=True), spec, fmt.scale_rule)
        return round_to_grid(groups / scale, spec, generator).mul_(scale)

    return _in_groups(x, fmt.group_size, dim, round_groups)


def tensor_scale(amax: torch.Tensor, spec: ElementFormat) -> torch.Tensor:
    """A per-tensor scaling factor: the largest power of two ``2^s`` with ``amax x 2^s`` within the
    element's range, ``s = floor(log2(max_finite / amax))`` (Micikevicius et al. 2022, Sec. 2 and 4:
    the factor maps the tensor's largest magnitude near the format's largest value; a power of two
    keeps the scaling exact, so the values are the format's times ``2^-s``). Computed exactly from
    the exponents and significands of ``max_finite`` and ``amax``; 1 where ``amax`` is 0 or not
    finite."""
    top = torch.clamp_min(binade(amax), SMALLEST_NORMAL)
    significand = amax / top  # in [1, 2)
    exponent = element_emax(spec) - torch.log2(top)  # exact: top is a power of two
    fits = significand <= spec.max_finite / 2.0 ** element_emax(spec)
    scale = torch.exp2(torch.where(fits, exponent, exponent - 1))
    return torch.where((amax > 0) & torch.isfinite(amax), scale, torch.ones_like(scale))


def round_scaled(x: torch.Tensor, spec: ElementFormat, amax: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` in a per-tensor scaled FP8 format: ``round(x x 2^s) / 2^s`` with ``2^s =
    tensor_scale(amax)`` and a saturating rounding (``round_to_grid``: under delayed scaling a value
    beyond the history's ``amax`` saturates)."""
    scale = tensor_scale(amax, spec)
    return round_to_grid(x * scale, spec, generator).div_(scale)

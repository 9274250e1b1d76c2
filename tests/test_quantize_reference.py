"""The quantizers of workloads.numerics.quantize, rewritten for speed (no copy to regroup a tensor,
fewer passes, a reused rounding in the emulation), against a straightforward reference kept here:
the implementation they replaced, written plainly (each tensor regrouped by a permuted copy, a
short last group padded with zeros, every step a separate tensor operation). Bit for bit: the same
FP32 bit patterns (signed zeros included; NaN where NaN), and for stochastic rounding the same
uniform draws from the same generator, in the same order (element formats: torch.rand's; BFP, MX
and scaled FP8: a SplitMix64 stream keyed from the generator, written here with numpy), on random
tensors of many shapes and layouts, with FP32 subnormals, zeros of both signs, exact ties,
infinities and NaN; BFP, MX and scaled FP8 both through the fused kernel and through the torch
operations it falls back to. And a training step in every format is bitwise that of the reference
quantizers (docs/numerics.md, "What it costs")."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from accel_sim.formats import ELEMENT_FORMATS, MX_ELEMENTS, NumberFormat, element_emax
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.methods import parse_method
from workloads.models import build_model
from workloads.numerics import emulate, fused
from workloads.numerics.quantize import bfp_unit, largest_magnitude, round_to_format, round_to_grid

# --- the reference -------------------------------------------------------------------------------


def ref_binade(x):
    return (x.view(torch.int32) & 0x7F800000).view(torch.float32)


def ref_uniform(like, generator, p):
    """torch.rand's draws cut to 24 - p fractional bits (for a grid of p significant bits): the
    element formats' stochastic rounding."""
    bits = 24 - p
    return torch.floor(torch.rand(like.shape, generator=generator, device=like.device, dtype=like.dtype) * 2.0 ** bits) / 2.0 ** bits


def ref_splitmix64(counters, stream, key):
    """SplitMix64's outputs number counters + 1 from the seed stream x 2^32 + key (Steele, Lea and
    Flood, OOPSLA 2014; Vigna's splitmix64.c: state += 0x9E3779B97F4A7C15, then mix64), written
    with numpy's wrapping uint64 arithmetic (the package's is torch int64 and a numba kernel)."""
    state = np.uint64((stream << 32) | key) + (counters.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    z = (state ^ (state >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def ref_counter_uniform(like, generator, p):
    """BFP, MX and scaled FP8's draws: a (stream, key) pair from the generator (torch.randint, two
    32-bit words), then position j's word (the low 32 bits of SplitMix64's output j // 2 for an
    even j, the high 32 for an odd one) cut to its top 24 - p bits, positions in like's contiguous
    order."""
    stream, key = torch.randint(0, 1 << 32, (2,), generator=generator, dtype=torch.int64).tolist()
    j = np.arange(like.numel())
    outputs = ref_splitmix64(j // 2, stream, key)
    words = np.where(j % 2 == 0, outputs & np.uint64(0xFFFFFFFF), outputs >> np.uint64(32))
    bits = 24 - p
    return torch.from_numpy((words >> np.uint64(32 - bits)).astype(np.float32) * np.float32(2.0 ** -bits)).view(like.shape)


def ref_in_groups(x, g, dim, round_groups):
    """Permute the grouped dims together, copy to contiguous, pad the last group with zeros."""
    if x.numel() == 0:
        return x
    dims = {d % x.dim() for d in ((dim,) if isinstance(dim, int) else dim)}
    order = sorted(range(x.dim()), key=lambda d: (-x.stride(d), d))
    where = [i for i, d in enumerate(order) if d in dims]
    if where != list(range(where[0], where[0] + len(where))):
        rest = [d for d in order if d not in dims]
        order = rest[:where[0]] + sorted(dims, key=order.index) + rest[where[0]:]
        where = list(range(where[0], where[0] + len(where)))
    p = x.permute(order).contiguous()
    outer, inner = p.shape[:where[0]], p.shape[where[-1] + 1:]
    length = math.prod(p.shape[where[0]:where[-1] + 1])
    flat = p.reshape(*outer, length, *inner)
    pad = (-length) % g
    if pad:
        flat = torch.cat([flat, flat.new_zeros(*outer, pad, *inner)], len(outer))
    groups = flat.view(*outer, (length + pad) // g, g, *inner)
    out = round_groups(groups, len(outer) + 1).view(flat.shape)
    if pad:
        out = out.narrow(len(outer), 0, length)
    out = out.reshape(p.shape).permute([order.index(d) for d in range(x.dim())])
    return out if out.stride() == x.stride() else torch.empty_like(x).copy_(out)


def ref_bfp(x, m, g, dim, generator):
    def round_groups(groups, axis):
        top = groups.abs().amax(dim=axis, keepdim=True)
        unit = torch.clamp_min(ref_binade(top), 2.0 ** -126) * 2.0 ** (1 - m)
        unit = torch.where(top > (2.0 ** m - 1) * unit, unit * 2, unit)
        scaled = groups / unit
        q = scaled.round_() if generator is None else scaled.add_(ref_counter_uniform(scaled, generator, m)).floor_()
        return q.mul_(unit)

    return ref_in_groups(x, g, dim, round_groups)


def ref_grid(v, spec, generator=None):
    ulp = ref_binade(v).clamp_min_(2.0 ** spec.min_normal_exponent).mul_(2.0 ** (1 - spec.significand_bits))
    q = v / ulp
    q = q.round_() if generator is None else q.add_(ref_counter_uniform(q, generator, spec.significand_bits)).floor_()
    return q.mul_(ulp).clamp_(-spec.max_finite, spec.max_finite)


def ref_mx_scale(top, spec, rule):
    scale = torch.clamp_min(ref_binade(top), 2.0 ** -126) * 2.0 ** -element_emax(spec)
    if rule == "up":
        scale = torch.where(top > spec.max_finite * scale, scale * 2, scale)
    return scale.clamp_(2.0 ** -127, 2.0 ** 127).add_(top * 0)


def ref_mx(x, fmt, dim, generator):
    def round_groups(groups, axis):
        scale = ref_mx_scale(groups.abs().amax(dim=axis, keepdim=True), fmt.element, fmt.scale_rule)
        return ref_grid(groups / scale, fmt.element, generator).mul_(scale)

    return ref_in_groups(x, fmt.group_size, dim, round_groups)


def ref_tensor_scale(amax, spec):
    top = torch.clamp_min(ref_binade(amax), 2.0 ** -126)
    exponent = element_emax(spec) - torch.log2(top)
    fits = amax / top <= spec.max_finite / 2.0 ** element_emax(spec)
    scale = torch.exp2(torch.minimum(torch.where(fits, exponent, exponent - 1), torch.tensor(127.0)))
    return torch.where((amax > 0) & torch.isfinite(amax), scale, torch.ones_like(scale))


TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def ref_round(x, fmt, dim=-1, generator=None, amax=None, gradient=False):
    """round_to_format as it was written before the rewrite."""
    if fmt.is_identity:
        return x
    sr = generator if fmt.rounding == "stochastic" else None
    if fmt.kind == "bfp":
        return ref_bfp(x, fmt.mantissa_bits, fmt.group_size, dim, sr)
    if fmt.kind == "mx":
        return ref_mx(x, fmt, dim, sr)
    if fmt.scaling != "none":
        spec = ELEMENT_FORMATS["e5m2"] if gradient and fmt.kind == "fp8_hybrid" else fmt.element
        scale = ref_tensor_scale(x.abs().amax() if amax is None else amax, spec)
        scaled = torch.where(torch.isinf(x), float("nan"), (x * scale).clamp(-spec.max_finite, spec.max_finite))
        largest = (2 - 2.0 ** (1 - spec.significand_bits)) * 2.0 ** 127
        return ref_grid(scaled, spec, sr).div_(scale).clamp(-largest, largest)
    if fmt.rounding == "stochastic":
        spec = fmt.element
        if fmt.kind == "bf16":
            noise = torch.randint(0, 1 << 16, x.shape, generator=generator, device=x.device, dtype=torch.int32)
            return ((x.view(torch.int32) + noise) & -65536).view(torch.float32)
        magnitude = x.abs()
        ulp = torch.clamp_min(ref_binade(magnitude), 2.0 ** spec.min_normal_exponent) * 2.0 ** (1 - spec.significand_bits)
        rounded = torch.floor(magnitude / ulp + ref_uniform(x, generator, spec.significand_bits)).mul_(ulp)
        nearest = x.to(TORCH_DTYPES[fmt.kind]).to(x.dtype)
        return torch.where(rounded <= spec.max_finite, torch.copysign(rounded, x), nearest)
    if fmt.kind == "e4m3":
        return ref_grid(x.clamp(-2 * fmt.element.max_finite, 2 * fmt.element.max_finite), fmt.element)
    return x.to(TORCH_DTYPES[fmt.kind]).to(x.dtype)


# --- the comparisons -----------------------------------------------------------------------------

FORMATS = ["bf16", "fp16", "e4m3", "e5m2", "bf16_sr", "fp16_sr", "e4m3_sr", "e5m2_sr", "e4m3_cs", "e5m2_cs",
           "fp8_hybrid_cs", "e4m3_cs_sr", "bfp_m1_g2", "bfp_m2_g16", "bfp_m4_g16", "bfp_m8_g16", "bfp_m23_g3",
           "bfp_m4_g16_sr", "bfp_m2_g5_sr", *MX_ELEMENTS, "mxfp8_e4m3_ru", "mxfp4_e2m1_ru", "mxfp8_e4m3_sr",
           "mxint8_sr"]


def awkward(shape, seed):
    """Normal values over 80 binades (each group its own scale), FP32 subnormals, zeros of both
    signs, exact ties of the coarse grids, infinities and NaN, scattered over a tensor of ``shape``."""
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-40, 40, (n,), generator=g).float())
    kind = torch.randint(0, 40, (n,), generator=g)
    x = torch.where(kind == 0, torch.randn(n, generator=g) * 2.0 ** -135, x)  # FP32 subnormals
    x = torch.where(kind == 1, torch.zeros(n), x)
    x = torch.where(kind == 2, -torch.zeros(n), x)
    ties = torch.tensor([0.5, 1.5, 2.5, 1 + 2 ** -8, 1.125 + 2 ** -5, 3 * 2 ** -11, 0.75, 5.0])
    x = torch.where(kind == 3, ties[torch.randint(0, len(ties), (n,), generator=g)] * torch.sign(x), x)
    x = torch.where(kind == 4, torch.full((n,), 2.0 ** -140), x)  # a subnormal block's values
    special = (torch.rand(n, generator=g) < 0.002)
    x = torch.where(special, torch.tensor([float("inf"), float("-inf"), float("nan")])[torch.randint(0, 3, (n,), generator=g)], x)
    return x.view(shape)


def same_bits(a, b):
    """Bitwise equal, NaN where NaN (a NaN's payload is not compared)."""
    if not a.is_floating_point():
        return torch.equal(a, b)
    nan = torch.isnan(a)
    return (a.shape == b.shape and a.stride() == b.stride() and torch.equal(nan, torch.isnan(b))
            and torch.equal(a.view(torch.int32)[~nan], b.view(torch.int32)[~nan]))


LAYOUTS = [  # (shape, a view of a contiguous tensor of that shape, the dims grouped)
    ((8, 48, 6, 6), lambda t: t, 1),
    ((8, 48, 6, 6), lambda t: t, (0, 2, 3)),  # 36 pixels: groups of 16 straddle images (a copy)
    ((4, 24, 8, 8), lambda t: t, (0, 2, 3)),  # 64 pixels: whole groups per image (no copy)
    ((4, 24, 8, 8), lambda t: t.contiguous(memory_format=torch.channels_last), 1),
    ((4, 24, 8, 8), lambda t: t.contiguous(memory_format=torch.channels_last), (0, 2, 3)),
    ((24, 20, 3, 3), lambda t: t, 0),  # a convolution's weight along its outputs (dX)
    ((24, 20, 3, 3), lambda t: t, 1),
    ((37, 53), lambda t: t, -1),
    ((37, 53), lambda t: t, -2),
    ((53, 37), lambda t: t.t(), -1),  # a transposed view (an mm operand)
    ((3, 10, 37), lambda t: t, -1),  # bmm
    ((3, 37, 10), lambda t: t, -2),
    ((40, 70), lambda t: t[:, 5:60], -1),  # a slice: not dense
    ((1, 5, 1, 1), lambda t: t, (0, 2, 3)),
    ((1000,), lambda t: t, 0),
]


@pytest.mark.parametrize("path", ["kernel", "torch"])
@pytest.mark.parametrize("name", FORMATS)
def test_every_quantizer_equals_the_reference_bit_for_bit(name, path, monkeypatch):
    # both ways of rounding BFP, MX and scaled FP8: the fused kernel (which must take every layout
    # here) and the torch operations it falls back to
    if path == "kernel" and fused.kernel() is None:
        pytest.skip(f"the fused kernel is not available: {fused.fallback_reason}")
    monkeypatch.setattr(fused, "_kernel_enabled", path == "kernel")
    ran = []  # the kernel's runs (a layout rounded before runs on its remembered loop nests)
    run = fused._run
    monkeypatch.setattr(fused, "_run", lambda *a: ran.append(run(*a)))
    fmt = NumberFormat.parse(name)
    for i, (shape, view, dim) in enumerate(LAYOUTS):
        x = view(awkward(shape, seed=i))
        ours = round_to_format(x, fmt, dim=dim, generator=torch.Generator().manual_seed(i))
        ref = ref_round(x, fmt, dim=dim, generator=torch.Generator().manual_seed(i))
        assert same_bits(ours, ref), (name, shape, dim)
    blocks_or_scaled = fmt.kind in ("bfp", "mx") or fmt.scaling != "none"
    assert len(ran) == (len(LAYOUTS) if blocks_or_scaled and path == "kernel" else 0)


@pytest.mark.parametrize("name", ["fp8_hybrid_ds", "e4m3_ds"])
def test_a_scaled_rounding_with_a_given_amax_equals_the_reference(name):
    # delayed scaling's amax comes from the history: smaller than the tensor's own (values saturate),
    # larger, zero, infinite
    fmt = NumberFormat.parse(name)
    x = awkward((16, 40), seed=3).nan_to_num(nan=1.0, posinf=7.0, neginf=-7.0)
    for amax in (0.01, 3.0, 1e5, 0.0, float("inf")):
        for gradient in (False, True):
            a = torch.tensor(amax)
            assert same_bits(round_to_format(x, fmt, amax=a, gradient=gradient), ref_round(x, fmt, amax=a, gradient=gradient))


def test_the_shared_exponent_from_the_bit_pattern_equals_the_comparison():
    # bfp_unit's carry rule against the reference's where(top > (2^m - 1) unit, 2 unit, unit), on
    # every binade's edges (the significands just below and above 2 - 2^(1 - m)), subnormals, 0,
    # infinity and NaN, for every mantissa width
    edges = torch.tensor([1.0, 1.5, 1.75, 1.875, 1.9375, 2 - 2 ** -22, 2 - 2 ** -23, 1 + 2 ** -23])
    tops = torch.cat([edges * 2.0 ** e for e in range(-126, 127, 9)] + [
        edges.nextafter(torch.tensor(0.0)) * 2.0 ** 5, torch.tensor([2.0 ** -149, 2.0 ** -127, 0.0, float("inf"), float("nan")])])
    for m in range(1, 24):
        ref_unit = torch.clamp_min(ref_binade(tops), 2.0 ** -126) * 2.0 ** (1 - m)
        ref_unit = torch.where(tops > (2.0 ** m - 1) * ref_unit, ref_unit * 2, ref_unit)
        assert torch.equal(bfp_unit(tops.clone(), m), ref_unit), m


def test_the_largest_magnitude_equals_abs_max_nan_included():
    x = awkward((6, 5, 4, 32), seed=9)
    for axis in (0, 1, 2, 3):
        ours, ref = largest_magnitude(x, axis), x.abs().amax(axis, keepdim=True)
        assert torch.equal(ours.isnan(), ref.isnan()) and torch.equal(ours.nan_to_num(), ref.nan_to_num())
    assert largest_magnitude(x).isnan() and largest_magnitude(torch.tensor([-3.0, 2.0])) == 3.0


def test_round_to_grid_leaves_its_input_as_it_was():
    v = awkward((100,), seed=4)
    before = v.clone()
    round_to_grid(v, ELEMENT_FORMATS["e4m3"])
    assert same_bits(v, before)


@pytest.mark.parametrize("name", ["e4m3", "fp8_hybrid_ds", "bfp_m4_g16_sr", "mxfp4_e2m1"])
def test_a_training_step_is_bitwise_that_of_the_reference_quantizers(name, monkeypatch):
    # two SGD steps of a small ConvNet (the second scaled from the first's history under delayed
    # scaling), once with the package's
    # quantizers and its reuse of a convolution's rounded output gradient, once with the reference
    # rounding every operand of every GEMM afresh

    def train(reference: bool) -> dict:
        if reference:
            monkeypatch.setattr(emulate, "round_to_format", ref_round)
            monkeypatch.setattr(emulate.Arithmetic, "_rounding", reference_rounding)
        torch.manual_seed(0)
        method = parse_method("fedavg")
        model = prepare_model(build_model("convnet", num_classes=10, image_size=16), method, seed=0)
        fmt = NumberFormat.parse(name)
        gen = torch.Generator().manual_seed(5) if fmt.rounding == "stochastic" else None
        trainer = client_trainer(model, model.state_dict(), Hparams(lr=0.05), method,
                                 arithmetic=emulate.Arithmetic(fmt, generator=gen))
        g = torch.Generator().manual_seed(1)
        for _ in range(2):
            trainer.step(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g))
        monkeypatch.undo()
        return {k: v.clone() for k, v in model.state_dict().items()}

    ours, ref = train(False), train(True)
    assert all(same_bits(ours[k], ref[k]) for k in ref)


def reference_rounding(self, x, along, op, previous=None):
    """Arithmetic._rounding as written before the rewrite: every operand rounded afresh."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        return emulate._Rounded(x, None, None, x)
    self.rounded_operands[op] += 1
    if along == emulate.PIXELS:
        along = (0, *range(2, x.dim()))
    if self.fmt.scaling == "none":
        return emulate._Rounded(x, None, None, ref_round(x, self.fmt, dim=along, generator=self.generator))
    amax = x.abs().amax()
    if self.fmt.scaling == "delayed":
        history = self.amax_history.setdefault(self._operand, emulate.deque(maxlen=emulate.AMAX_HISTORY))
        own = amax
        if history:  # the window's largest, or the previous step's where that is not positive and finite
            window = max(float(a) for a in history) if not any(math.isnan(float(a)) for a in history) else math.nan
            amax = torch.tensor(window) if 0 < window < math.inf else self.scaled_by[self._operand]
        history.append(own)
        self.scaled_by[self._operand] = amax
    self._operand += 1
    gradient = self._gradients is not None and x in self._gradients
    return emulate._Rounded(x, None, None, ref_round(x, self.fmt, generator=self.generator, amax=amax, gradient=gradient))


"""Number formats: the one vocabulary the hardware model and the accuracy runs share.

A format names the arithmetic of the array's multiply-add cells: how each operand of a GEMM is
stored and multiplied (the emulation accumulates products in FP32; what the cell holds to do so is
``accel_sim.mac_cells``). The hardware side
(``accel_sim.resources``, ``accel_sim.energy``, ``accel_sim.space``) prices a point in its format;
the training side (``workloads.numerics``) rounds every GEMM operand of a federated run to it.
This module is torch-free and numpy-free so that both sides import it.

Names (``NumberFormat.parse``):

* element formats, each value its own exponent: ``fp32`` (IEEE 754 binary32, the reference: nothing
  is rounded), ``bf16`` (bfloat16: 8 exponent bits, 7 stored mantissa bits), ``fp16`` (IEEE 754
  binary16: 5 + 10), ``e4m3`` and ``e5m2`` (the FP8 formats of Micikevicius et al., "FP8 Formats for
  Deep Learning", arXiv 2209.05433, 2022, Sec. 3 and Table 1: E4M3 without infinities, its largest
  value 448; E5M2 with IEEE-style infinities);
* block floating point ``bfp_m<m>_g<g>``: a sign and ``m`` mantissa bits per value, ``g`` values
  sharing one ``BFP_EXPONENT_BITS``-bit exponent (Drumond et al., "Training DNNs with Hybrid Block
  Floating Point", NeurIPS 2018; FAST, Zhang, McDanel and Kung, HPCA 2022, SphereFed's ref. [91]);
* per-tensor scaled FP8, as FP8 training recipes use it (Micikevicius et al. 2022, Sec. 2 and 4:
  each tensor multiplied by a scaling factor before the cast; NVIDIA Transformer Engine's "current"
  and "delayed" scaling): ``e4m3_cs`` / ``e5m2_cs`` (current scaling: the factor from the tensor's
  own largest magnitude), ``e4m3_ds`` / ``e5m2_ds`` (delayed scaling: the factor from the largest
  magnitude of the same operand over the previous ``AMAX_HISTORY`` steps), and ``fp8_hybrid_cs`` /
  ``fp8_hybrid_ds``, the hybrid recipe: E4M3 for activations and weights, E5M2 for gradients (Sun
  et al., "Hybrid 8-bit Floating Point (HFP8) Training and Inference for Deep Neural Networks",
  NeurIPS 2019; Micikevicius et al. 2022, Sec. 4). The factor is a power of two, at most 2^127
  (``workloads.numerics.quantize.tensor_scale``; where the defaults differ from Transformer
  Engine's: ``docs/numerics.md``);
* OCP Microscaling (MX) formats (OCP "Microscaling Formats (MX) Specification" v1.0, 2023, Sec. 5
  and 6; Rouhani et al., "Microscaling Data Formats for Deep Learning", arXiv 2310.10537, 2023):
  blocks of ``MX_BLOCK_SIZE`` = 32 values share one E8M0 scale (a power of two, 8 bits):
  ``mxfp8_e4m3``, ``mxfp8_e5m2``, ``mxfp6_e3m2``, ``mxfp6_e2m3``, ``mxfp4_e2m1``, ``mxint8``. The
  scale is the specification's, ``2^(floor(log2 max|x|) - emax_elem)`` (Sec. 6.3, which clips a
  block's largest value where it rounds past the element's largest one); an ``_ru`` suffix
  (``mxfp4_e2m1_ru``) rounds the scale up instead, ``2^ceil(log2(max|x| / max_elem))``, so that
  nothing clips (the variant of Mishra et al., "Recipes for Pre-training LLMs with MXFP8", arXiv
  2506.08027, 2025);
* a ``_sr`` suffix, last, asks for stochastic rounding (``bf16_sr``, ``bfp_m4_g16_sr``,
  ``mxfp4_e2m1_sr``); without it values round to nearest, ties to even. ``fp32`` takes no suffix:
  it is the accumulator's format.

The hardware side reads a format's MAC datapath (``mac_kind``, ``multiplier_bits``, the group size),
its storage, and what its rounding costs (``docs/numerics.md``, "What it costs").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

BFP_EXPONENT_BITS = 8
"""Bits of the exponent a block-floating-point group shares: FP32's 8, an assumption (it keeps
FP32's range, the point of BFP for training)."""
BFP_MANTISSA_BITS = (1, 23)
BFP_GROUP_SIZES = (1, 1024)
ROUNDINGS = ("nearest", "stochastic")
STOCHASTIC_SUFFIX = "_sr"
SCALINGS = {"none": "", "current": "_cs", "delayed": "_ds"}
"""Per-tensor scaling of the FP8 formats, and its suffix in a name."""
SCALED_KINDS = ("e4m3", "e5m2", "fp8_hybrid")
AMAX_HISTORY = 16
"""Delayed scaling: steps of largest magnitudes an operand's factor is taken from (the maximum over
them, Transformer Engine's ``amax_compute_algo="max"``); an assumption (Transformer Engine's default
history length has been 1 and 1024 in its releases; 16 follows a drifting scale within a client's
few dozen steps of a round)."""
MX_BLOCK_SIZE = 32
"""Values per MX block sharing one scale (MX specification v1.0, Sec. 5, Table 1)."""
MX_SCALE_BITS = 8
"""Bits of an MX block's E8M0 scale (MX specification v1.0, Sec. 5.4)."""
MX_ELEMENTS = {"mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2", "mxfp6_e3m2": "e3m2", "mxfp6_e2m3": "e2m3",
               "mxfp4_e2m1": "e2m1", "mxint8": "int8"}
"""MX format name -> its element (MX specification v1.0, Sec. 5, Table 1)."""
MX_SCALE_RULES = {"floor": "", "up": "_ru"}
"""The MX block scale: the specification's (``floor``) or rounded up (``up``); its suffix in a name."""


@dataclass(frozen=True)
class ElementFormat:
    """A floating-point element format: ``significand_bits`` counts the hidden bit (FP32 24),
    ``min_normal_exponent`` is the exponent of the smallest normal value, ``max_finite`` the largest
    finite value, ``has_inf`` whether overflow gives infinity (else it saturates at ``max_finite``)."""

    bits: int
    exponent_bits: int
    significand_bits: int
    min_normal_exponent: int
    max_finite: float
    has_inf: bool


ELEMENT_FORMATS = {
    # IEEE 754-2008 binary32 / binary16; bfloat16 (Google Brain's; Kalamkar et al., "A Study of
    # BFLOAT16 for Deep Learning Training", arXiv 1905.12322, 2019); FP8 (Micikevicius et al. 2022,
    # Table 1: E4M3 max 448, min normal 2^-6; E5M2 max 57,344, min normal 2^-14).
    "fp32": ElementFormat(32, 8, 24, -126, (2 - 2 ** -23) * 2.0 ** 127, True),
    "bf16": ElementFormat(16, 8, 8, -126, (2 - 2 ** -7) * 2.0 ** 127, True),
    "fp16": ElementFormat(16, 5, 11, -14, 65504.0, True),
    "e4m3": ElementFormat(8, 4, 4, -6, 448.0, False),
    "e5m2": ElementFormat(8, 5, 3, -14, 57344.0, True),
    # MX elements (MX specification v1.0, Sec. 5.3, Tables 2-4): FP6 E3M2 (bias 3, max 28, min
    # normal 2^-2), FP6 E2M3 (bias 1, max 7.5, min normal 2^0), FP4 E2M1 (bias 1, max 6, min normal
    # 2^0), none with infinities or NaN; INT8: two's complement with an implicit scale of 2^-6, kept
    # symmetric (max 127 / 64; the specification allows -2 too), as a fixed-point grid of 2^-6.
    "e3m2": ElementFormat(6, 3, 3, -2, 28.0, False),
    "e2m3": ElementFormat(6, 2, 4, 0, 7.5, False),
    "e2m1": ElementFormat(4, 2, 2, 0, 6.0, False),
    "int8": ElementFormat(8, 0, 7, 0, 127 / 64, False),
}
ELEMENT_KINDS = ("fp32", "bf16", "fp16", "e4m3", "e5m2")
"""The element formats a run may compute in unscaled (the others are MX elements)."""
FORMAT_KINDS = (*ELEMENT_KINDS, "fp8_hybrid", "bfp", "mx")
NAME_PATTERN = (rf"(({'|'.join(ELEMENT_KINDS)}|fp8_hybrid)({'|'.join(s for s in SCALINGS.values() if s)})?"
                rf"|({'|'.join(MX_ELEMENTS)})({MX_SCALE_RULES['up']})?|bfp_m\d+_g\d+)({STOCHASTIC_SUFFIX})?")
"""Every name ``NumberFormat.parse`` reads (the module doc's vocabulary); what it cannot match is
refused in the words the user typed, before any part of it is read."""


def element_emax(spec: ElementFormat) -> int:
    """``emax_elem``: the exponent of an element format's largest normal value,
    ``floor(log2 max_finite)`` (MX specification v1.0, Sec. 6.3: E4M3 8, E5M2 15, E3M2 4, E2M3 2,
    E2M1 2, INT8 0)."""
    return math.floor(math.log2(spec.max_finite))


class NumberFormatError(ValueError):
    """A number format name or field this model does not know; the message names it and the fix."""


@dataclass(frozen=True)
class NumberFormat:
    """The arithmetic of the array's MAC cells (module doc): ``kind`` one of ``FORMAT_KINDS``;
    for ``bfp`` its ``mantissa_bits`` and ``group_size``; for ``mx`` its ``mx`` name (a key of
    ``MX_ELEMENTS``) and ``scale_rule``; ``scaling`` for the FP8 kinds (``SCALINGS``; the hybrid
    needs one); ``rounding`` nearest or stochastic."""

    kind: str
    mantissa_bits: int = 0
    group_size: int = 0
    rounding: str = "nearest"
    scaling: str = "none"
    mx: str = ""
    scale_rule: str = "floor"

    def __post_init__(self) -> None:
        if self.kind not in FORMAT_KINDS:
            raise NumberFormatError(f"number format {self.kind!r}: expected one of {', '.join(ELEMENT_KINDS)}, "
                                    f"e4m3_cs / e4m3_ds / e5m2_cs / e5m2_ds / fp8_hybrid_cs / fp8_hybrid_ds (scaled FP8), "
                                    f"{', '.join(MX_ELEMENTS)} (OCP MX; an _ru suffix rounds the block scale up), "
                                    f"bfp_m<mantissa bits>_g<group size>; a {STOCHASTIC_SUFFIX} suffix for stochastic rounding")
        if self.scaling not in SCALINGS or (self.scaling != "none" and self.kind not in SCALED_KINDS):
            raise NumberFormatError(f"number format {self.kind}: scaling {self.scaling!r} applies to "
                                    f"{', '.join(SCALED_KINDS)} only, as one of {', '.join(SCALINGS)}")
        if self.kind == "fp8_hybrid" and self.scaling == "none":
            raise NumberFormatError("number format fp8_hybrid: the hybrid recipe scales its tensors: use fp8_hybrid_cs "
                                    "(current scaling) or fp8_hybrid_ds (delayed scaling)")
        if self.kind == "mx":
            if self.mx not in MX_ELEMENTS or self.scale_rule not in MX_SCALE_RULES:
                raise NumberFormatError(f"number format {self.mx or self.kind!r}: an MX format is one of {', '.join(MX_ELEMENTS)} "
                                        f"with scale rule one of {', '.join(MX_SCALE_RULES)}")
            if (self.mantissa_bits, self.group_size) != (self.mx_mantissa_bits, MX_BLOCK_SIZE):
                raise NumberFormatError(f"number format {self.mx}: use NumberFormat.parse({self.mx!r}) (its block size "
                                        f"is {MX_BLOCK_SIZE})")
            return self._check_rounding()
        if (self.mx, self.scale_rule) != ("", "floor"):
            raise NumberFormatError(f"number format {self.kind} takes no MX element or scale rule")
        self._check_rounding()
        if self.kind == "bfp":
            for name, value, (low, high) in (("mantissa bits", self.mantissa_bits, BFP_MANTISSA_BITS),
                                             ("group size", self.group_size, BFP_GROUP_SIZES)):
                if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                    raise NumberFormatError(f"number format {self.name}: {name} must be an integer in "
                                            f"[{low}, {high}], got {value!r}")
        elif (self.mantissa_bits, self.group_size) != (0, 0):
            raise NumberFormatError(f"number format {self.kind} takes no mantissa bits or group size")

    @property
    def mx_mantissa_bits(self) -> int:
        """MXINT8's 7 magnitude bits (its datapath is BFP's with ``m = 7``, ``g = 32``); 0 for the
        other MX formats, whose elements carry their own exponent."""
        return 7 if MX_ELEMENTS.get(self.mx) == "int8" else 0

    def _check_rounding(self) -> None:
        if self.rounding not in ROUNDINGS:
            raise NumberFormatError(f"number format {self.kind}: rounding {self.rounding!r} is not one of {ROUNDINGS}")
        if self.kind == "fp32" and self.rounding != "nearest":
            raise NumberFormatError("number format fp32_sr: fp32 is the accumulator's format and rounds nothing; "
                                    "use fp32")

    @staticmethod
    def parse(text: object) -> "NumberFormat":
        """A name of the module doc (``fp32``, ``bf16``, ``e4m3_ds``, ``fp8_hybrid_cs``,
        ``mxfp4_e2m1_ru``, ``bfp_m4_g16_sr``, ...) as a ``NumberFormat``."""
        if isinstance(text, NumberFormat):
            return text
        name = str(text).strip()
        if not re.fullmatch(NAME_PATTERN, name):
            raise NumberFormatError(f"number format {name!r}: expected one of {', '.join(ELEMENT_KINDS)}, "  # as typed
                                    f"a scaled FP8 ({', '.join(k + s for k in SCALED_KINDS for s in SCALINGS.values() if s)}), "
                                    f"an MX format ({', '.join(MX_ELEMENTS)}; {MX_SCALE_RULES['up']} for the rounded-up "
                                    f"scale) or block floating point as bfp_m<mantissa bits>_g<group size>, e.g. "
                                    f"bfp_m4_g16; a {STOCHASTIC_SUFFIX} suffix for stochastic rounding")
        rounding = "nearest"
        if name.endswith(STOCHASTIC_SUFFIX):
            name, rounding = name[: -len(STOCHASTIC_SUFFIX)], "stochastic"
        match = re.fullmatch(r"bfp_m(\d+)_g(\d+)", name)
        if match:
            return NumberFormat("bfp", int(match[1]), int(match[2]), rounding)
        for rule, suffix in MX_SCALE_RULES.items():
            mx = name[: -len(suffix)] if suffix and name.endswith(suffix) else name
            if mx in MX_ELEMENTS and (suffix == "" or mx != name):
                return NumberFormat("mx", 7 if MX_ELEMENTS[mx] == "int8" else 0, MX_BLOCK_SIZE, rounding, mx=mx,
                                    scale_rule=rule)
        for scaling, suffix in SCALINGS.items():
            if suffix and name.endswith(suffix):
                return NumberFormat(name[: -len(suffix)], rounding=rounding, scaling=scaling)
        return NumberFormat(name, rounding=rounding)

    @property
    def name(self) -> str:
        if self.kind == "bfp":
            base = f"bfp_m{self.mantissa_bits}_g{self.group_size}"
        elif self.kind == "mx":
            base = self.mx + MX_SCALE_RULES[self.scale_rule]
        else:
            base = self.kind + SCALINGS[self.scaling]
        return base + (STOCHASTIC_SUFFIX if self.rounding == "stochastic" else "")

    @property
    def element(self) -> ElementFormat | None:
        """The parameters of the element the MAC multiplies (the hybrid: E4M3, its wider
        significand; an MX format: its element); None for block floating point."""
        if self.kind == "mx":
            return ELEMENT_FORMATS[MX_ELEMENTS[self.mx]]
        return ELEMENT_FORMATS.get("e4m3" if self.kind == "fp8_hybrid" else self.kind)

    @property
    def block_grouped(self) -> bool:
        """Whether values share a scale in blocks along one dimension (BFP, MX): a tensor stored so
        cannot be read transposed without re-grouping it (``docs/numerics.md``)."""
        return self.kind in ("bfp", "mx")

    @property
    def mac_kind(self) -> str:
        """The MAC datapath (``accel_sim.mac_cells``): ``bfp`` for BFP and MXINT8
        (an integer mantissa multiplier, a shared exponent per group), the element's name for the
        other MX formats and the scaled FP8 formats (the hybrid: ``e4m3``, its wider significand
        multiplier serves E5M2 operands too), else the kind."""
        if self.kind == "mx":
            element = MX_ELEMENTS[self.mx]
            return "bfp" if element == "int8" else element
        return "e4m3" if self.kind == "fp8_hybrid" else self.kind

    @property
    def is_identity(self) -> bool:
        """FP32: training in it rounds nothing."""
        return self.kind == "fp32"

    @property
    def bits_per_value(self) -> float:
        """FP32 32, BF16 and FP16 16, FP8 8 (a scaled tensor's one factor not counted per value);
        BFP ``1 + m`` plus its share of the group's exponent, ``8 / g``; MX the element's bits plus
        ``8 / 32`` (MXFP8 8.25, MXFP6 6.25, MXFP4 4.25, MXINT8 8.25)."""
        if self.kind == "bfp":
            return 1 + self.mantissa_bits + BFP_EXPONENT_BITS / self.group_size
        if self.kind == "mx":
            return self.element.bits + MX_SCALE_BITS / MX_BLOCK_SIZE
        return self.element.bits

    @property
    def element_bits(self) -> int:
        """Bits of one element as stored, packed (sub-byte elements share bytes: two E2M1 values to a
        byte), its shared scale apart (``scale_bits_per_value``): an element format's bits, a BFP
        value's sign and ``m`` mantissa bits, an MX element's bits (MXFP4 4, MXFP6 6, MXFP8 and
        MXINT8 8). What a GEMM operand in the format is priced at (``HardwareConfig.element_bits``,
        ``accel_sim.words``, ``accel_sim.memory``)."""
        if self.kind == "bfp":
            return 1 + self.mantissa_bits
        return self.element.bits

    @property
    def scale_bits_per_value(self) -> float:
        """Bits of shared scale per value, stored apart from the packed elements: a BFP group's
        ``BFP_EXPONENT_BITS``-bit exponent over its ``g`` values, ``8 / g`` (``bfp_m4_g16`` 0.5); an MX
        block's E8M0 scale, ``8 / 32`` = 0.25 (MX specification v1.0, Sec. 5: the scales need not be
        stored with the elements); 0 for the others (a scaled FP8 tensor's one factor is negligible).
        ``element_bits + scale_bits_per_value`` is ``bits_per_value``: MXFP4 4.25, MXFP6 6.25."""
        if self.kind == "bfp":
            return BFP_EXPONENT_BITS / self.group_size
        return MX_SCALE_BITS / MX_BLOCK_SIZE if self.kind == "mx" else 0.0

    @property
    def storage_bytes(self) -> int:
        """Whole bytes of the container a value would take byte-aligned, ``ceil(bits_per_value / 8)``
        (an MX format: ``ceil(element bits / 8)``, its scales apart): the ``word_bytes`` a point in
        the format declares, the word SCALE-Sim's reference memory model counts (``scalesim_v3``).
        What the fold model, the buffers and memory price is the packed ``element_bits`` (plus the
        scales, ``accel_sim.words``), not this."""
        if self.kind == "mx":
            return math.ceil(self.element.bits / 8)
        return math.ceil(self.bits_per_value / 8)

    def payload_bytes(self, values: int) -> int:
        """Bytes of ``values`` values sent over a link in this format, bit-packed (a message is not
        bound to memory words): ``bits`` each for an element format; for BFP ``1 + m`` each plus one
        ``BFP_EXPONENT_BITS``-bit exponent per group of ``g`` consecutive values (a last, shorter
        group where ``g`` does not divide ``values``). ``ceil(bits / 8)``."""
        if self.kind == "bfp":
            bits = values * (1 + self.mantissa_bits) + -(-values // self.group_size) * BFP_EXPONENT_BITS
        elif self.kind == "mx":
            bits = values * self.element.bits + -(-values // MX_BLOCK_SIZE) * MX_SCALE_BITS
        elif self.scaling != "none":  # the tensor's FP32 scaling factor travels with it
            bits = values * self.element.bits + 32
        else:
            bits = values * self.element.bits
        return -(-bits // 8)

    @property
    def multiplier_bits(self) -> int:
        """Width of the significand (mantissa) multiplier's operands: an element format's significand
        with its hidden bit, a BFP value's ``m`` mantissa bits (MXINT8: 7)."""
        return self.mantissa_bits if self.mac_kind == "bfp" else self.element.significand_bits

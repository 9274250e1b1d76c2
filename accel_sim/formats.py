"""Number formats: the one vocabulary the hardware model and the accuracy runs share.

A format names the arithmetic of the array's multiply-add cells: how each operand of a GEMM is
stored and multiplied (products are accumulated in FP32, as the MAC array does). The hardware side
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
* a ``_sr`` suffix asks for stochastic rounding (``bf16_sr``, ``bfp_m4_g16_sr``); without it values
  round to nearest, ties to even. ``fp32`` takes no suffix: it is the accumulator's format.

The rounding does not change what a value occupies or what its MAC costs in this model (the random
bits of stochastic rounding are not priced: an assumption), so the hardware side reads only the
kind, the mantissa bits and the group size.
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
}
FORMAT_KINDS = (*ELEMENT_FORMATS, "bfp")


class NumberFormatError(ValueError):
    """A number format name or field this model does not know; the message names it and the fix."""


@dataclass(frozen=True)
class NumberFormat:
    """The arithmetic of the array's MAC cells (module doc): ``kind`` one of ``FORMAT_KINDS``;
    for ``bfp`` its ``mantissa_bits`` and ``group_size``; ``rounding`` nearest or stochastic."""

    kind: str
    mantissa_bits: int = 0
    group_size: int = 0
    rounding: str = "nearest"

    def __post_init__(self) -> None:
        if self.kind not in FORMAT_KINDS:
            raise NumberFormatError(f"number format {self.kind!r}: expected one of {', '.join(FORMAT_KINDS)} "
                                    f"(block floating point as bfp_m<mantissa bits>_g<group size>; a {STOCHASTIC_SUFFIX} "
                                    f"suffix for stochastic rounding)")
        if self.rounding not in ROUNDINGS:
            raise NumberFormatError(f"number format {self.kind}: rounding {self.rounding!r} is not one of {ROUNDINGS}")
        if self.kind == "fp32" and self.rounding != "nearest":
            raise NumberFormatError("number format fp32_sr: fp32 is the accumulator's format and rounds nothing; "
                                    "use fp32")
        if self.kind == "bfp":
            for name, value, (low, high) in (("mantissa bits", self.mantissa_bits, BFP_MANTISSA_BITS),
                                             ("group size", self.group_size, BFP_GROUP_SIZES)):
                if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                    raise NumberFormatError(f"number format {self.name}: {name} must be an integer in "
                                            f"[{low}, {high}], got {value!r}")
        elif (self.mantissa_bits, self.group_size) != (0, 0):
            raise NumberFormatError(f"number format {self.kind} takes no mantissa bits or group size")

    @staticmethod
    def parse(text: object) -> "NumberFormat":
        """``fp32``, ``bf16``, ``fp16``, ``e4m3``, ``e5m2`` or ``bfp_m<m>_g<g>``, each but fp32
        optionally with ``_sr`` (stochastic rounding), as a ``NumberFormat``."""
        if isinstance(text, NumberFormat):
            return text
        name = str(text).strip()
        if not re.fullmatch(rf"({'|'.join(ELEMENT_FORMATS)}|bfp_m\d+_g\d+)({STOCHASTIC_SUFFIX})?", name):
            raise NumberFormatError(f"number format {name!r}: expected one of {', '.join(FORMAT_KINDS)} "  # as typed
                                    f"(block floating point as bfp_m<mantissa bits>_g<group size>, e.g. bfp_m4_g16; "
                                    f"a {STOCHASTIC_SUFFIX} suffix for stochastic rounding)")
        rounding = "nearest"
        if name.endswith(STOCHASTIC_SUFFIX):
            name, rounding = name[: -len(STOCHASTIC_SUFFIX)], "stochastic"
        match = re.fullmatch(r"bfp_m(\d+)_g(\d+)", name)
        if match:
            return NumberFormat("bfp", int(match[1]), int(match[2]), rounding)
        return NumberFormat(name, rounding=rounding)

    @property
    def name(self) -> str:
        base = f"bfp_m{self.mantissa_bits}_g{self.group_size}" if self.kind == "bfp" else self.kind
        return base + (STOCHASTIC_SUFFIX if self.rounding == "stochastic" else "")

    @property
    def element(self) -> ElementFormat | None:
        """The element format's parameters (None for block floating point)."""
        return ELEMENT_FORMATS.get(self.kind)

    @property
    def is_identity(self) -> bool:
        """FP32: training in it rounds nothing."""
        return self.kind == "fp32"

    @property
    def bits_per_value(self) -> float:
        """FP32 32, BF16 and FP16 16, FP8 8; BFP ``1 + m`` plus its share of the group's exponent,
        ``8 / g``."""
        if self.kind == "bfp":
            return 1 + self.mantissa_bits + BFP_EXPONENT_BITS / self.group_size
        return ELEMENT_FORMATS[self.kind].bits

    @property
    def storage_bytes(self) -> int:
        """Bytes a value occupies in memory: ``ceil(bits / 8)``. An assumption for BFP: values are
        stored byte-aligned (packing 5.5-bit values is not modeled), so ``bfp_m4_g16`` stores one
        byte per value; this is the ``word_bytes`` ``simulate`` must price the point with."""
        return math.ceil(self.bits_per_value / 8)

    def payload_bytes(self, values: int) -> int:
        """Bytes of ``values`` values sent over a link in this format, bit-packed (a message is not
        bound to memory words): ``bits`` each for an element format; for BFP ``1 + m`` each plus one
        ``BFP_EXPONENT_BITS``-bit exponent per group of ``g`` consecutive values (a last, shorter
        group where ``g`` does not divide ``values``). ``ceil(bits / 8)``."""
        if self.kind == "bfp":
            bits = values * (1 + self.mantissa_bits) + -(-values // self.group_size) * BFP_EXPONENT_BITS
        else:
            bits = values * ELEMENT_FORMATS[self.kind].bits
        return -(-bits // 8)

    @property
    def multiplier_bits(self) -> int:
        """Width of the significand (mantissa) multiplier's operands: an element format's significand
        with its hidden bit, a BFP value's ``m`` mantissa bits."""
        return self.mantissa_bits if self.kind == "bfp" else ELEMENT_FORMATS[self.kind].significand_bits

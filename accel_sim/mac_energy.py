"""Energy of one multiply-add of the array in a number format, and the hardware in a format.

What a MAC cell holds in each format is ``accel_sim.mac_cells`` (one rule per format family: FP32,
BF16 and FP16 add each product into FP32; block floating point, MXINT8, FP8 and the MX
floating-point formats accumulate a block in fixed point and add into FP32 once per block); what
each unit costs is a published cost table (``accel_sim.cost_tables``: ``horowitz45``, the default,
``epfl28``, ``aladdin40``), chosen by the hardware's ``cost_table`` field. A table is read as
ratios to its own FP32 cell (``accel_sim.mac_cells.relative_to_fp32``), placed at the node of the
rest of the energy model: FP32's MAC is ``FP32_MAC_PJ`` = 4.6 pJ (M. Horowitz, "Computing's
energy problem (and what we can do about it)", ISSCC 2014, Fig. 1.1.9: FP32 multiply 3.7 pJ + add
0.9 pJ, the source of every other ``[energy]`` figure), and another format's is 4.6 pJ x its
share of the FP32 cell under the table. So a table decides what a format costs against FP32, not
the node; under ``horowitz45`` a format's figure is Horowitz's own pJ. Formats under the default
table (``python -m bench.formulas`` prints them): FP32 4.6, BF16 1.20, FP16 2.0, E4M3 0.58, MXFP8
E4M3 0.58, MXFP4 0.24, MXINT8 0.26, ``bfp_m8_g16`` 0.34, ``bfp_m4_g16`` 0.163 pJ.

A format's rounding does not change its MAC's figure. The random bits of stochastic rounding
(``_sr`` formats) are priced per value rounded into a stored copy (``accel_sim.words``):
``rounding_pj(fmt)`` = ``random_bits(fmt) x RANDOM_BIT_PJ``. The model (an assumption): the
quantizer has one linear-feedback shift register per lane, which shifts once per random bit; a
value draws the bits its rounding drops from an FP32 significand, ``24 - p`` (an element format's
significand ``p``, hidden bit included: BF16 16, E4M3 20; a BFP or MXINT8 value's ``m`` mantissa
bits: ``bfp_m4_g16`` 20), as the emulation's uniform draw resolves them
(``workloads.numerics.quantize``). A shift's energy is taken as a 1-bit add (an XOR and a flip-flop
toggle), Horowitz's 32-bit add over 32, 0.1 / 32 = 0.003125 pJ: BF16 0.05 pJ per value,
``bfp_m4_g16_sr`` 0.0625 pJ, beside the special unit's 4.6 pJ per element.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from accel_sim.cost_tables import DEFAULT_COST_TABLE
from accel_sim.formats import NumberFormat
from accel_sim.hardware import HardwareConfig
from accel_sim.mac_cells import relative_to_fp32

FP32_MAC_PJ = Fraction("4.6")
"""FP32's MAC, pJ: Horowitz 2014, Fig. 1.1.9, FP32 multiply 3.7 + add 0.9 (exact decimals), the
``EnergyCosts.mac_pj`` default."""


def format_mac_pj(fmt: NumberFormat | str, cost_table: str = DEFAULT_COST_TABLE) -> float:
    """One MAC of the array in ``fmt``, pJ: ``FP32_MAC_PJ`` x the format's share of the FP32 cell's
    energy under ``cost_table`` (module docstring); FP32 the literal 4.6."""
    fmt = NumberFormat.parse(fmt)
    if fmt.is_identity:
        return float(FP32_MAC_PJ)
    return float(FP32_MAC_PJ) * relative_to_fp32(fmt, cost_table).energy


FP32_SIGNIFICAND_BITS = 24
RANDOM_BIT_PJ = Fraction("0.1") / 32
"""One random bit of stochastic rounding: one LFSR shift, taken as a 1-bit add (module docstring)."""


def random_bits(fmt: NumberFormat) -> int:
    """Random bits a stochastically rounded value draws: the bits its rounding drops from an FP32
    significand, ``24 - multiplier_bits`` (module docstring); 0 when rounding to nearest."""
    return FP32_SIGNIFICAND_BITS - fmt.multiplier_bits if fmt.rounding == "stochastic" else 0


def rounding_pj(fmt: NumberFormat | str) -> float:
    """Energy of the random bits of one value rounded into ``fmt``, pJ (``EnergyCosts.rounding_pj_per_value``)."""
    return float(random_bits(NumberFormat.parse(fmt)) * RANDOM_BIT_PJ)


def operand_copies(fmt: NumberFormat | str) -> str:
    """``per_role`` for a block-grouped format (BFP, MX: a tensor regrouped for each GEMM role) and
    for stochastic rounding (each role's copy drawn with its own bits, as the emulation rounds each
    GEMM's operands), else ``one`` (``accel_sim.hardware.OPERAND_COPIES``)."""
    fmt = NumberFormat.parse(fmt)
    return "per_role" if fmt.block_grouped or fmt.rounding == "stochastic" else "one"


def hardware_in_format(hw: HardwareConfig, fmt: NumberFormat | str, *, master_weights: bool = True) -> HardwareConfig:
    """``hw`` computing in ``fmt``: ``word_bytes`` the format's byte-aligned container,
    ``element_bits`` its packed element (``NumberFormat.element_bits``), ``energy.mac_pj`` its MAC
    figure under ``hw.cost_table`` (``format_mac_pj``), and how it stores GEMM operands (``operand_copies``,
    ``scale_bits_per_value``) and what its rounding's random bits cost
    (``energy.rounding_pj_per_value``: ``rounding_pj``); ``master_weights=False``: the weights live in
    the format only (``weight_master = "none"``, ``--low-precision-weights``). ``fp32`` returns
    ``hw`` itself: a hardware file is given in FP32,
    and its own ``mac_pj`` (any technology) and ``word_bytes`` stay as given. For another format the
    figure replaces the file's ``mac_pj``: the per-format figures are placed at Horowitz's 45 nm FP32
    MAC (module docstring), so a file that sets another technology's FP32 figure is priced in that
    technology for fp32 only.
    Applying it twice with the same format gives the same hardware (a point ``bench.dse --write-hw``
    wrote is already in its format)."""
    fmt = NumberFormat.parse(fmt)
    if fmt.is_identity:
        return hw
    return hw.with_(word_bytes=fmt.storage_bytes, element_bits=fmt.element_bits, operand_copies=operand_copies(fmt),
                    scale_bits_per_value=fmt.scale_bits_per_value,
                    weight_master="fp32" if master_weights else "none",
                    energy=replace(hw.energy, mac_pj=format_mac_pj(fmt, hw.cost_table),
                                   rounding_pj_per_value=rounding_pj(fmt)))


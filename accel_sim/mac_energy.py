"""Energy of one multiply-add of the array in a number format, and the hardware in a format.

The array accumulates in FP32 whatever the element format (the training emulation rounds the
operands of every GEMM; products are summed in FP32), so one MAC is a multiply in the format plus
an FP32 add. The figures are M. Horowitz, "Computing's energy problem (and what we can do about
it)", IEEE ISSCC 2014, Fig. 1.1.9 ("rough energy costs for various operations in 45nm 0.9V"), the
source of every ``[energy]`` default (``accel_sim.hardware.EnergyCosts``). One named formula per
effect (below); what is not read off the figure is marked as an assumption:

* ``fp_multiply_pj(s)``: a floating-point multiply with an ``s``-bit significand (hidden bit
  included) costs ``a s^2 + c``, fitted through the figure's two points, FP32 (s = 24) 3.7 pJ and
  FP16 (s = 11) 1.1 pJ: ``a = 2.6 / 455 = 1/175`` pJ, ``c = 1.1 - 121/175 = 0.4086`` pJ.
  Assumption: the significand multiplier's array grows with the square of its width, the rest
  (exponent add, normalization, rounding) is taken as a constant. It gives BF16 (s = 8)
  0.774 pJ, E4M3 (s = 4) 0.5 pJ, E5M2 (s = 3) 0.46 pJ.
* ``int_multiply_pj(m)``: an ``m``-bit integer multiply, INT8's 0.2 pJ scaled by ``(m / 8)^2``
  (assumption, the same square law). A check against the figure: it gives 3.2 pJ at 32 bits, the
  figure's INT32 multiply is 3.1 pJ.
* ``int_add_pj(b)``: a ``b``-bit integer add, INT32's 0.1 pJ scaled by ``b / 32`` (assumption: a
  ripple / carry-chain adder's energy grows with its width). A check: it gives 0.025 pJ at 8 bits,
  the figure's INT8 add is 0.03 pJ (the linear law understates a small adder by ~17 %).
* an element format's MAC (``fp32``, ``bf16``, ``fp16``, ``e4m3``, ``e5m2``): its multiply + the
  FP32 add, 0.9 pJ. FP32: 3.7 + 0.9 = 4.6 pJ exactly, today's default; FP16: 1.1 + 0.9 = 2.0 pJ
  (FP16's own 0.4 pJ add does not enter: the array accumulates in FP32).
* a block-floating-point MAC (``bfp_m<m>_g<g>``, Drumond et al., "Training DNNs with Hybrid Block
  Floating Point", NeurIPS 2018; FAST, Zhang, McDanel and Kung, HPCA 2022): an ``m``-bit mantissa
  multiply + an add of the cell's fixed-point accumulator width
  (``accel_sim.resources.bfp_accumulator_bits``: ``2m + ceil(log2 g)``) + the group's share of
  its overhead, ``bfp_group_pj / g``: one ``BFP_EXPONENT_BITS``-bit add of the two operand groups'
  shared exponents and one FP32 add of the group's fixed-point sum into the FP32 accumulator, per
  ``g`` products (assumption: the conversion of the fixed-point sum to FP32 is in that add, and the
  exponent of each group is computed once when the group is formed and not charged here).
  MXINT8 is this datapath with ``m = 7``, ``g = 32`` (``NumberFormat.mac_kind``).
* an MX MAC with floating-point elements (``mxfp8_*``, ``mxfp6_*``, ``mxfp4_e2m1``): the element's
  significand multiply + the FP32 add, as an element format's, + ``int_add_pj(8) / 32``: the add of
  the two blocks' E8M0 scale exponents, once per block of 32 products (assumption: the product is
  accumulated in FP32 with the scales applied by that exponent add). A scaled FP8 format's MAC is
  its element's (the hybrid's, E4M3's: its 4-bit significand multiplier serves E5M2 operands); the
  per-tensor factor is applied once per GEMM output, not priced.

A format's rounding does not change its MAC's figure. The random bits of stochastic rounding
(``_sr`` formats) are priced per value rounded into a stored copy (``accel_sim.words``):
``rounding_pj(fmt)`` = ``random_bits(fmt) x RANDOM_BIT_PJ``. The model (an assumption): the
quantizer has one linear-feedback shift register per lane, which shifts once per random bit; a
value draws the bits its rounding drops from an FP32 significand, ``24 - p`` (an element format's
significand ``p``, hidden bit included: BF16 16, E4M3 20; a BFP or MXINT8 value's ``m`` mantissa
bits: ``bfp_m4_g16`` 20), as the emulation's uniform draw resolves them
(``workloads.numerics.quantize``). A shift's energy is taken as a 1-bit add (an XOR and a flip-flop
toggle), ``int_add_pj(1)`` = 0.1 / 32 = 0.003125 pJ: BF16 0.05 pJ per value, ``bfp_m4_g16_sr``
0.0625 pJ, beside the special unit's 4.6 pJ per element.

The formulas run on the figure's decimals as exact fractions and round once to a float, so FP32's
MAC is the literal 4.6 pJ (in binary floating point 3.7 + 0.9 would round to 4.6000000000000005).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from accel_sim.formats import BFP_EXPONENT_BITS, MX_BLOCK_SIZE, MX_SCALE_BITS, NumberFormat
from accel_sim.hardware import HardwareConfig
from accel_sim.resources import bfp_accumulator_bits, fp_multiplier_cost, int_adder_cost, int_multiplier_cost

# Horowitz, ISSCC 2014, Fig. 1.1.9, 45 nm, 0.9 V; picojoules, exact decimals
FP32_MULTIPLY_PJ = Fraction("3.7")
FP32_ADD_PJ = Fraction("0.9")
FP16_MULTIPLY_PJ = Fraction("1.1")
INT8_MULTIPLY_PJ = Fraction("0.2")
INT32_ADD_PJ = Fraction("0.1")


def fp_multiply_pj(significand_bits: int) -> Fraction:
    """A floating-point multiply with ``significand_bits`` (hidden bit included): ``a s^2 + c``
    through FP32 (24 bits, 3.7 pJ) and FP16 (11 bits, 1.1 pJ) (``resources.fp_multiplier_cost``,
    the law the ASIC-style area uses too); an assumption."""
    return fp_multiplier_cost(significand_bits, FP32_MULTIPLY_PJ, FP16_MULTIPLY_PJ)


def int_multiply_pj(bits: int) -> Fraction:
    """A ``bits``-bit integer multiply: INT8's 0.2 pJ x ``(bits / 8)^2``
    (``resources.int_multiplier_cost``); an assumption."""
    return int_multiplier_cost(bits, INT8_MULTIPLY_PJ)


def int_add_pj(bits: int) -> Fraction:
    """A ``bits``-bit integer add: INT32's 0.1 pJ x ``bits / 32`` (``resources.int_adder_cost``);
    an assumption."""
    return int_adder_cost(bits, INT32_ADD_PJ)


def bfp_group_pj() -> Fraction:
    """Per group of products: one ``BFP_EXPONENT_BITS``-bit add of the shared exponents and one
    FP32 add of the group's fixed-point sum into the accumulator (assumption)."""
    return int_add_pj(BFP_EXPONENT_BITS) + FP32_ADD_PJ


def mac_pj_exact(fmt: NumberFormat) -> Fraction:
    """One MAC in ``fmt``, pJ, as an exact fraction (module docstring): an element format's multiply
    + the FP32 add; BFP's mantissa multiply + accumulator add + ``bfp_group_pj() / g``."""
    fmt = NumberFormat.parse(fmt)
    if fmt.mac_kind == "bfp":
        return (int_multiply_pj(fmt.mantissa_bits) + int_add_pj(bfp_accumulator_bits(fmt))
                + bfp_group_pj() / fmt.group_size)
    element_mac = fp_multiply_pj(fmt.multiplier_bits) + FP32_ADD_PJ
    if fmt.kind == "mx":
        return element_mac + int_add_pj(MX_SCALE_BITS) / MX_BLOCK_SIZE
    return element_mac


def format_mac_pj(fmt: NumberFormat | str) -> float:
    """One MAC of the array in ``fmt`` at 45 nm, pJ (``mac_pj_exact`` rounded once): fp32 4.6,
    bf16 1.674, fp16 2.0, e4m3 1.4, e5m2 1.36, bfp_m8_g16 0.3203, bfp_m4_g16 0.1453."""
    return float(mac_pj_exact(fmt))


FP32_SIGNIFICAND_BITS = 24
RANDOM_BIT_PJ = int_add_pj(1)
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
    """``hw`` computing in ``fmt``: ``word_bytes`` the format's storage, ``energy.mac_pj`` its MAC
    figure (``format_mac_pj``), and how it stores GEMM operands (``operand_copies``,
    ``scale_bits_per_value``) and what its rounding's random bits cost
    (``energy.rounding_pj_per_value``: ``rounding_pj``); ``master_weights=False``: the weights live in
    the format only (``weight_master = "none"``, ``--low-precision-weights``). ``fp32`` returns
    ``hw`` itself: a hardware file is given in FP32,
    and its own ``mac_pj`` (any technology) and ``word_bytes`` stay as given. For another format the
    figure replaces the file's ``mac_pj``: the per-format figures are Horowitz's 45 nm ones, so a
    file that sets another technology's FP32 figure is priced in that technology for fp32 only.
    Applying it twice with the same format gives the same hardware (a point ``bench.dse --write-hw``
    wrote is already in its format)."""
    fmt = NumberFormat.parse(fmt)
    if fmt.is_identity:
        return hw
    return hw.with_(word_bytes=fmt.storage_bytes, operand_copies=operand_copies(fmt),
                    scale_bits_per_value=fmt.scale_bytes_per_value * 8,
                    weight_master="fp32" if master_weights else "none",
                    energy=replace(hw.energy, mac_pj=format_mac_pj(fmt), rounding_pj_per_value=rounding_pj(fmt)))


"""What a multiply-add cell holds in each number format, and what it costs under a cost table.

A cell is a list of units used once per product (``per_product``) and a list used once per block of
``block`` products (``per_block``): the energy of one MAC is the first list's plus the second's
over ``block``, and so is its area (the cell is one lane of a ``block``-lane dot-product unit whose
per-block units the lanes share). The units are those of ``accel_sim.cost_tables`` (integer
multipliers and adders of a width, barrel shifters, floating-point multipliers, the FP32 adder). One
rule per format family (``mac_cell``):

* **FP32, BF16, FP16** (element formats of 16 bits and more): the element's floating-point
  multiplier and the FP32 adder, per product: the product is added into the FP32 accumulator as it
  comes (mixed-precision FMA; a fixed-point window over BF16's 2^±254 product range is not built).
* **block floating point** ``bfp_m<m>_g<g>`` and **MXINT8** (m = 7, g = 32): per product an
  ``m x m`` integer mantissa multiplier and an add into the fixed-point accumulator of
  ``accumulator_bits`` (``2m + ceil(log2 g)``: exact over the block); per block the add of the two
  operand blocks' ``BFP_EXPONENT_BITS``-bit shared exponents, the normalization of the block's
  fixed-point sum (a leading-zero count, taken as an adder of the accumulator's width, and a shift
  of ``ceil(log2 width)`` stages) and one FP32 add into the accumulator (Drumond et al., "Training
  DNNs with Hybrid Block Floating Point", NeurIPS 2018: the dot product in fixed point, its
  result converted and accumulated in floating point; EPFL's HBFP units, Accuracy Boosters, arXiv
  2211.10737, the same datapath).
* **FP8 and the MX floating-point formats** (``e4m3``, ``e5m2``, scaled FP8, ``mxfp8_*``,
  ``mxfp6_*``, ``mxfp4_e2m1``): a dot-product unit of ``block`` lanes (MX: its block of 32; FP8: 32
  too, ``FP8_DOT_PRODUCT_LANES``, an assumption) accumulating in fixed point, adding into FP32 once
  per block (the MX dot-product units of Rouhani et al., "Microscaling Data Formats for Deep
  Learning", arXiv 2310.10537, and the MX specification v1.0's dot product of two
  blocks: the products summed, then scaled by the two blocks' scales). Per product: an ``s x s`` significand
  multiplier (hidden bit included), an ``e + 1``-bit adder of the two exponents, an alignment shifter
  placing the ``2s``-bit product in the accumulator's window (``ceil(log2(window - 2s + 1))``
  stages over ``window`` bits) and an add into it; where the window is capped (below), one compare
  of the ``e + 2``-bit product exponents per product (the block's largest, which the window is
  aligned to). Per block: the MX scales' ``MX_SCALE_BITS``-bit add (MX only), the sum's
  normalization (as BFP's) and one FP32 add.
  The window (``fixed_point_window_bits``) is the exact one where it is narrower than FP32's: a
  product's bits span ``2 (emax - emin + s)`` (largest normal to smallest subnormal, squared), plus
  ``ceil(log2 block)`` for the sum and a sign; otherwise FP32's significand, 24 bits, plus the same
  guard and sign bits (products aligned to the block's largest; what falls below is what an FP32
  accumulation of the block's sum would round away): E2M1 14 bits, E2M3 18, E3M2 24, E4M3 and
  E5M2 30 (capped).

The FPGA cell (``accel_sim.resources``) is built from the same lists: the floating-point units in
DSP slices, the rest in LUTs.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_sim.cost_tables import Cost, CostTable, ZERO, cost_table, int_add, int_multiply, log2_ceil, shifter
from accel_sim.formats import (BFP_EXPONENT_BITS, ELEMENT_FORMATS, MX_BLOCK_SIZE, MX_SCALE_BITS, NumberFormat,
                               element_emax)

FP8_DOT_PRODUCT_LANES = MX_BLOCK_SIZE
"""Products an FP8 dot-product unit sums in fixed point before one FP32 add: 32, the MX block's
length (an assumption: FP8 units that publish their accumulation do so per short dot product; we
take the MX block's, so that FP8 and MXFP8 differ by the block scale only)."""
FP32_WINDOW_BITS = 24
"""FP32's significand (hidden bit included): the widest fixed-point window kept below one block's
largest product (``fixed_point_window_bits``)."""


@dataclass(frozen=True)
class Unit:
    """One unit of a cell: ``kind`` one of ``int_multiply`` (``bits`` wide operands), ``int_add``
    (``bits``), ``shifter`` (``bits`` over ``stages``), ``fp_multiply`` (``element``: a key of
    ``ELEMENT_FORMATS``), ``fp32_add``."""

    kind: str
    bits: int = 0
    stages: int = 0
    element: str = ""


@dataclass(frozen=True)
class MacCell:
    """What one MAC lane holds (module docstring)."""

    per_product: tuple[Unit, ...]
    per_block: tuple[Unit, ...]
    block: int


def accumulator_bits(fmt: NumberFormat) -> int:
    """Bits of a BFP / MXINT8 cell's fixed-point accumulator: ``2m`` bits of a product of two
    ``m``-bit mantissas and ``ceil(log2 g)`` more for the group's sum (exact over the group)."""
    return 2 * fmt.mantissa_bits + log2_ceil(fmt.group_size)


def block_products(fmt: NumberFormat) -> int:
    """Products per FP32 add: 1 for FP32 / BF16 / FP16; the group for BFP; the MX block; else
    ``FP8_DOT_PRODUCT_LANES``."""
    fmt = NumberFormat.parse(fmt)
    if fmt.kind in ("fp32", "bf16", "fp16"):
        return 1
    if fmt.kind == "bfp":
        return fmt.group_size
    if fmt.kind == "mx":
        return MX_BLOCK_SIZE
    return FP8_DOT_PRODUCT_LANES


def fixed_point_window_bits(fmt: NumberFormat) -> tuple[int, bool]:
    """(window bits, capped) of an FP8 / MX-FP dot product's fixed-point accumulator (module
    docstring): ``min(2 (emax - emin + s) + ceil(log2 block) + 1, 24 + ceil(log2 block) + 1)``."""
    spec = fmt.element
    guard = log2_ceil(block_products(fmt)) + 1
    exact = 2 * (element_emax(spec) - spec.min_normal_exponent + spec.significand_bits) + guard
    capped = FP32_WINDOW_BITS + guard
    return (exact, False) if exact <= capped else (capped, True)


def normalization(width: int) -> tuple[Unit, ...]:
    """Converting a ``width``-bit fixed-point sum to floating point: a leading-zero count (taken as
    an adder of the width, an assumption) and a shift of ``ceil(log2 width)`` stages."""
    return Unit("int_add", width), Unit("shifter", width, log2_ceil(width))


def mac_cell(fmt: NumberFormat | str) -> MacCell:
    """The units of one MAC lane in ``fmt`` (module docstring: one rule per family)."""
    fmt = NumberFormat.parse(fmt)
    if fmt.kind in ("fp32", "bf16", "fp16"):
        return MacCell((Unit("fp_multiply", element=fmt.kind), Unit("fp32_add")), (), 1)
    block = block_products(fmt)
    if fmt.mac_kind == "bfp":  # BFP, MXINT8
        width = accumulator_bits(fmt)
        return MacCell((Unit("int_multiply", fmt.mantissa_bits), Unit("int_add", width)),
                       (Unit("int_add", BFP_EXPONENT_BITS), *normalization(width), Unit("fp32_add")), block)
    spec = fmt.element
    s, e = spec.significand_bits, spec.exponent_bits
    width, capped = fixed_point_window_bits(fmt)
    per_product = (Unit("int_multiply", s), Unit("int_add", e + 1),
                   *((Unit("int_add", e + 2),) if capped else ()),
                   Unit("shifter", width, log2_ceil(width - 2 * s + 1)), Unit("int_add", width))
    scale = (Unit("int_add", MX_SCALE_BITS),) if fmt.kind == "mx" else ()
    return MacCell(per_product, (*scale, *normalization(width), Unit("fp32_add")), block)


def fp_multiplier_units(element: str) -> tuple[Unit, ...]:
    """A floating-point multiplier of an element format (a key of ``ELEMENT_FORMATS``) built from what
    it holds, where a table or a device gives none: an ``s x s`` significand multiplier (hidden bit
    included), an ``e + 1``-bit exponent adder (the bias folded in), a one-stage shift normalizing
    the ``2s``-bit product and an ``s``-bit rounding increment (an assumption: the structure of a
    textbook multiplier, each part sized to the element's widths)."""
    spec = ELEMENT_FORMATS[element]
    s, e = spec.significand_bits, spec.exponent_bits
    return Unit("int_multiply", s), Unit("int_add", e + 1), Unit("shifter", 2 * s, 1), Unit("int_add", s)


def unit_cost(unit: Unit, table: CostTable) -> Cost:
    """One unit's cost under ``table`` (``accel_sim.cost_tables``' laws; a floating-point multiplier
    the table does not list: ``fp_multiplier_units``)."""
    if unit.kind == "int_multiply":
        return int_multiply(table, unit.bits)
    if unit.kind == "int_add":
        return int_add(table, unit.bits)
    if unit.kind == "shifter":
        return shifter(table, unit.bits, unit.stages)
    if unit.kind == "fp_multiply":
        if unit.element in table.fp_multiply:
            return table.fp_multiply[unit.element]
        return sum((unit_cost(u, table) for u in fp_multiplier_units(unit.element)), ZERO)
    if unit.kind == "fp32_add":
        return table.fp32_add
    raise ValueError(f"unknown unit kind {unit.kind!r}")


def cell_cost(fmt: NumberFormat | str, table: CostTable | str) -> Cost:
    """One MAC in ``fmt`` under ``table`` (a ``CostTable`` or a name): the per-product units plus the
    per-block units over the block, in the table's own units (its node; energy = area for a table
    without energies)."""
    table = cost_table(table) if isinstance(table, str) else table
    cell = mac_cell(fmt)
    total = sum((unit_cost(u, table) for u in cell.per_product), ZERO)
    block = sum((unit_cost(u, table) for u in cell.per_block), ZERO)
    return total + block.times(1 / cell.block)


def relative_to_fp32(fmt: NumberFormat | str, table: CostTable | str) -> Cost:
    """One MAC in ``fmt`` as a fraction of the FP32 cell's energy and area under the same table."""
    own, fp32 = cell_cost(fmt, table), cell_cost("fp32", table)
    return Cost(own.energy / fp32.energy, own.area_um2 / fp32.area_um2)

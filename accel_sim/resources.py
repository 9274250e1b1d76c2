"""What a hardware point costs in silicon: DSP slices, block RAM and LUTs on an FPGA device (does it
fit, and which resource limits it), the device's static power, and an ASIC-style area.

The cycle model (``accel_sim.simulate``) makes no array or buffer free of charge in time, but it
would let a design space grow them for nothing; this module charges them. Inputs: the points
(``accel_sim.points.HardwarePoints``), the MAC cells' number format (``NumberFormat``: FP32, BF16,
FP16, the FP8 E4M3 and E5M2, or block floating point with its mantissa bits and group size) and a
device file
(``configs/devices/xc7vx485t.toml``: the paper's Xilinx VC707 board), where every figure carries
its source or says "assumption". Formulas (one function each, below):

* a MAC cell is what ``accel_sim.mac_cells.mac_cell`` says it holds, the same units the energy and
  the area are priced from: units used per product, one per cell; units used once per block of
  ``block`` products, one per ``block`` cells (the cells are lanes of ``block``-lane dot-product
  units sharing them). On the FPGA (``fpga_unit``): the FP32 adder and the floating-point
  multipliers the device file lists in DSP slices (``[dsp_per_unit]``); the rest in LUTs: an
  ``n x n`` integer multiplier scaled from a 9 x 9 one (``lut_multiplier_luts``), an adder at
  ``luts_per_adder_bit`` per bit, a shifter at one LUT per bit per two stages (a 6-input LUT is a
  4:1 multiplexer, UG474), a floating-point multiplier the file does not list built from those
  (``accel_sim.mac_cells.fp_multiplier_units``).
* DSP slices = ``rows x cols x`` the per-product units' + ``ceil(rows x cols / block) x`` the
  per-block units' + the special unit's lanes x an FP32 cell's (its normalization and losses run in
  FP32 whatever the array's format; lanes = its largest throughput, rounded up: an assumption).
* LUTs likewise. Control, the DDR3 controller and the FP cores' own LUTs are not counted: ``fits``
  is necessary, not sufficient.
* DRAM channels = ``ceil(dram_peak_bytes_per_s / memory_channel_bytes_per_s)`` against the board's
  ``memory_channels`` (``memory_channels``): bandwidth costs memory interfaces, not only time.
* BRAM36 blocks per buffer = 2 halves (double buffering, as the cycle model's active half) x the
  larger of the blocks that hold a half (``bram36_bytes`` each) and the blocks whose ports deliver
  one word per lane per cycle (``bram36_port_bytes`` each); a buffer's lanes are the array side it
  feeds (``Dataflow.operand_layout``: a streamed operand enters along the side it spans, a
  stationary one is shifted in from the top, one per column), the widest over the point's
  dataflows; the output buffer takes one word per column (``BUFFER_LANES``: every buffer and its lanes).

The number format sets the storage of a value: ``NumberFormat.storage_bytes`` must equal the
point's ``word_bytes``, the size ``simulate`` prices every byte with, or the point is refused
(``ResourceModelError``). So the paper's point as the suite prices it (FP32 words, 32 x 64 MACs)
needs 2,048 x 5 DSP48E1 for its array alone, far more than the XC7VX485T's 2,800: it cannot be
built on the VC707 in FP32. It fits only in a narrow format such as the block floating point of
FAST (Zhang, McDanel and Kung, "FAST: DNN training under variable precision block floating point
with stochastic rounding", HPCA 2022; SphereFed's ref. [91]), whose MAC is small integer
arithmetic on mantissas sharing an exponent (``tests/test_resources.py`` works it by hand).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from accel_sim.cost_tables import DEFAULT_COST_TABLE
from accel_sim.dataflows import DATAFLOWS
from accel_sim.formats import NumberFormat
from accel_sim.hardware import word_bits
from accel_sim.mac_cells import Unit, fp_multiplier_units, mac_cell, relative_to_fp32
from accel_sim.points import HardwarePoints
from iokit.toml import read_toml
from accel_sim.trace_schema import GEMM_ROLES, VECTOR_OPS


class ResourceModelError(ValueError):
    """A number format, device file or point the resource model cannot price; the message names it."""


@dataclass(frozen=True)
class FpgaDevice:
    """An FPGA's resources and the cost of the MAC arithmetic on it (a device file: every field
    with its source in ``configs/devices/*.toml``)."""

    name: str
    board: str
    dsp_slices: int
    bram36_blocks: int
    luts: int
    bram36_bytes: int
    bram36_port_bytes: int
    static_w: float
    dsp_per_unit: Mapping[str, int]
    luts_per_9x9_multiplier: int
    luts_per_adder_bit: int
    memory_channels: int
    memory_channel_bytes_per_s: float


NUMBER_KEYS = ("static_w", "memory_channel_bytes_per_s")
"""Device fields that may be fractional; every other figure is a count."""


DSP_UNITS = ("fp32_multiply", "fp32_add", "bf16_multiply", "fp16_multiply")
"""The units a device file may put in DSP slices (``[dsp_per_unit]``; fp32_multiply and fp32_add
required)."""
MUX_STAGES_PER_LUT = 2
"""A 6-input LUT is a 4:1 multiplexer (UG474): two stages of a barrel shifter per LUT per bit."""


def load_device(path: str | Path) -> FpgaDevice:
    """Read a device file; ``ResourceModelError`` naming the file and the key for a missing, unknown
    or impossible entry."""
    data = read_toml(path, ResourceModelError, "device")
    lut_costs, dsp_per_unit = data.pop("lut_costs", None), data.pop("dsp_per_unit", None)
    if not isinstance(lut_costs, dict) or not isinstance(dsp_per_unit, dict):
        raise ResourceModelError(f"{path}: a device file needs the tables [dsp_per_unit] and [lut_costs]")
    if not {"fp32_multiply", "fp32_add"} <= set(dsp_per_unit) or set(dsp_per_unit) - set(DSP_UNITS):
        raise ResourceModelError(f"{path}: [dsp_per_unit] gives DSP slices per arithmetic unit: fp32_multiply, "
                                 f"fp32_add and any of {', '.join(DSP_UNITS[2:])}; got {', '.join(dsp_per_unit)}")
    values = {**data, **lut_costs, "dsp_per_unit": dsp_per_unit}
    expected = {f.name for f in fields(FpgaDevice)}
    if set(values) != expected:
        raise ResourceModelError(f"{path}: device keys missing {sorted(expected - set(values))}, unknown "
                                 f"{sorted(set(values) - expected)}")
    for key, value in [*((k, v) for k, v in values.items() if k not in ("name", "board", "dsp_per_unit")),
                       *((f"dsp_per_unit.{k}", v) for k, v in dsp_per_unit.items())]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 2**40 or (
                key not in NUMBER_KEYS and not isinstance(value, int)):
            raise ResourceModelError(f"{path}: device field '{key}' must be a non-negative "
                                     f"{'number' if key in NUMBER_KEYS else 'integer'}, got {value!r}")
    return FpgaDevice(**values)


# ----------------------------------------------------------------------------- the formulas


def lut_multiplier_luts(bits: int, device: FpgaDevice) -> int:
    """A ``bits x bits`` multiplier from LUTs: ``ceil(luts_per_9x9_multiplier x (bits / 9)^2)``
    (an array multiplier's area grows with the product of its operand widths: an assumption)."""
    return math.ceil(device.luts_per_9x9_multiplier * bits ** 2 / 81)


def fpga_unit(unit: Unit, device: FpgaDevice) -> tuple[int, int]:
    """(DSP slices, LUTs) of one unit of a cell on ``device`` (module docstring)."""
    if unit.kind == "fp32_add":
        return device.dsp_per_unit["fp32_add"], 0
    if unit.kind == "fp_multiply":
        if f"{unit.element}_multiply" in device.dsp_per_unit:
            return device.dsp_per_unit[f"{unit.element}_multiply"], 0
        return fpga_units(fp_multiplier_units(unit.element), device)
    if unit.kind == "int_multiply":
        return 0, lut_multiplier_luts(unit.bits, device)
    if unit.kind == "int_add":
        return 0, device.luts_per_adder_bit * unit.bits
    if unit.kind == "shifter":
        return 0, unit.bits * -(-unit.stages // MUX_STAGES_PER_LUT)
    raise ResourceModelError(f"unknown unit kind {unit.kind!r}")


def fpga_units(units, device: FpgaDevice) -> tuple[int, int]:
    """(DSP slices, LUTs) of a list of units."""
    costs = [fpga_unit(u, device) for u in units]
    return sum(c[0] for c in costs), sum(c[1] for c in costs)


def array_dsp_luts(fmt: NumberFormat, macs, device: FpgaDevice):
    """(DSP slices, LUTs) of ``macs`` cells in ``fmt`` (numbers or int64 arrays): the per-product
    units once per cell, the per-block units once per ``block`` cells, rounded up (module
    docstring)."""
    cell = mac_cell(fmt)
    product_dsp, product_luts = fpga_units(cell.per_product, device)
    block_dsp, block_luts = fpga_units(cell.per_block, device)
    blocks = -(-macs // cell.block)
    return macs * product_dsp + blocks * block_dsp, macs * product_luts + blocks * block_luts


def memory_channels(dram_peak_bytes_per_s, device: FpgaDevice) -> np.ndarray:
    """DRAM channels a point's peak bandwidth needs: ``ceil(dram_peak_bytes_per_s /
    memory_channel_bytes_per_s)`` (the board's channel: on the VC707 one 64-bit DDR3-1600 SODIMM,
    12.8 GB/s). More bandwidth is more memory interfaces (their pins, PHYs and DIMMs), which a board
    has or has not: a point needing more channels than ``memory_channels`` does not fit."""
    return np.ceil(np.asarray(dram_peak_bytes_per_s, dtype=np.float64) / device.memory_channel_bytes_per_s
                   - 1e-9).astype(np.int64)


def special_unit_lanes(points: HardwarePoints) -> np.ndarray:
    """The special unit's lanes: its largest throughput in elements per cycle, rounded up (an
    assumption: one FP32 multiply-add lane per element per cycle, shared by every kind of work)."""
    return np.ceil(np.max([points[f"special_unit.{kind}"] for kind in VECTOR_OPS], axis=0)).astype(np.int64)


def operand_lanes(points: HardwarePoints, operand: str) -> np.ndarray:
    """Words per cycle the buffer of an input operand ("a" or "b") must deliver: the array side the
    operand enters along (``Dataflow.operand_layout``: a streamed operand along the side it spans,
    a stationary one shifted in from the top, one word per column), the widest over the point's
    three dataflows."""
    rows, cols = points["rows"], points["cols"]
    lanes = np.zeros(len(points), dtype=np.int64)
    for role in GEMM_ROLES:
        for name, flow in DATAFLOWS.items():
            side = rows if flow.operand_layout(operand) == "rows" else cols
            lanes = np.where(points[f"dataflow_{role}"] == name, np.maximum(lanes, side), lanes)
    return lanes


BUFFER_LANES: dict[str, Callable[[HardwarePoints], np.ndarray]] = {
    "a_buffer_bytes": lambda points: operand_lanes(points, "a"),
    "b_buffer_bytes": lambda points: operand_lanes(points, "b"),
    "out_buffer_bytes": lambda points: points["cols"],  # one word per column
}
"""Every on-chip buffer (its ``HardwareConfig`` field, in bytes) and the words per cycle it must
deliver: what its BRAM (``buffer_bram36_blocks``) and its area (``sram_area_um2``) are charged
from. A new buffer field is one more entry."""


def buffer_bram36_blocks(buffer_bytes, lanes, word_bits, device: FpgaDevice):
    """BRAM36 blocks of a double-buffered buffer: two halves, each the larger of
    ``ceil(half / bram36_bytes)`` (capacity) and ``ceil(lanes x word_bits / (8 x bram36_port_bytes))``
    (width: one word, its packed bits, per lane per cycle through 72-bit ports, UG473); numbers or
    arrays alike."""
    half = -(-buffer_bytes // 2)
    capacity = -(-half // device.bram36_bytes)
    width = -(-(lanes * word_bits) // (8 * device.bram36_port_bytes))
    return 2 * np.maximum(capacity, width)


# ----------------------------------------------------------------------------- ASIC-style area

ASIC_NODE = "45 nm"
FP32_CELL_UM2 = 7700.0 + 4184.0
"""An FP32 MAC cell at 45 nm: FP32 multiplier 7,700 um^2 + FP32 adder 4,184 um^2 (M. Horowitz,
"Computing's energy problem (and what we can do about it)", ISSCC 2014, Fig. 1.1.9, the source of
``EnergyCosts``' energies). A cost table's cells are read as ratios to its own FP32 cell and placed
at this one (``mac_area_um2``), so the area of the MACs and of the SRAM (below) are at one node."""
SRAM_CELL_UM2 = 0.346
"""A 6T SRAM bit cell at 45 nm (K. Mistry et al., "A 45nm logic technology with high-k + metal gate
transistors, strained silicon, 9 Cu interconnect layers, 193nm dry patterning, and 100% Pb-free
packaging", IEDM 2007)."""
SRAM_ARRAY_EFFICIENCY = 0.5
"""Bit cells' share of an SRAM macro's area (decoders, sense amplifiers and I/O take the rest): an
assumption, the order of compiled SRAM macros."""


def mac_area_um2(fmt: NumberFormat, table: str = DEFAULT_COST_TABLE) -> float:
    """One multiply-add lane at ``ASIC_NODE``: ``FP32_CELL_UM2`` x the format's share of the FP32
    cell's area under the cost table ``table`` (``accel_sim.mac_cells``: what the cell holds, its
    per-block units shared by the block's lanes). Under ``horowitz45``: FP32 11,884, BF16 4,568,
    FP16 5,824, E4M3 631, ``bfp_m4_g16`` 396 um^2."""
    fmt = NumberFormat.parse(fmt)
    return FP32_CELL_UM2 if fmt.is_identity else FP32_CELL_UM2 * relative_to_fp32(fmt, table).area_um2


def sram_area_um2(sram_bytes):
    """On-chip buffer area: 8 bit cells per byte over the array efficiency."""
    return sram_bytes * 8 * SRAM_CELL_UM2 / SRAM_ARRAY_EFFICIENCY


# ----------------------------------------------------------------------------- per point

RESOURCES = ("dsp", "bram36", "lut")
"""The resources the array and its buffers are built from, among which ``limiting_resource`` is
named; memory channels (the board's) enter ``fits`` only."""


@dataclass(frozen=True, eq=False)
class Resources:
    """Per point: resources used on the device, their share of it, the verdict, and the area."""

    number_format: np.ndarray
    dsp_slices: np.ndarray
    bram36_blocks: np.ndarray
    luts: np.ndarray
    dsp_utilization: np.ndarray
    bram36_utilization: np.ndarray
    lut_utilization: np.ndarray
    memory_channels: np.ndarray
    memory_channel_utilization: np.ndarray
    limiting_resource: np.ndarray  # the resource with the largest utilization
    fits: np.ndarray  # every utilization <= 1
    static_w: np.ndarray
    asic_area_mm2: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def fpga_resources(points: HardwarePoints, number_formats, device: FpgaDevice) -> Resources:
    """The resources of each point on ``device`` with its MAC ``number_formats`` (one name for all,
    or one per point). ``ResourceModelError`` if a point's ``word_bytes`` is not its format's
    storage (``NumberFormat.storage_bytes``)."""
    names = np.broadcast_to(np.asarray(number_formats, dtype=str), (len(points),))
    formats = {name: NumberFormat.parse(name) for name in np.unique(names).tolist()}
    for name, fmt in formats.items():
        wrong = np.flatnonzero((names == name) & (points["word_bytes"] != fmt.storage_bytes))
        if wrong.size:
            i = int(wrong[0])
            raise ResourceModelError(
                f"hardware point {i}: number format {name} stores {fmt.storage_bytes}-byte values but word_bytes is "
                f"{int(points['word_bytes'][i])}: give word_bytes = {fmt.storage_bytes} (simulate prices every byte "
                f"at word_bytes)")
    macs = np.asarray(points["rows"] * points["cols"], dtype=np.int64)
    tables = np.broadcast_to(np.asarray(points["cost_table"], dtype=str), (len(points),))
    dsp, luts, area_per_mac = (np.zeros(len(points), dtype=np.int64), np.zeros(len(points), dtype=np.int64),
                               np.zeros(len(points)))
    for name, fmt in formats.items():
        at = names == name
        dsp[at], luts[at] = array_dsp_luts(fmt, macs[at], device)
        for table in np.unique(tables[at]).tolist():
            area_per_mac[at & (tables == table)] = mac_area_um2(fmt, table)
    lanes = special_unit_lanes(points)
    lane_dsp, lane_luts = array_dsp_luts(NumberFormat("fp32"), lanes, device)
    dsp, luts = dsp + lane_dsp, luts + lane_luts
    bits = word_bits(points["word_bytes"], points["element_bits"])
    bram = sum(buffer_bram36_blocks(points[buffer], lanes_of(points), bits, device)
               for buffer, lanes_of in BUFFER_LANES.items())
    channels = memory_channels(points["dram_peak_bytes_per_s"], device)
    utilization = {"dsp": dsp / device.dsp_slices, "bram36": bram / device.bram36_blocks, "lut": luts / device.luts}
    channel_utilization = channels / device.memory_channels
    stacked = np.stack([utilization[r] for r in RESOURCES])
    buffer_bytes = sum(points[buffer] for buffer in BUFFER_LANES)
    area_um2 = macs * area_per_mac + lanes * FP32_CELL_UM2 + sram_area_um2(buffer_bytes)
    return Resources(
        number_format=np.asarray(names, dtype=str), dsp_slices=dsp, bram36_blocks=bram, luts=luts,
        dsp_utilization=utilization["dsp"], bram36_utilization=utilization["bram36"], lut_utilization=utilization["lut"],
        memory_channels=channels, memory_channel_utilization=channel_utilization,
        limiting_resource=np.asarray(RESOURCES)[np.argmax(stacked, axis=0)],
        fits=np.all(stacked <= 1.0, axis=0) & (channel_utilization <= 1.0),
        static_w=np.full(len(points), float(device.static_w)), asic_area_mm2=area_um2 / 1e6)

"""What a hardware point costs in silicon: DSP slices, block RAM and LUTs on an FPGA device (does it
fit, and which resource limits it), the device's static power, and an ASIC-style area.

The cycle model (``accel_sim.simulate``) makes no array or buffer free of charge in time, but it
would let a design space grow them for nothing; this module charges them. Inputs: the points
(``accel_sim.points.HardwarePoints``), the MAC cells' number format (``NumberFormat``: FP32, BF16,
FP16, the FP8 E4M3 and E5M2, or block floating point with its mantissa bits and group size) and a
device file
(``configs/devices/xc7vx485t.toml``: the paper's Xilinx VC707 board), where every figure carries
its source or says "assumption". Formulas (one function each, below):

* DSP slices = ``rows x cols x dsp_per_mac[format]`` + the special unit's lanes x ``dsp_per_mac
  ["fp32"]`` (its normalization and losses run in FP32 whatever the array's format; lanes = its
  largest throughput, rounded up: an assumption).
* LUTs = ``rows x cols x`` the LUTs of the part of a MAC built from LUTs (``mac_luts``: block
  floating point's ``m x m`` mantissa multiplier scaled from a 9 x 9 one plus a
  ``2m + ceil(log2 g)``-bit accumulator at one LUT per bit; FP8's significand multiplier plus its
  exponent adder, the FP32 adder being in DSP slices). Control, the DDR3 controller and the FP
  cores' own LUTs are not counted: ``fits`` is necessary, not sufficient.
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

from accel_sim.dataflows import DATAFLOWS
from accel_sim.formats import ELEMENT_FORMATS, MAC_KINDS, NumberFormat
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
    dsp_per_mac: Mapping[str, int]
    luts_per_9x9_multiplier: int
    luts_per_adder_bit: int
    memory_channels: int
    memory_channel_bytes_per_s: float


NUMBER_KEYS = ("static_w", "memory_channel_bytes_per_s")
"""Device fields that may be fractional; every other figure is a count."""


def load_device(path: str | Path) -> FpgaDevice:
    """Read a device file; ``ResourceModelError`` naming the file and the key for a missing, unknown
    or impossible entry."""
    data = read_toml(path, ResourceModelError, "device")
    lut_costs, dsp_per_mac = data.pop("lut_costs", None), data.pop("dsp_per_mac", None)
    if not isinstance(lut_costs, dict) or not isinstance(dsp_per_mac, dict):
        raise ResourceModelError(f"{path}: a device file needs the tables [dsp_per_mac] and [lut_costs]")
    if "fp32" not in dsp_per_mac or set(dsp_per_mac) - set(MAC_KINDS):
        raise ResourceModelError(f"{path}: [dsp_per_mac] gives DSP slices per MAC by MAC datapath: fp32 and any "
                                 f"of {', '.join(MAC_KINDS)}; got {', '.join(dsp_per_mac)}")
    values = {**data, **lut_costs, "dsp_per_mac": dsp_per_mac}
    expected = {f.name for f in fields(FpgaDevice)}
    if set(values) != expected:
        raise ResourceModelError(f"{path}: device keys missing {sorted(expected - set(values))}, unknown "
                                 f"{sorted(set(values) - expected)}")
    for key, value in [*((k, v) for k, v in values.items() if k not in ("name", "board", "dsp_per_mac")),
                       *((f"dsp_per_mac.{k}", v) for k, v in dsp_per_mac.items())]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 2**40 or (
                key not in NUMBER_KEYS and not isinstance(value, int)):
            raise ResourceModelError(f"{path}: device field '{key}' must be a non-negative "
                                     f"{'number' if key in NUMBER_KEYS else 'integer'}, got {value!r}")
    return FpgaDevice(**values)


# ----------------------------------------------------------------------------- the formulas


def mac_dsp_slices(fmt: NumberFormat, device: FpgaDevice) -> int:
    """DSP slices of one multiply-add cell in ``fmt`` (the device file's ``[dsp_per_mac]``)."""
    if fmt.mac_kind not in device.dsp_per_mac:
        raise ResourceModelError(f"device {device.name}: [dsp_per_mac] gives no figure for number format {fmt.name}; "
                                 f"add {fmt.mac_kind} = <slices> to the device file")
    return device.dsp_per_mac[fmt.mac_kind]


def bfp_accumulator_bits(fmt: NumberFormat) -> int:
    """Bits of a BFP cell's fixed-point accumulator: a product of two ``m``-bit mantissas has ``2m``
    bits and a group's ``g`` of them sum in ``ceil(log2 g)`` more (an assumption: the sum over a
    group is exact in fixed point). Each group's sum then joins an FP32 accumulator: its energy is
    charged (``accel_sim.mac_energy``), its adder's resources are not (one adder serves a group of
    ``g`` products; how many the array shares is not modeled)."""
    return 2 * fmt.mantissa_bits + math.ceil(math.log2(fmt.group_size))


LUT_MULTIPLIER_KINDS = ("bfp", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1")
"""The formats whose significand (mantissa) multiplier is built from LUTs: a few bits wide, too
narrow to spend a DSP48E1's 25 x 18 multiplier on (an assumption; DSP packing of several small
products is not modeled)."""


def lut_multiplier_luts(bits: int, device: FpgaDevice) -> int:
    """A ``bits x bits`` multiplier from LUTs: ``ceil(luts_per_9x9_multiplier x (bits / 9)^2)``
    (an array multiplier's area grows with the product of its operand widths: an assumption)."""
    return math.ceil(device.luts_per_9x9_multiplier * bits ** 2 / 81)


def mac_luts(fmt: NumberFormat, device: FpgaDevice) -> int:
    """LUTs of the LUT-built part of one multiply-add cell: for BFP the ``m x m`` mantissa
    multiplier plus ``luts_per_adder_bit`` per accumulator bit (``bfp_accumulator_bits``); for FP8
    (``e4m3``, ``e5m2``) the ``s x s`` significand multiplier (hidden bit included: 4 x 4, 3 x 3)
    plus an ``e + 1``-bit adder of the two ``e``-bit exponents (assumptions: the product, exact in
    ``2s`` bits, enters the FP32 adder in DSP slices, ``[dsp_per_mac]``, as it is; the exponent
    bias is folded into that adder's input). 0 for the formats whose arithmetic is in DSP slices
    (their exponent logic's LUTs are not counted, as the FP cores' are not)."""
    if fmt.mac_kind not in LUT_MULTIPLIER_KINDS:
        return 0
    if fmt.mac_kind == "bfp":
        return lut_multiplier_luts(fmt.mantissa_bits, device) + device.luts_per_adder_bit * bfp_accumulator_bits(fmt)
    return (lut_multiplier_luts(fmt.multiplier_bits, device)
            + device.luts_per_adder_bit * (fmt.element.exponent_bits + 1))


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


def buffer_bram36_blocks(buffer_bytes, lanes, word_bytes, device: FpgaDevice):
    """BRAM36 blocks of a double-buffered buffer: two halves, each the larger of
    ``ceil(half / bram36_bytes)`` (capacity) and ``ceil(lanes x word_bytes / bram36_port_bytes)``
    (width: one word per lane per cycle through 72-bit ports, UG473); numbers or arrays alike."""
    half = -(-buffer_bytes // 2)
    capacity = -(-half // device.bram36_bytes)
    width = -(-(lanes * word_bytes) // device.bram36_port_bytes)
    return 2 * np.maximum(capacity, width)


# ----------------------------------------------------------------------------- ASIC-style area

ASIC_NODE = "45 nm"
FP32_MULTIPLY_UM2 = 7700.0
"""Area of an FP32 multiplier at 45 nm (M. Horowitz, "Computing's energy problem (and what we can do
about it)", ISSCC 2014, Fig. 1.1.9, the source of ``EnergyCosts``' energies)."""
FP32_ADD_UM2 = 4184.0
"""FP32 adder, same figure."""
FP16_MULTIPLY_UM2 = 1640.0
"""16-bit FP multiplier, same figure; other significand widths by ``fp_multiplier_cost``."""
INT8_MULTIPLY_UM2 = 282.0
"""8-bit integer multiplier, same figure; an ``m``-bit one by ``int_multiplier_cost``."""
INT32_ADD_UM2 = 137.0
"""32-bit integer adder, same figure; a ``b``-bit one by ``int_adder_cost``."""
SRAM_CELL_UM2 = 0.346
"""A 6T SRAM bit cell at 45 nm (K. Mistry et al., "A 45nm logic technology with high-k + metal gate
transistors, strained silicon, 9 Cu interconnect layers, 193nm dry patterning, and 100% Pb-free
packaging", IEDM 2007)."""
SRAM_ARRAY_EFFICIENCY = 0.5
"""Bit cells' share of an SRAM macro's area (decoders, sense amplifiers and I/O take the rest): an
assumption, the order of compiled SRAM macros."""


FP32_SIGNIFICAND_BITS = ELEMENT_FORMATS["fp32"].significand_bits  # 24
FP16_SIGNIFICAND_BITS = ELEMENT_FORMATS["fp16"].significand_bits  # 11


def fp_multiplier_cost(significand_bits: int, fp32_cost, fp16_cost):
    """Energy or area of a floating-point multiplier with ``significand_bits`` (hidden bit
    included), from the FP32 (24 bits) and FP16 (11 bits) multipliers' figures: ``a s^2 + c``
    through both, i.e. ``fp32 - (fp32 - fp16) (24^2 - s^2) / (24^2 - 11^2)``. An assumption: the
    significand multiplier's array grows with the square of its width, the rest (exponent add,
    normalization, rounding) is a constant. Exact at both points; exact fractions in, exact out."""
    span = FP32_SIGNIFICAND_BITS ** 2 - FP16_SIGNIFICAND_BITS ** 2
    return fp32_cost - (fp32_cost - fp16_cost) * (FP32_SIGNIFICAND_BITS ** 2 - significand_bits ** 2) / span


def int_multiplier_cost(bits: int, int8_cost):
    """Energy or area of a ``bits``-bit integer multiplier: the 8-bit one's x ``(bits / 8)^2`` (an
    assumption: an array multiplier grows with the product of its operand widths)."""
    return int8_cost * bits ** 2 / 64


def int_adder_cost(bits: int, int32_cost):
    """Energy or area of a ``bits``-bit integer adder: the 32-bit one's x ``bits / 32`` (an
    assumption: a carry-chain adder grows with its width)."""
    return int32_cost * bits / 32


def mac_area_um2(fmt: NumberFormat) -> float:
    """One multiply-add cell at ``ASIC_NODE``: an element format's multiplier
    (``fp_multiplier_cost``: FP32 7,700, FP16 1,640, BF16 881, E4M3 242, E5M2 148 um2) + the FP32
    adder (the array accumulates in FP32); BFP an ``m``-bit integer multiplier + the accumulator's
    adder (``bfp_accumulator_bits``); MXINT8 as BFP (``NumberFormat.mac_kind``)."""
    if fmt.mac_kind == "bfp":
        return (int_multiplier_cost(fmt.mantissa_bits, INT8_MULTIPLY_UM2)
                + int_adder_cost(bfp_accumulator_bits(fmt), INT32_ADD_UM2))
    return fp_multiplier_cost(fmt.multiplier_bits, FP32_MULTIPLY_UM2, FP16_MULTIPLY_UM2) + FP32_ADD_UM2


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
    per_mac = {key: np.zeros(len(points)) for key in ("dsp", "lut", "area")}
    for name, fmt in formats.items():
        at = names == name
        per_mac["dsp"][at], per_mac["lut"][at], per_mac["area"][at] = (
            mac_dsp_slices(fmt, device), mac_luts(fmt, device), mac_area_um2(fmt))
    macs = points["rows"] * points["cols"]
    lanes = special_unit_lanes(points)
    dsp = (macs * per_mac["dsp"]).astype(np.int64) + lanes * device.dsp_per_mac["fp32"]
    luts = (macs * per_mac["lut"]).astype(np.int64)
    word_bytes = points["word_bytes"]
    bram = sum(buffer_bram36_blocks(points[buffer], lanes_of(points), word_bytes, device)
               for buffer, lanes_of in BUFFER_LANES.items())
    channels = memory_channels(points["dram_peak_bytes_per_s"], device)
    utilization = {"dsp": dsp / device.dsp_slices, "bram36": bram / device.bram36_blocks, "lut": luts / device.luts}
    channel_utilization = channels / device.memory_channels
    stacked = np.stack([utilization[r] for r in RESOURCES])
    buffer_bytes = sum(points[buffer] for buffer in BUFFER_LANES)
    area_um2 = macs * per_mac["area"] + lanes * mac_area_um2(NumberFormat("fp32")) + sram_area_um2(buffer_bytes)
    return Resources(
        number_format=np.asarray(names, dtype=str), dsp_slices=dsp, bram36_blocks=bram, luts=luts,
        dsp_utilization=utilization["dsp"], bram36_utilization=utilization["bram36"], lut_utilization=utilization["lut"],
        memory_channels=channels, memory_channel_utilization=channel_utilization,
        limiting_resource=np.asarray(RESOURCES)[np.argmax(stacked, axis=0)],
        fits=np.all(stacked <= 1.0, axis=0) & (channel_utilization <= 1.0),
        static_w=np.full(len(points), float(device.static_w)), asic_area_mm2=area_um2 / 1e6)

"""The modeled training accelerator's parameters: ``HardwareConfig`` and its TOML loader.

Published (SphereFed, Dong et al. ECCV 2022, appendix 0.E): a 32 x 64 systolic array of
floating-point MAC cells, one multiply-add per cell per cycle, a special unit for normalization /
ReLU and the other non-GEMM layers, 100 MHz, on a Xilinx VC707 board. Everything else is *not*
published; each such field below carries the default we chose and where it comes from, and
``docs/accel_sim.md`` repeats the table. None of them was fitted to a paper number.

A config is a frozen dataclass; ``load_hardware_config(path)`` reads a TOML file whose keys are the
field names (the special unit's throughputs in a ``[special_unit]`` table, the energy per event in
an ``[energy]`` table). Unknown keys and impossible values raise ``HardwareConfigError`` naming the
field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from accel_sim.cost_tables import COST_TABLES, DEFAULT_COST_TABLE
from accel_sim.dataflows import DATAFLOWS  # the registry: "os", "ws", "is" (output / weight / input stationary)
from accel_sim.hardware_fields import (ENERGY_BOUNDS, FIELD_BOUNDS, GROUPED_MAPPINGS, MEMORY_MODELS,
                                       OPERAND_COPIES, RENAMED_MEMORY_MODELS, SPECIAL_UNIT_BOUNDS, WEIGHT_MASTERS)
from iokit import checks
from iokit.toml import read_toml


class HardwareConfigError(ValueError):
    """A hardware config with an unknown key or an impossible value. The message names the field."""


@dataclass(frozen=True)
class SpecialUnit:
    """Throughput of the special unit, in elements per cycle, per kind of vector work
    (``accel_sim.trace_schema.VECTOR_OPS``).

    Not published. Default assumption: the unit sits at the array's output edge with one lane per
    array column (64 lanes), as TPU v1's activation pipeline is as wide as its matrix unit (Jouppi
    et al., ISCA 2017). One element per lane per cycle for streaming arithmetic; normalization is
    given half that (a statistics pass, then a normalize pass over the same elements); losses a
    quarter (exp / log / divide are multi-cycle floating-point units on an FPGA). With the default
    DRAM bandwidth (89.6 B/cycle, i.e. ~11 FP32 elements in + out per cycle) every vector kind is
    DRAM-bound at these rates, so the exact values rarely matter; the sensitivity sweep varies them.
    """

    elementwise: float = 64.0
    activation: float = 64.0
    norm: float = 32.0
    pool: float = 64.0
    reduce: float = 64.0
    loss: float = 16.0
    update: float = 64.0
    copy: float = 64.0
    random: float = 64.0

    def __post_init__(self) -> None:
        for f in fields(self):
            checks.number_in(getattr(self, f.name), *SPECIAL_UNIT_BOUNDS, name=f"special_unit.{f.name}", error=HardwareConfigError)

    def elements_per_cycle(self, op: str) -> float:
        return getattr(self, op)


@dataclass(frozen=True)
class EnergyCosts:
    """Energy per event of the modeled accelerator (the ``[energy]`` table); ``accel_sim.energy``
    turns an op's event counts into joules with them.

    Not published for the paper's board. Defaults: the 45 nm figures of M. Horowitz, "Computing's
    energy problem (and what we can do about it)", ISSCC 2014, Fig. 1.1.9 ("rough energy costs for
    various operations in 45nm 0.9V"), the figures accelerator papers quote. They are ASIC
    figures; the paper's accelerator is an FPGA (Xilinx VC707), whose programmable logic and
    routing spend several times more per operation, so these defaults understate the board's
    energy: an explicit assumption (``docs/accel_sim.md``). Another technology: replace the five
    numbers, each per event as named.
    """

    mac_pj: float = 4.6
    """One multiply-add on the array, in FP32 by default: FP32 multiply 3.7 pJ + FP32 add 0.9 pJ
    (Horowitz 2014, Fig. 1.1.9). Counted per useful MAC (``docs/accel_sim.md``: padded zeros are
    gated). The hardware in another number format carries that format's figure
    (``accel_sim.mac_energy``: ``hardware_in_format``, a design space's ``number_format`` axis)."""
    sram_pj_per_byte: float = 1.25
    """On-chip buffer access: 10 pJ per 64-bit access of an 8 KB SRAM (Horowitz 2014, Fig. 1.1.9)
    = 1.25 pJ/B. The buffers are banks of small block RAMs (36 Kb each on the VC707), so one access
    touches one small array; the 1 MB figure (100 pJ / 64 bit = 12.5 pJ/B) is the pessimistic end."""
    dram_pj_per_byte: float = 162.5
    """DRAM access: 1.3-2.6 nJ per 64-bit access (Horowitz 2014, Fig. 1.1.9); the low end,
    1.3 nJ / 8 B = 162.5 pJ/B (Han et al., NIPS 2015, quote the same source as 640 pJ per 32-bit
    word = 160 pJ/B)."""
    special_unit_pj_per_element: float = 4.6
    """One element through the special unit: one FP32 multiply + add (3.7 + 0.9 pJ, Horowitz 2014),
    an assumption (a norm or loss does a few operations per element, a copy none)."""
    static_w: float = 0.3
    """Static (leakage) power of the whole accelerator while a trace runs, watts, times its latency.
    An assumption, not measured nor published for the paper's board: the order of a large FPGA's
    static power at room temperature (a few hundred mW); an ASIC of the same array leaks less."""
    rounding_pj_per_value: float = 0.0
    """The random bits of stochastic rounding, per value rounded into a stored copy
    (``accel_sim.simulate.rounded_values``): 0 for FP32 and rounding to nearest; a ``_sr`` format's
    figure is set with the format (``accel_sim.mac_energy.rounding_pj``)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            checks.number_in(getattr(self, f.name), *ENERGY_BOUNDS, name=f"energy.{f.name}", error=HardwareConfigError)


@dataclass(frozen=True)
class HardwareConfig:
    """Every parameter of the modeled accelerator. Defaults: the paper's array plus documented
    assumptions (``docs/accel_sim.md``)."""

    # --- published (SphereFed appendix 0.E) ---------------------------------------------------
    rows: int = 32
    """Systolic array rows (paper: "a 32 by 64 systolic array")."""
    cols: int = 64
    """Systolic array columns."""
    clock_hz: float = 100e6
    """Clock (paper: "The hardware system runs at 100 MHz")."""
    word_bytes: int = 4
    """Bytes per operand word: the size of a float32 value of the trace on the accelerator as the
    array's GEMMs read it. Below 4 (a narrow number format) what GEMMs read is stored at this size
    and everything else stays FP32 (master weights, momentum, normalization, losses: the rule of
    ``accel_sim.words``). The paper's MACs are floating point; we assume FP32 (PyTorch's default
    training dtype; the trace's tensors are float32)."""
    operand_copies: str = "one"
    """Copies of a GEMM operand a narrow format stores: one of ``OPERAND_COPIES``; set with the
    number format (``accel_sim.mac_energy.hardware_in_format``)."""
    scale_bits_per_value: float = 0.0
    """Bits of shared scale stored apart from the elements, per value a GEMM reads: an MX block's
    8-bit scale per 32 values, 0.25; a BFP group's 8-bit exponent per ``g`` values, ``8 / g``; 0 for
    the others. Set with the number format (``NumberFormat.scale_bits_per_value``)."""
    element_bits: int = 0
    """Bits of one GEMM operand value as stored, packed (``NumberFormat.element_bits``: MXFP4 4,
    MXFP6 6, ``bfp_m4_g16`` 5, FP8 8), at most ``8 x word_bytes``; 0: ``8 x word_bytes`` (byte-aligned
    words). What the fold model's GEMM traffic, the buffers' residency and width, and the stored
    operands are priced at (``word_bits``); ``word_bytes`` stays the byte-aligned container (the
    SCALE-Sim reference model's word). Set with the number format."""
    weight_master: str = "fp32"
    """One of ``WEIGHT_MASTERS``: whether a narrow format's weights keep an FP32 master copy
    (``accel_sim.words``)."""

    # --- not published: dataflow per GEMM role ------------------------------------------------
    dataflow_fwd: str = "ws"
    """Forward GEMMs: a name in ``accel_sim.dataflows.DATAFLOWS``. An assumption: SphereFed does
    not publish its dataflow, nor does the training accelerator it builds on (its ref. [91]: Zhang,
    McDanel and Kung, "FAST: DNN training under variable precision block floating point with
    stochastic rounding", HPCA 2022) in a form we could check; weight stationary keeps each weight
    block in the cells while the batch streams through, as TPU v1's array does (Jouppi et al.,
    ISCA 2017, Sec. 2). ``bench.sweep`` varies it."""
    dataflow_dx: str = "ws"
    """Input-gradient GEMMs (dY . W: the weights again stationary); the same assumption as
    ``dataflow_fwd``."""
    dataflow_dw: str = "os"
    """Weight-gradient GEMMs (dY^T . X): output stationary, so each weight gradient accumulates in
    its cell over the batch (the reduction dimension streams); an assumption, as above."""

    # --- not published: on-chip buffers (double buffered; half of each is active) --------------
    a_buffer_bytes: int = 1536 * 1024
    """Buffer for the GEMM's left operand A[m x k] (SCALE-Sim's "ifmap" SRAM). The VC707's
    XC7VX485T has 1,030 36-Kb block RAMs = 4.6 MB; we give 1.5 MiB to each operand buffer and
    1 MiB to outputs (4 MiB in all), leaving the rest to the special unit and control."""
    b_buffer_bytes: int = 1536 * 1024
    """Buffer for the right operand B[k x n] (SCALE-Sim's "filter" SRAM)."""
    out_buffer_bytes: int = 1024 * 1024
    """Buffer for outputs and partial sums (SCALE-Sim's "ofmap" SRAM)."""

    # --- not published: DRAM ------------------------------------------------------------------
    dram_peak_bytes_per_s: float = 12.8e9
    """VC707: one DDR3-1600 SODIMM on a 64-bit bus: 1600 MT/s x 8 B = 12.8 GB/s peak
    (= 128 B per 100 MHz cycle)."""
    dram_efficiency: float = 0.7
    """Fraction of peak a DDR3 controller sustains on streaming traffic: ~70 %, an assumption typical
    of DDR3 memory controllers, not a measurement of the board; ``bench.sweep`` varies it."""
    dram_latency_cycles: int = 20
    """Latency of the first access of a transfer, at ``clock_hz``: 200 ns, i.e. DDR3-1600 11-11-11
    tRCD + CL = 27.5 ns plus the memory controller / PHY pipeline. Paid once per op."""

    memory_model: str = "on_chip_accumulation"
    """How GEMM DRAM traffic and stalls are priced: one of ``MEMORY_MODELS``. Default
    ``on_chip_accumulation``: ``docs/scalesim.md`` argues why it is the more faithful one for a
    training accelerator (partial sums accumulated, not written out per fold; one shared DRAM
    channel); ``scalesim_v3`` is the validation reference."""

    # --- not published: special unit, grouped GEMMs, linear algebra --------------------------
    special_unit: SpecialUnit = field(default_factory=SpecialUnit)
    grouped_mapping: str = "per_group"
    """How GEMMs with groups > 1 (depthwise convolution) are mapped: one of ``GROUPED_MAPPINGS``.
    Default ``per_group``: SCALE-Sim's convention; the FPGA's mapping is not published."""
    linalg_efficiency: float = 0.5
    """Fraction of the array's rows x cols MACs/cycle that dense factorizations / solves reach:
    blocked algorithms run their trailing updates (most MACs) as GEMMs, while the panel steps are
    sequential. An assumption; only the calibration (FFC solve, CCVR) uses it."""

    # --- not published: energy per event ------------------------------------------------------
    energy: EnergyCosts = field(default_factory=EnergyCosts)
    cost_table: str = DEFAULT_COST_TABLE
    """The published table a MAC in a number format other than FP32 is priced from (energy and
    ASIC area): one of ``accel_sim.cost_tables.COST_TABLES`` (``horowitz45``, the default,
    ``epfl28``, ``aladdin40``; ``configs/costs/<name>.toml``). An FP32 hardware keeps its own
    ``energy.mac_pj`` whatever the table (``accel_sim.mac_energy``)."""

    def __post_init__(self) -> None:
        for name, (low, high) in FIELD_BOUNDS.items():
            value = getattr(self, name)
            if isinstance(low, int):
                checks.integer_in(value, low, high, name=name, error=HardwareConfigError)
            else:
                checks.number_in(value, low, high, name=name, error=HardwareConfigError)
        for name in ("dataflow_fwd", "dataflow_dx", "dataflow_dw"):
            checks.one_of(getattr(self, name), DATAFLOWS, name=name, error=HardwareConfigError)
        checks.one_of(self.grouped_mapping, GROUPED_MAPPINGS, name="grouped_mapping", error=HardwareConfigError)
        checks.one_of(self.operand_copies, OPERAND_COPIES, name="operand_copies", error=HardwareConfigError)
        checks.one_of(self.weight_master, WEIGHT_MASTERS, name="weight_master", error=HardwareConfigError)
        checks.one_of(self.cost_table, COST_TABLES, name="cost_table", error=HardwareConfigError)
        if self.element_bits > 8 * self.word_bytes:
            raise HardwareConfigError(f"element_bits = {self.element_bits} does not fit a {self.word_bytes}-byte word: "
                                      f"give at most {8 * self.word_bytes} (0: the whole word)")
        if isinstance(self.memory_model, str) and self.memory_model in RENAMED_MEMORY_MODELS:
            raise HardwareConfigError(f"hardware field 'memory_model' = {self.memory_model!r} was renamed: use "
                                      f"{RENAMED_MEMORY_MODELS[self.memory_model]!r}")
        checks.one_of(self.memory_model, MEMORY_MODELS, name="memory_model", error=HardwareConfigError)
        if not isinstance(self.special_unit, SpecialUnit):
            raise HardwareConfigError("hardware field 'special_unit' must be a SpecialUnit")
        if not isinstance(self.energy, EnergyCosts):
            raise HardwareConfigError("hardware field 'energy' must be an EnergyCosts")

    @property
    def macs_per_cycle(self) -> int:
        """The roofline: one MAC per cell per cycle."""
        return self.rows * self.cols

    @property
    def dram_bytes_per_cycle(self) -> float:
        """Sustained DRAM bandwidth per clock cycle (``dram_bytes_per_cycle``; default 89.6 B/cycle)."""
        return dram_bytes_per_cycle(self.dram_peak_bytes_per_s, self.clock_hz, self.dram_efficiency)

    @property
    def scalesim_bandwidth_words_per_cycle(self) -> int:
        """SCALE-Sim's ``Bandwidth`` for this config (``scalesim_bandwidth_words_per_cycle``; default 22)."""
        return int(scalesim_bandwidth_words_per_cycle(self.dram_bytes_per_cycle, self.word_bytes))

    def dataflow(self, role: str) -> str:
        """The dataflow of a GEMM role ("fwd", "dx", "dw")."""
        try:
            return {"fwd": self.dataflow_fwd, "dx": self.dataflow_dx, "dw": self.dataflow_dw}[role]
        except KeyError:
            raise ValueError(f"unknown GEMM role {role!r}; expected fwd, dx or dw") from None

    def with_(self, **changes: Any) -> "HardwareConfig":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


def word_bits(word_bytes, element_bits):
    """Bits a GEMM operand value is priced at: ``element_bits`` where given (packed), else
    ``8 x word_bytes``; on numbers or numpy arrays alike."""
    return np.where(element_bits > 0, element_bits, 8 * word_bytes) if isinstance(word_bytes, np.ndarray) \
        else (element_bits if element_bits > 0 else 8 * word_bytes)


def word_units(bits):
    """(units per word, units per byte) of a ``bits``-bit word in the smallest unit that makes both
    whole: ``bits / gcd(bits, 8)`` and ``8 / gcd(bits, 8)`` (32 bits: 4 and 1, bytes; 4 bits: 1 and
    2, half-bytes; 5 bits: 5 and 8, bits); on numbers or numpy arrays alike."""
    g = math.gcd(bits, 8) if isinstance(bits, (int, np.integer)) else np.gcd(bits, 8)
    return bits // g, 8 // g


def dram_bytes_per_cycle(dram_peak_bytes_per_s, clock_hz, dram_efficiency):
    """Sustained DRAM bandwidth per clock cycle: peak / clock x efficiency (default 12.8e9 / 100e6
    x 0.7 = 89.6 B/cycle); on numbers or numpy arrays alike."""
    return dram_peak_bytes_per_s / clock_hz * dram_efficiency


def scalesim_bandwidth_words_per_cycle(bytes_per_cycle, word_bytes):
    """SCALE-Sim's ``Bandwidth`` (an integer number of words per cycle, per operand port):
    ``bytes per cycle / word_bytes``, rounded down, at least 1 (default 89.6 / 4 = 22.4 -> 22); on
    numbers or numpy arrays alike."""
    return np.maximum(1, np.floor(bytes_per_cycle / word_bytes + 1e-9)).astype(np.int64)


def hardware_config_from_dict(data: dict[str, Any], source: str = "<config>") -> HardwareConfig:
    """Build a config from a dict shaped like the TOML file. Unknown keys raise
    ``HardwareConfigError`` naming them."""
    if not isinstance(data, dict):
        raise HardwareConfigError(f"{source}: a hardware config is a table of fields (rows = 32, ...), got "
                                  f"{type(data).__name__} {str(data)[:40]!r}")
    known = {f.name for f in fields(HardwareConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise HardwareConfigError(
            f"{source}: unknown hardware field(s) {', '.join(unknown)}; known fields: {', '.join(sorted(known))}"
        )
    values = dict(data)
    for table, cls in (("special_unit", SpecialUnit), ("energy", EnergyCosts)):
        if table in values:
            values[table] = _sub_table(table, cls, values[table], source)
    try:
        return HardwareConfig(**values)
    except HardwareConfigError as e:
        raise HardwareConfigError(f"{source}: {e}") from None


def _sub_table(table: str, cls: type, value: Any, source: str) -> Any:
    """A TOML sub-table (``[special_unit]``, ``[energy]``) as its dataclass; unknown keys and bad
    values raise ``HardwareConfigError`` naming ``table.key``."""
    if not isinstance(value, dict):
        raise HardwareConfigError(f"{source}: hardware field '{table}' must be a table")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise HardwareConfigError(
            f"{source}: unknown field(s) {table}.{(', ' + table + '.').join(unknown)}; "
            f"known: {', '.join(sorted(known))}"
        )
    try:
        return cls(**value)
    except HardwareConfigError as e:
        raise HardwareConfigError(f"{source}: {e}") from None


def load_hardware_config(path: str | Path) -> HardwareConfig:
    """Read a TOML hardware config (keys = ``HardwareConfig`` field names; fields left out keep
    their defaults). Raises ``HardwareConfigError`` for a missing file, bad TOML, an unknown key or
    an impossible value, naming the file and the field."""
    return hardware_config_from_dict(read_toml(path, HardwareConfigError, "hardware config"), source=str(path))


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return repr(float(value)) if isinstance(value, float) else str(value)


def hardware_config_toml(hw: HardwareConfig, header: str = "") -> str:
    """``hw`` as a TOML hardware config that ``load_hardware_config`` reads back to an equal config
    (every field written; ``header`` lines become comments)."""
    lines = [f"# {line}" for line in header.splitlines()]
    tables = []
    for f in fields(HardwareConfig):
        value = getattr(hw, f.name)
        if isinstance(value, (SpecialUnit, EnergyCosts)):
            tables += ["", f"[{f.name}]"] + [f"{g.name} = {_toml_value(getattr(value, g.name))}" for g in fields(value)]
        else:
            lines.append(f"{f.name} = {_toml_value(value)}")
    return "\n".join(lines + tables) + "\n"

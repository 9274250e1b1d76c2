"""Published per-operation costs (energy, ASIC area) of arithmetic units, as data: a cost table.

A MAC cell in any number format is built from a few kinds of unit (``accel_sim.mac_cells``):
integer multipliers and adders of a width, barrel shifters, floating-point multipliers of an element
format and the FP32 adder. A cost table gives each its energy per operation (pJ) and area (um^2)
from one published source, every figure cited in its file (``configs/costs/<name>.toml``):

* ``horowitz45`` (the default): M. Horowitz, "Computing's energy problem (and what we can do about
  it)", ISSCC 2014, Fig. 1.1.9, 45 nm. Default because it is the one table with both energy and area
  from one source, and the source of every other ``[energy]`` figure of the model (SRAM, DRAM, the
  special unit), so the MAC is priced at the node of the rest of the energy model.
* ``epfl28``: EPFL's synthesized HBFP hardware model (Accuracy Boosters, arXiv 2211.10737;
  github.com/jnbrq/hbfp_hardware_model), Synopsys DC at 28 nm: areas only.
* ``aladdin40``: Aladdin's function-unit models (Shao et al., ISCA 2014;
  github.com/harvard-acc/ALADDIN, ``common/power_func.h``), 40 nm, 1 ns: the table Accelergy's
  library plug-in ships.

Where a table lacks a unit, a named law fills it, each an assumption (one function each, below):

* ``int_multiply``: the table's figure at that width; otherwise the nearest listed width's x
  ``(bits / listed)^2`` (an array multiplier grows with the product of its operand widths);
* ``int_add``: the table's figure at that width; otherwise the nearest listed width's x
  ``bits / listed`` (a carry-chain adder grows with its width);
* ``shifter(bits, stages)``: a barrel shifter of ``stages`` levels of 2:1 multiplexers over ``bits``
  bits; the table's shifter x ``bits x stages / (its bits x its stages)``; a table without a shifter
  takes Aladdin's ratio of a shifter's bit-stage to an adder's bit (``aladdin40``: 32 bits x 5
  stages, 0.797 pJ and 520 um^2, against its 32-bit adder's 0.210 pJ and 278 um^2) times its own
  adder per bit;
* a floating-point multiplier: the table's figure for that element format (FP32, FP16, BF16 where
  listed, ``CostTable.fp_multiply``); otherwise built from what it holds
  (``accel_sim.mac_cells.fp_multiplier_units``: an ``s x s`` integer multiplier of the significands,
  hidden bit included, an ``e + 1``-bit adder of the exponents, a one-position normalizing shift of
  the ``2s``-bit product and an ``s``-bit rounding increment);
* energy of a table without energies (``epfl28``): proportional to area (the same library, clock and
  activity for every unit): the figures are read as ratios to the FP32 cell (``relative_to_fp32``),
  so only their proportions matter.

A table is read through ``cost_table(name)``; an unknown name is one line naming the known tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Mapping

from accel_sim.formats import ELEMENT_FORMATS, ElementFormat
from iokit.toml import read_toml

COST_TABLE_DIR = Path(__file__).resolve().parents[1] / "configs" / "costs"
"""Where the cost tables live, one TOML file per table (``<name>.toml``)."""
DEFAULT_COST_TABLE = "horowitz45"
"""The default table (module docstring: why)."""
COST_TABLES = tuple(sorted(p.stem for p in COST_TABLE_DIR.glob("*.toml")))
"""Every table's name."""
SHIFTER_REFERENCE_TABLE = "aladdin40"
"""The table whose shifter fills the shifter of a table without one (``shifter``)."""


class CostTableError(ValueError):
    """A cost table name or file the model cannot read; the message names it and the fix."""


@dataclass(frozen=True)
class Cost:
    """Energy per operation (pJ; the area for a table without energies, ``CostTable.has_energy``) and
    area (um^2) of a unit or a sum of units."""

    energy: float
    area_um2: float

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.energy + other.energy, self.area_um2 + other.area_um2)

    def times(self, factor: float) -> "Cost":
        return Cost(self.energy * factor, self.area_um2 * factor)


ZERO = Cost(0.0, 0.0)


@dataclass(frozen=True)
class CostTable:
    """One published table (module docstring): its units' costs by width where it lists several."""

    name: str
    node: str
    source: str
    has_energy: bool
    fp_multiply: Mapping[str, Cost]  # element format name -> its multiplier
    fp32_add: Cost
    int_multiply: Mapping[int, Cost]  # bits -> cost
    int_add: Mapping[int, Cost]
    shifter: tuple[int, int, Cost] | None  # (bits, stages, cost)


def _figure(entry: Any, where: str, has_energy: bool) -> Cost:
    if not isinstance(entry, dict) or not isinstance(entry.get("source"), str) or not entry["source"].strip():
        raise CostTableError(f"{where}: every figure is a table with area_um2{', energy_pj' if has_energy else ''} "
                             f"and its source")
    values = [entry.get("area_um2"), entry.get("energy_pj") if has_energy else entry.get("area_um2")]
    if not has_energy and "energy_pj" in entry:
        raise CostTableError(f"{where}: energy_pj given in a table whose other figures have none: give every "
                             f"figure an energy or none")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
            raise CostTableError(f"{where}: area_um2{' and energy_pj' if has_energy else ''} must be positive "
                                 f"numbers, got {entry}")
    return Cost(float(values[1]), float(values[0]))


def _widths(entries: Any, where: str, has_energy: bool) -> dict[int, Cost]:
    if not isinstance(entries, list) or not entries:
        raise CostTableError(f"{where}: give at least one [[...]] entry with bits, area_um2 and its source")
    out = {}
    for i, entry in enumerate(entries):
        bits = entry.get("bits") if isinstance(entry, dict) else None
        if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 64:
            raise CostTableError(f"{where}[{i}]: bits must be an integer in [1, 64], got {bits!r}")
        out[bits] = _figure({k: v for k, v in entry.items() if k != "bits"}, f"{where}[{i}]", has_energy)
    return out


def load_cost_table(path: str | Path) -> CostTable:
    """Read a cost table file; ``CostTableError`` naming the file and the entry for anything missing,
    unknown or impossible."""
    data = read_toml(path, CostTableError, "cost table")
    known = {"name", "node", "source", "fp_multiply", "fp32_add", "int_multiply", "int_add", "shifter"}
    if set(data) - known or not {"name", "node", "source", "fp_multiply", "fp32_add", "int_multiply",
                                 "int_add"} <= set(data):
        raise CostTableError(f"{path}: a cost table has the keys {', '.join(sorted(known))} (shifter optional); "
                             f"got {', '.join(sorted(data))}")
    has_energy = "energy_pj" in data["fp32_add"] if isinstance(data["fp32_add"], dict) else False
    fp_multiply = data["fp_multiply"]
    if not isinstance(fp_multiply, dict) or "fp32" not in fp_multiply or set(fp_multiply) - set(ELEMENT_FORMATS):
        raise CostTableError(f"{path}: [fp_multiply.<element>] needs fp32 and may list "
                             f"{', '.join(ELEMENT_FORMATS)}; got {', '.join(fp_multiply) if isinstance(fp_multiply, dict) else fp_multiply}")
    shifter = None
    if "shifter" in data:
        entry = dict(data["shifter"]) if isinstance(data["shifter"], dict) else {}
        bits, stages = entry.pop("bits", None), entry.pop("stages", None)
        if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 64 for v in (bits, stages)):
            raise CostTableError(f"{path}: [shifter] needs integer bits and stages in [1, 64]")
        shifter = (bits, stages, _figure(entry, f"{path}: [shifter]", has_energy))
    return CostTable(
        name=str(data["name"]), node=str(data["node"]), source=str(data["source"]), has_energy=has_energy,
        fp_multiply={k: _figure(v, f"{path}: [fp_multiply.{k}]", has_energy) for k, v in fp_multiply.items()},
        fp32_add=_figure(data["fp32_add"], f"{path}: [fp32_add]", has_energy),
        int_multiply=_widths(data["int_multiply"], f"{path}: [[int_multiply]]", has_energy),
        int_add=_widths(data["int_add"], f"{path}: [[int_add]]", has_energy), shifter=shifter)


def check_cost_table_name(name: object) -> str:
    """``name`` if it names a table; else ``CostTableError``, one line naming the known tables."""
    if not isinstance(name, str) or name not in COST_TABLES:
        raise CostTableError(f"cost table {name!r}: expected one of {', '.join(COST_TABLES)} "
                             f"(configs/costs/<name>.toml)")
    return name


@cache
def cost_table(name: str = DEFAULT_COST_TABLE) -> CostTable:
    """The table named ``name`` (``COST_TABLES``), read once."""
    table = load_cost_table(COST_TABLE_DIR / f"{check_cost_table_name(name)}.toml")
    if table.name != name:
        raise CostTableError(f"{COST_TABLE_DIR / name}.toml: its name is {table.name!r}; a table's file is "
                             f"<name>.toml")
    return table


# ----------------------------------------------------------------------------- the laws


def _nearest(widths: Mapping[int, Cost], bits: int) -> int:
    """The listed width nearest ``bits`` (the wider of two as near)."""
    return min(widths, key=lambda w: (abs(w - bits), -w))


def int_multiply(table: CostTable, bits: int) -> Cost:
    """A ``bits x bits`` integer multiplier: the table's figure, else the nearest listed width's x
    ``(bits / width)^2`` (module docstring)."""
    width = _nearest(table.int_multiply, bits)
    return table.int_multiply[width].times((bits / width) ** 2)


def int_add(table: CostTable, bits: int) -> Cost:
    """A ``bits``-bit integer adder: the table's figure, else the nearest listed width's x
    ``bits / width`` (module docstring)."""
    width = _nearest(table.int_add, bits)
    return table.int_add[width].times(bits / width)


def shifter(table: CostTable, bits: int, stages: int) -> Cost:
    """A barrel shifter of ``stages`` levels over ``bits`` bits: the table's shifter scaled by
    ``bits x stages``; without one, Aladdin's shifter-per-adder-bit ratio times this table's adder
    per bit (module docstring)."""
    if bits <= 0 or stages <= 0:
        return ZERO
    if table.shifter is not None:
        ref_bits, ref_stages, cost = table.shifter
        return cost.times(bits * stages / (ref_bits * ref_stages))
    ref = cost_table(SHIFTER_REFERENCE_TABLE)
    ref_bits, ref_stages, ref_cost = ref.shifter
    ref_adder_bit = int_add(ref, ref_bits).times(1 / ref_bits)
    per_bit_stage = Cost(ref_cost.energy / (ref_bits * ref_stages) / ref_adder_bit.energy,
                         ref_cost.area_um2 / (ref_bits * ref_stages) / ref_adder_bit.area_um2)
    own_adder_bit = int_add(table, 32).times(1 / 32)
    return Cost(own_adder_bit.energy * per_bit_stage.energy * bits * stages,
                own_adder_bit.area_um2 * per_bit_stage.area_um2 * bits * stages)


def log2_ceil(n: int) -> int:
    """``ceil(log2 n)`` for ``n >= 1`` (0 for 1)."""
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0

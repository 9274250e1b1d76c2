"""Energy of an op, or of any set of ops, from the events the cycle model counts.

``E = mac_pj * MACs + sram_pj_per_byte * SRAM bytes + dram_pj_per_byte * DRAM bytes
+ special_unit_pj_per_element * elements + rounding_pj_per_value * values rounded + static_w * latency_s``

the usual accelerator energy model: dynamic energy as a count of events times an energy per event
(Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC 2014, Fig. 1.1.9 for
the per-event figures; the same actions x energy-per-action form as Accelergy, Wu, Emer and Sze,
"Accelergy: an architecture-level energy estimation methodology for accelerator designs", ICCAD
2019, which Timeloop and SCALE-Sim v3 use), plus static power over the run time. The per-event
figures are ``HardwareConfig.energy`` (``accel_sim.hardware.EnergyCosts``); the MAC's depends on
the array's number format and the hardware's cost table (``accel_sim.mac_energy``: FP32 4.6 pJ, a
4-bit-mantissa BFP MAC 0.163 pJ under the default table). Events per op:

* MACs: the useful multiply-adds (``OpCost.macs``) of a GEMM or a linear-algebra op. Zero MACs of a
  block-diagonal packing are not charged (the cell's multiplier is gated while its stationary
  operand is zero, as in Eyeriss's zero gating, Chen et al., JSSC 2017); they cost cycles, hence
  static energy.
* SRAM bytes: a GEMM's on-chip buffer reads and writes by the array, fold by fold
  (``accel_sim.memory``, partial-sum read-backs included); vector and linear-algebra work read
  their inputs and write their outputs once.
* DRAM bytes: the op's DRAM reads + writes (``OpCost.dram_read_bytes + dram_write_bytes``).
* special-unit elements: the elements a vector op processes (``VectorWork.elements``).
* values rounded: the values an op writes into a narrow number format's stored copies
  (``accel_sim.words``), each drawing the random bits of stochastic rounding
  (``rounding_pj_per_value``, 0 when rounding to nearest: ``accel_sim.mac_energy.rounding_pj``).
  The special unit rounds what it writes, so this energy is part of its component.
* latency: the op's total cycles / clock (stalls included: the chip leaks while it waits).

Energy is linear in these counts, so the energy of a set of ops is computed from their summed
counts (``energy_of``), which keeps totals exact: with only ``mac_pj = 1`` a trace's energy is its
MACs x 1e-12 J, with only ``static_w = 1`` its latency in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_sim.hardware import EnergyCosts

PJ = 1e-12  # joules per picojoule

COMPONENTS = ("mac", "sram", "dram", "special_unit", "static")
"""The parts of an energy figure, in the order reports list them."""


@dataclass(frozen=True)
class Energy:
    """An energy figure split by component, joules."""

    mac_j: float = 0.0
    sram_j: float = 0.0
    dram_j: float = 0.0
    special_unit_j: float = 0.0
    static_j: float = 0.0

    @property
    def energy_j(self) -> float:
        """Total joules."""
        return self.mac_j + self.sram_j + self.dram_j + self.special_unit_j + self.static_j

    def by_component_j(self) -> dict[str, float]:
        """``{mac, sram, dram, special_unit, static}`` -> joules (``COMPONENTS`` order)."""
        return {name: getattr(self, f"{name}_j") for name in COMPONENTS}


def mac_energy_j(macs: int, costs: EnergyCosts) -> float:
    """``mac_pj * MACs`` (Horowitz 2014, Fig. 1.1.9: FP32 multiply 3.7 pJ + add 0.9 pJ; another
    number format's figure from ``accel_sim.mac_energy``)."""
    return costs.mac_pj * macs * PJ


def sram_energy_j(sram_bytes: int, costs: EnergyCosts) -> float:
    """``sram_pj_per_byte * (bytes read + written)`` of the on-chip buffers (Horowitz 2014,
    Fig. 1.1.9: 8 KB SRAM, 10 pJ per 64-bit access)."""
    return costs.sram_pj_per_byte * sram_bytes * PJ


def dram_energy_j(dram_bytes: int, costs: EnergyCosts) -> float:
    """``dram_pj_per_byte * (bytes read + written)`` of DRAM (Horowitz 2014, Fig. 1.1.9: 1.3-2.6 nJ
    per 64-bit access)."""
    return costs.dram_pj_per_byte * dram_bytes * PJ


def special_unit_energy_j(elements: int, rounded_values: int, costs: EnergyCosts) -> float:
    """``special_unit_pj_per_element * elements`` of vector work (assumed: one FP32 multiply + add
    per element, Horowitz 2014) + ``rounding_pj_per_value * values rounded`` (the random bits of
    stochastic rounding, ``accel_sim.mac_energy.rounding_pj``; nothing when rounding to nearest)."""
    return costs.special_unit_pj_per_element * elements * PJ + costs.rounding_pj_per_value * rounded_values * PJ


def static_energy_j(latency_s: float, costs: EnergyCosts) -> float:
    """``static_w * latency_s``: leakage over the time the work takes."""
    return costs.static_w * latency_s


def energy_of(costs: EnergyCosts, *, macs: int, sram_bytes: int, dram_bytes: int, special_unit_elements: int,
              rounded_values: int, latency_s: float) -> Energy:
    """The energy of work with these event counts (module docstring), split by component."""
    return Energy(
        mac_j=mac_energy_j(macs, costs),
        sram_j=sram_energy_j(sram_bytes, costs),
        dram_j=dram_energy_j(dram_bytes, costs),
        special_unit_j=special_unit_energy_j(special_unit_elements, rounded_values, costs),
        static_j=static_energy_j(latency_s, costs),
    )

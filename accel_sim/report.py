"""``CostReport``: what a trace costs on the modeled accelerator, op by op, with totals and queries.

Units: cycles of the accelerator's clock, bytes of DRAM traffic (``dram_read_bytes``, ``dram_write_bytes``)
and of on-chip buffer traffic (``sram_read_bytes``, ``sram_write_bytes``), MACs (one multiply-add;
we never print FLOPs), joules (``accel_sim.energy``). Utilization is against the roofline of
``rows x cols`` MACs per cycle: ``macs / (total_cycles x rows x cols)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

from accel_sim.energy import Energy, energy_of
from accel_sim.hardware import HardwareConfig
from accel_sim.lifetimes import PeakMemory


@dataclass(frozen=True)
class OpCost:
    idx: int
    aten: str
    layer: str
    phase: str
    work_kind: str  # gemm | vector | linalg | none | unsupported
    work_op: str  # GEMM role (fwd/dx/dw), vector op kind or linalg op; "" otherwise
    dataflow: str  # GEMMs only
    macs: int
    compute_cycles: int
    stall_cycles: int
    total_cycles: int
    dram_read_bytes: int
    dram_write_bytes: int
    priced: bool
    sram_read_bytes: int  # on-chip buffer bytes read (GEMM: by the array; vector / linalg: inputs)
    sram_write_bytes: int  # on-chip buffer bytes written
    special_unit_elements: int  # vector work's elements
    rounded_values: int  # values rounded into a narrow format's stored copies (accel_sim.words)
    gemm_groups: int  # GEMMs: groups (> 1: grouped / depthwise convolution, batched matmul); else 1
    energy: Energy  # joules by component (accel_sim.energy)

    @property
    def energy_j(self) -> float:
        return self.energy.energy_j


@dataclass(frozen=True)
class Totals:
    """Sums over a set of ops; the energy comes from the summed event counts (``accel_sim.energy``
    is linear in them), so it equals the sum of the ops' energies up to rounding."""

    ops: int
    macs: int
    compute_cycles: int
    stall_cycles: int
    total_cycles: int
    dram_read_bytes: int
    dram_write_bytes: int
    sram_read_bytes: int
    sram_write_bytes: int
    special_unit_elements: int
    rounded_values: int
    energy: Energy

    @staticmethod
    def of(costs: Iterable[OpCost], hw: HardwareConfig) -> "Totals":
        costs = list(costs)
        counts = {
            name: sum(getattr(c, name) for c in costs)
            for name in ("macs", "compute_cycles", "stall_cycles", "total_cycles", "dram_read_bytes", "dram_write_bytes",
                         "sram_read_bytes", "sram_write_bytes", "special_unit_elements", "rounded_values")
        }
        energy = op_energy(hw, macs=counts["macs"], total_cycles=counts["total_cycles"],
                           dram_bytes=counts["dram_read_bytes"] + counts["dram_write_bytes"],
                           sram_bytes=counts["sram_read_bytes"] + counts["sram_write_bytes"],
                           special_unit_elements=counts["special_unit_elements"],
                           rounded_values=counts["rounded_values"])
        return Totals(ops=len(costs), **counts, energy=energy)

    @property
    def energy_j(self) -> float:
        return self.energy.energy_j

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: the counts, ``energy_j`` and ``energy_by_component_j``."""
        out = {k: v for k, v in asdict(self).items() if k != "energy"}
        return {**out, "energy_j": self.energy_j, "energy_by_component_j": self.energy.by_component_j()}


def op_energy(hw: HardwareConfig, *, macs: int, total_cycles: int, dram_bytes: int, sram_bytes: int,
              special_unit_elements: int, rounded_values: int) -> Energy:
    """The energy of an op (or a set of ops) from its event counts under ``hw.energy``; latency =
    total cycles / clock."""
    return energy_of(hw.energy, macs=macs, sram_bytes=sram_bytes, dram_bytes=dram_bytes,
                     special_unit_elements=special_unit_elements, rounded_values=rounded_values,
                     latency_s=total_cycles / hw.clock_hz)


@dataclass(frozen=True)
class CostReport:
    hw: HardwareConfig
    model: str
    method: str
    batch_size: int
    ops: tuple[OpCost, ...]
    peak: PeakMemory

    # ---- totals ---------------------------------------------------------------------------
    @property
    def totals(self) -> Totals:
        return Totals.of(self.ops, self.hw)

    @property
    def total_cycles(self) -> int:
        return sum(c.total_cycles for c in self.ops)

    @property
    def latency_s(self) -> float:
        """Latency of the whole trace: total cycles / clock."""
        return self.total_cycles / self.hw.clock_hz

    @property
    def macs(self) -> int:
        return sum(c.macs for c in self.ops)

    @property
    def peak_memory_bytes(self) -> int:
        return self.peak.peak_memory_bytes

    @property
    def energy(self) -> Energy:
        """Energy of the whole trace by component (``accel_sim.energy``)."""
        return self.totals.energy

    @property
    def energy_j(self) -> float:
        """Energy of the whole trace, joules."""
        return self.totals.energy_j

    def utilization(self) -> float:
        """Useful MACs / (total cycles x rows x cols)."""
        cycles = self.total_cycles
        return self.macs / (cycles * self.hw.macs_per_cycle) if cycles else 0.0

    # ---- queries ----------------------------------------------------------------------------
    def _group(self, key) -> dict:
        groups: dict = {}
        for cost in self.ops:
            groups.setdefault(key(cost), []).append(cost)
        return {name: Totals.of(costs, self.hw) for name, costs in groups.items()}

    def by_layer(self) -> dict[str, Totals]:
        """Totals per owning module (in order of first appearance; "" = outside any module)."""
        return self._group(lambda c: c.layer)

    def by_layer_phase(self) -> dict[tuple[str, str], Totals]:
        """Totals per (owning module, phase), in order of first appearance."""
        return self._group(lambda c: (c.layer, c.phase))

    def by_phase(self) -> dict[str, Totals]:
        """Totals per phase (fwd, bwd, update, calibration, aggregation)."""
        return self._group(lambda c: c.phase)

    def by_work(self) -> dict[str, Totals]:
        """Totals per kind of work: "gemm:fwd", "gemm:dx", "gemm:dw", "vector:norm", ..."""
        return self._group(lambda c: f"{c.work_kind}:{c.work_op}" if c.work_op else c.work_kind)

    def unsupported_ops(self) -> dict[str, int]:
        """Aten op -> count of the ops that could not be priced (0 cycles in every total)."""
        counts: dict[str, int] = {}
        for cost in self.ops:
            if not cost.priced:
                counts[cost.aten] = counts.get(cost.aten, 0) + 1
        return counts

    def rows(self) -> list[dict[str, Any]]:
        """One dict per op, for ``pandas.DataFrame(report.rows())``; adds ``utilization``; the energy as
        ``energy_j`` and one ``energy_<component>_j`` column per component."""
        per_cell = self.hw.macs_per_cycle
        rows = []
        for c in self.ops:
            row = {k: v for k, v in asdict(c).items() if k != "energy"}
            row["utilization"] = c.macs / (c.total_cycles * per_cell) if c.total_cycles else 0.0
            row["energy_j"] = c.energy_j
            row.update({f"energy_{k}_j": v for k, v in c.energy.by_component_j().items()})
            rows.append(row)
        return rows

    def summary(self) -> dict[str, Any]:
        """Totals, peak memory and the unpriced ops as plain JSON-ready data."""
        t = self.totals
        return {
            "model": self.model,
            "method": self.method,
            "batch_size": self.batch_size,
            "memory_model": self.hw.memory_model,  # which model priced the GEMMs' DRAM traffic and stalls
            "ops": t.ops,
            "macs": t.macs,
            "compute_cycles": t.compute_cycles,
            "stall_cycles": t.stall_cycles,
            "total_cycles": t.total_cycles,
            "latency_s": self.latency_s,
            "utilization": self.utilization(),
            "dram_read_bytes": t.dram_read_bytes,
            "dram_write_bytes": t.dram_write_bytes,
            "sram_read_bytes": t.sram_read_bytes,
            "sram_write_bytes": t.sram_write_bytes,
            "special_unit_elements": t.special_unit_elements,
            "rounded_values": t.rounded_values,
            "energy_j": t.energy_j,
            "energy_by_component_j": t.energy.by_component_j(),
            "peak_memory_bytes": self.peak.peak_memory_bytes,
            "peak_memory_at_op": self.peak.at_op,
            "peak_memory_by_kind_bytes": dict(self.peak.by_kind_bytes),
            "peak_memory_live_storages": list(self.peak.live_storages),
            "by_phase": {k: v.as_dict() for k, v in self.by_phase().items()},
            "unsupported_ops": self.unsupported_ops(),
            "hardware": asdict(self.hw),
        }

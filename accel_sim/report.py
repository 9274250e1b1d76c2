"""``CostReport``: what a trace costs on the modeled accelerator, op by op, with totals and queries.

Units: cycles of the accelerator's clock, bytes of DRAM traffic, MACs (one multiply-add; FLOPs =
2 x MACs, only through ``flops``). Utilization is against the roofline of ``rows x cols`` MACs per
cycle: ``macs / (total_cycles x rows x cols)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

from accel_sim.hardware import HardwareConfig
from accel_sim.lifetimes import PeakMemory


def flops(macs: int) -> int:
    """FLOPs = 2 x MACs (one multiply and one add)."""
    return 2 * macs


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
    read_bytes: int
    write_bytes: int
    priced: bool


@dataclass(frozen=True)
class Totals:
    """Sums over a set of ops."""

    ops: int
    macs: int
    compute_cycles: int
    stall_cycles: int
    total_cycles: int
    read_bytes: int
    write_bytes: int

    @staticmethod
    def of(costs: Iterable[OpCost]) -> "Totals":
        costs = list(costs)
        return Totals(
            ops=len(costs),
            macs=sum(c.macs for c in costs),
            compute_cycles=sum(c.compute_cycles for c in costs),
            stall_cycles=sum(c.stall_cycles for c in costs),
            total_cycles=sum(c.total_cycles for c in costs),
            read_bytes=sum(c.read_bytes for c in costs),
            write_bytes=sum(c.write_bytes for c in costs),
        )


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
        return Totals.of(self.ops)

    @property
    def total_cycles(self) -> int:
        return sum(c.total_cycles for c in self.ops)

    @property
    def seconds(self) -> float:
        """Latency of the whole trace: total cycles / clock."""
        return self.total_cycles / self.hw.clock_hz

    @property
    def macs(self) -> int:
        return sum(c.macs for c in self.ops)

    @property
    def peak_bytes(self) -> int:
        return self.peak.peak_bytes

    def utilization(self) -> float:
        """Useful MACs / (total cycles x rows x cols)."""
        cycles = self.total_cycles
        return self.macs / (cycles * self.hw.macs_per_cycle) if cycles else 0.0

    # ---- queries ----------------------------------------------------------------------------
    def _group(self, key) -> dict[str, Totals]:
        groups: dict[str, list[OpCost]] = {}
        for cost in self.ops:
            groups.setdefault(key(cost), []).append(cost)
        return {name: Totals.of(costs) for name, costs in groups.items()}

    def by_layer(self) -> dict[str, Totals]:
        """Totals per owning module (in order of first appearance; "" = outside any module)."""
        return self._group(lambda c: c.layer)

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
        """One dict per op, for ``pandas.DataFrame(report.rows())``; adds ``utilization``."""
        per_cell = self.hw.macs_per_cycle
        return [
            {**asdict(c), "utilization": c.macs / (c.total_cycles * per_cell) if c.total_cycles else 0.0}
            for c in self.ops
        ]

    def summary(self) -> dict[str, Any]:
        """Totals, peak memory and the unpriced ops as plain JSON-ready data."""
        t = self.totals
        return {
            "model": self.model,
            "method": self.method,
            "batch_size": self.batch_size,
            "ops": t.ops,
            "macs": t.macs,
            "compute_cycles": t.compute_cycles,
            "stall_cycles": t.stall_cycles,
            "total_cycles": t.total_cycles,
            "seconds": self.seconds,
            "utilization": self.utilization(),
            "dram_read_bytes": t.read_bytes,
            "dram_write_bytes": t.write_bytes,
            "peak_bytes": self.peak.peak_bytes,
            "peak_at_op": self.peak.at_op,
            "peak_by_kind_bytes": dict(self.peak.by_kind_bytes),
            "peak_live_storages": list(self.peak.live_storages),
            "by_phase": {k: asdict(v) for k, v in self.by_phase().items()},
            "unsupported_ops": self.unsupported_ops(),
            "hardware": asdict(self.hw),
        }

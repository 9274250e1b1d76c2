"""What a captured trace holds, counted: multiply-accumulates (by phase, GEMM role or layer), the special
unit's element operations, and a few lines for people (``summary``).
"""

from __future__ import annotations

from accel_sim.lifetimes import peak_memory
from accel_sim.trace_schema import PHASES, GemmWork, LinalgWork, Trace, VectorWork


def macs(trace: Trace, *, phase: str | None = None, role: str | None = None, layer: str | None = None) -> int:
    """Multiply-accumulates of GEMM and linear-algebra work, optionally of one phase, GEMM role
    or layer. (Print FLOPs, if at all, as 2 x this.)"""
    total = 0
    for op in trace.ops:
        if (phase and op.phase != phase) or (layer is not None and op.layer != layer):
            continue
        if isinstance(op.work, GemmWork) and (role is None or op.work.role == role):
            total += op.work.macs
        elif isinstance(op.work, LinalgWork) and role is None:
            total += op.work.macs
    return total


def vector_elements(trace: Trace, *, phase: str | None = None) -> int:
    """Element operations of vector work (special unit), optionally of one phase."""
    return sum(o.work.elements for o in trace.ops if isinstance(o.work, VectorWork) and (phase is None or o.phase == phase))


def summary(trace: Trace) -> str:
    """A few lines for people: op count, MACs per phase, unsupported ops, peak memory (as
    ``accel_sim.lifetimes.peak_memory`` accounts it)."""
    h = trace.header
    lines = [
        f"{h.model or '?'} / {h.method or '?'}, batch {h.batch_size}: {len(trace.ops)} ops, "
        f"{len(h.tensors)} tensors, {len(h.storages)} storages",
        "MACs: " + ", ".join(f"{p} {macs(trace, phase=p):,}" for p in PHASES if any(o.phase == p for o in trace.ops)),
    ]
    lines.append(
        "vector elements: "
        + ", ".join(f"{p} {vector_elements(trace, phase=p):,}" for p in PHASES if any(o.phase == p for o in trace.ops))
    )
    unsupported = trace.unsupported_ops()
    lines.append(
        "unsupported ops: " + (", ".join(f"{k} x{v}" for k, v in sorted(unsupported.items())) if unsupported else "none")
    )
    lines.append(f"peak memory bytes: {peak_memory(h.storages, trace.ops).peak_memory_bytes:,}")
    return "\n".join(lines)

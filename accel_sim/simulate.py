"""``simulate(trace, hw) -> CostReport``: price every op of a trace and account its memory.

Ops run one after another in program order (the accelerator has one array and one special unit
and the trace is one sequential program): the latency of a trace is the sum of its ops' total
cycles. Each op is priced by ``accel_sim.pricing``; vector and linear-algebra ops stream the
bytes of their input and output tensors (each distinct tensor once), or the bytes a vector op
states it touches (``VectorWork.read_bytes`` / ``write_bytes``); peak memory comes from the
storage lifetimes (``accel_sim.lifetimes``); every op's energy from its event counts
(``accel_sim.energy``). GEMM operands are counted in words of ``word_bytes`` (``accel_sim.memory``);
every other byte figure, peak memory and the values a narrow format rounds follow one rule
(``accel_sim.words``: what the emulation keeps in FP32 at 4 bytes, what it stores in the format at
the format's size).
"""

from __future__ import annotations

from typing import Mapping

from accel_sim.hardware import HardwareConfig
from accel_sim.lifetimes import peak_memory
from accel_sim.pricing import GemmTooLargeError, check_gemm_fits, price_work
from accel_sim.report import CostReport, OpCost, op_energy
from accel_sim.trace_schema import OpRecord, TensorInfo, Trace
from accel_sim.words import StoredBytes, Storing, stated_bytes, stored_bytes


def _work_op(op: OpRecord) -> str:
    work = op.work
    if work.kind == "gemm":
        return work.role
    if work.kind in ("vector", "linalg"):
        return work.op
    return ""


def streamed_bytes(op: OpRecord, tensors: Mapping[int, TensorInfo], stored: StoredBytes) -> tuple[int, int]:
    """(read, written) bytes a vector or linear-algebra op streams from and to DRAM on the
    accelerator (``stored``, ``accel_sim.words``): each distinct input / output tensor once, or the
    bytes a vector op states it touches (``VectorWork.read_bytes`` / ``write_bytes``); (0, 0) for
    other work."""
    kind = op.work.kind
    if kind not in ("vector", "linalg"):
        return 0, 0
    read = sum(stored.read[i] for i in dict.fromkeys(op.inputs))
    write = sum(stored.write[i] for i in dict.fromkeys(op.outputs))
    if kind == "vector":  # an op that touches only part of its tensors says so
        if op.work.read_bytes is not None:
            read = stated_bytes(op.work.read_bytes, op.inputs, tensors, stored.read)
        if op.work.write_bytes is not None:
            write = stated_bytes(op.work.write_bytes, op.outputs, tensors, stored.write)
    return read, write


def rounded_values(op: OpRecord, stored: StoredBytes) -> int:
    """Values ``op`` rounds into the format: those of its distinct outputs stored in it, once per
    copy (``accel_sim.words``)."""
    return sum(stored.rounded.get(i, 0) for i in dict.fromkeys(op.outputs))


def check_trace_fits(trace: Trace, hw: HardwareConfig) -> None:
    """Raise ``GemmTooLargeError`` naming the op if any GEMM of ``trace`` is beyond what the fold
    model prices on ``hw`` (``accel_sim.memory.MAX_FOLDS_PER_OP``); checked before any pricing."""
    for op in trace.ops:
        if op.work.kind == "gemm":
            try:
                check_gemm_fits(op.work, hw)
            except GemmTooLargeError as e:
                raise GemmTooLargeError(f"op {op.idx} ({op.aten}, layer {op.layer!r}): {e}") from None


def simulate(trace: Trace, hw: HardwareConfig | None = None) -> CostReport:
    """Price ``trace`` on ``hw`` (default: ``HardwareConfig()``, the paper's array). Raises
    ``GemmTooLargeError`` before pricing anything if a GEMM is too large for the fold model."""
    hw = hw if hw is not None else HardwareConfig()
    check_trace_fits(trace, hw)
    tensors = {t.id: t for t in trace.header.tensors}
    stored = stored_bytes(trace.header, trace.ops, Storing.of(hw))
    costs = []
    for op in trace.ops:
        kind = op.work.kind
        read, write = streamed_bytes(op, tensors, stored)
        rounded = rounded_values(op, stored)
        cost = price_work(op.work, hw, read, write)
        t = cost.timing
        costs.append(
            OpCost(
                idx=op.idx,
                aten=op.aten,
                layer=op.layer,
                phase=op.phase,
                work_kind=kind,
                work_op=_work_op(op),
                dataflow=cost.dataflow,
                macs=cost.macs,
                compute_cycles=t.compute_cycles,
                stall_cycles=t.stall_cycles,
                total_cycles=t.total_cycles,
                dram_read_bytes=t.dram_read_bytes,
                dram_write_bytes=t.dram_write_bytes,
                priced=cost.priced,
                sram_read_bytes=cost.sram_read_bytes,
                sram_write_bytes=cost.sram_write_bytes,
                special_unit_elements=cost.special_unit_elements,
                rounded_values=rounded,
                gemm_groups=op.work.groups if kind == "gemm" else 1,
                energy=op_energy(hw, macs=cost.macs, total_cycles=t.total_cycles,
                                 dram_bytes=t.dram_read_bytes + t.dram_write_bytes,
                                 sram_bytes=cost.sram_read_bytes + cost.sram_write_bytes,
                                 special_unit_elements=cost.special_unit_elements, rounded_values=rounded),
            )
        )
    header = trace.header
    return CostReport(
        hw=hw,
        model=header.model,
        method=header.method,
        batch_size=header.batch_size,
        ops=tuple(costs),
        peak=peak_memory(stored.storages, trace.ops),
    )

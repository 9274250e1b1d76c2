"""What one traced op costs on the accelerator: GEMMs on the array, vector work on the special
unit, linear algebra, and nothing for metadata ops.

* GEMM (``GemmWork``): priced with its role's dataflow (``HardwareConfig.dataflow(role)``), fold
  by fold with ``accel_sim.memory``; under ``memory_model = "scalesim_v3"`` its DRAM bytes, stall and
  total cycles come from ``accel_sim.memory_scalesim`` (each group / packed GEMM on its own, as
  SCALE-Sim runs one layer per GEMM), its on-chip buffer bytes from the same fold schedule (the
  array's SRAM requests agree with SCALE-Sim's under both models, ``docs/scalesim.md``). ``groups > 1`` (grouped / depthwise convolution) follows
  ``HardwareConfig.grouped_mapping`` (``per_group`` or ``block_diagonal``, see
  ``accel_sim.hardware.GROUPED_MAPPINGS``); the groups run back to back in one pipeline. Packed
  groups' block-diagonal B moves only its non-zero blocks (``packed_groups`` in ``accel_sim.memory``).
* Vector (``VectorWork``): ``ceil(elements / special-unit throughput of its kind)`` cycles,
  streaming every input tensor from DRAM and every output tensor back (no fusion with the
  neighbouring op: each traced op is one pass over memory, as the trace lists it). The optimizer
  update, FeatureNorm and the losses arrive as vector work of kinds ``update``, ``norm``, ``loss``.
* Linear algebra (``LinalgWork``: the FFC solve, CCVR's Cholesky for sampling):
  ``ceil(macs / (rows x cols x linalg_efficiency))`` cycles, operands streamed like vector work.
* ``none``: free. ``unsupported``: not priced (0 cycles, ``priced=False``), listed by the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_sim.dataflows import dataflow_named
from accel_sim.effects import linalg_cycles, packed_groups, special_unit_cycles
from accel_sim.hardware import HardwareConfig
from accel_sim.memory import (MAX_FOLDS_PER_OP, FoldSchedule, Timing, gemm_fold_schedule, pipelined_cycles,
                             streaming_cycles)
from accel_sim.memory_scalesim import gemm_memory_scalesim
from accel_sim.systolic import fold_counts, map_gemm
from accel_sim.trace_schema import MAX_DIM, MAX_GROUPS, GemmWork, LinalgWork, VectorWork, Work


@dataclass(frozen=True)
class WorkCost:
    """The price of one op's work: cycles, DRAM bytes, useful MACs, and the other events the energy
    model counts (``accel_sim.energy``): on-chip buffer bytes read / written, special-unit elements."""

    timing: Timing
    macs: int
    dataflow: str = ""  # GEMMs only
    priced: bool = True
    sram_read_bytes: int = 0
    sram_write_bytes: int = 0
    special_unit_elements: int = 0


_FREE = Timing(0, 0, 0, 0, 0)


def packing_factor(n: int, k: int, groups: int, *, rows: int, cols: int, dataflow: str) -> int:
    """Groups per packed GEMM under the ``block_diagonal`` mapping: the most groups whose packed
    spatial dimensions fit one fold (WS: ``pk <= rows`` and ``pn <= cols``; IS: ``pk <= rows``;
    OS: ``pn <= cols``), at least 1 and at most ``groups`` (``Dataflow.packing_factor``)."""
    return dataflow_named(dataflow).packing_factor(n, k, groups, rows=rows, cols=cols)


def gemm_parts(work: GemmWork, hw: HardwareConfig, dataflow: str) -> list[tuple[int, int, int, int, int]]:
    """The GEMMs the array runs for a (possibly grouped) GEMM, as ``(m, n, k, packed_groups,
    times)``: ``times`` back-to-back runs of ``m x n x k`` with ``packed_groups`` groups packed
    block-diagonally (1: not packed; ``accel_sim.effects.packed_groups``)."""
    m, n, k, groups = work.m, work.n, work.k, work.groups
    if groups == 1 or min(m, n, k) == 0:  # nothing to pack
        return [(m, n, k, 1, groups)]
    p = packed_groups(dataflow_named(dataflow), n, k, groups, hw)
    full, rest = divmod(groups, p)
    parts = [(m, p * n, p * k, p, full)]
    if rest:
        parts.append((m, rest * n, rest * k, rest, 1))
    return parts


class GemmTooLargeError(ValueError):
    """A GEMM whose fold count on this hardware exceeds ``MAX_FOLDS_PER_OP``."""


def gemm_folds(work: GemmWork, hw: HardwareConfig) -> int:
    """Folds the array runs for ``work`` (every part of ``gemm_parts`` times its repeats)."""
    dataflow = hw.dataflow(work.role)
    total = 0
    for m, n, k, _, times in gemm_parts(work, hw, dataflow):
        if min(m, n, k) > 0:
            s_r, s_c, _t = map_gemm(m, n, k, dataflow)
            row_folds, col_folds = fold_counts(s_r, s_c, rows=hw.rows, cols=hw.cols)
            total += times * row_folds * col_folds
    return total


def check_gemm_fits(work: GemmWork, hw: HardwareConfig) -> None:
    """Raise ``GemmTooLargeError`` (one line: the GEMM, its folds, the bound) if the fold model
    cannot price ``work`` on ``hw``."""
    if max(work.m, work.n, work.k) > MAX_DIM or work.groups > MAX_GROUPS:
        raise GemmTooLargeError(f"GEMM m={work.m} n={work.n} k={work.k} groups={work.groups}: dimensions must be "
                                f"at most 2^40 and groups at most 2^24 (accel_sim.trace_schema)")
    folds = gemm_folds(work, hw)
    if folds > MAX_FOLDS_PER_OP:
        raise GemmTooLargeError(
            f"GEMM m={work.m} n={work.n} k={work.k} groups={work.groups} takes {folds:,} folds on a "
            f"{hw.rows} x {hw.cols} array ({hw.dataflow(work.role)}); the fold model prices at most "
            f"{MAX_FOLDS_PER_OP:,} (2^22) per op"
        )


def gemm_schedule(work: GemmWork, hw: HardwareConfig, dataflow: str) -> FoldSchedule:
    """The fold sequence the array runs for a (possibly grouped) GEMM."""

    def one(m: int, n: int, k: int, packed_groups: int = 1) -> FoldSchedule:
        return gemm_fold_schedule(m, n, k, hw=hw, dataflow=dataflow, packed_groups=packed_groups)

    parts = [one(m, n, k, p).repeat(times) for m, n, k, p, times in gemm_parts(work, hw, dataflow)]
    return parts[0] if len(parts) == 1 else FoldSchedule.concat(parts)


def scalesim_timing(work: GemmWork, hw: HardwareConfig, dataflow: str) -> Timing:
    """A GEMM's cycles and DRAM bytes under SCALE-Sim's memory model (``accel_sim.memory_scalesim``):
    the sum over its parts (``gemm_parts``), each priced as one SCALE-Sim layer. A packed GEMM's
    zero blocks are fetched like any word (SCALE-Sim has no notion of them)."""
    compute = stall = read = write = 0
    for m, n, k, _, times in gemm_parts(work, hw, dataflow):
        g = gemm_memory_scalesim(
            m, n, k, rows=hw.rows, cols=hw.cols, dataflow=dataflow,
            ifmap_buffer_words=max(1, hw.a_buffer_bytes // hw.word_bytes),
            filter_buffer_words=max(1, hw.b_buffer_bytes // hw.word_bytes),
            ofmap_buffer_words=max(1, hw.out_buffer_bytes // hw.word_bytes),
            bandwidth_words_per_cycle=hw.scalesim_bandwidth_words_per_cycle,
        )
        compute += times * g.compute_cycles
        stall += times * g.stall_cycles
        read += times * (g.ifmap_read_words + g.filter_read_words) * hw.word_bytes
        write += times * g.ofmap_write_words * hw.word_bytes
    return Timing(compute, stall, compute + stall, read, write)


def price_gemm(work: GemmWork, hw: HardwareConfig) -> WorkCost:
    check_gemm_fits(work, hw)
    dataflow = hw.dataflow(work.role)
    schedule = gemm_schedule(work, hw, dataflow)
    if hw.memory_model == "scalesim_v3":
        timing = scalesim_timing(work, hw, dataflow)
    else:
        timing = pipelined_cycles(schedule, bytes_per_cycle=hw.dram_bytes_per_cycle,
                                  latency_cycles=hw.dram_latency_cycles)
    sram_read, sram_write = schedule.sram_bytes
    return WorkCost(timing, work.macs, dataflow, sram_read_bytes=sram_read, sram_write_bytes=sram_write)


def price_vector(work: VectorWork, hw: HardwareConfig, dram_read_bytes: int, dram_write_bytes: int) -> WorkCost:
    compute = special_unit_cycles(work.elements, hw.special_unit.elements_per_cycle(work.op))
    timing = streaming_cycles(
        compute, dram_read_bytes, dram_write_bytes, bytes_per_cycle=hw.dram_bytes_per_cycle, latency_cycles=hw.dram_latency_cycles
    )
    # the unit reads its inputs from the on-chip buffer and writes its outputs there once
    return WorkCost(timing, 0, sram_read_bytes=dram_read_bytes, sram_write_bytes=dram_write_bytes,
                    special_unit_elements=work.elements)


def price_linalg(work: LinalgWork, hw: HardwareConfig, dram_read_bytes: int, dram_write_bytes: int) -> WorkCost:
    compute = linalg_cycles(work.macs, hw.rows, hw.cols, hw.linalg_efficiency)
    timing = streaming_cycles(
        compute, dram_read_bytes, dram_write_bytes, bytes_per_cycle=hw.dram_bytes_per_cycle, latency_cycles=hw.dram_latency_cycles
    )
    return WorkCost(timing, work.macs, sram_read_bytes=dram_read_bytes, sram_write_bytes=dram_write_bytes)


def price_work(work: Work, hw: HardwareConfig, dram_read_bytes: int = 0, dram_write_bytes: int = 0) -> WorkCost:
    """The cost of one op's work. ``dram_read_bytes`` / ``dram_write_bytes`` are the op's input /
    output tensor bytes, which vector and linear-algebra work stream from and to DRAM (GEMM
    traffic comes from the fold model)."""
    if work.kind == "gemm":
        return price_gemm(work, hw)
    if work.kind == "vector":
        return price_vector(work, hw, dram_read_bytes, dram_write_bytes)
    if work.kind == "linalg":
        return price_linalg(work, hw, dram_read_bytes, dram_write_bytes)
    if work.kind == "none":
        return WorkCost(_FREE, 0)
    return WorkCost(_FREE, 0, priced=False)

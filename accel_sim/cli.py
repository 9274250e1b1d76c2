"""Command line: ``python -m accel_sim gemm ...`` and ``python -m accel_sim simulate ...``.

``gemm M N K [--dataflow os|ws|is] [--rows R] [--cols C] [--hw hw.toml]`` prints the GEMM's
mapping, folds and compute cycles as JSON, and its DRAM traffic and time under the hardware's
buffers, DRAM bandwidth and ``memory_model`` (``memory_model``, ``dram_read_bytes``,
``dram_write_bytes``, ``stall_cycles``, ``total_cycles``; the default hardware without ``--hw``;
``--rows`` / ``--cols`` override the hardware's array and ``--dataflow`` its dataflow). ``simulate trace.jsonl [--hw hw.toml] [--json]`` prices a trace and prints
a per-layer table and the totals (latency in cycles and ms, energy in mJ, peak memory in MB = 10^6
bytes), or JSON with ``--json`` (``energy_j`` and ``energy_by_component_j`` at the top level, per
phase and per layer). A malformed trace or hardware config (binary, truncated, a field of the
wrong type or out of its range: ``accel_sim.trace_schema``, ``accel_sim.hardware.FIELD_BOUNDS``),
an empty ``--hw ""``, or a GEMM beyond the fold model (``accel_sim.memory.MAX_FOLDS_PER_OP``)
prints one line naming the file and what is wrong, and exits with status 2; nothing is written.
"""

from __future__ import annotations

import json
import sys
from typing import Sequence

from accel_sim.hardware import HardwareConfig, HardwareConfigError, load_hardware_config
from accel_sim.hardware_fields import FIELD_BOUNDS
from accel_sim.pricing import GemmTooLargeError, price_gemm
from accel_sim.report import CostReport
from accel_sim.simulate import check_trace_fits, simulate
from accel_sim.dataflows import DATAFLOWS
from accel_sim.systolic import gemm_summary
from accel_sim.trace_schema import MAX_DIM, GemmWork, TraceFormatError
from accel_sim.trace_io import load_trace
from iokit.cli import EXIT_USAGE, Parser, UsageError, int_in

EXIT_BAD_INPUT = EXIT_USAGE


def build_parser() -> Parser:
    parser = Parser(prog="python -m accel_sim", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gemm = sub.add_parser("gemm", help="compute cycles of one GEMM out[M x N] = A[M x K] . B[K x N]")
    for dim in ("M", "N", "K"):
        gemm.add_argument(dim.lower(), type=int_in(0, MAX_DIM), metavar=dim)
    gemm.add_argument("--dataflow", choices=DATAFLOWS, default="ws")
    gemm.add_argument("--rows", type=int_in(*FIELD_BOUNDS["rows"]), help="array rows (default: the hardware's)")
    gemm.add_argument("--cols", type=int_in(*FIELD_BOUNDS["cols"]), help="array columns (default: the hardware's)")
    gemm.add_argument("--hw", help="hardware config TOML for the memory figures (default: the paper's array)")
    sim = sub.add_parser("simulate", help="price a trace file on the modeled accelerator")
    sim.add_argument("trace", help="trace file (JSON Lines, accel_sim/trace_schema.py)")
    sim.add_argument("--hw", help="hardware config TOML (default: the paper's array, configs/hw/paper_default.toml)")
    sim.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def layer_table(report: CostReport) -> str:
    """The per-layer table and the totals, as text."""
    clock = report.hw.clock_hz
    header = f"{'layer':<40} {'ops':>5} {'MACs':>14} {'compute cyc':>12} {'stall cyc':>12} {'total cyc':>12} {'ms':>9} {'mJ':>9} {'util':>6}"
    lines = [header, "-" * len(header)]
    per_cell = report.hw.macs_per_cycle
    for layer, t in report.by_layer().items():
        util = t.macs / (t.total_cycles * per_cell) if t.total_cycles else 0.0
        lines.append(
            f"{(layer or '(no module)')[:40]:<40} {t.ops:>5} {t.macs:>14,} {t.compute_cycles:>12,} "
            f"{t.stall_cycles:>12,} {t.total_cycles:>12,} {t.total_cycles / clock * 1e3:>9.3f} {t.energy_j * 1e3:>9.3f} {util:>6.1%}"
        )
    s = report.summary()
    lines += [
        "-" * len(header),
        f"trace: model={report.model or '?'} method={report.method or '?'} batch={report.batch_size} ops={s['ops']}",
        f"latency: {s['total_cycles']:,} cycles = {s['latency_s'] * 1e3:.3f} ms at {clock / 1e6:g} MHz "
        f"(compute {s['compute_cycles']:,}, memory stall {s['stall_cycles']:,}, memory model {s['memory_model']}); "
        f"utilization {s['utilization']:.1%}",
        f"energy: {s['energy_j'] * 1e3:.3f} mJ ("
        + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in s["energy_by_component_j"].items()) + ")",
        "by phase: " + ", ".join(f"{k} {v['total_cycles']:,} cycles {v['energy_j'] * 1e3:.3f} mJ"
                                 for k, v in s["by_phase"].items()),
        f"DRAM traffic: read {s['dram_read_bytes'] / 1e6:.1f} MB, write {s['dram_write_bytes'] / 1e6:.1f} MB",
        f"peak memory: {s['peak_memory_bytes'] / 1e6:.3f} MB (op {s['peak_memory_at_op']}): "
        + ", ".join(f"{k} {v / 1e6:.3f}" for k, v in s["peak_memory_by_kind_bytes"].items() if v),
    ]
    unsupported = report.unsupported_ops()
    if unsupported:
        lines.append("NOT PRICED (unsupported ops, 0 cycles): " + ", ".join(f"{k} x{v}" for k, v in sorted(unsupported.items())))
    return "\n".join(lines)


def gemm_report(m: int, n: int, k: int, *, dataflow: str, hw: HardwareConfig) -> dict:
    """The ``gemm`` command's JSON: ``gemm_summary``'s compute figures, then the GEMM priced on
    ``hw`` (as a forward GEMM with ``dataflow``) under its memory model."""
    timing = price_gemm(GemmWork(m, n, k), hw.with_(dataflow_fwd=dataflow)).timing
    return {
        **gemm_summary(m, n, k, rows=hw.rows, cols=hw.cols, dataflow=dataflow),
        "memory_model": hw.memory_model,
        "dram_read_bytes": timing.dram_read_bytes,
        "dram_write_bytes": timing.dram_write_bytes,
        "stall_cycles": timing.stall_cycles,
        "total_cycles": timing.total_cycles,
    }


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # an empty name is an error, not the defaults: only a left-out --hw means the paper's array
    if args.hw is not None and not args.hw.strip():
        print("error: --hw is empty: give a hardware config TOML file, or leave --hw out for the paper's array",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command == "simulate" and not args.trace.strip():
        print("error: the trace file name is empty: give a trace file (JSON Lines, docs/trace.md)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        hw = load_hardware_config(args.hw) if args.hw is not None else HardwareConfig()
        if args.command == "gemm":
            hw = hw.with_(rows=args.rows or hw.rows, cols=args.cols or hw.cols)
            report = gemm_report(args.m, args.n, args.k, dataflow=args.dataflow, hw=hw)
        else:
            trace = load_trace(args.trace)
            try:
                check_trace_fits(trace, hw)
            except GemmTooLargeError as e:
                raise GemmTooLargeError(f"{args.trace}: {e}") from None
    except (TraceFormatError, HardwareConfigError, GemmTooLargeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command == "gemm":
        print(json.dumps(report, indent=2))
        return 0
    report = simulate(trace, hw)
    if args.json:
        print(json.dumps({**report.summary(), "by_layer": {k: v.as_dict() for k, v in report.by_layer().items()}}, indent=2))
    else:
        print(layer_table(report))
    return 0

"""Sensitivity of SphereFed's savings to the accelerator parameters the paper does not publish.

``python -m bench.sweep [--models mobilenetv2 ...] [--hw base.toml] [--out results/sweep]``
captures one local training step of FedAvg and of SphereFed per model and batch size, prices
them while one parameter at a time moves away from the base config, and writes
``sweep.csv`` (one row per model x parameter x value), ``sweep.json`` (command, git commit, base
hardware) and ``sweep.png`` (latency, memory and energy saving per parameter, the paper's "up to"
figures as reference lines). Saving = 1 - SphereFed / FedAvg, in percent.

Parameters (SphereFed appendix 0.E publishes only the 32x64 array and 100 MHz):

* ``dram_gbps``: peak DRAM bandwidth (VC707 DDR3-1600 SODIMM: 12.8 GB/s);
* ``special_unit_scale``: every special-unit throughput times this factor;
* ``dataflow``: fwd/dx/dw dataflows (default ws/ws/os; all-os, all-ws, all-is);
* ``grouped_mapping``: how grouped (depthwise) GEMMs are mapped (``HardwareConfig.grouped_mapping``);
* ``memory_model``: how GEMM DRAM traffic and stalls are priced (``ours`` or SCALE-Sim's,
  ``accel_sim.hardware.MEMORY_MODELS``, docs/scalesim.md);
* ``batch_size``: the local batch (recaptured: the trace changes);
* ``word_bytes``: bytes per float32 value on the accelerator: every byte figure of the trace, DRAM
  and on-chip traffic of every kind of work and peak memory, scales with it (``accel_sim.words``);
* ``energy``: each ``[energy]`` figure (``accel_sim.hardware.EnergyCosts``) halved and doubled,
  one at a time (``mac_pj x0.5``, ...): moves only the energy saving (the paper reports no energy).

Nothing is fitted: the values are a fixed grid around the documented defaults.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from accel_sim.hardware import (MEMORY_MODELS, EnergyCosts, HardwareConfig, HardwareConfigError,  # noqa: E402
                                SpecialUnit, load_hardware_config)
from bench.paper import LATENCY_SAVING, MEMORY_SAVING, saving_pct  # noqa: E402
from bench.results import FORMAT_VERSION, ResultsError, check_out_dir, write_json, write_run_dir  # noqa: E402
from workloads import cli  # noqa: E402
from workloads.provenance import git_commit  # noqa: E402
from bench.traces import local_training_trace  # noqa: E402
from workloads.fl.step_cost import simulate_complete  # noqa: E402

SWEEP_CSV = "sweep.csv"
SWEEP_COLUMNS = ("model", "parameter", "value", "is_base", "fedavg_cycles", "spherefed_cycles",
                 "latency_saving_pct", "fedavg_peak_memory_bytes", "spherefed_peak_memory_bytes", "memory_saving_pct",
                 "fedavg_energy_j", "spherefed_energy_j", "energy_saving_pct")
ENERGY_FACTORS = (0.5, 2.0)


def _scaled_special_unit(unit: SpecialUnit, factor: float) -> SpecialUnit:
    return SpecialUnit(**{f.name: getattr(unit, f.name) * factor for f in fields(SpecialUnit)})


def _energy_values() -> tuple[str, ...]:
    """``default`` and each ``[energy]`` figure times each of ``ENERGY_FACTORS``: ``"mac_pj x0.5"``, ..."""
    return ("default", *(f"{f.name} x{factor:g}" for f in fields(EnergyCosts) for factor in ENERGY_FACTORS))


def _scaled_energy(hw: HardwareConfig, value: str) -> HardwareConfig:
    """``hw`` with one energy figure scaled as ``value`` says (``"dram_pj_per_byte x2"``)."""
    if value == "default":
        return hw
    name, factor = value.split(" x")
    return hw.with_(energy=replace(hw.energy, **{name: getattr(hw.energy, name) * float(factor)}))


def _dataflows(hw: HardwareConfig, text: str) -> HardwareConfig:
    fwd, dx, dw = text.split("/")
    return hw.with_(dataflow_fwd=fwd, dataflow_dx=dx, dataflow_dw=dw)


@dataclass(frozen=True)
class HwParameter:
    """A hardware parameter of the sweep: its values and how each changes the base config."""

    name: str
    values: tuple
    apply: Callable[[HardwareConfig, object], HardwareConfig]
    base_value: Callable[[HardwareConfig], object]


HW_PARAMETERS = {
    p.name: p
    for p in (
        HwParameter("dram_gbps", (3.2, 6.4, 12.8, 25.6, 51.2),
                    lambda hw, v: hw.with_(dram_peak_bytes_per_s=v * 1e9),
                    lambda hw: hw.dram_peak_bytes_per_s / 1e9),
        HwParameter("special_unit_scale", (0.25, 0.5, 1.0, 2.0, 4.0),
                    lambda hw, v: hw.with_(special_unit=_scaled_special_unit(hw.special_unit, v)),
                    lambda hw: 1.0),
        HwParameter("dataflow", ("ws/ws/os", "os/os/os", "ws/ws/ws", "is/is/is"), _dataflows,
                    lambda hw: f"{hw.dataflow_fwd}/{hw.dataflow_dx}/{hw.dataflow_dw}"),
        HwParameter("grouped_mapping", ("per_group", "block_diagonal"),
                    lambda hw, v: hw.with_(grouped_mapping=v), lambda hw: hw.grouped_mapping),
        HwParameter("memory_model", MEMORY_MODELS,
                    lambda hw, v: hw.with_(memory_model=v), lambda hw: hw.memory_model),
        HwParameter("word_bytes", (2, 4), lambda hw, v: hw.with_(word_bytes=v), lambda hw: hw.word_bytes),
        HwParameter("energy", _energy_values(), _scaled_energy, lambda hw: "default"),
    )
}
BATCH_SIZES = (16, 32, 64, 128)


def _row(model, parameter, value, is_base, traces, hw) -> dict:
    reports = {m: simulate_complete(t, hw, f"{model} {m} training step") for m, t in traces.items()}
    peaks = {m: r.peak_memory_bytes for m, r in reports.items()}  # at hw.word_bytes, as every byte figure
    return {
        "model": model, "parameter": parameter, "value": str(value), "is_base": is_base,
        "fedavg_cycles": reports["fedavg"].total_cycles, "spherefed_cycles": reports["spherefed"].total_cycles,
        "latency_saving_pct": saving_pct(reports["fedavg"].total_cycles, reports["spherefed"].total_cycles),
        "fedavg_peak_memory_bytes": peaks["fedavg"], "spherefed_peak_memory_bytes": peaks["spherefed"],
        "memory_saving_pct": saving_pct(peaks["fedavg"], peaks["spherefed"]),
        "fedavg_energy_j": reports["fedavg"].energy_j, "spherefed_energy_j": reports["spherefed"].energy_j,
        "energy_saving_pct": saving_pct(reports["fedavg"].energy_j, reports["spherefed"].energy_j),
    }


def sweep(models, base: HardwareConfig, *, batch_size: int = 64, batch_sizes=BATCH_SIZES,
          progress: Callable[[str], None] = lambda _: None) -> pd.DataFrame:
    """One row per model x parameter x value; the other parameters stay at ``base``."""
    rows = []
    for model in models:
        cache = {}

        def traces(batch):
            if batch not in cache:
                progress(f"{model}: capturing FedAvg and SphereFed steps at batch {batch}")
                cache[batch] = {m: local_training_trace(model, m, batch_size=batch) for m in ("fedavg", "spherefed")}
            return cache[batch]

        for p in HW_PARAMETERS.values():
            progress(f"{model}: sweeping {p.name}")
            base_value = p.base_value(base)
            for value in p.values:
                rows.append(_row(model, p.name, value, value == base_value, traces(batch_size), p.apply(base, value)))
        for batch in batch_sizes:
            rows.append(_row(model, "batch_size", batch, batch == batch_size, traces(batch), base))
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


def plot_sweep(frame: pd.DataFrame):
    """One panel per parameter: latency, memory and energy saving (%) per value, per model."""
    parameters = list(dict.fromkeys(frame["parameter"]))
    widths = [3 if p == "energy" else 1 for p in parameters]  # the energy panel has 11 values
    fig, axes = plt.subplots(3, len(parameters), figsize=(3.2 * sum(widths), 9), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for col, parameter in enumerate(parameters):
        part = frame[frame["parameter"] == parameter]
        for row, (metric, paper, label) in enumerate((
            ("latency_saving_pct", LATENCY_SAVING.up_to_pct, "latency saving (%)"),
            ("memory_saving_pct", MEMORY_SAVING.up_to_pct, "peak-memory saving (%)"),
            ("energy_saving_pct", None, "energy saving (%)"),
        )):
            ax = axes[row][col]
            table = part.pivot(index="value", columns="model", values=metric).reindex(list(dict.fromkeys(part["value"])))
            table.plot.bar(ax=ax, rot=30, fontsize=7, legend=(col == 0))
            if paper is not None:  # the paper reports no energy
                ax.axhline(paper, color="red", linestyle="--", linewidth=1, label=f"paper, up to {paper}%")
            ax.axhline(0, color="black", linewidth=0.5)
            ax.set_title(parameter if row == 0 else "", fontsize=9)
            ax.set_xlabel("")
            ax.set_ylabel(label if col == 0 else "", fontsize=8)
            if col == 0:
                ax.legend(fontsize=7)
    fig.suptitle("SphereFed vs FedAvg, one local training step: saving as each unpublished parameter varies",
                 fontsize=10)
    fig.tight_layout()
    return fig


@cli.command("interrupted; nothing written (--out appears only when complete)")
def main(argv: list[str] | None = None) -> int:
    from workloads import model_spec
    from workloads.models import MODELS

    parser = cli.Parser(prog="python -m bench.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mobilenetv2"], metavar="MODEL",
                        help=f"models to sweep (default mobilenetv2; known: {', '.join(sorted(MODELS))}; "
                             "or package.module:factory, docs/byom.md)")
    parser.add_argument("--hw", type=Path, help="base hardware config (TOML); default: accel_sim defaults")
    batch = cli.int_in(1, cli.BATCH_SIZE_MAX)
    parser.add_argument("--batch-size", type=batch, default=64,
                        help=f"batch of the hardware sweeps (default 64, at most {cli.BATCH_SIZE_MAX:,})")
    parser.add_argument("--batch-sizes", type=batch, nargs="+", default=list(BATCH_SIZES), metavar="B",
                        help=f"batch sizes of the batch sweep (default {' '.join(map(str, BATCH_SIZES))})")
    parser.add_argument("--out", type=Path, default=Path("results/sweep"), help="output folder")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    args = parser.parse_args(argv)
    try:
        check_out_dir(args.out, overwrite=args.overwrite)
        for model in args.models:  # a paper model or package.module:factory (docs/byom.md), checked before work
            model_spec.build(model_spec.ModelSpec(model), num_classes=100, spherefed=True)
        if min(args.batch_size, *args.batch_sizes) < 1:
            raise ValueError("--batch-size and --batch-sizes must be at least 1")
        base = load_hardware_config(args.hw) if args.hw else HardwareConfig()
    except (ValueError, HardwareConfigError, ResultsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    frame = sweep(args.models, base, batch_size=args.batch_size, batch_sizes=tuple(args.batch_sizes),
                  progress=lambda msg: print(msg, file=sys.stderr))

    def build(tmp: Path) -> None:
        frame.to_csv(tmp / SWEEP_CSV, index=False)
        write_json(tmp / "sweep.json", {
            "version": FORMAT_VERSION, "command": shlex.join(["python", "-m", "bench.sweep", *(argv if argv is not None else sys.argv[1:])]),
            "git_commit": git_commit(), "models": args.models, "batch_size": args.batch_size,
            "batch_sizes": args.batch_sizes,
            "hardware": asdict(base),
        })
        fig = plot_sweep(frame)
        fig.savefig(tmp / "sweep.png", dpi=120)
        plt.close(fig)

    try:  # checked before the work; only another process writing the same --out meanwhile fails here
        write_run_dir(args.out, build, overwrite=args.overwrite)
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(frame[["model", "parameter", "value", "latency_saving_pct", "memory_saving_pct", "energy_saving_pct"]].to_string(
            index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

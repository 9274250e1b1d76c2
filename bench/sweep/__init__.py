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
* ``memory_model``: how GEMM DRAM traffic and stalls are priced (``on_chip_accumulation`` or SCALE-Sim's ``scalesim_v3``,
  ``accel_sim.hardware.MEMORY_MODELS``, docs/scalesim.md);
* ``batch_size``: the local batch (recaptured: the trace changes);
* ``word_bytes``: bytes per float32 value that the array's GEMMs read: their traffic, and what the
  trace stores for them, scale with it; below 4 bytes the rest stays FP32 (``accel_sim.words``);
* ``energy``: each ``[energy]`` figure (``accel_sim.hardware.EnergyCosts``) halved and doubled,
  one at a time (``mac_pj x0.5``, ...): moves only the energy saving (the paper reports no energy).

Nothing is fitted: the values are a fixed grid around the documented defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Callable

import pandas as pd

from accel_sim.hardware import EnergyCosts, HardwareConfig, SpecialUnit
from accel_sim.hardware_fields import MEMORY_MODELS
from bench.lib.paper import saving_pct
from workloads.cost.step import method_step_trace, simulate_complete

SWEEP_CSV = "sweep.csv"
SWEEP_COLUMNS = ("model", "parameter", "value", "is_base", "fedavg_cycles", "spherefed_cycles",
                 "latency_saving_pct", "fedavg_peak_memory_bytes", "spherefed_peak_memory_bytes", "memory_saving_pct",
                 "fedavg_energy_j", "spherefed_energy_j", "energy_saving_pct")
ENERGY_FACTORS = (0.5, 2.0)


def _scaled_special_unit(unit: SpecialUnit, factor: float) -> SpecialUnit:
    return SpecialUnit(**{f.name: getattr(unit, f.name) * factor for f in fields(SpecialUnit)})


SWEPT_ENERGY = tuple(f.name for f in fields(EnergyCosts) if f.name != "rounding_pj_per_value")
"""The ``[energy]`` figures the sweep scales: all but the random bits of stochastic rounding, which a
number format sets (0 in the FP32 hardware the sweep prices, so scaling it would move nothing)."""


def _energy_values() -> tuple[str, ...]:
    """``default`` and each ``[energy]`` figure times each of ``ENERGY_FACTORS``: ``"mac_pj x0.5"``, ..."""
    return ("default", *(f"{name} x{factor:g}" for name in SWEPT_ENERGY for factor in ENERGY_FACTORS))


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
                cache[batch] = {m: method_step_trace(model, m, batch_size=batch) for m in ("fedavg", "spherefed")}
            return cache[batch]

        for p in HW_PARAMETERS.values():
            progress(f"{model}: sweeping {p.name}")
            base_value = p.base_value(base)
            for value in p.values:
                rows.append(_row(model, p.name, value, value == base_value, traces(batch_size), p.apply(base, value)))
        for batch in batch_sizes:
            rows.append(_row(model, "batch_size", batch, batch == batch_size, traces(batch), base))
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)

"""Price every point of a design space for every model and method, chunk by chunk, and keep what
the report needs: the Pareto fronts, the best point per objective, a sample to draw, and the
configs/hw presets priced beside the space (docs/dse.md).

Every point is priced by ``accel_sim.batch.price_points`` (equal, figure for figure, to
``simulate``: tests/test_batch.py, tests/test_dse.py) and sized on the FPGA by
``accel_sim.resources.fpga_resources``. The front of a union is the front of the union of the
parts' fronts, so the fronts are kept chunk by chunk and a space never has to fit in memory.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np
import pandas as pd

from accel_sim.batch import PointCosts, TraceWork, price_points, within_fold_bound
from accel_sim.hardware import HardwareConfig, load_hardware_config
from accel_sim.mac_energy import hardware_in_format
from accel_sim.pareto import pareto_front
from accel_sim.points import HardwarePoints
from accel_sim.resources import Resources, fpga_resources
from accel_sim.space import CHUNK_POINTS, FORMAT_OF_WORD, NUMBER_FORMAT, SpaceChunk
from bench.dse.spec import ROOT, Dse

FIGURES = {  # PointCosts field -> column (per step of the method)
    "total_cycles": "step_total_cycles", "latency_s": "step_latency_s", "energy_j": "step_energy_j",
    "peak_memory_bytes": "peak_memory_bytes", "dram_read_bytes": "dram_read_bytes",
    "dram_write_bytes": "dram_write_bytes", "utilization": "array_utilization", "macs": "macs",
}
RESOURCE_COLUMNS = ("dsp_slices", "bram36_blocks", "luts", "dsp_utilization", "bram36_utilization",
                    "lut_utilization", "memory_channels", "memory_channel_utilization", "limiting_resource", "fits",
                    "asic_area_mm2")
OBJECTIVE_PAIRS = (("step_latency_s", "step_energy_j"), ("step_latency_s", "asic_area_mm2"))
"""The Pareto fronts kept per model and method, among the points that fit the device (issue 24)."""
OBJECTIVES = ("step_latency_s", "step_energy_j", "asic_area_mm2")
SAMPLE_PER_CHUNK = 2_000  # points per model, method and chunk kept to draw the cloud behind the fronts
HW_PRESETS = ROOT / "configs" / "hw"


@dataclass
class Exploration:
    """What the report needs, for every (model, method)."""

    fronts: dict[tuple[str, str, str], pd.DataFrame] = field(default_factory=dict)  # (model, method, pair) -> rows
    samples: dict[tuple[str, str], list[pd.DataFrame]] = field(default_factory=dict)
    points: int = 0
    fitting: int = 0
    beyond_fold_model: int = 0
    pricing_s: float = 0.0

    def front(self, model: str, method: str, pair: tuple[str, str]) -> pd.DataFrame:
        return self.fronts.get((model, method, "|".join(pair)), pd.DataFrame())

    def best(self, model: str, method: str, objective: str) -> pd.Series | None:
        """The fitting point with the least ``objective`` (ties: the lowest grid index), or None."""
        pair = next(p for p in OBJECTIVE_PAIRS if objective in p)
        front = self.front(model, method, pair)
        if front.empty:
            return None
        return front.sort_values([objective, "point"], kind="stable").iloc[0]


def axis_columns(dse: Dse, chunk: SpaceChunk) -> dict[str, np.ndarray]:
    """Every axis of the space as a column named by its HardwareConfig field path, and the MAC number format."""
    columns = {a.path: chunk.points[a.path] for a in dse.space.axes if a.path != NUMBER_FORMAT}
    return {**columns, NUMBER_FORMAT: chunk.number_formats}


def rows(model: str, method: str, batch_size: int, index: np.ndarray, axes: dict[str, np.ndarray],
         costs: PointCosts, resources: Resources) -> pd.DataFrame:
    """One row per point: the point, its axes, the step's figures and the point's resources."""
    frame = pd.DataFrame({"model": model, "method": method, "batch_size": batch_size, "point": index, **axes})
    for name, column in FIGURES.items():
        frame[column] = getattr(costs, name)
    for name in RESOURCE_COLUMNS:
        frame[name] = getattr(resources, name)
    return frame


def merge_front(old: pd.DataFrame, new: pd.DataFrame, pair: tuple[str, str]) -> pd.DataFrame:
    """The front of ``old`` and ``new`` together (both fronts or any rows)."""
    both = new if old.empty else pd.concat([old, new], ignore_index=True)
    if both.empty:
        return both
    return both[pareto_front(both[list(pair)].to_numpy(dtype=np.float64))].reset_index(drop=True)


@dataclass(frozen=True)
class PricedChunk:
    """One chunk priced, reduced to what the report keeps, per (model, method) in the order of the
    works: its rows as CSV text (no header), the chunk's fronts among the fitting points (the front
    of a union is the front of the parts' fronts) and a sample of the fitting points to draw."""

    points: int
    fitting: int
    beyond_fold_model: int
    seconds: float
    header: str = ""
    csv: tuple[str, ...] = ()
    fronts: tuple[dict[str, pd.DataFrame], ...] = ()
    samples: tuple[pd.DataFrame, ...] = ()


def price_chunk(dse: Dse, works: dict[tuple[str, str], TraceWork], chunk: SpaceChunk, seed: int = 0) -> PricedChunk:
    """Every (model, method) of ``works`` on the points of ``chunk`` within the fold model (a pure
    function of its arguments, so any process may run it; the sample is drawn with ``seed`` and the
    chunk's first grid index)."""
    started = time.perf_counter()
    work_list = list(works.values())
    inside = within_fold_bound(work_list, chunk.points)
    beyond = int((~inside).sum())
    if not inside.all():
        chunk = SpaceChunk(chunk.index[inside], chunk.points.take(inside), chunk.number_formats[inside])
    if not len(chunk):
        return PricedChunk(0, 0, beyond, time.perf_counter() - started)
    costs = price_points(work_list, chunk.points)
    resources = fpga_resources(chunk.points, chunk.number_formats, dse.device)
    fits = np.asarray(resources.fits, dtype=bool)
    axes = axis_columns(dse, chunk)
    rng = np.random.default_rng([seed, int(chunk.index[0])])
    header, csv, fronts, samples = "", [], [], []
    for (model, method), cost in zip(works, costs):
        frame = rows(model, method, dse.batch_size, chunk.index, axes, cost, resources)
        header = ",".join(frame.columns) + "\n"
        csv.append(frame.to_csv(header=False, index=False))
        fitting = frame[fits].reset_index(drop=True)
        fronts.append({"|".join(pair): merge_front(pd.DataFrame(), fitting, pair) for pair in OBJECTIVE_PAIRS})
        samples.append(fitting if len(fitting) <= SAMPLE_PER_CHUNK else fitting.iloc[
            np.sort(rng.choice(len(fitting), SAMPLE_PER_CHUNK, replace=False))])
    return PricedChunk(len(chunk), int(fits.sum()), beyond, time.perf_counter() - started, header, tuple(csv),
                       tuple(fronts), tuple(samples))


_WORKER: tuple = ()  # (dse, works, seed) in a worker process, set once by _start_worker


def _start_worker(dse: Dse, works: dict[tuple[str, str], TraceWork], seed: int) -> None:
    global _WORKER
    _WORKER = (dse, works, seed)


def _price_in_worker(chunk: SpaceChunk) -> PricedChunk:
    dse, works, seed = _WORKER
    return price_chunk(dse, works, chunk, seed)


def priced_chunks(dse: Dse, works: dict[tuple[str, str], TraceWork], workers: int = 1,
                  chunk_points: int = CHUNK_POINTS, seed: int = 0) -> Iterator[PricedChunk]:
    """``price_chunk`` of every chunk of the space, in the space's order: in this process
    (``workers`` 1) or across ``workers`` processes, at most two chunks per worker in flight (so
    memory holds a few chunks, not the space). The order, and so every output, is the same either way."""
    if workers <= 1:
        for chunk in dse.space.chunks(chunk_points):
            yield price_chunk(dse, works, chunk, seed)
        return
    # forkserver: workers start from a clean interpreter (no torch, no inherited thread pools)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("forkserver"),
                             initializer=_start_worker, initargs=(dse, works, seed)) as pool:
        pending: deque = deque()
        for chunk in dse.space.chunks(chunk_points):
            pending.append(pool.submit(_price_in_worker, chunk))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def explore(dse: Dse, works: dict[tuple[str, str], TraceWork], *, points_csv: TextIO | None = None,
            progress: Callable[[str], None] = lambda line: None, seed: int = 0, workers: int = 1,
            chunk_points: int = CHUNK_POINTS) -> Exploration:
    """Price ``dse``'s space for every (model, method) of ``works`` (across ``workers`` processes);
    write every row to ``points_csv`` as it goes. ``pricing_s`` is the wall time of it all."""
    found = Exploration()
    keys = list(works)
    header = True
    chunks_total = -(-dse.space.grid_size // chunk_points)
    started = time.perf_counter()
    for n, priced in enumerate(priced_chunks(dse, works, workers, chunk_points, seed), 1):
        found.beyond_fold_model += priced.beyond_fold_model
        if not priced.points:
            continue
        found.points += priced.points
        found.fitting += priced.fitting
        for (model, method), text, fronts, sample in zip(keys, priced.csv, priced.fronts, priced.samples):
            if points_csv is not None:
                points_csv.write(priced.header if header else "")
                points_csv.write(text)
                header = False
            for pair in OBJECTIVE_PAIRS:
                key = (model, method, "|".join(pair))
                found.fronts[key] = merge_front(found.fronts.get(key, pd.DataFrame()), fronts["|".join(pair)], pair)
            found.samples.setdefault((model, method), []).append(sample)
        progress(f"chunk {n}/{chunks_total}: {priced.points:,} points priced for {len(keys)} model-method pair(s) "
                 f"({found.points:,} so far, {found.fitting:,} fit the device; {priced.seconds:.2f} s)")
    found.pricing_s = time.perf_counter() - started
    return found


def preset_configs(dse: Dse) -> dict[str, HardwareConfig]:
    """The accelerators marked on the plot: the space's base (the paper's by default) and each configs/hw preset."""
    configs = {"base" if dse.hw_path else "paper (32x64, 100 MHz)": dse.base}
    for path in sorted(HW_PRESETS.glob("*.toml")):
        hw = load_hardware_config(path)
        if hw != dse.base:
            configs[path.stem] = hw
    return configs


def price_presets(dse: Dse, works: dict[tuple[str, str], TraceWork]) -> pd.DataFrame:
    """``preset_configs`` priced like the space's points (their number format from their word size,
    and that format's MAC energy: ``hardware_in_format``, which leaves FP32 as given)."""
    presets = preset_configs(dse)
    formats = np.array([FORMAT_OF_WORD.get(hw.word_bytes, "fp32") for hw in presets.values()])
    configs = {name: hardware_in_format(hw, fmt) for (name, hw), fmt in zip(presets.items(), formats)}
    points = HardwarePoints.of(list(configs.values()))
    keep = within_fold_bound(list(works.values()), points) & np.isin(points["word_bytes"], list(FORMAT_OF_WORD))
    names = [name for name, k in zip(configs, keep) if k]
    points, formats = points.take(keep), formats[keep]
    if not len(points):
        return pd.DataFrame()
    resources = fpga_resources(points, formats, dse.device)
    frames = [rows(model, method, dse.batch_size, np.full(len(points), -1), {NUMBER_FORMAT: formats}, cost, resources)
              .assign(preset=names)
              for (model, method), cost in zip(works, price_points(list(works.values()), points))]
    return pd.concat(frames, ignore_index=True)

"""python -m bench.dse (issue 24; docs/dse.md): a row of the exploration is what bench.run's pricing
path gives for that point (the same trace, simulate_complete), the written hardware TOML is the
point, the fronts hold only fitting, non-dominated points, and bad input fails fast and clean."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from accel_sim.batch import TraceWork
from accel_sim.hardware import load_hardware_config
from accel_sim.pareto import pareto_front
from bench.dse.__main__ import main
from bench.dse.explore import OBJECTIVE_PAIRS, explore
from bench.dse.spec import load_dse
from bench.dse.traces import method_trace
from tests.failfast import assert_fails_clean, workspace
from workloads.cost.step import method_step_trace, simulate_complete

ROOT = Path(__file__).resolve().parents[1]

EXACT_SPACE = """
[dse]
models = ["convnet"]
methods = ["fedavg", "spherefed"]
batch_size = 8
classes = 10
image_size = 16

[space.axes]
rows = [4, 16, 32]
cols = [8, 64]
dataflow_fwd = ["os", "ws", "is"]
dataflow_dx = ["os", "ws", "is"]
dataflow_dw = ["os", "ws", "is"]
memory_model = ["on_chip_accumulation", "scalesim_v3"]
a_buffer_bytes = [16384, 1572864]
"""


@pytest.mark.slow  # two captures of ConvNet and 48 simulate calls: ~5 s
def test_a_row_equals_what_bench_run_prices_for_that_point(tmp_path):
    """>= 20 random points of a space over every dataflow of every role and both memory models: each
    row equals simulate_complete on the trace bench.run captures (method_step_trace), exactly."""
    path = tmp_path / "s.toml"
    path.write_text(EXACT_SPACE)
    dse = load_dse(path)
    traces = {m: method_trace("convnet", m, batch_size=8, num_classes=10, image_size=16) for m in dse.methods}
    works = {("convnet", m): TraceWork.of(t) for m, t in traces.items()}
    csv = io.StringIO()
    explore(dse, works, points_csv=csv)
    table = pd.read_csv(io.StringIO(csv.getvalue()))
    assert len(table) == dse.space.size * 2
    picks = np.random.default_rng(24).choice(dse.space.size, 24, replace=False)
    seen = set()
    for method in dse.methods:
        reference = method_step_trace("convnet", method, batch_size=8, num_classes=10, image_size=16)
        assert reference.ops == traces[method].ops  # the same capture as bench.run's
        mine = table[table["method"] == method].reset_index(drop=True)
        for i in picks:
            row = mine.iloc[int(i)]
            hw, _ = dse.space.point(int(row["point"]))
            seen |= {(hw.memory_model, hw.dataflow_fwd, hw.dataflow_dx, hw.dataflow_dw)}
            s = simulate_complete(reference, hw, "test").summary()
            assert (row["step_total_cycles"], row["peak_memory_bytes"], row["dram_read_bytes"],
                    row["dram_write_bytes"]) == (s["total_cycles"], s["peak_memory_bytes"], s["dram_read_bytes"],
                                                 s["dram_write_bytes"])
            assert row["step_energy_j"] == pytest.approx(s["energy_j"], rel=1e-9)
            assert row["step_latency_s"] == pytest.approx(s["latency_s"], rel=1e-12)
    assert {m for m, *_ in seen} == {"on_chip_accumulation", "scalesim_v3"}
    assert all({flows[r] for flows in (x[1:] for x in seen)} == {"os", "ws", "is"} for r in range(3))


SMALL_SPACE = """
[dse]
models = ["convnet"]
methods = ["fedavg", "spherefed", "ffc"]
batch_size = 8
classes = 10
image_size = 16

[space]
constraints = ["rows * cols <= 2048"]

[space.axes]
rows = [8, 16, 32, 64]
cols = [16, 32, 64]
number_format = ["fp32", "bfp_m4_g16"]
dram_peak_bytes_per_s = [6.4e9, 12.8e9]
"""


@pytest.mark.slow  # three ConvNet captures and a plot: ~6 s
def test_the_command_writes_points_fronts_and_a_point_bench_run_reads(tmp_path, capsys):
    path = tmp_path / "small.toml"
    path.write_text(SMALL_SPACE)
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "pareto.csv", "pareto.png", "points.csv",
                                                     "summary.json"]
    points = pd.read_csv(out / "points.csv")
    # 4 x 3 x 2 x 2 = 48 grid points; rows * cols <= 2048 drops 64 x 64 (2 formats x 2 bandwidths): 44
    assert len(points) == 44 * 3 and set(points["method"]) == {"fedavg", "spherefed", "ffc"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["points"] == 44 and summary["counts"]["fitting"] == int(points[points.method == "ffc"].fits.sum())
    fronts = pd.read_csv(out / "pareto.csv")
    assert fronts["fits"].all()
    for (method, objectives), front in fronts.groupby(["method", "objectives"]):
        x, y = objectives.split(" vs ")
        fitting = points[(points["method"] == method) & points["fits"]]
        mask = pareto_front(fitting[[x, y]].to_numpy())
        assert sorted(fitting[mask]["point"]) == sorted(front["point"])  # the front of every fitting point
    assert {f"{a} vs {b}" for a, b in OBJECTIVE_PAIRS} == set(fronts["objectives"])
    assert "best step_latency_s for fedavg and spherefed" in printed
    # the best-latency point of FedAvg, written as a TOML: the loader gives back that point
    best = next(b for b in summary["best"] if (b["method"], b["objective"]) == ("fedavg", "step_latency_s"))
    toml = tmp_path / "best.toml"
    assert main([str(path), "--write-hw", str(best["point"]), "--out", str(toml)]) == 0
    dse = load_dse(path)
    assert load_hardware_config(toml) == dse.space.point(best["point"])[0]
    # rerunning onto the results folder needs --overwrite, which replaces it
    assert main([str(path), "--out", str(out)]) == 2
    assert main([str(path), "--out", str(out), "--overwrite"]) == 0


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return workspace(tmp_path)


def space(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return str(path)


HEAD = '[dse]\nmodels = ["convnet"]\nmethods = ["fedavg"]\n'
CASES = [
    ("no [space]", HEAD, [], ("[space]",)),
    ("typo in [dse]", HEAD + "batch_sise = 8\n[space.axes]\nrows = [8]\n", [], ("batch_sise", "batch_size")),
    ("unknown method", '[dse]\nmethods = ["fedavgg"]\n[space.axes]\nrows = [8]\n', [], ("fedavgg",)),
    ("calibration on a method", '[dse]\nmethods = ["fedavg+ccvr"]\n[space.axes]\nrows = [8]\n', [],
     ("fedavg+ccvr", "ccvr")),
    ("unknown model", '[dse]\nmodels = ["convnt"]\n[space.axes]\nrows = [8]\n', [], ("convnt",)),
    ("unknown axis", HEAD + "[space.axes]\nrowz = [8]\n", [], ("rowz", "rows")),
    ("empty axis", HEAD + "[space.axes]\nrows = []\n", [], ("'rows'",)),
    ("out of bounds", HEAD + "[space.axes]\nrows = [0, 8]\n", [], ("rows = 0", "[1, 65,536]")),
    ("constraint keeps nothing", HEAD + '[space]\nconstraints = ["rows > 100"]\n[space.axes]\nrows = [8, 16]\n', [],
     ("rows > 100", "loosen")),
    ("over the size limit", HEAD + "[space.axes]\nrows = [8, 16, 32]\n", ["--max-points", "2"], ("3 points", "--stream")),
    ("bad device file", HEAD + 'device = "binary.toml"\n[space.axes]\nrows = [8]\n', [], ("binary.toml",)),
    ("excluded point to write", HEAD + '[space]\nconstraints = ["rows > 8"]\n[space.axes]\nrows = [8, 16]\n',
     ["--write-hw", "0"], ("point 0", "constraints")),
    ("existing file to write", HEAD + "[space.axes]\nrows = [8, 16]\n", ["--write-hw", "1", "--out", "afile"],
     ("afile", "exists")),
    ("no workers", HEAD + "[space.axes]\nrows = [8]\n", ["--workers", "0"], ("--workers",)),
    ("a --run folder that is missing", HEAD + "[space.axes]\nrows = [8]\n", ["--run", "norun"], ("norun",)),
    ("a --run folder with no rounds.csv", HEAD + "[space.axes]\nrows = [8]\n", ["--run", "."], ("rounds.csv",)),
    ("--target without --run", HEAD + "[space.axes]\nrows = [8]\n", ["--target", "50"], ("--target", "--run")),
    ("an --out that is a file", HEAD + "[space.axes]\nrows = [8]\n", ["--out", "afile"], ("afile",)),
    # issue 33, item 11: --write-hw silently ignored these
    ("--write-hw with pricing flags", HEAD + "[space.axes]\nrows = [8]\n",
     ["--write-hw", "0", "--overwrite", "--workers", "2"], ("--write-hw", "drop --overwrite, --workers")),
]


@pytest.mark.parametrize("case, text, extra, names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_fast_and_clean(ws, capsys, case, text, extra, names):
    assert_fails_clean(main, [space(ws, text), *extra], capsys, ws, names)


def test_the_shipped_spaces_load():
    for path in sorted((ROOT / "configs" / "dse").glob("*.toml")):
        dse = load_dse(path)
        assert dse.space.size > 0 and dse.methods


WORKERS_SPACE = """
[dse]
models = ["convnet"]
methods = ["fedavg", "ffc"]
batch_size = 4
classes = 10
image_size = 16

[space]
constraints = ["rows * cols <= 2048"]
[space.axes]
rows = [4, 8, 16, 32, 64]
cols = [8, 16, 32, 64]
number_format = ["fp32", "bf16", "bfp_m4_g16"]
dataflow_dw = ["os", "ws"]
"""


@pytest.mark.slow  # two ConvNet captures and a two-process pool: ~6 s
def test_workers_give_the_same_rows_fronts_and_counts(tmp_path):
    path = tmp_path / "workers.toml"
    path.write_text(WORKERS_SPACE)
    dse = load_dse(path)
    works = {("convnet", m): TraceWork.of(method_trace("convnet", m, batch_size=4, num_classes=10, image_size=16))
             for m in dse.methods}
    # 5 x 4 x 3 x 2 = 120 grid points in chunks of 16 (8 chunks); rows * cols <= 2048 drops 64 x 64 (6 points)
    runs = {}
    for workers in (1, 2):
        csv = io.StringIO()
        runs[workers] = (explore(dse, works, points_csv=csv, workers=workers, chunk_points=16), csv.getvalue())
    (one, one_csv), (two, two_csv) = runs[1], runs[2]
    assert one.points == two.points == 114 and one.fitting == two.fitting
    assert one_csv == two_csv and len(one_csv.splitlines()) == 1 + 114 * 2
    for key, front in one.fronts.items():
        pd.testing.assert_frame_equal(front, two.fronts[key])
    for key, sample in one.samples.items():
        pd.testing.assert_frame_equal(pd.concat(sample), pd.concat(two.samples[key]))

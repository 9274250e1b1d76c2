"""A run on a fleet, seen from outside (docs/fleets.md): its figure ``fleet_<model>.png`` in the one
list of a run folder's figures (``bench.lib.plots.run.run_figures``), and the round rule overridden
without editing the fleet file (``--deadline-s`` / ``--overcommit``, grid keys ``deadline_s`` /
``overcommit``)."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
from pathlib import Path

import matplotlib.image as mpimg
import pytest

import bench.plots.__main__ as plots_cli
from bench.lib.plots import run as run_plots
from tests.failfast import assert_fails_clean, workspace
from workloads.cost.fleet import FleetError, load_fleet, run_fleet, with_round
from workloads.cost.system import ROUNDS_COLUMNS

FIXTURE = Path(__file__).parent / "data" / "results_small"
FLEET_RECORD = {"name": "t", "deadline_s": 10.0, "overcommit": 1.0, "overridden": ["deadline_s"]}


def fleet_rows(method: str) -> list[dict]:
    """Two training rounds of 3 sampled clients: round 1 aggregated 2 (one past the 10 s deadline:
    the round closed at the deadline), round 2 aggregated 1 (one offline, one over memory)."""
    base = {c: 0 for c in ROUNDS_COLUMNS}
    return [{**base, "method": method, "round": 1, "stage": "train", "clients": 2, "accuracy": 0.5,
             "round_wall_s": 10.5, "server_s": 0.5, "cum_wall_s": 10.5, "sampled": 3, "dropped_deadline": 1,
             "collect_s": 10.0},
            {**base, "method": method, "round": 2, "stage": "train", "clients": 1, "accuracy": 0.7,
             "round_wall_s": 4.5, "server_s": 0.5, "cum_wall_s": 15.0, "sampled": 3, "dropped_unavailable": 1,
             "dropped_memory": 1, "collect_s": 4.0}]


def write_rows(path: Path, rows: list[dict], columns) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows({c: row.get(c, "") for c in columns} for row in rows)


def fl_folder(root: Path, *, fleet: dict | None) -> Path:
    """A bench.fl folder as far as its figures read it: results.json and rounds.csv."""
    root.mkdir()
    doc = {"config": {"model": "convnet"}, **({} if fleet is None else {"fleet": fleet})}
    (root / "results.json").write_text(json.dumps(doc))
    write_rows(root / "rounds.csv", fleet_rows("fedavg") + fleet_rows("fedavg+spherefed"), ROUNDS_COLUMNS)
    return root


# ---- the figure ----------------------------------------------------------------------------------------

def test_a_bench_fl_fleet_folder_gets_its_figure_and_plots_redraws_it(tmp_path, capsys):
    run_dir = fl_folder(tmp_path / "fl", fleet=FLEET_RECORD)
    figures = run_plots.run_figures(run_dir)
    assert [f.path.name for f in figures] == ["fleet_convnet.png"]
    assert figures[0].figure._suptitle.get_text() == \
        "convnet on fleet t: deadline 10.0 s, over-commitment 1 (deadline_s set by the run)"
    # top: accuracy of both methods; bottom: one panel per method, each round a stack of 5 bars
    # (arrived + 4 drop reasons) whose heights sum to the sampled 3: round 1 = 2 + 0 + 0 + 1 + 0
    top, *bottom = figures[0].figure.axes
    assert len(top.lines) == 2 and len(bottom) == 2
    bars = bottom[0].patches
    assert len(bars) == 2 * 5
    assert [b.get_height() for b in bars[0::2]] == [2, 0, 0, 1, 0]  # round 1, bottom up
    assert [(b.get_x(), b.get_width()) for b in bars[1::2]][:1] == [(10.5, 4.5)]  # round 2 spans 10.5 .. 15 s
    for drawn in figures:
        drawn.figure.clf()
    assert plots_cli.main([str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "fleet_convnet.png")
    assert mpimg.imread(run_dir / "fleet_convnet.png").shape[0] > 300


def test_the_fleet_figure_draws_the_runs_targets(tmp_path):
    # bench.fl: the preset's [targets] accuracy_pct as recorded in results.json, one dashed line each;
    # a folder written before targets were recorded draws none
    run_dir = fl_folder(tmp_path / "fl", fleet=FLEET_RECORD)
    doc = json.loads((run_dir / "results.json").read_text())
    (run_dir / "results.json").write_text(json.dumps({**doc, "targets_accuracy_pct": [80.0, 90.0]}))
    (drawn,) = run_plots.run_figures(run_dir)
    top = drawn.figure.axes[0]
    assert [line.get_ydata()[0] for line in top.lines if line.get_linestyle() == "--"] == [80.0, 90.0]
    assert len(top.lines) == 2 + 2  # two methods, two targets
    drawn.figure.clf()
    (drawn,) = run_plots.run_figures(fl_folder(tmp_path / "old", fleet=FLEET_RECORD))
    assert len(drawn.figure.axes[0].lines) == 2
    drawn.figure.clf()


def test_a_run_without_a_fleet_gets_no_fleet_figure(tmp_path):
    assert run_plots.run_figures(fl_folder(tmp_path / "fl", fleet=None)) == []
    run_dir = Path(shutil.copytree(FIXTURE, tmp_path / "run"))
    assert not [f for f in run_plots.run_figures(run_dir) if f.path.name.startswith("fleet_")]


def test_a_bench_run_fleet_folder_gets_one_figure_per_fleet_model(tmp_path):
    run_dir = Path(shutil.copytree(FIXTURE, tmp_path / "run"))
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["models"]["tiny"]["fleet"] = {**FLEET_RECORD, "methods": {}}  # only tiny's runs were on the fleet
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with (run_dir / "rounds.csv").open() as f:
        old = list(csv.DictReader(f))
    rows = [{**row, **{c: 0 for c in ROUNDS_COLUMNS if c not in row}, "sampled": row["clients"],
             "collect_s": row["round_wall_s"]} for row in old]
    write_rows(run_dir / "rounds.csv", rows, ("model", *ROUNDS_COLUMNS))
    for png in run_dir.glob("*.png"):
        png.unlink()
    assert plots_cli.main([str(run_dir)]) == 0
    assert sorted(p.name for p in run_dir.glob("fleet_*.png")) == ["fleet_tiny.png"]
    # a fleet run whose rounds.csv lacks the participation columns: one line, nothing written
    write_rows(run_dir / "rounds.csv", old, list(old[0]))
    (run_dir / "fleet_tiny.png").unlink()
    assert plots_cli.main([str(run_dir)]) == 2
    assert not list(run_dir.glob("fleet_*.png"))


# ---- the round rule, overridden ---------------------------------------------------------------------------

def test_the_override_replaces_the_round_rule_and_is_recorded():
    mixed = load_fleet("mixed")  # deadline_s = 60, overcommit = 1.3 in the file
    assert "overridden" not in mixed.describe()  # a run that overrides nothing keeps its record (and hash)
    tight = with_round(mixed, deadline_s=6.0)
    assert (tight.deadline_s, tight.overcommit, tight.overridden) == (6.0, 1.3, ("deadline_s",))
    assert tight.describe()["deadline_s"] == 6.0 and tight.describe()["overridden"] == ["deadline_s"]
    both = run_fleet("mixed", deadline_s=math.inf, overcommit=2.0)
    assert both.describe()["deadline_s"] == "inf" and both.overcommit == 2.0
    assert both.describe()["overridden"] == ["deadline_s", "overcommit"]
    assert with_round(mixed) is mixed
    for bad, words in (({"deadline_s": 0.0}, "--deadline-s"), ({"deadline_s": math.nan}, "--deadline-s"),
                       ({"overcommit": 0.5}, "--overcommit")):
        with pytest.raises(FleetError, match=words):
            with_round(mixed, **bad)
    with pytest.raises(FleetError, match="--deadline-s 5: .*--fleet"):
        run_fleet(None, deadline_s=5.0)


def test_an_override_without_a_fleet_stops_bench_fl_and_bench_run_in_one_line(tmp_path, monkeypatch, capsys):
    import bench.fl.__main__ as fl_command
    import bench.run.__main__ as run_command

    monkeypatch.chdir(tmp_path)
    ws = workspace(tmp_path, out_with="results.json")
    fl = ["--preset", "smoke", "--model", "convnet", "--out", str(ws / "out")]
    assert_fails_clean(fl_command.main, [*fl, "--deadline-s", "5"], capsys, ws, ("--deadline-s 5", "--fleet"))
    assert_fails_clean(fl_command.main, [*fl, "--fleet", "mixed", "--deadline-s", "0"], capsys, ws,
                       ("--deadline-s", "> 0"))
    run = ["--model", "convnet", "--preset", "smoke", "--out", str(ws / "out")]
    assert_fails_clean(run_command.main, [*run, "--overcommit", "2"], capsys, ws, ("--overcommit 2", "--fleet"))


def test_grid_keys_deadline_s_and_overcommit():
    from bench.lib.run.config import resolved_runs
    from bench.lib.run.study import config_record, point_config

    cfg = point_config({"model": "convnet", "preset": "quick", "fleet": "mixed", "deadline_s": math.inf,
                        "overcommit": 1})
    fleet = resolved_runs(cfg)[0].fleet
    assert (fleet.deadline_s, fleet.overcommit) == (math.inf, 1.0)
    assert config_record(cfg)["deadline_s"] == "inf"  # summary.json holds no infinity
    assert resolved_runs(point_config({"model": "convnet", "fleet": "mixed", "deadline_s": 6}))[0].fleet.deadline_s == 6.0
    with pytest.raises(ValueError, match="deadline_s = 'soon'"):
        point_config({"model": "convnet", "fleet": "mixed", "deadline_s": "soon"})
    with pytest.raises(ValueError, match="--deadline-s 6"):
        resolved_runs(point_config({"model": "convnet", "deadline_s": 6}))
    assert config_record(dataclasses.replace(cfg, deadline_s=None))["deadline_s"] is None


def test_the_shipped_deadline_grid_resolves_every_point():
    from bench.lib.grid.engine import load_grid, validate_points

    spec = load_grid("configs/grids/fleet-deadlines.toml")
    assert spec.fixed["fleet"] == "mixed" and math.inf in spec.axes["deadline_s"]
    validate_points(spec)

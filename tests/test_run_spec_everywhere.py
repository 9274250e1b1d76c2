"""Every command that trains turns its run into the one ``RunSpec`` and resolves it once
(``bench.lib.resolve``): a ``bench.study`` cell is a ``bench.fl`` run on the preset its point carries,
read back into the very point its run id hashes (so shipped studies keep their ids), ``bench.flower``
parses the same flags into the same spec, and the same bad input gets the same words everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench.fl.__main__ as fl_cli
import bench.flower.__main__ as flower_cli
import bench.run.__main__ as run_cli
from bench.lib import spec

from bench.lib.grid.point import run_id
from bench.lib.resolve import resolve
from bench.lib.run.config import resolved_runs as run_resolve
from bench.lib.study.runner import parse_point, prepare
from workloads.fl.execution import Execution

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "results" / "reference").glob("*/grid/runs/*/point.json"))


def kinds(paths):
    """One shipped point of each kind: its keys, its execution table, a fleet, a deadline."""
    seen = {}
    for path in paths:
        point = json.loads(path.read_text())["config"]
        kind = (tuple(sorted(point)), tuple(sorted(point["execution"].items())), point.get("fleet"),
                point.get("deadline_s"))
        seen.setdefault(kind, path)
    return sorted(seen.values())


def round_trip(path: Path) -> None:
    record = json.loads(path.read_text())
    point = record["config"]
    cell = parse_point(point)
    assert cell.point() == point  # the on-disk format, key for key
    assert run_id("bench.study", cell.point()) == record["run_id"] == path.parent.name
    assert cell.execution == Execution(**point["execution"])  # the run trains as before
    assert (cell.model, cell.method.name, cell.spec.seed) == (point["model"], point["method"], point["seed"])


def test_shipped_study_points_are_run_specs_and_back_with_their_ids():
    assert len(SHIPPED) > 900  # the reference studies are there to read
    chosen = kinds(SHIPPED)
    assert any("fleet" in json.loads(p.read_text())["config"] for p in chosen)  # fleets and deadlines covered
    assert any("number_format" in json.loads(p.read_text())["config"]["execution"] for p in chosen)
    for path in chosen:
        round_trip(path)


@pytest.mark.slow
def test_every_shipped_study_point_keeps_its_id():
    for path in SHIPPED:
        round_trip(path)


def fl_error(**fields) -> str:
    with pytest.raises(ValueError) as err:
        resolve(spec.RunSpec(preset="quick", device="cpu", **fields))
    return str(err.value)


@pytest.mark.parametrize("setting, field", [
    ({"fleet": "no-such-fleet"}, {"fleet_path": "no-such-fleet"}),
    ({"hw": "/no/such/hw.toml"}, {"hw_path": "/no/such/hw.toml"}),
    ({"system": "/no/such/system.toml"}, {"system_path": "/no/such/system.toml"}),
    ({"deadline_s": 6.0}, {"deadline_s": 6.0}),
    ({"data_dir": "/tmp"}, {"data_dir": "/tmp"}),
])
def test_a_study_cell_is_refused_in_bench_fls_words(setting, field):
    point = json.loads(kinds(SHIPPED)[0].read_text())["config"]
    point = {k: v for k, v in point.items() if k not in ("fleet", "deadline_s")}
    with pytest.raises(ValueError) as err:
        prepare({**point, **setting})  # what the study command does to one point per setting before any run
    assert str(err.value) == fl_error(**field)


def test_a_study_cells_flags_are_a_grid_points():
    """A value of the wrong type or out of its flag's range: the grid point's words, the point named."""
    point = json.loads(kinds(SHIPPED)[0].read_text())["config"]
    with pytest.raises(ValueError, match="^bench.study point: grid setting hw = 3 must be text"):
        parse_point({**point, "hw": 3})
    with pytest.raises(ValueError, match="^bench.study point: --number-format: number format 'fp7'"):
        parse_point({**point, "execution": {**point["execution"], "number_format": "fp7"}})
    with pytest.raises(ValueError, match="^bench.study point execution: unknown key 'warp'"):
        parse_point({**point, "execution": {**point["execution"], "warp": True}})


@pytest.mark.parametrize("argv, words", [
    (["--data-dir", "/tmp"], "--data-dir /tmp: the preset's dataset is the offline digits, which ships with "
                             "scikit-learn; leave --data-dir out"),
    (["--preset", "paper"], "the preset's dataset is cifar100: give its folder with --data-dir DIR"),
    (["--classifier", "fc"], "--classifier fc: the paper model 'convnet' has its classifier built in"),
    (["--fleet", "mixed", "--system", "configs/system/default.toml"], "--fleet mixed and --system "
                                                                        "configs/system/default.toml: a fleet gives"),
    (["--hw", "/no/such/hw.toml"], "/no/such/hw.toml"),
])
def test_bench_run_and_bench_fl_resolve_a_run_alike(argv, words):
    """One resolution (bench.lib.resolve): the same flags refused with the same line by both commands."""
    argv = ["--model", "convnet", "--device", "cpu", *argv]
    argv = argv if "--preset" in argv else [*argv, "--preset", "quick"]
    with pytest.raises(ValueError) as by_fl:
        resolve(spec.from_args(fl_cli.parser().parse_args(argv), spec.FL))
    with pytest.raises(ValueError) as by_run:
        run_resolve(run_cli.parse_args(argv)[0])
    assert str(by_run.value) == str(by_fl.value) and words in str(by_fl.value)


def test_bench_flower_parses_the_same_flags_into_the_same_spec():
    argv = ["--model", "convnet", "--methods", "fedavg", "fedprox", "--preset", "quick", "--seed", "3",
            "--rounds", "4", "--fleet", "mixed", "--deadline-s", "6"]
    flower = spec.from_args(flower_cli.parser().parse_args(argv), spec.FLOWER)
    fl = spec.from_args(fl_cli.parser().parse_args(argv), spec.FL)
    assert flower == fl  # every field: the flags bench.flower does not take are the field defaults
    # and its resolution is bench.fl's: the same bad fleet refused in the same words
    with pytest.raises(ValueError) as err:
        flower_cli.flower_run(spec.from_args(flower_cli.parser().parse_args(["--fleet", "no-such-fleet"]),
                                          spec.FLOWER), clients=3)
    assert str(err.value) == fl_error(fleet_path="no-such-fleet")

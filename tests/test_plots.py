"""bench.fig5.fig5, bench.lib.run.breakdown and bench.lib.results against a small hand-made results folder
(tests/data/results_small)."""

import json
import shutil
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from accel_sim.hardware import HardwareConfig
from accel_sim.simulate import simulate
import bench.plots.__main__ as plots_cli
from bench.lib import results
from bench.lib.plots import breakdown as breakdown_plots
from bench.lib.plots import fig5
from bench.lib.plots import run as run_plots
from bench.lib.run import breakdown
from bench.run.table import format_time_to_accuracy
from tests.accel_traces import small_trace

FIXTURE = Path(__file__).parent / "data" / "results_small"


@pytest.fixture
def run_dir(tmp_path):
    return Path(shutil.copytree(FIXTURE, tmp_path / "run"))


def test_panels_normalize_to_the_baseline():
    summary = results.load_summary(FIXTURE)
    memory = fig5.panel_values(summary, fig5.FIG5_PANELS[1])
    # tiny: 3600 / 4000 = 0.9; small: 6000 / 8000 = 0.75
    assert memory.loc["tiny", "spherefed"] == pytest.approx(0.9)
    assert memory.loc["small", "spherefed"] == pytest.approx(0.75)
    assert (memory["fedavg"] == 1.0).all()
    calibration = fig5.panel_values(summary, fig5.FIG5_PANELS[3])
    # tiny: 3e-6 / 1e-5 = 0.3; small: 6e-6 / 1e-5 = 0.6
    assert calibration.loc["tiny", "ffc"] == pytest.approx(0.3)
    assert calibration.loc["small", "ffc"] == pytest.approx(0.6)
    accuracy = fig5.panel_values(summary, fig5.FIG5_PANELS[4])  # absolute, not normalized
    assert accuracy.loc["small", "spherefed"] == 52.5
    energy = fig5.panel_values(summary, fig5.FIG5_PANELS[5])
    # tiny: 1.5 mJ x 10 steps / (2 mJ x 10) = 0.75
    assert energy.loc["tiny", "spherefed"] == pytest.approx(0.75)
    calibration_energy = fig5.panel_values(summary, fig5.FIG5_PANELS[6])
    # tiny: (0.8 + 0.2) mJ / (1 + 3) mJ = 0.25
    assert calibration_energy.loc["tiny", "ffc"] == pytest.approx(0.25)


def test_block_stacks():
    frame = breakdown_plots.read_breakdown(FIXTURE)
    tiny = frame[(frame["model"] == "tiny") & (frame["method"] == "fedavg") & (frame["region"] == "training")]
    latency = breakdown_plots.latency_stacks(tiny, 100e6)
    # blocks in model order; compute per kind, then every stall of the block as one segment
    assert list(latency.index) == ["blocks.0", "classifier", "(outside modules)"]
    assert list(latency.columns) == ["array_fwd", "array_dx", "special_unit_fwd", "array_dw", "special_unit_update",
                                     "memory_stall"]
    # blocks.0: compute 200 + 400 + 20 cycles, stall 100 + 0 + 80 = 180 cycles (1.8 us at 100 MHz)
    assert latency.loc["blocks.0", "array_dx"] == pytest.approx(4e-6)
    assert latency.loc["blocks.0", "memory_stall"] == pytest.approx(1.8e-6)
    assert latency.to_numpy().sum() == pytest.approx(tiny["latency_s"].sum())
    energy = breakdown_plots.energy_stacks(tiny)
    assert list(energy.columns) == ["mac", "sram", "dram", "special_unit", "static"]
    # classifier: dram 20 + 100 uJ
    assert energy.loc["classifier", "dram"] == pytest.approx(120e-6)
    assert energy.to_numpy().sum() == pytest.approx(tiny["energy_j"].sum())


@pytest.mark.parametrize("layer, block", [
    ("body.blocks.3.depthwise.conv", "blocks.3"),
    ("body.blocks.16", "blocks.16"),
    ("body.layer2.1.conv1", "layer2.1"),
    ("body.conv3.norm", "conv3"),
    ("body.stem.conv", "stem"),
    ("body.head.relu", "head"),
    ("classifier", "classifier"),
    ("feature_norm", "feature_norm"),
    ("", "(outside modules)"),
])
def test_blocks(layer, block):
    assert breakdown.block_of(layer) == block


def test_kinds_of_work():
    assert breakdown.kind_of("gemm:dw", "bwd") == "array_dw"
    assert breakdown.kind_of("gemm:fwd", "fwd", gemm_groups=32) == "array_fwd_grouped"
    assert breakdown.kind_of("vector:norm", "bwd") == "special_unit_bwd"
    assert breakdown.kind_of("vector:update", "update") == "special_unit_update"
    assert breakdown.kind_of("linalg:solve", "calibration") == "linalg_calibration"
    assert breakdown.kind_of("none", "fwd") == ""


def test_plots_regenerate_from_saved_results(run_dir):
    for png in run_dir.glob("*.png"):
        png.unlink()
    assert plots_cli.main([str(run_dir)]) == 0
    names = sorted(p.name for p in run_dir.glob("*.png"))
    assert names == ["breakdown_small.png", "breakdown_tiny.png", "fig5.png", "tta.png"]
    image = mpimg.imread(run_dir / "fig5.png")
    assert image.shape[0] > 100 and image.shape[1] > 500
    tta = mpimg.imread(run_dir / "tta.png")  # two models: two rows of three panels
    assert tta.shape[0] > tta.shape[1] / 3 > 100
    assert not list(run_dir.glob(".*"))  # no temporary files left behind


def test_a_run_without_calibrations_plots_what_it_has(run_dir):
    # bench.run --methods fedavg spherefed: no calibration section entries; panels (d), (g) say so
    summary = json.loads((run_dir / "summary.json").read_text())
    for sections in summary["models"].values():
        sections["calibration"] = {}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert fig5.panel_values(results.load_summary(run_dir), fig5.FIG5_PANELS[3]).isna().all().all()
    assert plots_cli.main([str(run_dir)]) == 0 and (run_dir / "fig5.png").stat().st_size > 0


def test_time_to_accuracy_table():
    summary = results.load_summary(FIXTURE)
    text = format_time_to_accuracy("tiny", summary["models"]["tiny"]["time_to_accuracy"])
    lines = text.splitlines()
    assert lines[0].startswith("time to 85.5 % test accuracy (95 % of the best final accuracy")
    assert lines[2].split() == ["fedavg", "3", "30", "s", "6", "s", "3", "J", "0.003", "MB"]
    assert lines[3].split() == ["spherefed", "not", "reached"]


def test_unreadable_rounds_csv_is_one_clear_error(run_dir):
    (run_dir / "rounds.csv").write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(results.ResultsError, match="rounds.csv"):
        run_plots.plot_run(run_dir)
    assert not list(run_dir.glob("*.png"))  # every input is checked before the first figure is written


def with_hardware_comparison(run_dir: Path) -> dict:
    """The fixture's summary as a ``bench.run --hw base.toml half.toml`` run writes it: the second
    accelerator's figures are the first's halved."""
    summary = json.loads((run_dir / "summary.json").read_text())
    halved = {m: {section: {method: {k: v / 2 for k, v in figs.items() if isinstance(v, (int, float))}
                            for method, figs in summary["models"][m][section].items()}
                  for section in ("training", "calibration")} for m in summary["models"]}
    own = {m: {section: summary["models"][m][section] for section in ("training", "calibration")}
           for m in summary["models"]}
    summary["hardware_comparison"] = {"labels": ["base", "half"], "by_hardware": {
        "base": {"hardware": summary["hardware"], "models": own},
        "half": {"hardware": summary["hardware"], "models": halved}}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return summary


def test_plots_redraw_the_hardware_comparison_with_the_runs_own_list(run_dir, capsys):
    # bench.plots and bench.run write the one list run_figures draws: with a hardware_comparison
    # block it holds hardware_<model>.png for both models, and bench.plots rewrites exactly it
    with_hardware_comparison(run_dir)
    listed = [(drawn.path.name, drawn.dpi) for drawn in run_plots.run_figures(run_dir)]
    assert listed == [("fig5.png", 120), ("breakdown_tiny.png", 120), ("breakdown_small.png", 120),
                      ("tta.png", 110), ("hardware_tiny.png", 110), ("hardware_small.png", 110)]
    capsys.readouterr()
    assert plots_cli.main([str(run_dir)]) == 0
    printed = [Path(line).name for line in capsys.readouterr().out.splitlines()]
    assert printed == [name for name, _ in listed]
    assert sorted(p.name for p in run_dir.glob("*.png")) == sorted(printed)
    panels = mpimg.imread(run_dir / "hardware_tiny.png")  # six panels (compare_hw.ROWS) side by side
    assert panels.shape[1] > 4 * panels.shape[0]


def test_a_malformed_hardware_comparison_writes_no_figure(run_dir, capsys):
    summary = with_hardware_comparison(run_dir)
    del summary["hardware_comparison"]["by_hardware"]["half"]["models"]["small"]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert plots_cli.main([str(run_dir)]) == 2
    assert "key 'small'" in capsys.readouterr().err
    assert not list(run_dir.glob("*.png"))


def test_missing_folder_is_one_clear_error(tmp_path, capsys):
    assert plots_cli.main([str(tmp_path / "nope")]) == 2
    assert "nope is not a folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.update(version=99), "version"),
        (lambda s: s.pop("git_commit"), "git_commit"),
        (lambda s: s["models"]["tiny"].pop("calibration"), "calibration"),
        (lambda s: s["models"]["tiny"]["training"].pop("fedavg"), "normalized to"),
    ],
)
def test_malformed_summary_is_rejected(run_dir, edit, message, capsys):
    summary = json.loads((run_dir / "summary.json").read_text())
    edit(summary)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert plots_cli.main([str(run_dir)]) == 2
    assert message in capsys.readouterr().err


def test_nan_is_rejected(run_dir):
    text = (run_dir / "summary.json").read_text().replace('"accuracy_pct": 40.0', '"accuracy_pct": NaN')
    (run_dir / "summary.json").write_text(text)
    with pytest.raises(results.ResultsError, match="accuracy_pct is nan"):
        results.load_summary(run_dir)
    with pytest.raises(results.ResultsError, match="finite"):
        results.write_json(run_dir / "x.json", {"a": float("inf")})
    assert not (run_dir / "x.json").exists()


def test_energy_by_kind_adds_up():
    report = simulate(small_trace(), HardwareConfig(rows=4, cols=4))
    kinds = breakdown.energy_by_kind(report)
    # fwd GEMM, relu + loss (fwd), loss backward, dW GEMM, the update, the solve; views and the
    # unsupported op have no kind
    assert list(kinds) == ["array_fwd", "special_unit_fwd", "special_unit_bwd", "array_dw", "special_unit_update",
                           "linalg_calibration"]
    assert sum(kinds.values()) == pytest.approx(report.energy_j)
    assert kinds["array_dw"] == report.ops[5].energy_j

"""bench.plots and bench.results against a small hand-made results folder (tests/data/results_small)."""

import json
import shutil
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from bench import plots, results

FIXTURE = Path(__file__).parent / "data" / "results_small"


@pytest.fixture
def run_dir(tmp_path):
    return Path(shutil.copytree(FIXTURE, tmp_path / "run"))


def test_panels_normalize_to_the_baseline():
    summary = results.load_summary(FIXTURE)
    memory = plots.panel_values(summary, plots.FIG5_PANELS[1])
    # tiny: 3600 / 4000 = 0.9; small: 6000 / 8000 = 0.75
    assert memory.loc["tiny", "spherefed"] == pytest.approx(0.9)
    assert memory.loc["small", "spherefed"] == pytest.approx(0.75)
    assert (memory["fedavg"] == 1.0).all()
    calibration = plots.panel_values(summary, plots.FIG5_PANELS[3])
    # tiny: 3e-6 / 1e-5 = 0.3; small: 6e-6 / 1e-5 = 0.6
    assert calibration.loc["tiny", "ffc"] == pytest.approx(0.3)
    assert calibration.loc["small", "ffc"] == pytest.approx(0.6)
    accuracy = plots.panel_values(summary, plots.FIG5_PANELS[4])  # absolute, not normalized
    assert accuracy.loc["small", "spherefed"] == 52.5


def test_layer_latency_sums_phases_slowest_first():
    layers = plots.read_layers(FIXTURE)
    table = plots.layer_latency(layers, "tiny")
    # body.0: fwd 3 us + bwd 4 us = 7 us; classifier FedAvg 1 + 2 = 3 us, SphereFed 1 + 1 = 2 us
    assert list(table.index) == ["body.0", "classifier"]
    assert table.loc["body.0", "fedavg"] == pytest.approx(7e-6)
    assert table.loc["classifier", "spherefed"] == pytest.approx(2e-6)
    assert "ffc" not in table.columns  # calibration rows are not training


def test_plots_regenerate_from_saved_results(run_dir):
    for png in run_dir.glob("*.png"):
        png.unlink()
    assert plots.main([str(run_dir)]) == 0
    names = sorted(p.name for p in run_dir.glob("*.png"))
    assert names == ["fig5.png", "layers_small.png", "layers_tiny.png"]
    image = mpimg.imread(run_dir / "fig5.png")
    assert image.shape[0] > 100 and image.shape[1] > 500
    assert not list(run_dir.glob(".*"))  # no temporary files left behind


def test_missing_folder_is_one_clear_error(tmp_path, capsys):
    assert plots.main([str(tmp_path / "nope")]) == 2
    assert "summary.json not found" in capsys.readouterr().err


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
    assert plots.main([str(run_dir)]) == 2
    assert message in capsys.readouterr().err


def test_nan_is_rejected(run_dir):
    text = (run_dir / "summary.json").read_text().replace('"accuracy_pct": 40.0', '"accuracy_pct": NaN')
    (run_dir / "summary.json").write_text(text)
    with pytest.raises(results.ResultsError, match="accuracy_pct is nan"):
        results.load_summary(run_dir)
    with pytest.raises(results.ResultsError, match="finite"):
        results.write_json(run_dir / "x.json", {"a": float("inf")})
    assert not (run_dir / "x.json").exists()


def test_run_dir_is_written_atomically(tmp_path):
    out = tmp_path / "run"

    def failing(tmp):
        (tmp / "summary.json").write_text("{}")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        results.write_run_dir(out, failing, overwrite=False)
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its temporary sibling

    results.write_run_dir(out, lambda tmp: (tmp / "a.txt").write_text("first"), overwrite=False)
    with pytest.raises(results.ResultsError, match="--overwrite"):
        results.write_run_dir(out, lambda tmp: None, overwrite=False)
    results.write_run_dir(out, lambda tmp: (tmp / "b.txt").write_text("second"), overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]  # old and new never mixed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]

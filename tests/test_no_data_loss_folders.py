"""Nothing lost, round three (issue 46): a folder one command consumes from another is checked
(``iokit.consumed``), never trusted.

Case 3: ``bench.dse --study`` priced a study whose manifest still said "running", or that missed a
seed of a format ("mean curve over 2 seeds" for a one-seed curve); NaN accuracies became
"measured, not reached"; a non-numeric round gave a traceback after the pricing; a study at its
dataset's own image size gave "NonexNone inputs ... set image_size = None". Each is now one line,
exit 2, before any capture. The inputs are copies of the shipped study
results/reference/digits-quick-formats (3 seeds, FP32, BF16 and BFP m4 g16), each damaged in one
way; its own copy undamaged is accepted. No case names: ``bench.dse --run`` with a folder
of another command, and with a file its manifest lists gone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import bench.dse.__main__ as dse_cli
from bench.dse import accuracy
from bench.dse.rerun import load_run
from bench.dse.spec import DseError, load_dse
from bench.lib.results import FORMAT_VERSION
from iokit import outputs

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "results/reference/digits-quick-formats"
SPACE = ROOT / "configs/dse/digits-quick-formats.toml"


def copy_of_study(tmp_path: Path) -> Path:
    folder = tmp_path / "study"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("grid"))
    return folder


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def edit_curves(folder: Path, change) -> None:
    change(pd.read_csv(folder / "curves.csv")).to_csv(folder / "curves.csv", index=False)


def set_cell(column: str, value):
    def change(curves):
        curves[column] = curves[column].astype(object)
        curves.loc[3, column] = value
        return curves
    return change


def no_image_size(summary):
    for choice in summary["choices"]:
        if choice.get("point"):
            choice["point"]["fl"]["image_size"] = None


DAMAGE = {  # the input -> (what is done to the copy, what the one line says)
    "a study still running (case 3)": (
        lambda f: edit_json(f / "manifest.json", lambda m: m.update(state="running")),
        "the bench.study that writes it has not finished (its manifest says 'running')"),
    "a format missing a seed (case 3)": (
        lambda f: edit_curves(f, lambda c: c[~((c["number_format"] == "bf16") & (c["seed"] == 2))]),
        "bf16 fedavg has the runs of seed(s) [0, 1], but the folder claims seeds [0, 1, 2]"),
    "a NaN accuracy (case 3)": (lambda f: edit_curves(f, set_cell("accuracy_pct", float("nan"))),
                                "row 4, accuracy_pct = nan is not a finite number"),
    "a non-numeric round (case 3)": (lambda f: edit_curves(f, set_cell("round", "x")),
                                     "row 4, round = 'x' is not a whole number"),
    "a study at its dataset's own image size (case 3)": (
        lambda f: edit_json(f / "summary.json", no_image_size), "kept its dataset's own image size"),
    "a file the manifest lists gone (no case names it)": (lambda f: (f / "tuning.csv").unlink(),
                                                          "tuning.csv is missing, though the folder's manifest lists it"),
}


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_study_is_refused_before_any_pricing(tmp_path, capsys, name):
    damage, said = DAMAGE[name]
    folder = copy_of_study(tmp_path)
    damage(folder)
    assert dse_cli.main([str(SPACE), "--study", str(folder), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and "None" not in err.replace("'None'", ""), err
    assert not (tmp_path / "out").exists()


def test_the_shipped_study_itself_is_accepted(tmp_path):
    """The control: the same copy, undamaged, is read with its 3 seeds and 3 formats."""
    study = accuracy.load_study(copy_of_study(tmp_path), load_dse(SPACE), None, None)
    assert (study.seeds, study.formats) == (3, ("fp32", "bf16", "bfp_m4_g16"))


def run_folder_missing_a_file(tmp_path: Path) -> Path:
    """A bench.run folder whose manifest lists tta.csv, which is gone."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").write_text("{}")
    (folder / "rounds.csv").write_text("model\n")
    outputs.Manifest("bench.run", "x", FORMAT_VERSION, "complete", ("rounds.csv", "summary.json", "tta.csv")
                     ).write(folder)
    return folder


def study_with_rounds(tmp_path: Path) -> Path:
    """A bench.study folder, with a rounds.csv beside it so that only its manifest tells."""
    folder = copy_of_study(tmp_path)
    (folder / "rounds.csv").write_text("model\n")
    return folder


@pytest.mark.parametrize("name, make, said", [
    ("a bench.study folder given to --run (no case names it)", study_with_rounds,
     "a bench.study results folder, not a bench.run one"),
    ("a bench.run folder whose tta.csv is gone (no case names it)", run_folder_missing_a_file,
     "tta.csv is missing, though the folder's manifest lists it"),
])
def test_a_run_folder_of_another_command_or_incomplete_is_refused(tmp_path, name, make, said):
    with pytest.raises(DseError, match=said):
        load_run(make(tmp_path), load_dse(SPACE), None)

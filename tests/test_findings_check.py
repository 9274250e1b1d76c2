"""``bench.findings --check`` recomputes from the runs (issue 53 item 5), and bad results folders are one
line, exit 2, nothing written (issue 56 items 7 and 8)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

import bench.findings.__main__ as findings_cli
from bench.lib.findings import END, FINDINGS, README, START, check, outputs
from iokit.outputs import CHECKOUT_ROOT

STUDY = "digits-quick-formats"  # the smallest shipped study (22 runs)


@pytest.fixture
def root(tmp_path: Path, monkeypatch) -> Path:
    """A checkout in miniature: one shipped study's folder (its runs too), a README with the markers, the
    generated files; the command pointed at it."""
    shutil.copytree(CHECKOUT_ROOT / "results/reference" / STUDY, tmp_path / "results/reference" / STUDY)
    (tmp_path / "docs").mkdir()
    (tmp_path / README).write_text(f"# x\n\n{START}\n(generated)\n{END}\n", encoding="utf-8")
    for path, text in outputs(tmp_path).items():
        path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(findings_cli, "CHECKOUT_ROOT", tmp_path)
    return tmp_path


def _summary_path(root: Path) -> Path:
    return root / "results/reference" / STUDY / "summary.json"


def _edit(root: Path, change) -> None:
    summary = json.loads(_summary_path(root).read_text(encoding="utf-8"))
    change(summary)
    _summary_path(root).write_text(json.dumps(summary), encoding="utf-8")


def _generated(root: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in (root / FINDINGS, root / README)}


def test_the_shipped_studies_agree_with_their_runs():
    assert check(CHECKOUT_ROOT) == []


def test_one_changed_accuracy_in_one_runs_curve_fails_the_check(root, capsys):
    assert findings_cli.main(["--check"]) == 0
    # FedAvg's first run in FP32: its last round's accuracy one image (1/360) higher in its curve.csv only
    runs = list(csv.DictReader(open(root / "results/reference" / STUDY / "runs.csv", encoding="utf-8")))
    row = next(r for r in runs if r["method"] == "fedavg" and r["setting"] == "alpha=0.5")
    curve = root / "results/reference" / STUDY / "grid/runs" / row["run_id"] / "curve.csv"
    rows = list(csv.DictReader(open(curve, encoding="utf-8")))
    last = max(i for i, r in enumerate(rows) if r["method"] == "fedavg" and r["accuracy"])
    old = float(rows[last]["accuracy"])
    rows[last]["accuracy"] = repr(old + 1 / 360)
    with open(curve, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    capsys.readouterr()
    assert findings_cli.main(["--check"]) == 1
    lines = capsys.readouterr().out.splitlines()
    cell = f"{row['model']} alpha=0.5 fedavg"
    assert lines[0] == (f"{STUDY}: runs.csv {cell} {row['seed']}: final_accuracy_pct {float(row['final_accuracy_pct'])!r}, "
                        f"but run {row['run_id']}'s curve.csv says {100 * (old + 1 / 360)!r}")
    assert any(line.startswith(f"{STUDY}: cell {cell}: final_accuracy_pct.mean: recorded ") for line in lines)


def test_a_forged_p_value_with_its_matching_word_fails_the_check(root, capsys):
    def forge(summary):  # a consistent forgery: the adjusted p and the word that follows from it
        c = next(c for c in summary["cells"] if c.get("paired_difference_vs_base_pct"))
        e = c["paired_difference_vs_base_pct"]
        e["p_difference_adjusted"], e["verdict"] = 0.001, "different"
        e["p_equivalence_adjusted"] = 1.0

    _edit(root, forge)
    for path, text in outputs(root).items():  # the docs regenerated from it: consistent, so the old check passed
        path.write_text(text, encoding="utf-8")
    assert findings_cli.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert ": paired_difference_vs_base_pct.p_difference_adjusted: recorded 0.001, recomputed from the runs" in out


def test_no_results_folder_is_one_line_and_nothing_is_written(root, capsys):
    before = _generated(root)
    shutil.rmtree(root / "results")
    assert findings_cli.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {root / 'results/reference'}: no such folder; run python -m bench.findings from the root "
                   "of a checkout that holds the shipped results (results/reference/)"]
    assert _generated(root) == before


@pytest.mark.parametrize("damage, says", [
    (lambda p: p.unlink(), "missing beside its manifest.json; rebuild it"),
    (lambda p: p.write_text("[1, 2]"), "a JSON list, not a summary (a table); rebuild it"),
    (lambda p: p.write_text("{"), "not readable JSON (JSONDecodeError); rebuild it"),
])
def test_a_deleted_or_list_typed_summary_is_refused_not_dropped(root, capsys, damage, says):
    before = _generated(root)
    damage(_summary_path(root))
    for argv in ([], ["--check"]):
        assert findings_cli.main(argv) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: {_summary_path(root)}: {says}")
    assert _generated(root) == before


@pytest.mark.parametrize("remove, key", [
    (lambda s: next(c for c in s["cells"] if c.get("n")).pop("final_accuracy_pct"), "'final_accuracy_pct'"),
    (lambda s: s.pop("study"), "'study'"),
    (lambda s: next(c for c in s["cells"] if c.get("paired_difference_vs_base_pct"))
     ["paired_difference_vs_base_pct"].pop("operands"), "'operands'"),
])
def test_a_summary_missing_a_key_is_one_line_naming_the_file_and_the_key(root, capsys, remove, key):
    _edit(root, remove)
    assert findings_cli.main(["--check"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and STUDY in line and "summary.json" in line and key in line
    assert "Traceback" not in line

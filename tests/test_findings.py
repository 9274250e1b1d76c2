"""Every result the README and docs state about a shipped study is written from its results
(``bench.lib.findings``, issue 41): the generated files match the shipped summaries, a changed number
in a summary makes them stale, and a verdict stronger than its numbers is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.lib.findings import END, FINDINGS, README, START, FindingsError, outputs, stale
from iokit.outputs import CHECKOUT_ROOT

STUDY = "digits"


def test_the_shipped_findings_and_headline_match_the_results():
    assert stale(outputs(CHECKOUT_ROOT)) == [], "run python -m bench.findings and commit what it writes"


@pytest.fixture
def fixture_root(tmp_path: Path) -> Path:
    """A checkout in miniature: one shipped study's summary, a README with the markers, the generated files."""
    (tmp_path / "results/reference" / STUDY).mkdir(parents=True)
    for name in ("summary.json", "manifest.json"):
        shutil.copy(CHECKOUT_ROOT / "results/reference" / STUDY / name, tmp_path / "results/reference" / STUDY)
    (tmp_path / "docs").mkdir()
    (tmp_path / README).write_text(f"# x\n\n{START}\n(generated)\n{END}\n\nmore\n", encoding="utf-8")
    for path, text in outputs(tmp_path).items():
        path.write_text(text, encoding="utf-8")
    assert stale(outputs(tmp_path)) == []
    return tmp_path


def _edit(root: Path, change) -> None:
    path = root / "results/reference" / STUDY / "summary.json"
    summary = json.loads(path.read_text(encoding="utf-8"))
    change(summary)
    path.write_text(json.dumps(summary), encoding="utf-8")


def _cell(summary: dict, setting: str, method: str) -> dict:
    return next(c for c in summary["cells"] if (c["setting"], c["method"]) == (setting, method))


def test_one_changed_number_in_a_summary_makes_the_stated_results_stale(fixture_root):
    def change(summary):
        _cell(summary, "alpha=0.1", "fedavg+spherefed+ffc")["paired_difference_vs_base_pct"]["mean"] += 0.01

    _edit(fixture_root, change)
    assert stale(outputs(fixture_root)) == [fixture_root / FINDINGS, fixture_root / README]
    readme = (fixture_root / README).read_text(encoding="utf-8")
    assert "+1.20 [-2.96, +5.36]: not resolved with 3 seeds" in readme  # what it stated before
    assert "+1.21 [-2.96, +5.36]" in outputs(fixture_root)[fixture_root / README]  # what the data now says


def test_a_verdict_word_stronger_than_its_numbers_is_refused(fixture_root):
    def overstate(summary):  # +1.20 [-2.96, +5.36], adjusted p 1: called "different"
        _cell(summary, "alpha=0.1", "fedavg+spherefed+ffc")["paired_difference_vs_base_pct"]["verdict"] = "different"

    _edit(fixture_root, overstate)
    with pytest.raises(FindingsError, match=r"results/reference/digits/summary.json, convnet alpha=0.1 fedavg\+spherefed\+ffc "
                                            r"vs fedavg: stated 'different', .* give 'not resolved with 3 seeds'"):
        outputs(fixture_root)


def test_a_weaker_word_where_the_test_resolved_it_is_refused_too(fixture_root):
    def resolve(summary):  # the same comparison with an adjusted p of 0.001: "not resolved" would understate it
        d = _cell(summary, "alpha=0.1", "fedavg+spherefed+ffc")["paired_difference_vs_base_pct"]
        d["p_difference_adjusted"] = 0.001

    _edit(fixture_root, resolve)
    with pytest.raises(FindingsError, match="stated 'not resolved with 3 seeds'.* give 'different'"):
        outputs(fixture_root)


def test_a_readme_without_the_markers_is_refused(fixture_root):
    (fixture_root / README).write_text("# no markers\n", encoding="utf-8")
    with pytest.raises(FindingsError, match="README.md must hold the line <!-- findings:headline:start --> once"):
        outputs(fixture_root)


def test_each_claim_is_answered_by_its_own_test_with_the_p_that_carries_it():
    from bench.lib.findings_study import claim_test, claim_word

    def e(mean, verdict, p_diff, p_eq, p_ni, p_sup):
        return {"mean": mean, "verdict": verdict, "n": 16, "margin_pts": 1.0, "p_difference_adjusted": p_diff,
                "p_equivalence_adjusted": p_eq, "p_noninferiority_adjusted": p_ni, "p_superiority_adjusted": p_sup,
                "minimum_detectable_pts": 0.8, "primary_test": "permutation"}

    # FFC - CCVR = -0.14, equivalent: a >= b holds by non-inferiority at -1 (not by the equivalence word), with
    # the one-sided p printed; a > b is open; a = b holds by the TOST
    ffc = e(-0.14, "equivalent within ± 1", 1.0, 0.0001, 0.00002, 1.0)
    assert claim_word("s", "x", ffc) == "holds: not below by 1 or more (exact sign-flip adj. p <0.001)"
    assert claim_word("s", "x", ffc, ">").startswith("open: not shown (exact sign-flip adj. p 1;")
    assert claim_word("s", "x", ffc, "=") == "holds: within ± 1 (exact sign-flip adj. p <0.001)"
    # SphereFed + FFC vs FedAvg at alpha 0.1 (+1.92, not resolved two-sided): the one-sided test resolves >=
    open_two_sided = e(+1.92, "not resolved with 16 seeds", 0.16, 1.0, 0.001, 0.01)
    assert claim_word("s", "x", open_two_sided) == "holds: not below by 1 or more (exact sign-flip adj. p 0.001)"
    assert claim_word("s", "x", open_two_sided, ">") == "holds: above (exact sign-flip adj. p 0.01)"
    # a resolved difference the wrong way contradicts >= and >; any resolved difference beyond the margin contradicts =
    below = e(-1.5, "different", 0.01, 0.9, 0.8, 1.0)
    assert claim_word("s", "x", below) == "contradicted: below (exact sign-flip adj. p 0.01, difference)"
    assert claim_word("s", "x", e(+1.5, "different", 0.01, 0.9, 0.001, 0.002), "=") == \
        "contradicted: different (exact sign-flip adj. p 0.01, difference)"
    assert claim_test(">=", 1.0) == "non-inferiority (one-sided, H0: a - b <= -1)"
    with pytest.raises(FindingsError, match="stated 'different'"):  # a claim cannot rest on an overstated word
        claim_word("s", "x", e(+0.9, "different", 0.2, 0.3, 0.01, 0.1))
    with pytest.raises(FindingsError, match="no 'p_noninferiority_adjusted' recorded; rebuild the report"):
        claim_word("s", "x", {k: v for k, v in ffc.items() if k != "p_noninferiority_adjusted"})

"""The bootstrap over test images and seeds (bench/lib/study/image_bootstrap.py), what study runs
record for it (run.json's ``test_correct``) and the check that recomputes it (bench/lib/study/recheck.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.lib.study import compare
from bench.lib.study.image_bootstrap import bootstrap_means_pts, holds, image_bootstrap
from bench.lib.study.recheck import recheck
from workloads.fl.bits import packed_hex, unpacked

REPO = Path(__file__).resolve().parents[1]
RULES = compare.Rules(margin_pts=1.0, correction="holm", power=0.8, primary_test="permutation")


@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_bits_round_trip(bits):
    text = packed_hex(np.array(bits))
    assert len(text) == 2 * ((len(bits) + 7) // 8)  # 8 samples a byte, 2 hex digits a byte
    assert unpacked(text, len(bits)).tolist() == bits


def test_bits_refuse_the_wrong_length():
    text = packed_hex(np.ones(16, bool))  # 2 bytes: 9 to 16 samples
    for n in (8, 17):
        with pytest.raises(ValueError, match="hold 16 bits"):
            unpacked(text, n)


def test_every_image_better_at_every_seed_gives_a_point_interval():
    d = np.ones((3, 50), np.int8)  # a right and b wrong on every image: +100 points whatever is drawn
    record = image_bootstrap(d, draws=500)
    assert record["interval_95_pts"] == [100.0, 100.0] and record["interval_90_pts"] == [100.0, 100.0]
    assert holds(record, "different", 100.0, 1.0) is True


def test_the_image_level_alone_is_a_binomial_proportion():
    # 4 identical seeds; a gains 1 on half of 400 images (D = +1 on 200, 0 on 200): every seed's
    # difference is 50 points and seeds cannot move it; images drawn with replacement make it a
    # binomial share, sd = 100 * sqrt(0.5 * 0.5 / 400) = 2.5 points, so the 95 % interval is about
    # 50 ± 1.96 * 2.5 = [45.1, 54.9]
    d = np.tile(np.r_[np.ones(200), np.zeros(200)].astype(np.int8), (4, 1))
    means = bootstrap_means_pts(d, draws=20_000)
    assert means.std() == pytest.approx(2.5, rel=0.03)
    lo, hi = image_bootstrap(d, draws=20_000)["interval_95_pts"]
    assert lo == pytest.approx(45.1, abs=0.4) and hi == pytest.approx(54.9, abs=0.4)


def test_the_seed_level_alone_is_the_seeds_bootstrap():
    # seed 0: a right where b is wrong on every image (+100); seed 1: no image differs (0). Images
    # cannot move a seed's mean; two seeds drawn with replacement give 0, 50 or 100 points with
    # probabilities 1/4, 1/2, 1/4: the 95 % interval is [0, 100], the 90 % one too (5 % < 1/4)
    d = np.stack([np.ones(30), np.zeros(30)]).astype(np.int8)
    means = bootstrap_means_pts(d, draws=8_000)
    assert set(np.unique(means)) == {0.0, 50.0, 100.0}
    assert (means == 50.0).mean() == pytest.approx(0.5, abs=0.02)
    record = image_bootstrap(d, draws=8_000)
    assert record["interval_95_pts"] == [0.0, 100.0] and record["interval_90_pts"] == [0.0, 100.0]
    assert holds(record, "different", 50.0, 1.0) is False  # the interval reaches 0


def test_the_same_draws_every_time():
    d = np.random.default_rng(3).integers(-1, 2, size=(5, 100)).astype(np.int8)
    assert image_bootstrap(d) == image_bootstrap(d)


@pytest.mark.parametrize("verdict, mean, lo95, hi95, lo90, hi90, expected", [
    ("different", 2.0, 0.5, 3.5, 0.8, 3.2, True),
    ("different", 2.0, -0.1, 3.5, 0.1, 3.2, False),  # the 95 % interval reaches 0
    ("different", -2.0, -3.5, -0.2, -3.2, -0.5, True),  # below 0, on the mean's side
    ("different, but within ± 1", 0.4, 0.1, 0.7, 0.15, 0.65, True),
    ("equivalent within ± 1", 0.1, -1.2, 1.1, -0.9, 0.95, True),  # TOST reads the 90 % interval
    ("equivalent within ± 1", 0.1, -0.5, 1.3, -0.4, 1.02, False),
    ("not resolved with 6 seeds", 0.1, -3.0, 3.0, -2.0, 2.0, None),
])
def test_holds_reads_the_verdict_against_its_interval(verdict, mean, lo95, hi95, lo90, hi90, expected):
    record = {"interval_95_pts": [lo95, hi95], "interval_90_pts": [lo90, hi90]}
    assert holds(record, verdict, mean, 1.0) is expected


def _images(rng, seeds, n, p):
    return {s: rng.random(n) < p for s in seeds}


def test_a_comparison_carries_the_bootstrap_only_where_every_paired_seed_has_images():
    rng = np.random.default_rng(0)
    # 8 seeds: the exact sign-flip test's smallest two-sided p is 2 / 2^8 = 0.0078, 0.023 after Holm over 3
    ia, ib = _images(rng, range(8), 300, 0.95), _images(rng, range(8), 300, 0.80)
    a = {s: 100 * ia[s].mean() for s in range(8)}
    b = {s: 100 * ib[s].mean() for s in range(8)}
    family = [compare.comparison(a, b, 1 / 3, RULES, "base", images=(ia, ib)),
              compare.comparison(a, b, 1 / 3, RULES, "base", images=(ia, {s: ib[s] for s in range(7)})),
              compare.comparison(a, b, 1 / 3, RULES, "base")]
    compare.adjust_family(family, RULES)
    with_images, one_missing, without = family
    assert "image_bootstrap" not in one_missing and "image_bootstrap" not in without
    record = with_images["image_bootstrap"]
    assert (record["seeds"], record["images"]) == (8, 300)
    lo, hi = record["interval_95_pts"]
    assert lo < with_images["mean"] < hi
    assert with_images["verdict"] == "different" and record["verdict_holds"] is True  # ~15 points apart


def _study_copy(tmp_path: Path) -> Path:
    """A shipped study's folder, with its runs, to tamper with."""
    src = REPO / "results" / "reference" / "digits-quick"
    dst = tmp_path / "study"
    shutil.copytree(src, dst)
    return dst


def _first_run(folder: Path) -> tuple[Path, str, float]:
    import csv

    with (folder / "runs.csv").open(newline="") as f:
        row = next(csv.DictReader(f))
    return folder / "grid" / "runs" / row["run_id"], row["method"], float(row["final_accuracy_pct"])


def test_the_check_refuses_per_image_bits_that_disagree_with_the_curve(tmp_path):
    folder = _study_copy(tmp_path)
    summary = json.loads((folder / "summary.json").read_text())
    assert recheck(folder, "s", summary) == []  # shipped without per-image bits: nothing to disagree with
    run, label, final_pct = _first_run(folder)
    info = json.loads((run / "run.json").read_text())
    n = int(info["test_samples"])
    right = round(final_pct * n / 100)
    bits = np.zeros(n, bool)
    bits[:right] = True  # as many right as the curve says
    (run / "run.json").write_text(json.dumps({**info, "test_correct": {label: packed_hex(bits)}}))
    assert recheck(folder, "s", summary) == []
    bits[right] = True  # one more right than the curve says
    (run / "run.json").write_text(json.dumps({**info, "test_correct": {label: packed_hex(bits)}}))
    problems = recheck(folder, "s", summary)
    assert len(problems) == 1 and f"test_correct of {label} says" in problems[0]


def test_evaluate_on_is_the_share_of_correct_on():
    from workloads.fl.evaluation import correct_on, evaluate_on
    from workloads.fl.execution import DeviceData

    torch.manual_seed(0)
    x, y = torch.randn(37, 5), torch.randint(0, 3, (37,))
    data = DeviceData(x, y)  # float inputs held as they are
    model = torch.nn.Linear(5, 3)
    hits = correct_on(model, data, batch_size=8)  # 5 batches, the last one short
    assert hits.tolist() == (model(x).argmax(1) == y).tolist()
    assert evaluate_on(model, data, batch_size=8) == int(hits.sum()) / 37


@pytest.mark.slow
def test_a_study_run_records_each_labels_bits_and_their_share_is_its_accuracy(tmp_path):
    import tomllib

    from bench.lib.study.runner import make_point, run_point
    from bench.lib.study.study_file import parse_study
    from bench.study.phases import execution

    with open(REPO / "configs" / "studies" / "digits-quick.toml", "rb") as f:
        study = parse_study({**tomllib.load(f), "rounds": 4, "local_epochs": 1}, "s.toml")
    setting = study.settings[0]
    point = make_point("convnet", "fedavg+ccvr", 0, study.fl("convnet", setting, 0),
                       study.hparams("fedavg+ccvr", {"lr": 0.05}), execution(study))
    metrics = run_point(point, tmp_path)
    info = json.loads((tmp_path / "run.json").read_text())
    assert set(info["test_correct"]) == {"fedavg", "fedavg+ccvr"}  # before and after the calibration
    for label, text in info["test_correct"].items():
        assert unpacked(text, info["test_samples"]).mean() == pytest.approx(metrics[f"{label}.accuracy"], abs=1e-12)


def test_the_scope_counts_the_comparisons_the_bootstrap_was_made_for():
    """Two cells: one against the base method with a bootstrap, one against FP32 without, one in the
    local test mode (never a per-image record); one compare pair with a bootstrap: 2 of 4 made."""
    boot = {"image_bootstrap": {}}
    cells = [{"paired_difference_vs_base_pct": boot, "local_difference_vs_base_pct": {}},
             {"paired_difference_vs_fp32_pct": {}}]
    text = compare.scope_text(cells, [{"difference_pct": boot}])
    assert "made for 2 of 4 comparisons" in text and "the 1 in the local test mode have no per-image record" in text
    assert "local test mode" not in compare.scope_text(cells[1:], [{"difference_pct": boot}])
    assert "no images × seeds bootstrap can be made" in compare.scope_text(cells[1:])

"""Issue 36: the accuracy protocol a reviewer accepts. The prediction interval for one new seed, the
equivalence test (TOST) and the verdict wording on hand-worked numbers; the convergence rule failing
on a cosine-decayed unconverged curve; the search extending past a grid edge (stand-in runners,
tests/study_runners.py); per-run provenance; the study file's new keys."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench.study import choices, phases, report
from bench.lib.study import verdicts
from bench.lib.study.curves import high_rate_rounds, judge, plateau
from bench.lib.study.spec import StudyError
from bench.lib.study.study_file import parse_study
from bench.lib.study.stats import (benjamini_hochberg, difference_p, estimate, holm, minimum_detectable_difference,
                                   paired_difference, prediction_interval, resolution_pts, seeds_for_equivalence,
                                   tost)
from bench.lib.study.tuning import extension_value
from tests.study_runners import PEAK_LR

ROOT = Path(__file__).resolve().parents[1]

PEAKED = "tests.study_runners:peaked"


def doc(**changes) -> dict:
    d = {"name": "p", "preset": "quick", "models": ["convnet"], "methods": ["fedavg"], "base": "fedavg",
         "alphas": [0.5], "rounds": 4, "seeds": [0, 1], "tuning_seeds": [10, 11],
         "search": {"fedavg": {"lr": [0.05, 0.1, 0.2]}}, "convergence": {"last_rounds": 1},
         "tuning": {"last_rounds": 1}, "targets": {"accuracy_pct": [50.0]}}
    d.update(changes)
    return d


# ----------------------------------------------------------------------------- one new seed


def test_prediction_interval_for_one_new_seed_by_hand():
    # values 1, 2, 3: mean 2, s = 1, n = 3; t_{0.975, 2} = 0.95 sqrt(2 / (1 - 0.95^2)) = 4.302653;
    # half width t s sqrt(1 + 1/3) = 4.302653 x 1.154701 = 4.968275: [-2.968275, 6.968275],
    # sqrt(n + 1) = 2 times the interval of the mean (4.302653 / sqrt(3) = 2.484138)
    p = prediction_interval([1.0, 2.0, 3.0])
    assert (p.low, p.high) == pytest.approx((-2.968275, 6.968275), abs=1e-6)
    assert p.half_width == pytest.approx(2 * estimate([1.0, 2.0, 3.0]).half_width, rel=1e-12)
    assert verdicts.new_seed(6.9, p) == "inside the reference's 95 % prediction interval for a new seed [-3.0, +7.0]"
    assert verdicts.new_seed(7.0, p).startswith("outside")  # 7.0 > 6.968
    assert verdicts.same_run(0) == "the reference's own seed-0 run: not new evidence"


# ----------------------------------------------------------------------------- equivalence


def test_tost_on_hand_worked_differences():
    # d = 0.2, 0.4, 0.6: mean 0.4, s = 0.2, s / sqrt(3) = 0.115470; with 2 degrees of freedom
    # F(t) = 1/2 + t / (2 sqrt(2 + t^2)).
    # margin 1: t_high = (0.4 - 1) / 0.115470 = -3 sqrt(3) (t^2 = 27): p_high = 1/2 - 3 sqrt(3) / (2 sqrt(29))
    # = 0.017549; t_low = 1.4 / 0.115470 = 7 sqrt(3) (t^2 = 147): p_low = 1/2 - 7 sqrt(3) / (2 sqrt(149))
    # = 0.003367; p = 0.017549 < 0.05: equivalent within ± 1
    e = tost([0.2, 0.4, 0.6], 1.0)
    assert e.p_high == pytest.approx(0.5 - 3 * math.sqrt(3) / (2 * math.sqrt(29)), rel=1e-9)
    assert e.p_low == pytest.approx(0.5 - 7 * math.sqrt(3) / (2 * math.sqrt(149)), rel=1e-9)
    assert e.p == pytest.approx(0.017549, abs=1e-6) and e.equivalent
    # margin 0.5: t_high = -0.1 / 0.115470 = -sqrt(3) / 2 (t^2 = 3/4): p_high = 1/2 - (sqrt(3) / 2) / (2 sqrt(2.75))
    # = 0.238884 > 0.05: not shown equivalent
    e = tost([0.2, 0.4, 0.6], 0.5)
    assert e.p_high == pytest.approx(0.5 - (math.sqrt(3) / 2) / (2 * math.sqrt(2.75)), rel=1e-9)
    assert not e.equivalent
    # no spread and no floor: no p-value by fiat
    with pytest.raises(ValueError, match="no spread and no floor"):
        tost([0.3, 0.3, 0.3], 1.0)


def test_a_zero_spread_gets_one_test_samples_floor():
    # "+0.28 on every seed": one test image of 360 on each of 3 seeds, s = 0. The floor is one sample,
    # 100 / 360 = 0.277778 points; s' / sqrt(3) = 0.160375; t_{0.975, 2} = 4.302653:
    # half width 0.690031: +0.2778 [-0.4122, +0.9678]: includes 0, not a difference.
    # Paired t: t = 0.2778 / 0.160375 = 1.732051 (= sqrt(3)), p = 2 (1/2 - t / (2 sqrt(2 + t^2)))
    # = 1 - sqrt(3) / sqrt(5) = 0.225403.
    # TOST within ± 1: t_high = (0.2778 - 1) / 0.160375 = -4.503 (t^2 = 20.28): p_high = 1/2 - 4.503 / (2 sqrt(22.28))
    # = 0.022971; t_low = 7.967: p_low = 0.007695; p = 0.022971 < 0.05: equivalent within ± 1.
    floor = resolution_pts(360)
    assert floor == pytest.approx(0.277778, abs=1e-6)
    one = 100 / 360
    d = paired_difference({0: 98.0 + one, 1: 97.0 + one, 2: 96.0 + one}, {0: 98.0, 1: 97.0, 2: 96.0}, floor=floor)
    assert d.std == pytest.approx(0.0, abs=1e-9) and d.spread == floor
    assert (d.low, d.high) == pytest.approx((one - 0.690031, one + 0.690031), abs=1e-5)
    assert difference_p(d) == pytest.approx(1 - math.sqrt(3) / math.sqrt(5), abs=1e-6)
    e = tost([one] * 3, 1.0, floor=floor)
    assert e.p == pytest.approx(0.022971, abs=1e-5) and e.equivalent
    p = verdicts.comparison(3, difference_p(d), e.p, 1.0)
    assert p == "equivalent within ± 1"  # not "different" by fiat
    # a prediction interval over seeds that agree to the image is not [x, x]:
    # half width t s' sqrt(1 + 1/3) = 4.302653 x 0.277778 x 1.154701 = 1.380077
    pi = prediction_interval([one] * 3, floor=floor)
    assert (pi.low, pi.high) == pytest.approx((one - 1.380077, one + 1.380077), abs=1e-5)


def test_holm_and_benjamini_hochberg_on_five_p_values():
    # p = 0.01, 0.04, 0.03, 0.005, 0.20; sorted 0.005, 0.01, 0.03, 0.04, 0.20 (m = 5).
    # Holm: 5 x 0.005 = 0.025; 4 x 0.01 = 0.04; 3 x 0.03 = 0.09; 2 x 0.04 = 0.08 -> max(0.09, 0.08) = 0.09;
    # 1 x 0.20 = 0.20.  In the input's order: 0.04, 0.09, 0.09, 0.025, 0.20 (two of five below 0.05).
    # BH: m p / j = 0.025, 0.025, 0.05, 0.05, 0.20, then the running minimum from the largest:
    # 0.20, 0.05, 0.05, 0.025, 0.025. In the input's order: 0.025, 0.05, 0.05, 0.025, 0.20.
    p = [0.01, 0.04, 0.03, 0.005, 0.20]
    assert holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.025, 0.20], abs=1e-12)
    assert benjamini_hochberg(p) == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.20], abs=1e-12)
    # a nan (no test) is not a member of the family: m = 2 for the others
    assert holm([0.01, math.nan, 0.04]) == pytest.approx([0.02, math.nan, 0.04], nan_ok=True)


def test_holm_agrees_with_statsmodels_style_definition_on_random_p_values():
    """Holm's adjusted p-values reject exactly what the sequential procedure rejects: walk the sorted
    p-values, reject p_(i) while p_(i) <= α / (m - i + 1), stop at the first that is not."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = list(rng.uniform(0, 0.2, int(rng.integers(1, 9))))
        order = sorted(range(len(p)), key=lambda i: p[i])
        rejected = set()
        for rank, i in enumerate(order):
            if p[i] > 0.05 / (len(p) - rank):
                break
            rejected.add(i)
        assert {i for i, q in enumerate(holm(p)) if q <= 0.05} == rejected


def test_a_seed_plan_for_a_given_spread_margin_and_power():
    # sd 1 point, margin 1 point, α 0.05, power 0.8: the smallest n with
    # (t_{0.95, n-1} + t_{0.90, n-1}) / sqrt(n) <= 1:
    # n = 10: (1.833113 + 1.383029) / 3.162278 = 1.017 > 1;  n = 11: (1.812461 + 1.372184) / 3.316625 = 0.960 <= 1
    assert seeds_for_equivalence(1.0, 1.0) == 11
    # half the spread: n = 4: (2.353363 + 1.637744) / 2 x 0.5 = 0.998 <= 1; n = 3: (2.919986 + 1.885618) / 1.732 x 0.5
    # = 1.387 > 1
    assert seeds_for_equivalence(0.5, 1.0) == 4
    # MDD of 11 seeds at sd 1: (t_{0.975, 10} + t_{0.80, 10}) / sqrt(11) = (2.228139 + 0.879058) / 3.316625 = 0.936855
    assert minimum_detectable_difference(1.0, 11) == pytest.approx(0.936855, abs=1e-6)
    assert math.isnan(minimum_detectable_difference(1.0, 1))


def test_tost_agrees_with_scipy_one_sided_t_tests():
    from scipy import stats

    rng = np.random.default_rng(5)
    for n in (3, 5, 8):
        d = rng.normal(0.3, 0.8, n)
        e = tost(d, 1.0)
        assert e.p_low == pytest.approx(stats.ttest_1samp(d, -1.0, alternative="greater").pvalue, rel=1e-9)
        assert e.p_high == pytest.approx(stats.ttest_1samp(d, 1.0, alternative="less").pvalue, rel=1e-9)


def test_tost_is_the_90_percent_interval_inside_the_margin():
    """An independent statement of the same test: equivalent at α = 0.05 exactly when the 90 % t
    interval of the mean lies inside (-m, +m) (Schuirmann 1987)."""
    rng = np.random.default_rng(11)
    seen = set()
    for _ in range(300):
        d = rng.normal(rng.uniform(-1.5, 1.5), rng.uniform(0.05, 1.5), int(rng.integers(2, 7)))
        ci = estimate(d, confidence=0.90)
        inside = -1.0 < ci.low and ci.high < 1.0
        assert tost(d, 1.0).equivalent == inside
        seen.add(inside)
    assert seen == {True, False}


@pytest.mark.parametrize("a, b, margin, verdict", [
    # d = 0.2, 0.4, 0.6: interval 0.4 ± 4.302653 x 0.115470 = [-0.097, +0.897] includes 0; TOST p 0.0175
    ([90.2, 90.4, 90.6], [90.0] * 3, 1.0, "equivalent within ± 1"),
    ([90.2, 90.4, 90.6], [90.0] * 3, 0.5, "not resolved with 3 seeds"),
    # d = 2, 3, 4: [3 - 2.484, 3 + 2.484] excludes 0; TOST at 1: t_high = 2 / 0.577 > 0: p > 0.5
    ([92.0, 93.0, 94.0], [90.0] * 3, 1.0, "different"),
    # d = 0.5, 0.5, 0.6: mean 0.533, s 0.0577, interval [0.39, 0.68] excludes 0, inside ± 1 by far
    ([90.5, 90.5, 90.6], [90.0] * 3, 1.0, "different, but within ± 1"),
])
def test_comparison_verdicts(a, b, margin, verdict):
    d = paired_difference(dict(enumerate(a)), dict(enumerate(b)))
    e = tost([x - y for x, y in zip(a, b)], margin)
    assert verdicts.comparison(d.n, difference_p(d), e.p, margin) == verdict
    assert verdicts.check(verdict, d.n, difference_p(d), e.p, margin) == verdict


def test_a_verdict_word_stronger_than_its_test_is_refused():
    # d = 0.2, 0.4, 0.6 at ± 0.5: the TOST p is 0.2389 and the t-test's 0.0890: neither resolves it
    d = paired_difference({0: 0.2, 1: 0.4, 2: 0.6}, {0: 0.0, 1: 0.0, 2: 0.0})
    e = tost([0.2, 0.4, 0.6], 0.5)
    for stronger in ("equivalent within ± 0.5", "different", "different, but within ± 0.5"):
        with pytest.raises(verdicts.OverstatedVerdict, match="give 'not resolved with 3 seeds'"):
            verdicts.check(stronger, d.n, difference_p(d), e.p, 0.5)
    # a raw p below 0.05 that the family's correction lifts above it is no longer "different"
    assert verdicts.comparison(3, 0.04, math.nan, 1.0) == "different"
    assert verdicts.comparison(3, 0.04 * 5, math.nan, 1.0) == "not resolved with 3 seeds"


# ----------------------------------------------------------------------------- convergence


def cosine_lr(rounds: int, peak: float = 0.1) -> list[float]:
    """The loop's schedule: round t runs at peak (1 + cos(pi (t - 1) / R)) / 2."""
    return [peak * (1 + math.cos(math.pi * (t - 1) / rounds)) / 2 for t in range(1, rounds + 1)]


def test_high_rate_part_of_a_20_round_cosine_schedule():
    # (1 + cos(pi 10 / 20)) / 2 = 0.5 exactly at round 11; round 12: (1 + cos(0.55 pi)) / 2 = 0.42
    assert high_rate_rounds(cosine_lr(20), 0.5) == 11


def test_a_cosine_decayed_unconverged_curve_is_not_converged():
    # rising 2 points a round while the rate is high, then flattened by the decay: the last 3 rounds
    # (80.4, 80.6, 80.8: mean 80.6) against (79.3, 79.9, 80.2: mean 79.8) gain 0.8 < 1 point, spread 0.4:
    # the plain rule calls it converged
    lr = cosine_lr(20)
    curve = [50 + 2 * t for t in range(1, 12)] + [74, 76.5, 78, 79.3, 79.9, 80.2, 80.4, 80.6, 80.8]
    assert plateau(curve).verdict == "converged"
    v = judge(curve, lr)
    # judged on its end it converged; apart: rounds 1-11, the last 3 (68, 70, 72) against (62, 64, 66):
    # gain 6 >= 1: still learning while the rate was high
    assert v.converged and v.end.verdict == "converged"
    assert (v.high_rate.verdict, v.high_rate.gain_pct, v.high_rate_rounds) == ("rising", pytest.approx(6.0), 11)


def test_a_converged_curve_is_converged():
    # flat from round 5 at 97 +- 0.3 points, at the high rate and at the end
    curve = [60, 85, 93, 96] + [97 + 0.3 * (-1) ** t for t in range(16)]
    v = judge(curve, cosine_lr(20))
    assert v.converged and v.high_rate.converged


def test_a_curve_too_short_at_the_high_rate_cannot_converge():
    # 5 rounds: rates 1, 0.905, 0.655, 0.345, 0.095 of the peak: 3 rounds >= 50 %, fewer than 2 windows of 3
    v = judge([90, 95, 96, 96, 96], cosine_lr(5), last_rounds=2)
    assert v.high_rate.verdict == "too short" and v.converged  # its end is flat
    assert judge([90, 95, 96, 96, 96], None, last_rounds=2).high_rate is None  # no lr recorded
    with pytest.raises(ValueError, match="5 rounds of accuracy but 4 learning rates"):
        judge([90, 95, 96, 96, 96], cosine_lr(4))


# ----------------------------------------------------------------------------- tuning past an edge


def test_extension_value_is_the_grids_own_ratio():
    assert extension_value([0.1, 0.2, 0.4], [0.1, 0.2, 0.4], 0.4, 3) == ("extend", pytest.approx(0.8))
    assert extension_value([0.1, 0.2, 0.4], [0.1, 0.2, 0.4], 0.1, 3) == ("extend", pytest.approx(0.05))
    assert extension_value([0.1, 0.3], [0.1, 0.3, 0.9, 2.7], 2.7, 2) == ("bound", None)
    assert extension_value([0.1, 0.2, 0.4], [0.1, 0.2, 0.4], 0.2, 3) == ("interior", None)
    assert extension_value([1, 2], [1, 2], 2, 3) == ("extend", 4)  # integers stay integers


def run_peaked(tmp_path, **changes):
    study = parse_study(doc(**changes), "test")
    run = phases.run_study(study, tmp_path, runner=PEAKED, commit="abc123-dirty")
    return study, run


def test_an_optimum_beyond_the_grid_is_found_and_said_to_be_interior(tmp_path):
    # validation peaks at lr 0.8 (tests/study_runners.py); the grid 0.05 / 0.1 / 0.2 chooses its top,
    # the extension adds 0.4, 0.8 and 1.6 (factor 2, the grid's ratio there); 0.8 is then interior
    study, run = run_peaked(tmp_path, tuning={"last_rounds": 1, "extend_steps": 3})
    c = run.choices[("convnet", "alpha=0.5", "fedavg")]
    assert c.trial == {"lr": pytest.approx(PEAK_LR)} and c.at_edge == ()
    assert [dict(e) for e in c.extension] == [{"key": "lr", "side": "high", "added": [0.4, 0.8, 1.6], "steps": 3,
                                               "bound_steps": 3, "status": "interior"}]
    # two tuning seeds, the score their mean: at lr 0.8 the last round's validation is 0.9 + 0.01 (seed mod 3),
    # seeds 10 and 11: 91 and 92 %, mean 91.5
    assert c.score_pct == pytest.approx(91.5) and len(c.scores[0].seed_scores_pct) == 2
    assert sorted({o.planned.seed for o in run.tuning}) == [10, 11] and len(run.tuning) == 2 * 6
    assert [o.planned.trial["lr"] for o in run.evaluation] == [pytest.approx(PEAK_LR)] * 2


def test_the_bound_is_said_when_hit(tmp_path):
    study, run = run_peaked(tmp_path, tuning={"last_rounds": 1, "extend_steps": 1})
    c = run.choices[("convnet", "alpha=0.5", "fedavg")]
    assert c.trial == {"lr": pytest.approx(0.4)} and c.at_edge == ("lr",)
    assert c.extension[0]["status"] == "bound" and c.extension[0]["added"] == [pytest.approx(0.4)]
    assert "bound hit (1 value(s) added above the grid; bound 1)" in choices.edge_text(c.extension[0])


def test_a_diverged_next_value_stops_the_extension(tmp_path):
    # weight_decay 0.5 makes the stand-in fail above lr 1.0: 0.4 and 0.8 run, 1.6 fails; 0.8 stays at the edge
    study, run = run_peaked(tmp_path, search={"fedavg": {"lr": [0.05, 0.1, 0.2], "weight_decay": [0.5]}},
                            tuning={"last_rounds": 1, "extend_steps": 5})
    c = run.choices[("convnet", "alpha=0.5", "fedavg")]
    assert c.trial["lr"] == pytest.approx(0.8) and c.extension[0]["status"] == "diverged"
    assert sum(o.status == "failed" for o in run.tuning) == 2  # 1.6 on both tuning seeds


def test_a_report_written_without_running_says_the_extension_was_not_run(tmp_path):
    study = parse_study(doc(tuning={"last_rounds": 1, "extend_steps": 0}), "test")
    phases.run_study(study, tmp_path, runner=PEAKED)  # the grid alone: 0.2 chosen at the edge
    wider = parse_study(doc(tuning={"last_rounds": 1, "extend_steps": 2}), "test")
    run = phases.run_study(wider, tmp_path, runner=PEAKED, execute=False)
    c = run.choices[("convnet", "alpha=0.5", "fedavg")]
    assert c.trial == {"lr": 0.2} and c.extension[0]["status"] == "not run"
    assert [o.status for o in run.tuning if o.planned.trial["lr"] == pytest.approx(0.4)] == ["missing", "missing"]


# ----------------------------------------------------------------------------- provenance, the report


def test_every_run_records_its_provenance_and_the_report_lists_what_lacks_it(tmp_path):
    study, run = run_peaked(tmp_path, tuning={"last_rounds": 1, "extend_steps": 0}, equivalence_margin_pts=2.0,
                            methods=["fedavg", "fedavg+ccvr"])
    report.write_report(tmp_path, study, run, command="test", started_unix_s=0.0, commit="abc123-dirty")
    rows = list(csv.DictReader(open(tmp_path / "runs.csv")))
    assert rows and all(r["git_commit"] == "abc123-dirty" and r["git_dirty"] == "True" for r in rows)
    summary = json.loads((tmp_path / "summary.json").read_text())
    # the stand-in records no kernels: every finished run is listed (3 tuning trials x 2 seeds + 2 evaluation)
    assert summary["missing_provenance"]["git_commit"] == [] and len(summary["missing_provenance"]["kernels"]) == 8
    table = (tmp_path / "table.md").read_text()
    assert "* without `kernels`: 8" in table and "* without `git_commit`: 0" in table
    # the stand-in's CCVR equals its training run: differences 0, 0, floored at one of its 1,000 test samples
    # (0.1 point): half width t_{0.975, 1} 0.1 / sqrt(2) = 12.706205 x 0.070711 = 0.898454; TOST within ± 2:
    # t_high = -2 / 0.070711 = -28.284, and with 1 degree of freedom (Cauchy) p = 1/2 + arctan(t) / π
    # = 1/2 - 1.535442 / π = 0.011249: equivalent
    cell = next(c for c in summary["cells"] if c["method"] == "fedavg+ccvr")
    d = cell["paired_difference_vs_base_pct"]
    t = d["tests"]["t"]
    assert t["verdict"] == "equivalent within ± 2" and d["margin_pts"] == 2.0
    assert t["equivalence"] == pytest.approx(0.5 + math.atan(-28.284271) / math.pi, abs=1e-6)
    # the primary test, the exact sign-flip test: 2 seeds give 4 sign patterns; d + 2 = (2, 2) sums to 4 only
    # under (+, +): p_low = 1/4, and so p_high: the TOST's p is 0.25, not resolved (what 2 seeds can show
    # without assuming normal differences), and the table says that the t-test's word differs
    assert (d["primary_test"], d["p_equivalence"], d["verdict"]) == ("permutation", 0.25, "not resolved with 2 seeds")
    assert ("+0.00 [-0.90, +0.90]: not resolved with 2 seeds (exact sign-flip adj. p: difference 1, TOST 0.25); "
            "the t-test says equivalent within ± 2 (t-test adj. p: TOST 0.011)") in table
    # bytes: the stand-in's curve ends at 1,000 x 4 rounds = 4,000 B for both labels of the one run
    assert (cell["bytes"], cell["bytes_vs_base"]) == (4000.0, 1.0) and "| 0.0 (× 1.000) |" in table


@pytest.mark.parametrize("changes, message", [
    ({"equivalence_margin_pts": 0}, "equivalence_margin_pts = 0 is out of range"),
    ({"dataset": "mnist"}, "dataset = 'mnist' is not a dataset bench.fl reads"),
    ({"tuning": {"extend_steps": -1}}, "[tuning] extend_steps = -1 is out of range"),
    ({"convergence": {"last_rounds": 1, "rate_fraction": 1.5}}, "[convergence] rate_fraction = 1.5 is out of range"),
])
def test_the_new_keys_are_checked(changes, message):
    with pytest.raises(StudyError) as err:
        parse_study(doc(**changes), "s.toml")
    assert message in str(err.value) and "\n" not in str(err.value)


# ----------------------------------------------------------------------------- real data


TINY_CIFAR_STUDY = """
name = "tiny-cifar"
preset = "quick"            # 5 clients, 16x16, batch 32
dataset = "cifar10"
models = ["convnet"]
methods = ["fedavg"]
base = "fedavg"
iid = true
rounds = 2
local_epochs = 1
seeds = [0, 1]
tuning_seeds = [0]          # also an evaluation seed: 2 runs in all
[search.fedavg]
lr = [0.05]
[tuning]
last_rounds = 1
[convergence]
last_rounds = 1
[targets]
accuracy_pct = [50.0]
"""


@pytest.mark.slow  # two real ConvNet runs of 2 rounds with pricing: ~5 s
def test_a_study_on_a_generated_dataset_in_cifar10s_on_disk_format(tmp_path, capsys):
    """CIFAR-10's real pickles (tests/test_fl_data.py's writer), 100 random training images: the
    protocol runs on them through --data-dir, the projection printed before the first run."""
    from bench.study.__main__ import main
    from tests.test_fl_data import _write_cifar10

    _write_cifar10(tmp_path / "data", np.random.default_rng(0), per_batch=20, test=20)
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_CIFAR_STUDY)
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out)]) == 2  # a folder dataset needs its folder
    assert "give its folder with --data-dir DIR" in capsys.readouterr().err and not out.exists()
    assert main([str(path), "--out", str(out), "--data-dir", str(tmp_path / "data")]) == 0
    err = capsys.readouterr().err
    projected = err.index("projected local training of the study's 2 runs still to do on cpu")
    assert projected < err.index("[tune 1/1]")
    assert "left in this phase at the pace of its 1 run(s)" in err  # eval 1/2 done: one run's pace, one to go
    runs = list(csv.DictReader(open(out / "runs.csv")))
    assert [r["seed"] for r in runs] == ["0", "1"] and all(r["git_commit"] and r["kernels"] for r in runs)
    info = json.loads(next((out / "grid" / "runs").glob("*/run.json")).read_text())
    # 100 images, 15 held out for validation: 85 train, 20 test (the generated test batch)
    assert (info["train_samples"], info["val_samples"], info["test_samples"]) == (85, 15, 20)
    assert json.loads((out / "summary.json").read_text())["study"]["dataset"] == "cifar10"


# ----------------------------------------------------------------------------- one reference point again


@pytest.mark.parametrize("study, model, setting, method, seed", [
    ("digits", "convnet", "alpha=0.5", "fedavg", 0),
    ("digits", "convnet", "alpha=0.1", "fedavg+spherefed+ffc", 2),
    ("digits-quick", "mobilenetv2", "alpha=0.5", "fedavg+ccvr", 1),
])
def test_the_reproduce_command_resolves_to_the_shipped_runs_point(study, model, setting, method, seed):
    """Training one shipped point takes ~80 s (ConvNet, 20 rounds) or more: instead, the command's
    point is the shipped row's own (the same run id: the same settings, hashed) and its point.json's."""
    import pandas as pd

    from bench.lib.grid.point import run_id
    from bench.study.reproduce import reference_point

    folder = ROOT / "results" / "reference" / study
    point = reference_point(folder, model, setting, method, seed)
    runs = pd.read_csv(folder / "runs.csv")
    row = runs[(runs["model"] == model) & (runs["setting"] == setting) & (runs["method"] == method)
               & (runs["seed"] == seed)]
    assert run_id("bench.study", point) == row["run_id"].iloc[0]
    shipped = json.loads((folder / "grid" / "runs" / row["run_id"].iloc[0] / "point.json").read_text())
    assert shipped["config"] == json.loads(json.dumps(point))


def test_the_reproduce_command_refuses_a_folder_without_a_study(tmp_path, capsys):
    from bench.study.reproduce import main

    assert main([str(tmp_path), "convnet", "iid", "fedavg", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no summary.json" in err and not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------- the double head's local test mode


def test_local_test_accuracy_by_hand():
    """Three classes, features = the input; the global head outputs 0 (softmax 1/3 each). Client 0
    holds classes 0 and 1, its local head 10 x the input: softmax(10, 0, 0) = 0.99991 > 1/3, so Eq. 3
    picks its local head's argmax, the true class: 2 of 2 right. Client 1 holds class 2 only and its
    local head always says 0 (bias 10): 0 of its 2 test samples. Client 2 never trained (no local
    parts): left out. Mean over clients 0 and 1: (1 + 0) / 2 = 0.5."""
    import torch
    from torch import nn

    from workloads.fl.methods.doublehead import local_test_accuracy

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Identity()
            self.classifier = nn.Linear(3, 3)
            self.local_classifier = nn.Linear(3, 3)

    net = Net()
    zero = {k: torch.zeros_like(v) for k, v in net.state_dict().items()}
    own0 = {"local_classifier.weight": 10 * torch.eye(3), "local_classifier.bias": torch.zeros(3)}
    own1 = {"local_classifier.weight": torch.zeros(3, 3), "local_classifier.bias": torch.tensor([10.0, 0, 0])}
    test_x, test_y = torch.eye(3)[[0, 1, 2, 2]], torch.tensor([0, 1, 2, 2])
    acc = local_test_accuracy(net, zero, {0: own0, 1: own1}, [[0, 1, 1], [2, 2], [0]], lambda i: test_x[i], test_y)
    assert acc == pytest.approx(0.5)
    assert local_test_accuracy(net, zero, {}, [[0]], lambda i: test_x[i], test_y) is None


def test_local_test_accuracy_of_a_method_without_local_parts_by_hand():
    """FedAvg's local test mode (Li et al., Sec. 4.1, as they score FedAvg): every client's model is
    the global one. An identity classifier predicts the input's class: on test inputs e0, e1, e2, e2
    with labels 0, 1, 2, 0 it is right, right, right, wrong. Client 0 holds classes {0, 1}: test
    samples 0, 1, 3, two of three right: 2/3. Client 1 holds {2}: sample 2, right: 1. Client 2 holds
    no data: left out. Mean (2/3 + 1) / 2 = 5/6."""
    import torch
    from torch import nn

    from workloads.fl.methods import parse_method

    net = nn.Linear(3, 3)
    weights = {"weight": torch.eye(3), "bias": torch.zeros(3)}
    test_x, test_y = torch.eye(3)[[0, 1, 2, 2]], torch.tensor([0, 1, 2, 0])
    algo = parse_method("fedavg").algo
    assert algo.local_test_accuracy(net, weights, {}, [[0, 1, 1], [2], []], lambda i: test_x[i], test_y) == \
        pytest.approx(5 / 6)
    assert algo.local_test_accuracy(net, weights, {}, [[], []], lambda i: test_x[i], test_y) is None


def test_every_run_reports_its_local_test_accuracy_before_and_after_calibration():
    import torch
    from fl_standins import TinyNet, blobs

    from workloads.fl.hparams import FLConfig, Hparams
    from workloads.fl.loop import run_method
    from workloads.fl.methods import parse_method
    from workloads.fl.partition import dirichlet_partition

    train, test = blobs(60), blobs(20, seed=1)
    parts = dirichlet_partition(train.y.numpy(), 3, 0.5, min_size=5, seed=0)
    cfg, hp = FLConfig(dataset="blobs", num_clients=3, rounds=1), Hparams(lr=0.05, local_epochs=1, batch_size=16)
    results = {m: run_method(parse_method(m), model_fn=TinyNet, train=train, test=test, parts=parts, cfg=cfg, hp=hp)
               for m in ("doublehead", "fedavg", "fedavg+ccvr")}
    assert 0.0 <= results["doublehead"].local_accuracy <= 1.0
    # FedAvg: the final global model on each client's own classes, recomputed here from its weights
    model = TinyNet()
    model.load_state_dict(results["fedavg"].weights)
    model.eval()
    with torch.no_grad():
        correct = model(test.x).argmax(1) == test.y
    own = [correct[torch.isin(test.y, torch.as_tensor(sorted(set(train.y[p].tolist()))))] for p in parts]
    assert results["fedavg"].local_accuracy == sum(int(c.sum()) / len(c) for c in own) / len(own)
    # a calibrated run scores its model before the calibration too: the same training, the same number
    assert results["fedavg+ccvr"].local_accuracy_before_calibration == results["fedavg"].local_accuracy
    assert results["fedavg"].local_accuracy_before_calibration is None


def test_the_local_test_mode_is_compared_with_the_base_paired():
    # FedAvg's local test accuracy 98, 97, 96 on seeds 0-2, the double head's 90, 92, 91: differences
    # -8, -5, -5, mean -6, std sqrt((4 + 1 + 1) / 2) = sqrt(3), half width t_{0.975,2} sqrt(3) / sqrt(3)
    # = 4.303: [-10.30, -1.70], excludes 0. A method whose runs lack the record gets no comparison.
    import pandas as pd

    from bench.lib.study.study_file import load_study
    from bench.study.cells import cells

    study = load_study("configs/studies/digits-systems.toml")
    local = {"fedavg": [98.0, 97.0, 96.0], "doublehead": [90.0, 92.0, 91.0], "fedprox": [None] * 3}
    runs = pd.DataFrame([{"model": "convnet", "setting": "iid", "method": m, "seed": s, "final_accuracy_pct": 97.0,
                          "best_accuracy_pct": 98.0, "final_local_accuracy_pct": v, "converged": True, "bytes": 1.0,
                          "verdict": "converged", "high_rate_verdict": "converged", "test_samples": 360}
                         for m, values in local.items() for s, v in enumerate(values)])
    by = {c["method"]: c for c in cells(study, runs, pd.DataFrame()) if c["setting"] == "iid" and c.get("n")}
    d = by["doublehead"]["local_difference_vs_base_pct"]
    assert d["mean"] == pytest.approx(-6.0) and d["std"] == pytest.approx(3 ** 0.5)
    assert (d["ci_low"], d["ci_high"]) == pytest.approx((-6 - 4.302653, -6 + 4.302653), abs=1e-5)
    assert "local_difference_vs_base_pct" not in by["fedprox"] and "local_difference_vs_base_pct" not in by["fedavg"]


# ----------------------------------------------------------------------------- ties in tuning


def test_a_tie_is_broken_the_same_way_under_two_grid_orders():
    from bench.lib.study.tuning import TrialScore, centre_distance, choose

    # SphereFed IID on the digits (results/reference/digits): lr 0.25, 0.5 and 2 score 98.84 (equal), lr 1 98.69.
    # Centre of the values tried, on a log scale: (ln 0.25 + ln 2) / 2 = ln 0.7071; range ln 8 = 2.0794.
    # Distances: 0.5 -> |ln 0.5 - ln 0.7071| / 2.0794 = 0.3466 / 2.0794 = 0.1667; 2 and 0.25 -> 1.0397 / 2.0794 = 0.5.
    # So 0.5 wins in any order (the first-listed rule chose 0.25 or 0.5 by the listing).
    scores = {0.25: 98.84, 0.5: 98.84, 1.0: 98.69, 2.0: 98.84}
    space = {"lr": [0.25, 0.5, 1.0, 2.0]}
    assert centre_distance({"lr": 0.5}, space) == pytest.approx(1 / 6, abs=1e-12)
    assert centre_distance({"lr": 2.0}, space) == pytest.approx(0.5, abs=1e-12)
    for order in ([0.25, 0.5, 1.0, 2.0], [2.0, 1.0, 0.5, 0.25], [1.0, 0.25, 2.0, 0.5]):
        c = choose([TrialScore({"lr": v}, scores[v]) for v in order], {"lr": order}, 100 / 216)
        assert c.trial == {"lr": 0.5} and c.tie
        # decisive by 0 samples; within one sample (0.463 points): 0.25 and 2 (equal) and 1 (0.15 below)
        assert c.margin_samples == pytest.approx(0.0, abs=1e-9)
        assert sorted(t["lr"] for t in c.near) == [0.25, 1.0, 2.0]
    # equidistant from the centre: the smaller value. [0.1, 0.2, 0.4]: 0.1 and 0.4 tie at distance 1/2 each
    c = choose([TrialScore({"lr": 0.4}, 90.0), TrialScore({"lr": 0.2}, 80.0), TrialScore({"lr": 0.1}, 90.0)],
               {"lr": [0.1, 0.2, 0.4]})
    assert c.trial == {"lr": 0.1} and c.margin_samples is None  # no validation size given: decisiveness unknown


def test_near_ties_within_one_validation_sample_go_to_the_centre_when_declared():
    from bench.lib.study.tuning import TrialScore, choose

    # one validation sample of 200 is 0.5 points. 0.1 scores 90.3, 0.2 scores 90.0 (0.6 samples below),
    # 0.4 scores 88.0. "best": 0.1 wins by 0.6 samples, a tie with 0.2; "centre": 0.2 (the centre of
    # [0.1, 0.4] on a log scale) wins the near tie, 0.6 samples below 0.1.
    scores = [TrialScore({"lr": 0.1}, 90.3), TrialScore({"lr": 0.2}, 90.0), TrialScore({"lr": 0.4}, 88.0)]
    space = {"lr": [0.1, 0.2, 0.4]}
    best = choose(scores, space, 0.5)
    assert best.trial == {"lr": 0.1} and best.margin_samples == pytest.approx(0.6) and best.tie
    centre = choose(scores, space, 0.5, near_tie="centre")
    assert centre.trial == {"lr": 0.2} and centre.margin_samples == pytest.approx(-0.6) and centre.tie
    assert choose(scores, space, 0.25).tie is False  # 0.3 points is 1.2 samples of 400: decided


# ----------------------------------------------------------------------------- the seed plan


def test_the_seed_plan_runs_the_seeds_the_tuning_spread_asks_for(tmp_path):
    # The "opposite" stand-in (tests/study_runners.py): a calibrated method's final validation accuracy is its
    # training run's + 1 point on every tuning seed: paired differences +1, +1, +1, s = 0, floored at one of its
    # 200 validation samples (0.5 point). The plan takes the pilot's mean (+1) as the truth and the spread's
    # upper 80 % bound on 2 degrees of freedom: 0.5 x sqrt(2 / chi2_{0.2, 2}) = 0.5 x sqrt(2 / 0.446287) = 1.058468.
    # At a true +1 a TOST within ± 1 cannot succeed; the difference test needs the smallest n with
    # (t_{0.975, n-1} + t_{0.8, n-1}) 1.058468 / sqrt(n) <= 1: n = 10 gives (2.262157 + 0.883404) x 1.058468 / 3.162278 = 1.0528 > 1,
    # n = 11 gives (2.228139 + 0.879058) x 1.058468 / 3.316625 = 0.9916: 11 (one comparison: alpha / 1).
    # The bounds [3, 6] clamp it to 6: seeds 0-5 of 0-7.
    study = parse_study(doc(methods=["fedavg", "fedavg+ccvr"], seeds=list(range(8)), tuning_seeds=[10, 11, 12],
                            seed_plan={"min_seeds": 3, "max_seeds": 6}), "p")
    run = phases.run_study(study, tmp_path, runner="tests.study_runners:opposite")
    (plan,) = run.seed_plans
    (c,) = plan.comparisons
    assert (c.method, c.tuning_seeds, c.sd_pts, c.mean_pts, c.seeds_needed, plan.seeds) == \
        ("fedavg+ccvr", 3, 0.5, pytest.approx(1.0), 11, 6)
    assert c.sd_upper_pts == pytest.approx(1.058468, abs=1e-6) and c.alpha == pytest.approx(0.05)
    assert sorted({o.planned.seed for o in run.evaluation}) == [0, 1, 2, 3, 4, 5]
    report.write_report(tmp_path, study, run, command="test", started_unix_s=0.0, commit="t")
    table = (tmp_path / "table.md").read_text()
    assert "| convnet | alpha=0.5 | 6 | fedavg+ccvr: +1.00, 0.50 → 1.06, 0.05, 11; 0.03 → " in table  # at a true difference of m, a TOST succeeds about α of the time
    # the plan was registered as the evaluation started, and binds: the same folder under a study file whose
    # bounds now say [3, 4] still runs the registered 6 (a change the study file must declare; bench.study
    # refuses an undeclared one before anything runs: test_study_registration.py)
    registered = json.loads((tmp_path / "registration.json").read_text())
    assert registered["planned"]["seed_counts"] == {"convnet alpha=0.5": 6}
    fewer = parse_study(doc(methods=["fedavg", "fedavg+ccvr"], seeds=list(range(8)), tuning_seeds=[10, 11, 12],
                            seed_plan={"min_seeds": 3, "max_seeds": 4}), "p")
    assert phases.run_study(fewer, tmp_path, runner="tests.study_runners:opposite", execute=False).seed_plans[0].seeds == 6


@pytest.mark.parametrize("changes, message", [
    ({"seed_plan": {"min_seeds": 1}}, r"\[seed_plan\] min_seeds = 1 is out of range"),
    ({"seed_plan": {"min_seeds": 2, "max_seeds": 3}}, r"\[seed_plan\] max_seeds = 3 is out of range"),
    ({"verdicts": {"correction": "bonferroni"}}, r'\[verdicts\] correction = .bonferroni.: give "holm"'),
    ({"verdicts": {"power": 1.0}}, r"\[verdicts\] power = 1 must be below 1"),
    ({"tuning": {"last_rounds": 1, "near_tie": "first"}}, r'\[tuning\] near_tie = .first.: give "best"'),
    ({"compare": [["fedavg", "fedavg"]]}, "compare two different methods"),
    ({"compare": [["fedprox", "fedavg"]]}, "compare: 'fedprox' is not one of the study's methods"),
])
def test_bad_protocol_keys_are_one_line(changes, message):
    with pytest.raises(StudyError, match=message) as err:
        parse_study(doc(**changes), "p.toml")
    assert "\n" not in str(err.value)


def test_the_projection_times_each_number_format_on_its_own():
    # a study's runs in a number format are timed in it (its emulation costs time), not at the
    # FP32 rate of the first run of the same model and method
    from dataclasses import replace as _replace

    from bench.lib.study.runner import make_point, projected_local_training_s
    from workloads.fl.execution import Execution
    from workloads.fl.presets import load_preset

    quick = load_preset("quick")
    fl = _replace(quick.fl, rounds=1, num_clients=2)
    points = [make_point("convnet", "fedavg", 0, fl, quick.hp, Execution(number_format=f))
              for f in ("fp32", "bfp_m4_g16", "fp32")]
    per = projected_local_training_s(points)
    assert sorted(per) == [("convnet", "fedavg", "bfp_m4_g16"), ("convnet", "fedavg", "fp32")]
    assert per[("convnet", "fedavg", "fp32")][0] == 2 and per[("convnet", "fedavg", "bfp_m4_g16")][0] == 1

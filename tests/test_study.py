"""The accuracy study (bench.study): statistics on hand-made numbers, the plateau rule on hand-made
curves, tuning that reads validation only, fixed time-to-accuracy targets, paired seeds, the study
file's fail-fast checks, and the report end to end on a stand-in runner (tests/study_runners.py)."""

from __future__ import annotations

import csv
import functools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from bench.study import phases, report
from bench.lib.study.curves import base_validation_target, first_reaching, plateau
from bench.lib.study.runner import make_point, parse_point
from bench.lib.study.spec import Setting, StudyError
from bench.lib.study.study_file import parse_study
from bench.lib.study.stats import estimate, paired_difference, spread, t_quantile
from bench.lib.study.tuning import TrialScore, choose, score

ROOT = Path(__file__).resolve().parents[1]
OPPOSITE = "tests.study_runners:opposite"


def study_doc(**changes) -> dict:
    doc = {"name": "t", "preset": "quick", "models": ["convnet"], "methods": ["fedavg", "spherefed", "fedavg+ccvr"],
           "base": "fedavg", "alphas": [0.5], "rounds": 6, "seeds": [0, 1, 2], "tuning_seeds": [7],
           "search": {"fedavg": {"lr": [0.05, 0.1, 0.2]}, "spherefed": {"lr": [0.5, 1.0]}},
           "convergence": {"last_rounds": 2}, "targets": {"accuracy_pct": [50.0], "base_validation_fraction": 0.9},
           "tuning": {"extend_steps": 0}}  # the edge extension: tests/test_study_protocol.py
    doc.update(changes)
    return doc


# ----------------------------------------------------------------------------- statistics


def test_mean_sample_std_and_t_interval_of_three_values():
    e = estimate([90.0, 92.0, 94.0])
    # mean 92; deviations -2, 0, 2: sum of squares 8 over n - 1 = 2 -> variance 4, s = 2
    assert (e.n, e.mean, e.std) == (3, 92.0, 2.0)
    # t_{0.975, 2} = 4.302653 (Student t, 2 degrees of freedom, two-sided 95 %); with 2 degrees of
    # freedom the CDF is 1/2 + t / (2 sqrt(2 + t^2)), so F(t) = 0.975 gives t = 0.95 sqrt(2 / (1 - 0.95^2));
    # half width 4.3026527 * 2 / sqrt(3) = 4.968276
    assert t_quantile(3) == pytest.approx(0.95 * math.sqrt(2 / (1 - 0.95 ** 2)), rel=1e-12)
    assert t_quantile(3) == pytest.approx(4.302653, abs=1e-6)
    assert e.low == pytest.approx(92 - 4.968276, abs=1e-6)
    assert e.high == pytest.approx(92 + 4.968276, abs=1e-6)


def test_one_value_has_no_spread():
    e = estimate([80.0])
    assert e.mean == 80.0 and math.isnan(e.std) and math.isnan(e.low)


def test_paired_difference_over_common_seeds():
    a = {0: 92.0, 1: 95.0, 2: 91.0, 9: 50.0}  # seed 9 has no partner: left out
    b = {0: 90.0, 1: 92.0, 2: 90.0}
    d = paired_difference(a, b)
    # differences 2, 3, 1: mean 2, s = 1; half width 4.3026527 * 1 / sqrt(3) = 2.484138
    assert (d.n, d.mean, d.std) == (3, 2.0, 1.0)
    assert (d.low, d.high) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)


def test_paired_interval_agrees_with_scipy_ttest_rel():
    from scipy import stats

    rng = np.random.default_rng(3)
    a, b = rng.normal(80, 5, 5), rng.normal(78, 5, 5)
    d = paired_difference(dict(enumerate(a)), dict(enumerate(b)))
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert (d.low, d.high) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_spread_counts_unreached_seeds_without_using_them():
    s = spread([3.0, None, 5.0, 4.0])
    assert (s.reached, s.of, s.median, s.low, s.high) == (3, 4, 4.0, 3.0, 5.0)
    assert spread([None, None]).median is None


# ----------------------------------------------------------------------------- the plateau rule


def test_plateau_rule_on_hand_made_curves():
    # last 3 mean 96.4, 3 before 96.17: gain 0.23 < 1, spread 0.2 <= 2 -> converged
    assert plateau([50, 70, 85, 95, 96, 96.2, 96.3, 96.5, 96.4]).verdict == "converged"
    # last 3 (95, 96, 97) mean 96 against (90, 92, 94) mean 92: gain 4 -> rising
    assert plateau([80, 90, 92, 94, 95, 96, 97]).verdict == "rising"
    # (90, 95, 91) mean 92 against (96, 89, 92) mean 92.33: gain 0.33, but spread 7 > 2 -> noisy
    assert plateau([90, 95, 91, 96, 89, 92]).verdict == "noisy"
    assert plateau([95, 95, 95, 90, 90, 90]).verdict == "falling"
    assert plateau([1, 2, 3, 4, 5]).verdict == "too short"  # 2 windows of 3 need 6 rounds
    v = plateau([80, 90, 92, 94, 95, 96, 97])
    assert (v.gain_pct, v.spread_pct, v.converged) == (pytest.approx(4.0), pytest.approx(2.0), False)


def test_plateau_tolerance_decides():
    curve = [90, 91, 92, 93, 93.5, 94]  # gain (93 + 93.5 + 94) / 3 - 91 = 2.5
    assert plateau(curve, 3, 3.0).verdict == "converged"
    assert plateau(curve, 3, 2.0).verdict == "rising"


# ----------------------------------------------------------------------------- tuning


def test_score_reads_validation_of_the_last_rounds_only():
    curve = [{"stage": "train", "val_accuracy": v, "accuracy": 1.0 - v} for v in (0.2, 0.5, 0.7, 0.9)]
    curve.append({"stage": "calibration", "val_accuracy": 0.1, "accuracy": 0.1})
    assert score(curve, 2) == pytest.approx(80.0)  # (0.7 + 0.9) / 2, the calibration row left out


def test_choose_best_score_first_on_ties_failed_out():
    space = {"lr": (0.1, 0.2, 0.4)}
    scores = [TrialScore({"lr": 0.1}, 80.0), TrialScore({"lr": 0.2}, 85.0), TrialScore({"lr": 0.4}, 85.0)]
    c = choose(scores, space)
    assert c.trial == {"lr": 0.2} and c.at_edge == ()
    c = choose([TrialScore({"lr": 0.1}, None), TrialScore({"lr": 0.2}, 70.0), TrialScore({"lr": 0.4}, 90.0)], space)
    assert c.trial == {"lr": 0.4} and c.at_edge == ("lr",)
    assert choose([TrialScore({"lr": 0.1}, None)], space).trial is None


@pytest.fixture(scope="module")
def opposite_study(tmp_path_factory):
    """A study run on the stand-in whose validation and test rank the learning rates oppositely."""
    out = tmp_path_factory.mktemp("opposite")
    study = parse_study(study_doc(), "test")
    run = phases.run_study(study, out, runner=OPPOSITE)
    files = report.write_report(out, study, run, command="test", started_unix_s=0.0, commit="test")
    return study, run, out, files


def test_tuning_follows_validation_not_test(opposite_study):
    study, run, out, _ = opposite_study
    # validation 0.5 + lr prefers the largest rate, test 0.9 - lr the smallest
    assert run.choices[("convnet", "alpha=0.5", "fedavg")].trial == {"lr": 0.2}
    assert run.choices[("convnet", "alpha=0.5", "fedavg+spherefed")].trial == {"lr": 1.0}
    rows = list(csv.DictReader(open(out / "tuning.csv")))
    fedavg = [r for r in rows if r["method"] == "fedavg"]
    by_test = max(fedavg, key=lambda r: float(r["final_test_accuracy_pct_not_used"]))
    assert float(by_test["lr"]) == 0.05 and by_test["chosen"] == "False"
    assert [r["chosen"] for r in fedavg] == ["False", "False", "True"]


def test_evaluation_runs_the_choice_on_every_seed_and_calibration_reuses_the_run(opposite_study):
    study, run, out, _ = opposite_study
    configs = [o.planned.config for o in run.evaluation]
    assert sorted((c["method"], c["seed"], c["hparams"]["lr"]) for c in configs) == [
        ("fedavg+ccvr", s, 0.2) for s in (0, 1, 2)] + [("fedavg+spherefed", s, 1.0) for s in (0, 1, 2)]
    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert sorted({r["method"] for r in rows}) == ["fedavg", "fedavg+ccvr", "fedavg+spherefed"]
    assert len(rows) == 9


def test_report_statistics_match_the_stand_in(opposite_study):
    study, run, out, files = opposite_study
    summary = json.loads((out / "summary.json").read_text())
    cell = next(c for c in summary["cells"] if c["method"] == "fedavg+ccvr")
    # final test accuracy of seed s: 100 (0.1 + 0.8 - 0.2 + 0.001 s) + 1 (calibration) = 71.0 + 0.1 s
    assert cell["final_accuracy_pct"]["mean"] == pytest.approx(71.1)
    assert cell["final_accuracy_pct"]["std"] == pytest.approx(0.1)
    # paired change against fedavg: exactly the calibration's +1 point on every seed
    assert cell["paired_difference_vs_base_pct"]["mean"] == pytest.approx(1.0)
    assert cell["paired_difference_vs_base_pct"]["std"] == pytest.approx(0.0, abs=1e-9)
    table = (out / "table.md").read_text()
    assert "| convnet | fedavg | 70.10 ± 0.10 |" in table
    assert "| fedavg+ccvr | 71.10 ± 0.10 (↑ 1.00) †" in table  # linear ramp: still rising at the end
    assert {"runs.csv", "curves.csv", "tuning.csv", "tta.csv", "table.md", "summary.json",
            "curves_convnet.png"} <= set(files)
    assert all((out / f).is_file() for f in files)


def test_rerun_resumes_without_running_anything(opposite_study, tmp_path):
    study, run, out, _ = opposite_study
    log = []
    again = phases.run_study(study, out, runner=OPPOSITE, progress=log.append)
    assert again.choices == run.choices
    assert [line for line in log if line.startswith("[")] and all(": skipped" in line for line in log
                                                                  if line.startswith("["))


def test_number_formats_run_at_the_fp32_choice_and_are_compared_with_fp32(tmp_path):
    formats = parse_study(study_doc(number_formats=["bfp_m2_g16", "fp32", "bfp_m2_g16_sr"]), "test")
    plain = parse_study(study_doc(), "test")
    assert [s.label for s in formats.settings] == ["alpha=0.5", "alpha=0.5 bfp_m2_g16", "alpha=0.5 bfp_m2_g16_sr"]
    ex = phases.execution(formats)
    # tuning runs in FP32 only, and its points are the points of the study without formats
    assert [p.config for p in phases.tuning_plan(formats, ex)] == [p.config for p in phases.tuning_plan(plain, ex)]
    run = phases.run_study(formats, tmp_path, runner=OPPOSITE)
    assert len(run.tuning) == 5 and len(run.evaluation) == 3 * 2 * 3  # 3 settings x 2 training methods x 3 seeds
    lrs = {(o.planned.setting.label, o.planned.training): o.planned.config["hparams"]["lr"] for o in run.evaluation}
    assert lrs[("alpha=0.5 bfp_m2_g16", "fedavg")] == lrs[("alpha=0.5", "fedavg")] == 0.2  # FP32's choice
    fmt = {o.planned.setting.number_format: o.planned.config["execution"].get("number_format") for o in run.evaluation}
    assert fmt == {"fp32": None, "bfp_m2_g16": "bfp_m2_g16", "bfp_m2_g16_sr": "bfp_m2_g16_sr"}
    report.write_report(tmp_path, formats, run, command="test", started_unix_s=0.0, commit="test")
    summary = json.loads((tmp_path / "summary.json").read_text())
    cell = next(c for c in summary["cells"] if c["setting"] == "alpha=0.5 bfp_m2_g16" and c["method"] == "fedavg+ccvr")
    # the stand-in loses 0.05 of accuracy in bfp_m2_g16 on every seed: -5 points, no spread
    assert cell["paired_difference_vs_fp32_pct"]["mean"] == pytest.approx(-5.0)
    assert cell["paired_difference_vs_fp32_pct"]["std"] == pytest.approx(0.0, abs=1e-9)
    assert "paired_difference_vs_fp32_pct" not in next(c for c in summary["cells"] if c["setting"] == "alpha=0.5")
    table = (tmp_path / "table.md").read_text()
    assert "## Number formats: paired difference against FP32" in table
    # no spread: floored at one of the stand-in's 1,000 test samples (0.1 point): half width
    # t_{0.975, 2} 0.1 / sqrt(3) = 4.302653 x 0.057735 = 0.248414; a difference of 5 (and of 2) is resolved.
    # p of -2: t = 2 / 0.057735 = 34.641, 2 degrees of freedom: p = 1 - t / sqrt(2 + t^2) = 0.000833. The
    # family: 3 methods x 2 formats against FP32, three at -5 (p ~ 1e-4) and three at -2; Holm multiplies
    # the fourth-smallest by 6 - 4 + 1 = 3: 0.0025, and the running maximum keeps it for the other two.
    # The primary test, the exact sign-flip test, cannot resolve 3 seeds: its smallest two-sided p is 2 / 2^3 =
    # 0.25 (x 6 by Holm: 1); each row says so, and what the t-test says.
    row = next(line for line in table.splitlines() if line.startswith("| convnet | fedavg | -5.00"))
    assert ("-5.00 [-5.25, -4.75]: not resolved with 3 seeds (exact sign-flip adj. p: difference 1, TOST 1); "
            "the t-test says different (t-test adj. p: difference <0.001)") in row
    assert "-2.00 [-2.25, -1.75]: not resolved with 3 seeds (exact sign-flip adj. p: difference 1, TOST 1); " \
           "the t-test says different (t-test adj. p: difference 0.0025)" in row
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert sorted(set(runs["number_format"])) == ["bfp_m2_g16", "bfp_m2_g16_sr", "fp32"]


@pytest.mark.parametrize("formats, message", [
    (["bf16"], r'number_formats = \[.bf16.\]: add "fp32"'),
    (["fp32", "int8"], "number_formats: number format 'int8'"),
    (["fp32", "bf16", "bf16"], "number_formats"),
])
def test_bad_number_formats_are_refused(formats, message):
    with pytest.raises(StudyError, match=message):
        parse_study(study_doc(number_formats=formats), "test")


def test_busy_time_is_the_union_of_the_runs_intervals():
    # Two workers: [0, 10] and [5, 12] overlap (12 s busy); a resume an hour later runs [3612, 3620]
    # (8 s), beside [3615, 3618] (inside it): 12 + 8 = 20 s, where the span would be 3,620 s.
    intervals = [(3615.0, 3618.0), (0.0, 10.0), (3612.0, 3620.0), (5.0, 12.0)]
    assert report.busy_s(intervals) == 20.0
    assert report.busy_s([]) == 0.0
    assert report.busy_s([(1.0, 2.0), (2.0, 3.0)]) == 2.0  # touching intervals: no double count


@pytest.mark.slow  # two spawned processes import torch: ~15 s on the loaded 2-core machine
def test_two_local_workers_give_the_same_study(opposite_study, tmp_path):
    study, run, _, _ = opposite_study
    side_by_side = phases.run_study(study, tmp_path, runner=OPPOSITE, workers=2)
    assert side_by_side.choices == run.choices
    assert [o.curve for o in side_by_side.evaluation] == [o.curve for o in run.evaluation]


# ----------------------------------------------------------------------------- fixed targets


def test_a_fixed_target_does_not_move_with_another_method(opposite_study):
    study, run, _, _ = opposite_study
    runs = report.method_runs(study, run)
    before = report.tta_table(study, runs)
    # SphereFed's curves jump to 100 % from round 1: a target relative to the methods' results would move
    changed = [report.MethodRun(r.model, r.setting, r.method, r.seed, r.trial,
                                tuple({**row, "accuracy": 1.0} for row in r.curve), r.outcome)
               if r.method == "fedavg+spherefed" else r for r in runs]
    after = report.tta_table(study, changed)
    others = lambda df: df[df["method"] != "fedavg+spherefed"].reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(others(before), others(after), check_dtype=False)
    assert sorted(before["target_pct"].unique()) == sorted(after["target_pct"].unique())
    sphere = after[after["method"] == "fedavg+spherefed"]
    assert set(sphere["round"]) == {1}  # and its own time to accuracy did change


def test_base_validation_target_reads_the_base_validation_curves():
    # mean curve over seeds: (50, 70, 85) and (60, 80, 75) -> 55, 75, 80; best 80; 95 % -> 76
    assert base_validation_target([[50, 70, 85], [60, 80, 75]], 0.95) == pytest.approx(76.0)


def test_first_reaching_gives_the_round_and_its_cost():
    curve = [{"round": t, "accuracy": a, "cum_wall_s": 10 * t, "cum_device_s": t, "cum_energy_j": 2 * t,
              "cum_bytes": 100 * t} for t, a in ((1, 0.3), (2, None), (3, 0.81), (4, 0.9))]
    reach = first_reaching(curve, 80.0)
    assert (reach.round, reach.wall_s, reach.energy_j, reach.bytes) == (3, 30.0, 6.0, 300.0)
    assert first_reaching(curve, 95.0) is None


# ----------------------------------------------------------------------------- pairing


def test_seed_gives_every_method_the_same_partition_and_initial_body_weights():
    from workloads import model_spec
    from workloads.fl.execution import Execution
    from workloads.fl.loop import build_on_device
    from workloads.fl.presets import make_partition

    study = parse_study(study_doc(), "test")
    labels = np.random.default_rng(0).integers(0, 10, 500)

    def setup(method: str, seed: int):
        p = parse_point(make_point("convnet", method, seed, study.fl("convnet", study.settings[0], seed),
                                   study.hparams(method, {"lr": 0.1}), Execution()))
        spec = model_spec.ModelSpec("convnet", (3, 16, 16), None)
        build = functools.partial(model_spec.build, spec, num_classes=10, head=p.method.head)
        weights = build_on_device(p.method, build, p.fl.seed, p.execution).state_dict()
        return make_partition(labels, p.fl), weights

    parts_a, fedavg = setup("fedavg+ccvr", 1)
    parts_b, sphere = setup("spherefed", 1)
    parts_c, other_seed = setup("fedavg", 2)
    assert all(np.array_equal(a, b) for a, b in zip(parts_a, parts_b))
    assert not all(np.array_equal(a, c) for a, c in zip(parts_a, parts_c))
    body = [k for k in fedavg if not k.startswith("classifier")]
    assert body and all(torch.equal(fedavg[k], sphere[k]) for k in body)
    assert not all(torch.equal(fedavg[k], other_seed[k]) for k in body)
    assert not torch.equal(fedavg["classifier.weight"], sphere["classifier.weight"])  # SphereFed's fixed one


# ----------------------------------------------------------------------------- the study file


@pytest.mark.parametrize("changes, message", [
    ({"bogus": 1}, "unknown key 'bogus'"),
    ({"methods": ["fedavg", "spherfed"]}, "unknown method name"),
    ({"base": "fedprox"}, "base = 'fedprox' is not one of the methods"),
    ({"methods": ["fedavg", "fedavg+ccvr", "fedavg+ffc"], "search": {"fedavg": {"lr": [0.1]}}},
     "calibrate the same run of fedavg"),
    ({"alphas": [], "iid": False}, "alphas = [] must be a non-empty list"),
    ({"alphas": [0.5, 0.5]}, "lists 0.5 twice"),
    ({"seeds": [0]}, "at least 2 evaluation seeds"),
    ({"search": {"fedavg": {"lr": [0.1]}}}, "no [search.fedavg+spherefed] table"),
    ({"search": {"fedavg": {"momentum": [0.9]}, "spherefed": {"lr": [0.5]}}}, "must search at least lr"),
    ({"search": {"fedavg": {"lr": [0.1], "lrr": [1]}, "spherefed": {"lr": [0.5]}}}, "unknown key 'lrr'"),
    ({"search": {"fedavg": {"lr": [-0.1]}, "spherefed": {"lr": [0.5]}}}, "lr must be > 0"),
    ({"targets": {}}, "declares no target"),
    ({"rounds": 3}, "needs at least 4 rounds"),
    ({"holdout_fraction": 0.0}, "holdout_fraction = 0.0 is out of range"),
    ({"name": "../x"}, "file-name-safe"),
])
def test_a_bad_study_file_is_one_line_naming_the_key(changes, message):
    with pytest.raises(StudyError) as err:
        parse_study(study_doc(**changes), "s.toml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_command_refuses_a_bad_study_before_any_folder(tmp_path, capsys):
    from bench.study.__main__ import main

    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\npreset = "quick"\n')
    out = tmp_path / "out"
    assert main([str(bad), "--out", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not out.exists()


def test_shipped_studies_parse_and_plan():
    for name in ("digits", "digits-quick"):
        study = phases_study = parse_study(__import__("tomllib").loads(
            (ROOT / "configs" / "studies" / f"{name}.toml").read_text()), name)
        plan = phases.tuning_plan(phases_study, phases.execution(study))
        tuned = {s.tuned_on for s in study.settings}  # fleets and other formats run at these settings' choices
        assert len(plan) == len(study.models) * len(tuned) * sum(
            len(study.trials(t)) for t in study.training_methods) * len(study.tuning_seeds)


def test_setting_labels():
    assert Setting("iid").label == "iid" and Setting("dirichlet", 0.1).title == "α=0.1"


# ----------------------------------------------------------------------------- end to end


SMALL_STUDY = """
name = "ci"
preset = "quick"
models = ["convnet"]
methods = ["fedavg", "spherefed"]
base = "fedavg"
alphas = [0.5]
rounds = 3
local_epochs = 1
seeds = [0, 1]
tuning_seeds = [0]          # also an evaluation seed: the chosen trial's tuning run is reused
[search.fedavg]
lr = [0.05, 0.1]
[search.spherefed]
lr = [0.5]
[tuning]
last_rounds = 1
extend_steps = 0            # no edge extension: 3 tuning runs (tests/test_study_protocol.py extends)
[convergence]
last_rounds = 1
[targets]
accuracy_pct = [50.0]
"""


@pytest.mark.slow
def test_the_command_end_to_end_on_a_small_study(tmp_path, capsys):
    """ConvNet, FedAvg and SphereFed, 2 seeds, 3 rounds of 1 local epoch: 3 tuning runs and 2 more evaluation runs
    (the tuning seed is evaluation seed 0); then a rerun resumes without training anything."""
    from bench.study.__main__ import main

    path = tmp_path / "ci.toml"
    path.write_text(SMALL_STUDY)
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("[tune ") == 3 and err.count("[eval ") == 4 and err.count(": skipped") == 2
    runs = list(csv.DictReader(open(out / "runs.csv")))
    assert sorted((r["method"], r["seed"]) for r in runs) == [
        ("fedavg", "0"), ("fedavg", "1"), ("fedavg+spherefed", "0"), ("fedavg+spherefed", "1")]
    assert all(0 < float(r["final_accuracy_pct"]) <= 100 and r["cpu"] for r in runs)
    curves = list(csv.DictReader(open(out / "curves.csv")))
    assert len(curves) == 4 * 3 and all(c["val_accuracy_pct"] for c in curves)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["evaluation"] == {"done": 4, "failed": 0, "missing": 0}
    assert summary["study"]["name"] == "ci" and summary["git_commit"] and summary["machine"]["cpu"]
    # 5 distinct runs (evaluation seed 0 is the tuning run), each by this checkout's code
    assert summary["run_commits"] == {summary["git_commit"]: 5} and summary["run_machines"][0]["runs"] == 5
    assert {r["git_commit"] for r in runs} == {summary["git_commit"]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "complete" and "table.md" in manifest["files"]
    table = (out / "table.md").read_text()
    assert main([str(path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count(": skipped") == 7 and err.count(": done") == 0
    assert (out / "table.md").read_text().split("\n", 3)[3] == table.split("\n", 3)[3]  # all but the timing line
    # --reprice: runs priced by this code re-price to themselves; the report names the commit that re-priced them
    runs_csv = (out / "runs.csv").read_text()
    assert main([str(path), "--out", str(out), "--reprice"]) == 0
    assert "re-priced 5 run(s): 0 with new cost columns, 5 unchanged" in capsys.readouterr().err
    assert (out / "runs.csv").read_text() == runs_csv
    assert json.loads((out / "summary.json").read_text())["repriced_commits"] == {summary["git_commit"]: 5}

"""bench.run's use of the shipped reference studies (bench/lib/run/reference.py, issue 23 item 4): which
study covers a run, the learning rates it hands over, the fixed time-to-accuracy target, and the
verdict: the reference's own seed run (not new evidence) or the prediction interval for a new seed."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from bench.lib.fl.jobs import Job
from bench.lib.run import reference
from workloads.fl.methods import parse_method
from workloads.fl.presets import load_preset

QUICK = load_preset("quick")


def quick_fl(**changes):
    return replace(QUICK.fl, **{"model": "mobilenetv2", "seed": 0, **changes})


def job(name: str) -> Job:
    return Job(name, QUICK.hparams(parse_method(name)))


@pytest.fixture(scope="module")
def refs():
    found = reference.studies()
    assert {"digits", "digits-quick"} <= {r.name for r in found}
    return found


def chosen_lr(ref, model: str, method: str) -> float:
    """The rate the study's own tuning.csv marks as chosen (what the study decided on validation)."""
    tuning = pd.read_csv(ref.folder / "tuning.csv")
    row = tuning[(tuning["model"] == model) & (tuning["method"] == method) & tuning["chosen"]]
    return float(row["lr"].iloc[0])


def test_the_quick_preset_takes_the_5_round_studys_tuned_rates(refs):
    jobs, notes = reference.rates([job("fedavg+ccvr"), job("spherefed+ffc")], "mobilenetv2", quick_fl(), QUICK, "study", refs)
    quick = next(r for r in refs if r.name == "digits-quick")
    assert [j.hp.lr for j in jobs] == [chosen_lr(quick, "mobilenetv2", "fedavg"),
                                       chosen_lr(quick, "mobilenetv2", "fedavg+spherefed")]
    assert {n["study"] for n in notes.values()} == {"digits-quick"}
    assert all(n["from"].startswith("reference study digits-quick") for n in notes.values())
    # everything but the searched rate is the preset's
    assert replace(jobs[0].hp, lr=QUICK.hparams(parse_method("fedavg+ccvr")).lr) == job("fedavg+ccvr").hp


@pytest.mark.parametrize("change", [{"rounds": 6}, {"alpha": 0.3}, {"num_clients": 4}, {"holdout_fraction": 0.0}])
def test_a_run_that_differs_in_more_than_the_seed_is_not_covered(refs, change):
    jobs, notes = reference.rates([job("fedavg")], "mobilenetv2", quick_fl(**change), QUICK, "study", refs)
    assert jobs == [job("fedavg")] and "study" not in notes["fedavg"]
    assert notes["fedavg"]["from"] == "preset quick [hparams] (--lr-from study, but no reference study covers this run)"


def test_other_seeds_are_covered_too(refs):
    _, notes = reference.rates([job("fedavg")], "mobilenetv2", quick_fl(seed=7), QUICK, "study", refs)
    assert notes["fedavg"]["study"] == "digits-quick"


def test_a_model_the_studies_did_not_run_is_not_covered(refs):
    _, notes = reference.rates([job("fedavg")], "resnet18", replace(quick_fl(), model="resnet18"), QUICK, "study", refs)
    assert "study" not in notes["fedavg"]


def test_the_target_is_fixed_before_the_run_in_this_order():
    figures = {"declared_target_pct": 80.0, "study": "s"}
    assert reference.target(75.0, (90.0,), figures) == (75.0, "--target")
    assert reference.target(None, (90.0, 85.0), figures)[0] == 90.0  # the preset's first declared target
    assert reference.target(None, (), figures) == (80.0, "declared in the reference study s")
    assert reference.target(None, (), None)[0] is None


def with_ccvr_lr(jobs, lr):
    """``jobs`` with the FedAvg + CCVR job's ``ccvr_lr`` set to ``lr``."""
    return [replace(j, hp=j.hp.replace(ccvr_lr=lr)) if j.name == "fedavg+ccvr" else j for j in jobs]


def study_ccvr_lr(ref, model: str) -> float:
    """The ``ccvr_lr`` the study's FedAvg + CCVR runs of ``model`` had."""
    return next(c["point"]["hparams"]["ccvr_lr"] for c in ref.summary["choices"]
                if c["point"] and (c["model"], c["method"]) == (model, "fedavg"))


def test_figures_put_the_run_beside_the_reference_seeds(refs):
    quick = next(r for r in refs if r.name == "digits-quick")
    names = ["fedavg", "spherefed", "ccvr", "ffc"]
    jobs, _ = reference.rates([job("fedavg+ccvr"), job("spherefed+ffc")], "mobilenetv2", quick_fl(), QUICK, "study", refs)
    jobs = with_ccvr_lr(jobs, study_ccvr_lr(quick, "mobilenetv2"))  # CCVR as the study ran it
    runs = quick.runs[(quick.runs["model"] == "mobilenetv2") & (quick.runs["setting"] == "alpha=0.5")]  # not its fleets
    seed0 = {m: float(runs[(runs["method"] == m) & (runs["seed"] == 0)]["final_accuracy_pct"].iloc[0])
             for m in ("fedavg", "fedavg+spherefed")}
    # this run = the reference's seed-0 run for FedAvg; SphereFed 0.1 point above its seed-0 run
    accuracy = {"fedavg": {"accuracy_pct": seed0["fedavg"]}, "ccvr": {"accuracy_pct": seed0["fedavg"]},
                "spherefed": {"accuracy_pct": seed0["fedavg+spherefed"] + 0.1},
                "ffc": {"accuracy_pct": seed0["fedavg+spherefed"]}}
    figures = reference.reference_figures("mobilenetv2", names, jobs, accuracy, quick_fl(), refs)
    assert figures["study"] == "digits-quick" and figures["methods"]["fedavg"]["same_seed_pct"] == seed0["fedavg"]
    fedavg = runs[runs["method"] == "fedavg"]["final_accuracy_pct"]
    assert figures["methods"]["fedavg"]["mean"] == pytest.approx(fedavg.mean())
    assert figures["methods"]["fedavg"]["std"] == pytest.approx(fedavg.std())  # sample std (n - 1)
    pair = next(p for p in figures["pairs"] if (p["method"], p["versus"]) == ("ccvr", "fedavg"))
    # seed 0 with the study's chosen rates and settings and FedAvg's result to the digit: this run *is*
    # the reference's seed-0 run
    assert pair["difference_pct"] == 0.0 and pair["is_reference_run"] and pair["inside_prediction"] is None
    # SphereFed 0.1 point off its seed-0 run: the same settings, another result (other kernels)
    assert figures["methods"]["spherefed"]["same_settings"] and not figures["methods"]["spherefed"]["is_reference_run"]
    verdict = {(p["method"], p["versus"]): p["verdict"] for p in figures["pairs"]}
    assert verdict[("ccvr", "fedavg")] == "the reference's own seed-0 run: not new evidence"
    assert verdict[("spherefed", "fedavg")] == "the reference's seed-0 settings on other CPU kernels: not new evidence"
    text = reference.format_reference("mobilenetv2", figures, accuracy, quick_fl())
    assert "not new evidence" in text and f"lr {jobs[0].hp.lr:g}" in text and "seed spread" not in text
    # the same seed on another device (or other execution options) is not the reference's run
    from workloads.fl.execution import Execution

    point = next(c["point"] for c in quick.summary["choices"] if c["point"])
    same = reference.reference_figures("mobilenetv2", names, jobs, accuracy, quick_fl(), refs,
                                       Execution(**point["execution"]))
    other = reference.reference_figures("mobilenetv2", names, jobs, accuracy, quick_fl(), refs,
                                        Execution(**{**point["execution"], "channels_last": False}))
    assert all(v["same_settings"] for v in same["methods"].values())
    assert not any(v["same_settings"] for v in other["methods"].values())


def test_a_calibration_knob_other_than_the_studys_drops_only_the_calibrated_figures(refs):
    """CCVR's learning rate does not change FedAvg's training: the run still takes the study's FedAvg
    rate and FedAvg's figures, but CCVR's figures and its pair with FedAvg are not the study's."""
    quick = next(r for r in refs if r.name == "digits-quick")
    names = ["fedavg", "spherefed", "ccvr", "ffc"]
    other = 10 * study_ccvr_lr(quick, "mobilenetv2")
    jobs, notes = reference.rates(with_ccvr_lr([job("fedavg+ccvr"), job("spherefed+ffc")], other), "mobilenetv2",
                                  quick_fl(), QUICK, "study", refs)
    assert notes["fedavg+ccvr"]["study"] == "digits-quick" and jobs[0].hp.ccvr_lr == other
    accuracy = {n: {"accuracy_pct": 90.0} for n in names}
    figures = reference.reference_figures("mobilenetv2", names, jobs, accuracy, quick_fl(), refs)
    assert set(figures["methods"]) == {"fedavg", "spherefed", "ffc"}
    assert {(p["method"], p["versus"]) for p in figures["pairs"]} == {("spherefed", "fedavg"), ("ffc", "spherefed")}
    converged = reference.reference_figures("mobilenetv2", names, jobs, accuracy, quick_fl(), refs)["converged_reference"]
    assert converged is not None and "ccvr" not in converged["methods"] and "fedavg" in converged["methods"]


def test_a_new_seed_is_judged_by_the_prediction_interval_of_the_reference_seeds(refs):
    """Seed 7 is no seed of digits-quick: this run's difference is set against mean ± t s √(1 + 1/n)
    of the reference's per-seed differences, recomputed here from its runs.csv."""
    import math

    from scipy import stats

    quick = next(r for r in refs if r.name == "digits-quick")
    names = ["fedavg", "spherefed", "ccvr", "ffc"]
    fl = quick_fl(seed=7)
    jobs, _ = reference.rates([job("fedavg+ccvr"), job("spherefed+ffc")], "mobilenetv2", fl, QUICK, "study", refs)
    runs = quick.runs[(quick.runs["model"] == "mobilenetv2") & (quick.runs["setting"] == "alpha=0.5")]  # not its fleets
    by = lambda m: runs[runs["method"] == m].set_index("seed")["final_accuracy_pct"]  # noqa: E731
    d = (by("fedavg+spherefed") - by("fedavg")).to_numpy()
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) * math.sqrt(1 + 1 / len(d))
    low, high = d.mean() - half, d.mean() + half
    for here, inside in ((high - 0.01, True), (high + 0.01, False)):
        accuracy = {"fedavg": {"accuracy_pct": 80.0}, "ccvr": {"accuracy_pct": 80.0},
                    "spherefed": {"accuracy_pct": 80.0 + here}, "ffc": {"accuracy_pct": 90.0}}
        figures = reference.reference_figures("mobilenetv2", names, jobs, accuracy, fl, refs)
        pair = next(p for p in figures["pairs"] if (p["method"], p["versus"]) == ("spherefed", "fedavg"))
        assert not pair["is_reference_run"] and pair["inside_prediction"] is inside
        assert (pair["prediction_low"], pair["prediction_high"]) == pytest.approx((low, high), abs=1e-9)
        assert pair["verdict"] == ("inside" if inside else "outside") + (
            f" the reference's 95 % prediction interval for a new seed [{low:+.1f}, {high:+.1f}]")


CONVERGED = [("convnet", "digits"), ("mobilenetv2", "digits-mobilenetv2")]


@pytest.mark.parametrize("model, study", CONVERGED)
def test_the_converged_reference_shows_where_on_its_curve_the_run_stopped(refs, model, study):
    """A 5-round run of a model that a 20-round study also covers: the converged reference's mean
    curve and the first round where it reaches this run's accuracy, read independently here from
    that study's curves.csv (the mean over its seeds per round; the final rows of each run)."""
    names = ["fedavg", "spherefed", "ccvr", "ffc"]
    fl = replace(quick_fl(), model=model)
    jobs, _ = reference.rates([job("fedavg+ccvr"), job("spherefed+ffc")], model, fl, QUICK, "study", refs)
    accuracy = {"fedavg": {"accuracy_pct": 90.0}, "ccvr": {"accuracy_pct": 90.0},
                "spherefed": {"accuracy_pct": 97.0}, "ffc": {"accuracy_pct": 100.0}}
    conv = reference.reference_figures(model, names, jobs, accuracy, fl, refs)["converged_reference"]
    assert conv["study"] == study and conv["rounds"] == 20
    curves = pd.read_csv(reference.REFERENCE_DIR / study / "curves.csv")
    curves = curves[(curves["model"] == model) & (curves["setting"] == "alpha=0.5") & curves["accuracy_pct"].notna()]
    for name, label in [("fedavg", "fedavg"), ("spherefed", "fedavg+spherefed"), ("ffc", "fedavg+spherefed+ffc")]:
        mine = curves[curves["method"] == label]
        mean = mine.groupby("round")["accuracy_pct"].mean()
        reached = [r for r, v in mean.items() if v >= accuracy[name]["accuracy_pct"]]
        got = conv["methods"][name]
        assert got["reaches_this_run_at_round"] == (reached[0] if reached else None)
        assert got["final_mean_pct"] == pytest.approx(mine[mine["round"] == mine["round"].max()]["accuracy_pct"].mean())
        assert got["n"] == 3 and got["round"] == sorted(mean.index)
    assert conv["methods"]["ffc"]["reaches_this_run_at_round"] is None  # 100 % is reached by no mean curve

"""A precision schedule (``--precision-schedule``; workloads/numerics/schedule.py): each round trains
and is priced in its own format, results record it, and bad schedules are refused before training."""

from __future__ import annotations

import pytest
import torch

from accel_sim.hardware import HardwareConfig
from bench.lib import spec
from bench.lib.resolve import resolve
from bench.lib.run.study import point_config
from fl_standins import TinyNet, blobs
from workloads.cost.rounds import PricedModel, RunPricer, client_devices, devices_by_round, price_run
from workloads.cost.system import SystemModel
from workloads.fl.execution import Execution, execution_of, preset_options
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl import loop
from workloads.fl.loop import RunPlan, load_checkpoint_document
from workloads.fl.methods import parse_method
from workloads.fl.partition import dirichlet_partition
from workloads.fl.presets import load_preset
from workloads.numerics.schedule import Step, format_at, steps_of

TRAIN, TEST = blobs(96), blobs(40, seed=1)
PARTS = dirichlet_partition(TRAIN.y.numpy(), 3, 1.0, min_size=5, seed=0)
CFG = FLConfig(dataset="blobs", num_clients=3, rounds=2, participation=1.0, eval_every=1)
HP = Hparams(lr=0.05, local_epochs=1, batch_size=16)
A, B = "bf16", "bfp_m4_g16"
SCHEDULE = f"1:{A},2:{B}"
PER_ROUND = ("round_wall_s", "round_device_s", "round_energy_j")


def test_steps_and_the_format_of_each_round_by_hand():
    steps = steps_of("1:bfp_m2_g16_sr, 4:bfp_m4_g16_sr")
    assert steps == (Step(1, "bfp_m2_g16_sr"), Step(4, "bfp_m4_g16_sr"))
    # rounds 1-3 in the first step's format, 4 on in the second's; round 0 (a forecast) and R + 1
    # (a calibration) in the first's and the last's
    assert [format_at(steps, t) for t in range(0, 7)] == ["bfp_m2_g16_sr"] * 4 + ["bfp_m4_g16_sr"] * 3
    # FAST over 10 rounds: 2-bit mantissas for rounds 1-5, 4-bit from round 1 + floor(10 / 2) = 6
    assert steps_of("fast", 10) == (Step(1, "bfp_m2_g16_sr"), Step(6, "bfp_m4_g16_sr"))
    assert steps_of("fast", 3) == (Step(1, "bfp_m2_g16_sr"), Step(2, "bfp_m4_g16_sr"))


def _run(tmp_path, execution: Execution, name: str, *, resume: bool = False):
    """fedavg on TinyNet for 2 rounds, checkpointed to ``name``.pt; returns the result and the
    loop's checkpoint document after round 1."""
    path, after_one = tmp_path / f"{name}.pt", {}

    def keep(t):
        if t == 1:
            after_one.update(load_checkpoint_document(path))

    result = loop.train(RunPlan(parse_method("fedavg"), model_fn=lambda: TinyNet(), train=TRAIN, test=TEST, parts=PARTS,
                                cfg=CFG, hp=HP, execution=execution, checkpoint=path, after_round=keep, resume=resume))
    return result, after_one


def _without_format(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k != "number_format"}


def test_each_round_of_a_schedule_is_bitwise_that_formats_run(tmp_path):
    # round 1 of 1:bf16,2:bfp_m4_g16 is round 1 of the bf16 run; round 2 is the bfp_m4_g16 run's
    # round 2 started from that bf16 round 1 (the bf16 run's round-1 checkpoint, resumed as the
    # bfp_m4_g16 run: the same seeds, the same rounding streams)
    scheduled, s1 = _run(tmp_path, Execution(precision_schedule=SCHEDULE), "scheduled")
    in_a, a1 = _run(tmp_path, Execution(number_format=A), "a")
    in_b, b1 = _run(tmp_path, Execution(number_format=B), "b")
    assert all(torch.equal(s1["server"]["weights"][k], v) for k, v in a1["server"]["weights"].items())
    assert _without_format(scheduled.history[0]) == in_a.history[0]
    assert [h["number_format"] for h in scheduled.history] == [A, B]  # results record each round's format
    resumed = tmp_path / "b.pt"  # the bf16 round 1, as the bfp_m4_g16 run's checkpoint
    doc = {**a1, "fingerprint": b1["fingerprint"]}
    torch.save(doc, resumed)
    b_from_a, _ = _run(tmp_path, Execution(number_format=B), "b", resume=True)
    assert b_from_a.resumed_after_round == 1
    assert all(torch.equal(scheduled.weights[k], v) for k, v in b_from_a.weights.items())
    assert _without_format(scheduled.history[1]) == b_from_a.history[1]
    # and the schedule is neither format alone
    assert not all(torch.equal(scheduled.weights[k], v) for k, v in in_a.weights.items())
    assert not all(torch.equal(scheduled.weights[k], v) for k, v in in_b.weights.items())


def test_each_round_is_priced_in_its_own_format():
    result = loop.train(RunPlan(parse_method("fedavg"), model_fn=lambda: TinyNet(), train=TRAIN, test=TEST, parts=PARTS,
                                cfg=CFG, hp=HP, execution=Execution(precision_schedule=SCHEDULE)))
    method, hw, system = parse_method("fedavg"), HardwareConfig(), SystemModel()
    pricer = RunPricer(PricedModel(lambda head: TinyNet(head=head), "tinynet", (3, 2, 2), 4, 0))
    labels = [TRAIN.y.numpy()[p] for p in PARTS]

    def in_format(fmt):
        return client_devices(system, hw, 3, seed=0, number_format=fmt)

    def rows(**devices):
        return price_run(result, method, HP, pricer=pricer, client_labels=labels, hw=hw, system=system, **devices)

    by_round = devices_by_round(Execution(precision_schedule=SCHEDULE), 2, in_format)
    assert [d[0].hw for d in by_round] == [in_format(A)[0].hw, in_format(B)[0].hw, in_format(B)[0].hw]
    scheduled, all_a, all_b = rows(devices=in_format("fp32"), by_round=by_round), rows(devices=in_format(A)), \
        rows(devices=in_format(B))
    assert all(all_a[1][c] != all_b[1][c] for c in ("round_device_s", "round_energy_j"))  # the formats' prices differ
    assert [scheduled[0][c] for c in PER_ROUND] == [all_a[0][c] for c in PER_ROUND]
    assert [scheduled[1][c] for c in PER_ROUND] == [all_b[1][c] for c in PER_ROUND]


def test_the_schedule_is_one_field_flag_preset_key_and_grid_setting():
    quick = load_preset("quick")
    rounds = quick.fl.rounds
    run = spec.RunSpec(precision_schedule="fast", device="cpu").execution(quick)
    assert run.precision_schedule == f"1:bfp_m2_g16_sr,{1 + rounds // 2}:bfp_m4_g16_sr"  # laid out over its rounds
    assert run.describe()["precision_schedule"] == run.precision_schedule and run.number_format == "fp32"
    assert point_config({"model": "convnet", "precision_schedule": "1:bf16"}).precision_schedule == "1:bf16"
    assert execution_of("cpu", {}, {"precision_schedule": "fast"}, rounds=4).precision_schedule == \
        "1:bfp_m2_g16_sr,3:bfp_m4_g16_sr"
    assert "precision_schedule" not in Execution().settings()  # runs without one keep their identity


@pytest.mark.parametrize("text, rounds, message", [
    ("2:bf16", 3, r"start at round 1 and their rounds rise \(given \[2\]\)"),
    ("1:bf16,1:fp32", 3, r"rise \(given \[1, 1\]\)"),
    ("1:bf16,9:fp32", 3, "a step starts at round 9, after the run's last round 3"),
    ("1:bfp", 3, "number format 'bfp'"),
    ("bf16", 3, "'bf16' is not ROUND:FORMAT"),
    ("fast", 1, "the run needs at least 2 rounds"),
])
def test_bad_schedules_are_refused_in_one_line(text, rounds, message):
    with pytest.raises(ValueError, match=message) as err:
        execution_of("cpu", {"precision_schedule": text}, {}, rounds=rounds)
    assert str(err.value).startswith("--precision-schedule") and "\n" not in str(err.value)


def test_a_schedule_beside_another_format_source_is_refused_before_training():
    with pytest.raises(ValueError, match="both set the clients' format: drop one"):
        execution_of("cpu", {"precision_schedule": "fast", "number_format": "bf16"}, {}, rounds=4)
    with pytest.raises(ValueError, match="drop --bf16"):
        Execution(precision_schedule="1:bf16", bf16=True)
    with pytest.raises(ValueError, match=r"\[execution\]: precision schedule '1:nope'"):
        preset_options({"precision_schedule": "1:nope"}, where="p.toml")
    # a step after the preset's last round, from the command line, before any data is loaded
    with pytest.raises(ValueError, match="after the run's last round"):
        resolve(spec.RunSpec(preset="quick", precision_schedule="1:bf16,100000:fp32", device="cpu"))


def test_a_study_setting_may_name_a_schedule_laid_out_over_the_studys_rounds():
    from bench.lib.study.spec import StudyError
    from bench.lib.study.study_file import parse_study
    from bench.lib.study.tuning import Choice
    from bench.study import phases
    from test_study import study_doc

    study = parse_study(study_doc(number_formats=["fp32", "fast", "1:bf16, 3:bfp_m4_g16"]), "test")  # rounds = 6
    assert [s.number_format for s in study.settings] == ["fp32", "fast", "1:bf16,3:bfp_m4_g16"]
    choices = {("convnet", "alpha=0.5", t): Choice({"lr": 0.1}, 80.0, ()) for t in study.training_methods}
    planned = phases.evaluation_plan(study, phases.execution(study), choices)
    schedules = {p.setting.number_format: p.config["execution"].get("precision_schedule") for p in planned}
    # FAST over 6 rounds: 2-bit mantissas in rounds 1-3, 4-bit from round 1 + floor(6 / 2) = 4
    assert schedules == {"fp32": None, "fast": "1:bfp_m2_g16_sr,4:bfp_m4_g16_sr",
                         "1:bf16,3:bfp_m4_g16": "1:bf16,3:bfp_m4_g16"}
    with pytest.raises(StudyError, match="after the run's last round 6"):
        parse_study(study_doc(number_formats=["fp32", "1:bf16,7:bfp_m4_g16"]), "test")

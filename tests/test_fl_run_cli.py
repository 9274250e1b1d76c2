"""The CLI writes complete outputs and fails cleanly on bad input."""

import json
import os
import re
import tomllib

import pytest
import torch

from bench.fl.__main__ import main, parser as fl_parser
from workloads.fl.presets import load_preset, method_hparams
from workloads.fl.methods import parse_method

TINY = """
[run]
dataset = "digits"
image_size = 16
model = "convnet"
num_clients = 3
rounds = 1
partition = "iid"
methods = ["fedavg", "spherefed+ffc"]

[hparams]
lr = 0.05
local_epochs = 1
batch_size = 64

[methods.spherefed]
lr = 0.25

[methods."fedavg+spherefed+ffc"]
ffc_ridge = 0.001
"""


@pytest.mark.slow
def test_cli_writes_results(tmp_path, capsys):
    """A real run, then --overwrite: a folder holding a file the suite did not write is refused
    (the file survives); the run's own folder is replaced as a whole and has the umask's mode, not
    mkdtemp's private 0700."""
    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "foreign.txt").write_text("not ours")
    argv = ["--preset", str(preset), "--threads", "1", "--device", "cpu"]
    threads = torch.get_num_threads()
    try:
        assert main([*argv, "--out", str(tmp_path / "mine"), "--overwrite"]) == 2
        assert "foreign.txt" in capsys.readouterr().err  # the file it would have lost, named
        assert (tmp_path / "mine" / "foreign.txt").read_text() == "not ours"
        assert main([*argv, "--out", str(tmp_path / "out")]) == 0
        (tmp_path / "out" / "results.json").write_text("{}")  # a file the suite wrote may be replaced
        assert main([*argv, "--out", str(tmp_path / "out"), "--overwrite"]) == 0
    finally:
        torch.set_num_threads(threads)
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["accuracy.csv", "ledger.csv", "manifest.json", "partition.csv", "results.json", "rounds.csv"]
    mask = os.umask(0o022)
    os.umask(mask)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o777 & ~mask
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(doc["methods"]) == {"fedavg", "fedavg+spherefed+ffc"}
    for m in doc["methods"].values():
        assert {k: m["comm"][k] for k in m["comm_closed_form"]} == m["comm_closed_form"]
    assert "digits" in doc["dataset_note"] and doc["git_commit"]
    assert doc["kernels"]["cpu_capability"] and doc["kernels"]["torch_threads"] >= 1  # what chose the kernels
    assert doc["hparams"]["fedavg+spherefed+ffc"]["lr"] == 0.25
    assert doc["hparams"]["fedavg+spherefed+ffc"]["ffc_ridge"] == 0.001
    for name in ("accuracy.csv", "ledger.csv", "partition.csv"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert not list((tmp_path / "out").glob(".*tmp"))
    assert doc["execution"]["device"] == "cpu" and doc["execution"]["augment"] is False
    assert not (tmp_path / "out" / "checkpoints").exists()  # removed once the run's files are written
    assert all(m["projected_wall_s"] > 0 and m["resumed_after_round"] == 0 for m in doc["methods"].values())


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cli_refuses_a_missing_device(tmp_path, capsys):
    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY)
    assert main(["--preset", str(preset), "--out", str(tmp_path / "o"), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA device" in err and "--device cpu" in err
    assert not (tmp_path / "o").exists()
    assert main(["--preset", str(preset), "--out", str(tmp_path / "o"), "--device", "tpu"]) == 2
    assert "not a device" in capsys.readouterr().err


def test_cli_rejects_bad_input(tmp_path, capsys):
    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY)
    assert main(["--preset", str(preset), "--methods", "fedsgd", "--out", str(tmp_path / "o")]) == 2
    assert "unknown method" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert main(["--preset", "no-such-preset"]) == 2
    assert "known presets" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.replace("lr = 0.05", "lr = 0.05\nlearning_rate = 1"))
    assert main(["--preset", str(bad)]) == 2
    assert "learning_rate" in capsys.readouterr().err


def test_shipped_presets_load():
    p = load_preset("paper")
    cfg, methods, hp, overrides = p.fl, p.methods, p.hp, p.overrides
    assert (cfg.num_clients, cfg.rounds, hp.local_epochs, hp.batch_size) == (10, 100, 10, 64)  # Tab. 16
    assert (hp.momentum, hp.weight_decay) == (0.9, 1e-5)
    assert method_hparams(parse_method("fedopt"), hp, overrides).server_momentum == 0.3
    assert method_hparams(parse_method("fedopt+spherefed+ffc"), hp, overrides).lr == 0.5
    for m in methods:
        parse_method(m)
    p = load_preset("small")
    cfg, methods, hp, overrides = p.fl, p.methods, p.hp, p.overrides
    assert cfg.dataset == "digits"
    for m in methods:
        parse_method(m)


@pytest.mark.slow
def test_cli_validation_holdout(tmp_path, capsys):
    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY)
    threads = torch.get_num_threads()
    try:
        assert main(["--preset", str(preset), "--out", str(tmp_path / "out"), "--threads", "1",
                     "--methods", "fedavg", "--holdout", "0.15"]) == 0
    finally:
        torch.set_num_threads(threads)
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    # digits' train split has 1,437 images; round(0.15 * 1437) = round(215.55) = 216 held out
    assert doc["holdout"]["fraction"] == 0.15 and doc["holdout"]["val_samples"] == 216
    assert sum(doc["partition_sizes"]) == 1437 - 216  # clients only see the rest
    assert 0.0 <= doc["methods"]["fedavg"]["val_accuracy"] <= 1.0
    assert "val_accuracy" in (tmp_path / "out" / "accuracy.csv").read_text().splitlines()[0]
    assert main(["--preset", str(preset), "--holdout", "1", "--out", str(tmp_path / "bad")]) == 2
    assert "argument --holdout: 1.0 is out of range" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("preset, model, base, lr, ours_lr", [
    ("paper-resnet18", "resnet18", "fedprox", 0.1, 0.5),   # Tab. 16, FedProx (ResNet18) rows
    ("paper-vgg13", "vgg13", "fednova", 0.01, 0.1),        # Tab. 16, FedNova (VGG13) rows
    ("paper-senet18", "senet18", "fedopt", 0.01, 0.5),     # Tab. 16, FedOpt (SENet18) rows
])
def test_per_model_paper_presets_follow_table_16(preset, model, base, lr, ours_lr):
    p = load_preset(preset)
    cfg, methods, hp, overrides = p.fl, p.methods, p.hp, p.overrides
    assert (cfg.dataset, cfg.model, cfg.norm, cfg.num_clients, cfg.rounds) == ("cifar100", model, "gn", 10, 100)
    assert (hp.local_epochs, hp.batch_size, hp.momentum, hp.weight_decay) == (10, 64, 0.9, 1e-5)
    ccvr = p.hparams(parse_method(f"{base}+ccvr"))
    assert (ccvr.ccvr_virtual_per_class, ccvr.ccvr_lr) == (500, 1e-5)
    assert methods == (base, f"{base}+ccvr", f"{base}+spherefed+ffc")
    assert method_hparams(parse_method(base), hp, overrides).lr == lr
    ours = method_hparams(parse_method(f"{base}+spherefed+ffc"), hp, overrides)
    assert ours.lr == ours_lr
    if base == "fedprox":
        assert (p.hparams(parse_method(base)).prox_mu, ours.prox_mu) == (0.001, 0.0001)
        assert p.hparams(parse_method("fedprox+spherefed")).prox_mu == 0.0001  # [methods."fedprox+spherefed"]
    if base == "fedopt":
        assert (ours.server_lr, ours.server_momentum) == (1.0, 0.3)


def test_cli_resume_without_checkpoints_is_refused(tmp_path, capsys):
    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY)
    assert main(["--preset", str(preset), "--out", str(tmp_path / "o"), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "thesis.tex").write_text("mine")  # a folder of the user's: not a run to resume
    assert main(["--preset", str(preset), "--out", str(tmp_path / "o"), "--resume"]) == 2
    assert "not a bench.fl results folder" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["thesis.tex"]
    (tmp_path / "o" / "thesis.tex").unlink()
    (tmp_path / "o").rmdir()
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_cli_resume_after_an_interruption_gives_the_uninterrupted_results(tmp_path, monkeypatch):
    from dataclasses import replace

    from workloads.fl import loop  # the jobs call loop.train

    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY.replace("rounds = 1", "rounds = 2\nmax_train_samples = 300\nmax_test_samples = 100"))
    args = ["--preset", str(preset), "--methods", "fedavg", "--threads", "1", "--device", "cpu"]
    threads = torch.get_num_threads()
    real = loop.train

    def interrupted(plan):
        def stop(t):
            if t == 1:
                raise KeyboardInterrupt
        return real(replace(plan, after_round=stop))

    try:
        assert main(args + ["--out", str(tmp_path / "whole")]) == 0
        monkeypatch.setattr(loop, "train", interrupted)
        assert main(args + ["--out", str(tmp_path / "cut")]) == 130  # Ctrl-C: one line, exit 130 (iokit.cli)
        assert (tmp_path / "cut" / "checkpoints" / "fedavg.pt").is_file()
        monkeypatch.setattr(loop, "train", real)
        assert main(args + ["--out", str(tmp_path / "cut"), "--resume"]) == 0
    finally:
        torch.set_num_threads(threads)
    whole, cut = (json.loads((tmp_path / d / "results.json").read_text())["methods"]["fedavg"] for d in ("whole", "cut"))
    assert cut["resumed_after_round"] == 1 and whole["resumed_after_round"] == 0
    for key in ("accuracy", "history", "comm", "samples_trained"):
        assert cut[key] == whole[key], key
    assert (tmp_path / "cut" / "ledger.csv").read_text() == (tmp_path / "whole" / "ledger.csv").read_text()


def test_preset_execution_table_sets_the_flags_defaults(tmp_path):
    from bench.lib import spec

    preset = tmp_path / "p.toml"
    preset.write_text(TINY + "\n[execution]\nchannels_last = true\n")
    loaded = load_preset(str(preset))
    assert loaded.execution == {"channels_last": True}
    parser = fl_parser()
    chosen = lambda argv: spec.from_args(parser.parse_args(["--preset", str(preset), *argv]),  # noqa: E731
                                         spec.FL).execution(loaded)
    assert chosen(["--device", "cpu"]).channels_last is True  # the preset's
    assert chosen(["--device", "cpu", "--no-channels-last"]).channels_last is False  # a flag wins
    assert chosen(["--device", "cpu", "--bf16"]).bf16 is True and chosen(["--device", "cpu"]).bf16 is False
    assert load_preset("quick").execution == {"channels_last": True}  # the main job's speed choice


@pytest.mark.parametrize("table, message", [
    ('channels_last = "yes"', "channels_last = 'yes' must be true or false"),
    ('device = "cuda"', "unknown key 'device'"),
    ("channels_last = 1", "channels_last = 1 must be true or false"),
])
def test_bad_preset_execution_table_is_one_line(tmp_path, capsys, table, message):
    preset = tmp_path / "p.toml"
    preset.write_text(TINY + f"\n[execution]\n{table}\n")
    assert main(["--preset", str(preset), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(preset) in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_preset_targets_are_a_list_as_in_a_study_file(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text(TINY + "\n[targets]\naccuracy_pct = [80, 92.5]\n")
    assert load_preset(str(preset)).accuracy_targets_pct == (80.0, 92.5)
    assert load_preset("quick").accuracy_targets_pct == (80.0,)  # the main job's: digits-quick's declared target
    assert load_preset("small").accuracy_targets_pct == ()  # none declared


@pytest.mark.parametrize("value, message", [
    ("80.0", "accuracy_pct = 80.0 must be a list of percentages, as in a study file: give accuracy_pct = [80.0]"),
    ('"80"', "accuracy_pct = '80' must be a list of percentages, e.g. [90.0]"),
    ("[80.0, 80]", "lists 80 (= 80.0) twice"),
    ("[0.0]", "is out of range; give a number in (0, 100]"),
])
def test_bad_preset_targets_are_one_line_and_spelt_as_a_studys(tmp_path, capsys, value, message):
    from bench.lib.study.spec import StudyError
    from bench.lib.study.study_file import parse_study
    from tests.test_study import study_doc

    preset = tmp_path / "p.toml"
    preset.write_text(TINY + f"\n[targets]\naccuracy_pct = {value}\n")
    assert main(["--preset", str(preset), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(preset) in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
    # a study file's [targets] accuracy_pct is read by the same function: the same words
    with pytest.raises(StudyError, match=re.escape(message)):
        parse_study(study_doc(targets={"accuracy_pct": tomllib.loads(f"v = {value}")["v"]}), "test")

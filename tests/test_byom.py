"""Bring your own model (workloads/model_spec.py, docs/byom.md): a model defined only in a temporary
folder, named ``module:factory``, traced and priced through every CLI with hand-counted MACs;
library models against fvcore; every error one line, exit code 2, nothing written."""

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import bench.run.__main__ as bench_run
from bench.lib.run.study import run_point
import bench.fl.__main__ as fl_run
from bench.lib import results
import workloads.capture as wtrace
import bench.capture.__main__ as capture
from accel_sim.trace_io import load_trace
from workloads.model_spec import ModelSpec, build
from workloads.models import MODELS
from workloads.fl.methods.spherefed import SphereFed

REPO = Path(__file__).resolve().parents[1]
USER_NETS = textwrap.dedent('''
    from torch import nn

    def net(num_classes=10):
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, num_classes))

    def fixed_head():  # takes no num_classes: its head is replaced by FLNet's FC(16, C)
        return net(num_classes=7)

    def gray(num_classes=10):
        return nn.Sequential(nn.Conv2d(1, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes))

    def no_linear():
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def head_not_last(num_classes=10):
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(4, num_classes), nn.Sigmoid())

    def not_a_module():
        return {"weights": 1}
''')
MODULE = "byom_user_nets"

# Hand count, batch B = 2, input 3x8x8, C = 5 classes, l = 16 features:
#   conv fwd  B.P.Q.C_out.C_in.R.S = 2.8.8.16.3.3.3 = 55,296
#   FC fwd    B.l.C                = 2.16.5         =    160   -> forward 55,456
#   backward, FedAvg: conv dW 55,296 (no conv dX: the input needs no gradient) + FC dX 160 + FC dW 160 = 55,616
#   backward, SphereFed: the fixed classifier has no dW                                           = 55,456
B, C = 2, 5
FWD_MACS = 2 * 8 * 8 * 16 * 3 * 3 * 3 + 2 * 16 * 5
BWD_MACS = {"fedavg": 2 * 8 * 8 * 16 * 3 * 3 * 3 + 2 * 16 * 5 + 2 * 16 * 5,
            "spherefed": 2 * 8 * 8 * 16 * 3 * 3 * 3 + 2 * 16 * 5}


TINY_PRESET = (REPO / "configs" / "presets" / "smoke.toml").read_text().replace(
    "max_test_samples = 100", "max_test_samples = 20").replace(
    "ccvr_virtual_per_class = 50", "ccvr_virtual_per_class = 5")  # bench.run's smallest accuracy run, smaller


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A folder holding the user's modules, as the current directory (nothing on PYTHONPATH)."""
    (tmp_path / f"{MODULE}.py").write_text(USER_NETS)
    (tmp_path / "byom_broken.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.chdir(tmp_path)
    for name in (MODULE, "byom_broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


@pytest.mark.parametrize("method", ["fedavg", "spherefed"])
def test_trace_cli_counts_the_hand_computed_macs(user_dir, capsys, method):
    out = user_dir / "t.jsonl"
    assert capture.main(["--model", f"{MODULE}:net", "--method", method, "--batch-size", str(B), "--classes", str(C),
                        "--input-shape", "3,8,8", "--out", str(out)]) == 0
    trace = load_trace(out)
    assert wtrace.macs(trace, phase="fwd") == FWD_MACS
    assert wtrace.macs(trace, phase="bwd") == BWD_MACS[method]
    assert trace.header.meta["input_shape"] == [3, 8, 8]
    assert f"fwd {FWD_MACS:,}" in capsys.readouterr().out


@pytest.mark.slow
def test_trace_cli_as_a_subprocess_imports_from_the_current_folder(user_dir):
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)  # the project only: the user's module is found through the cwd
    proc = subprocess.run([sys.executable, "-m", "bench.capture", "--model", f"{MODULE}:fixed_head", "--method",
                           "fedavg", "--batch-size", "2", "--classes", "3", "--input-shape", "3,8,8",
                           "--out", "t.jsonl"], cwd=user_dir, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    trace = load_trace(user_dir / "t.jsonl")
    # the factory takes no num_classes: FLNet's bias-free FC(16, 3) replaces its FC(16, 7)
    assert wtrace.macs(trace, phase="fwd", layer="classifier") == 2 * 16 * 3


HW_FILES = ("paper_default.toml", "gemmini_like.toml", "tpu_v1_like.toml")


@pytest.mark.slow
def test_bench_run_prices_a_user_model_on_several_accelerators(user_dir, capsys):
    (user_dir / "tiny.toml").write_text(TINY_PRESET)
    out, name = user_dir / "run", f"{MODULE}:net"
    assert bench_run.main(["--model", name, "--input-shape", "3,8,8", "--classes", str(C), "--batch-size", str(B),
                           "--preset", str(user_dir / "tiny.toml"),
                           "--hw", *(str(REPO / "configs" / "hw" / f) for f in HW_FILES), "--out", str(out)]) == 0
    summary = results.load_summary(out)  # the results layout holds with the comparison block
    models = summary["models"][name]
    for method in ("fedavg", "spherefed"):  # the priced step: forward + backward GEMMs (the update has none)
        assert models["training"][method]["macs"] == FWD_MACS + BWD_MACS[method]
    assert set(models["calibration"]) == {"ccvr", "ffc"}
    block = summary["hardware_comparison"]
    assert block["labels"] == [f.removesuffix(".toml") for f in HW_FILES]
    by_hw = {label: block["by_hardware"][label]["models"][name] for label in block["labels"]}
    for method, figures in models["training"].items():  # the first accelerator is the run's own
        first = by_hw["paper_default"]["training"][method]
        assert (first["step_latency_s"], first["peak_memory_bytes"]) == (figures["step_latency_s"],
                                                                        figures["peak_memory_bytes"])
        assert {by_hw[label]["training"][method]["macs"] for label in by_hw} == {figures["macs"]}  # one trace
    assert by_hw["paper_default"]["calibration"] == models["calibration"]
    assert len({by_hw[label]["training"]["fedavg"]["step_latency_s"] for label in by_hw}) == len(HW_FILES)
    printed = capsys.readouterr().out
    assert f"== {name} (input 3x8x8, 5 classes" in printed  # the usual table, for the first accelerator
    step_row = next(line for line in printed.splitlines() if line.startswith("training step_latency_s (ms)"))
    assert step_row.split().count("1.0000") == len(HW_FILES)  # one column group per accelerator
    assert (out / "hardware_byom_user_nets-net.png").stat().st_size > 0


def test_several_accelerators_need_distinct_valid_files(user_dir, tmp_path_factory, capsys):
    other = tmp_path_factory.mktemp("other") / "paper_default.toml"
    other.write_text("rows = 8\n")
    bad = tmp_path_factory.mktemp("bad") / "bad.toml"
    bad.write_text("rows = -1\n")
    paper = str(REPO / "configs" / "hw" / "paper_default.toml")
    for hws, message in (([paper, str(other)], "different names"), ([paper, str(bad)], "rows")):
        assert bench_run.main(["--model", "convnet", "--hw", *hws, "--out", str(user_dir / "r")]) == 2
        assert message in capsys.readouterr().err
        assert not (user_dir / "r").exists()


@pytest.mark.slow
def test_grid_point_takes_a_user_model_and_its_shape(user_dir):
    (user_dir / "tiny.toml").write_text(TINY_PRESET)
    metrics = run_point({"model": f"{MODULE}:net", "input_shape": [3, 8, 8], "classes": C,
                                   "preset": str(user_dir / "tiny.toml"),
                                   "batch_size": B, "methods": ["fedavg", "ccvr"]}, user_dir)
    assert json.loads((user_dir / "summary.json").read_text())["config"]["input_shape"] == [3, 8, 8]
    assert f"{MODULE}:net.fedavg.step_latency_s" in metrics


def test_fl_run_trains_a_user_model(user_dir):
    out = user_dir / "fl"
    assert fl_run.main(["--preset", "small", "--model", f"{MODULE}:net", "--rounds", "1", "--threads", "1",
                        "--methods", "fedavg", "spherefed+ffc", "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["model"] == f"{MODULE}:net"
    for result in doc["methods"].values():
        assert result["comm"]["total_bytes"] == result["comm_closed_form"]["total_bytes"]


def test_spherefed_acts_on_the_named_classifier(user_dir):
    model = build(ModelSpec(f"{MODULE}:net", (3, 8, 8), classifier="4"), num_classes=C, head=SphereFed.head)
    assert isinstance(model.body[4], torch.nn.Identity)  # the user's FC left the body
    assert (model.feature_dim, model.classifier.out_features, model.classifier.bias) == (16, C, None)
    assert type(model.feature_norm).__name__ == "FeatureNorm"  # in front of the classifier


ERRORS = [  # (model, extra arguments, what stderr must say)
    ("byom_no_such_module:net", [], "cannot import 'byom_no_such_module'"),
    (f"{MODULE}:missing", [], "has no attribute 'missing'"),
    (f"{MODULE}:not_a_module", [], "returned a dict, not an nn.Module"),
    (f"{MODULE}:no_linear", [], "has no nn.Linear to act as classifier"),
    (f"{MODULE}:gray", [], "expected input[2, 3,"),  # the model's own message, after "rejects input shape"
    (f"{MODULE}:head_not_last", [], "is not the output of model"),
    (f"{MODULE}:net", ["--classifier", "0"], "is a Conv2d, not an nn.Linear"),
    ("byom_broken:net", [], "RuntimeError: boom at import"),
    ("torchvision:resnet18", [], "pip install -c constraints.txt -e '.[models]'"),
]
CLIS = {  # name -> (main, arguments besides the model and its extras)
    "bench.capture": (capture.main, ["--method", "fedavg", "--out", "out/t.jsonl"]),
    "bench.run": (bench_run.main, ["--out", "out/run"]),
    "bench.fl": (fl_run.main, ["--preset", "small", "--out", "out/fl"]),
}


@pytest.mark.parametrize("cli", sorted(CLIS))
@pytest.mark.parametrize("model, extra, message", ERRORS, ids=[e[0] + " ".join(e[1]) for e in ERRORS])
def test_every_error_is_one_line_exit_2_nothing_written(user_dir, capsys, monkeypatch, cli, model, extra, message):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as if the extra were not installed
    before = sorted(p.name for p in user_dir.iterdir())
    main, args = CLIS[cli]
    assert main(["--model", model, *extra, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in user_dir.iterdir() if p.name != "__pycache__") == before


@pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="Flower is not installed: the .[flower] extra")
@pytest.mark.parametrize("model, message", [(m, msg) for m, extra, msg in ERRORS if not extra])
def test_flower_example_refuses_the_same_models_before_starting(user_dir, capsys, monkeypatch, model, message):
    from bench.flower.__main__ import main as flower_main

    monkeypatch.setitem(sys.modules, "torchvision", None)
    before = sorted(p.name for p in user_dir.iterdir())
    assert flower_main(["--model", model, "--out", "out/flower"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in user_dir.iterdir() if p.name != "__pycache__") == before


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                    reason="torchvision is not installed: pip install -c constraints.txt -e '.[models]'")
def test_torchvision_resnet18_forward_macs_equal_fvcore():
    from fvcore.nn import FlopCountAnalysis

    from workloads.model_spec import load_factory
    from workloads.capture import capture, macs

    model = build(ModelSpec("torchvision:resnet18"), num_classes=10).eval()
    x = torch.zeros(2, 3, 32, 32)
    ours = macs(capture(model, x.to("meta"), model=model.to("meta")).trace, phase="fwd")
    factory, _ = load_factory("torchvision:resnet18")
    reference = factory(num_classes=10).eval()  # the library's own model, classifier bias and all
    counts = FlopCountAnalysis(reference, x).unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    by_op = counts.by_operator()  # fvcore counts one MAC as one "flop"; the bias add is not counted
    assert ours == by_op["conv"] + by_op["linear"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_paper_model_forward_macs_equal_fvcore(name):
    """Every model of workloads.models: the traced forward GEMM MACs of one CIFAR sample equal
    fvcore's conv + linear count (fvcore counts one MAC as one "flop", no bias adds)."""
    from fvcore.nn import FlopCountAnalysis

    from workloads.models import build_model
    from workloads.capture import capture, macs

    x = torch.zeros(1, 3, 32, 32)
    counts = FlopCountAnalysis(build_model(name, num_classes=100).eval(), x)
    by_op = counts.unsupported_ops_warnings(False).uncalled_modules_warnings(False).by_operator()
    meta = build_model(name, num_classes=100).eval().to("meta")
    ours = macs(capture(meta, x.to("meta"), model=meta).trace, phase="fwd")
    assert ours == by_op["conv"] + by_op["linear"]
    if name == "mobilenetv2":  # the SCALE-Sim recording's MACs, a third count of the same GEMMs
        timing = json.loads((REPO / "tests/data/scalesim/mobilenetv2_fwd_timing.json").read_text())
        assert ours == timing["macs"] == 91_270_144


@pytest.mark.skipif(importlib.util.find_spec("timm") is None,
                    reason="timm is not installed: pip install -c constraints.txt -e '.[models]'")
@pytest.mark.slow
def test_timm_model_by_name_is_wrapped_and_traced(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert capture.main(["--model", "timm:mobilenetv3_small_100", "--method", "spherefed", "--batch-size", "2",
                        "--classes", "10", "--out", str(out)]) == 0
    trace = load_trace(out)
    # timm's head: conv_head -> flatten -> classifier Linear(1024, C); SphereFed fixes FC(1024, 10): no dW
    assert wtrace.macs(trace, phase="fwd", layer="classifier") == 2 * 1024 * 10
    assert wtrace.macs(trace, phase="bwd", layer="classifier", role="dw") == 0
    assert "unsupported ops: none" in capsys.readouterr().out

"""The capture CLI (python -m bench.capture): a real capture written and read back, and clear
errors with exit code 2 (tests/test_failfast_capture.py has the table of bad inputs)."""

import subprocess
import sys
from pathlib import Path

import pytest

from accel_sim.trace_io import load_trace
from bench.capture.__main__ import main
from workloads.capture import macs


def test_cli_writes_a_loadable_trace(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    argv = ["--model", "convnet", "--method", "spherefed", "--batch-size", "2", "--classes", "10", "--out", str(out)]
    assert main(argv) == 0
    trace = load_trace(out)
    printed = capsys.readouterr().out
    assert (trace.header.model, trace.header.method, trace.header.batch_size) == ("convnet", "spherefed", 2)
    assert trace.header.meta["classes"] == 10 and trace.header.meta["device"] == "meta"
    assert f"bwd {macs(trace, phase='bwd'):,}" in printed
    assert "unsupported ops: none" in printed and "peak memory bytes" in printed
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "resnet99", "--method", "fedavg"], "unknown model 'resnet99'; choose from ['convnet', 'mobilenetv2'"),
        (["--model", "convnet", "--method", "fedprx"], "unknown method name(s) ['fedprx']"),
        (["--model", "convnet", "--method", "fedavg", "--batch-size", "0"], "argument --batch-size: 0 is out of range"),
        (["--model", "convnet", "--method", "spherefed", "--classes", "2000"], "SphereFed needs num_classes <= feature_dim for orthonormal rows, got C=2000 > l=1024"),
    ],
)
def test_cli_errors(tmp_path, capsys, argv, message):
    out = tmp_path / "t.jsonl"
    assert main([*argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_cli_creates_the_output_folder(tmp_path):
    out = tmp_path / "results" / "t.jsonl"
    assert main(["--model", "convnet", "--method", "fedavg", "--batch-size", "1", "--out", str(out)]) == 0
    assert load_trace(out).header.method == "fedavg"


@pytest.mark.slow
def test_module_entry_point_exit_code(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.capture", "--model", "nope", "--method", "fedavg", "--out", str(tmp_path / "t")],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 2 and "choose from" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("method", ["fedprox", "fedcos", "doublehead"])
def test_cli_captures_any_training_method(tmp_path, method):
    # the loop's own step (penalty, second head), with the optimizer settings given
    out = tmp_path / "t.jsonl"
    assert main(["--model", "convnet", "--method", method, "--batch-size", "2", "--classes", "10",
                 "--momentum", "0.5", "--weight-decay", "0", "--out", str(out)]) == 0
    trace = load_trace(out)
    assert trace.header.method == method and trace.header.meta["momentum"] == 0.5
    assert trace.header.meta["weight_decay"] == 0.0


def test_cli_replaces_a_trace_only_with_overwrite(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    argv = ["--model", "convnet", "--method", "fedavg", "--batch-size", "1", "--out", str(out)]
    assert main(argv) == 0
    assert main(argv) == 2 and "--overwrite" in capsys.readouterr().err
    assert main([*argv[:-4], "--method", "spherefed", "--out", str(out), "--overwrite"]) == 0
    assert load_trace(out).header.method == "spherefed"
    mine = tmp_path / "notes.jsonl"  # a file of the user's, not a trace: never replaced
    mine.write_text('{"my": "notes"}\n')
    assert main([*argv[:-1], str(mine), "--overwrite"]) == 2
    assert "not one" in capsys.readouterr().err and mine.read_text() == '{"my": "notes"}\n'

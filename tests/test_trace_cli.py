"""The capture CLI (python -m workloads.cost.step): a real capture written and read back, and clear
errors with exit code 2 (tests/test_failfast_capture.py has the table of bad inputs)."""

import subprocess
import sys
from pathlib import Path

import pytest

from accel_sim.trace_schema import load_trace
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
        (["--model", "convnet", "--method", "fedprox"], "invalid choice: 'fedprox' (choose from 'fedavg', 'spherefed')"),
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


def test_module_entry_point_exit_code(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "workloads.cost.step", "--model", "nope", "--method", "fedavg", "--out", str(tmp_path / "t")],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 2 and "choose from" in proc.stderr and "Traceback" not in proc.stderr


def test_the_old_module_command_names_the_new_one():
    proc = subprocess.run([sys.executable, "-m", "workloads.capture", "--model", "convnet"], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 1 and "python -m workloads.cost.step" in proc.stderr

"""python -m accel_sim: gemm and simulate, and clear errors with exit status 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accel_sim.cli import main
from accel_sim.trace_schema import dump_trace
from tests.accel_traces import small_trace

ROOT = Path(__file__).resolve().parents[1]


def test_gemm_json(capsys):
    assert main(["gemm", "10", "6", "5", "--dataflow", "os", "--rows", "4", "--cols", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    # hand-computed in test_systolic: 6 folds x 11 cycles
    assert (out["compute_cycles"], out["folds"], out["macs"]) == (66, 6, 300)
    assert out["utilization"] == pytest.approx(300 / (66 * 16))


def test_gemm_defaults_to_the_papers_array(capsys):
    assert main(["gemm", "64", "100", "1280"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["rows"], out["cols"], out["dataflow"], out["compute_cycles"]) == (32, 64, "ws", 15_200)


def test_gemm_prints_memory_figures_under_the_hardwares_memory_model(tmp_path, capsys):
    """Hand-worked in tests/test_scalesim_memory.py: 20x16x20, ws, 8x16, 1,024-word buffers,
    8 words per cycle. SCALE-Sim's model: A 480 + B 320 words read, 967 written (every row
    fold's partial sums, 960, and 7 empty slots of a forced partial write line), no stall, 150 cycles. Ours: 720 read, 320 written, and more cycles than
    the compute alone (first load, last store and the DRAM latency are not hidden)."""
    # 4-byte words: 4,096-byte buffers hold 1,024 words; 3.2e9 B/s / 100 MHz = 32 B = 8 words/cycle
    hw = ('rows = 8\ncols = 16\na_buffer_bytes = 4096\nb_buffer_bytes = 4096\nout_buffer_bytes = 4096\n'
          'dram_peak_bytes_per_s = 3.2e9\ndram_efficiency = 1.0\n')
    for model, reads, writes in (("scalesim", 800, 967), ("ours", 720, 320)):
        path = tmp_path / f"{model}.toml"
        path.write_text(hw + f'memory_model = "{model}"\n')
        assert main(["gemm", "20", "16", "20", "--dataflow", "ws", "--hw", str(path)]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["memory_model"] == model and (out["rows"], out["cols"], out["compute_cycles"]) == (8, 16, 150)
        assert (out["dram_read_bytes"], out["dram_write_bytes"]) == (4 * reads, 4 * writes)
        assert out["total_cycles"] == out["compute_cycles"] + out["stall_cycles"]
        assert (out["stall_cycles"] == 0) == (model == "scalesim")


def test_gemm_bad_hardware_exits_2(tmp_path, capsys):
    path = tmp_path / "hw.toml"
    path.write_text('memory_model = "dramsim"\n')
    assert main(["gemm", "1", "2", "3", "--hw", str(path)]) == 2
    assert "'memory_model' is 'dramsim'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["gemm", "1", "2"], ["gemm", "1", "2", "-3"], ["gemm", "1", "2", "3", "--rows", "0"],
                                  ["gemm", "1", "2", "3", "--dataflow", "rs"]])
def test_gemm_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_simulate_table_and_json(tmp_path, capsys):
    path = dump_trace(small_trace(), tmp_path / "t.jsonl")
    assert main(["simulate", str(path)]) == 0
    text = capsys.readouterr().out
    assert "fc" in text and "latency:" in text and "peak memory: 0.000 MB" in text
    assert "mJ" in text.splitlines()[0] and "energy:" in text  # energy beside latency
    assert "NOT PRICED (unsupported ops, 0 cycles): aten.fancy_new_op.default x1" in text
    assert main(["simulate", str(path), "--json", "--hw", str(ROOT / "configs/hw/paper_default.toml")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peak_bytes"] == 224 and out["unsupported_ops"] == {"aten.fancy_new_op.default": 1}
    assert out["total_cycles"] == sum(v["total_cycles"] for v in out["by_layer"].values())
    # energy at the top level, per phase and per layer, split by component
    components = ["mac", "sram", "dram", "special_unit", "static"]
    for node in (out, *out["by_phase"].values(), *out["by_layer"].values()):
        assert list(node["energy_by_component_j"]) == components
        assert node["energy_j"] == pytest.approx(sum(node["energy_by_component_j"].values()))
    assert out["energy_j"] == pytest.approx(sum(v["energy_j"] for v in out["by_layer"].values()))
    assert out["energy_j"] == pytest.approx(sum(v["energy_j"] for v in out["by_phase"].values()))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda ls: ls[:-1] + [ls[-1][:-5]], "truncated file"),
        (lambda ls: [ls[0].replace('"version":1', '"version":7')] + ls[1:], "trace version 7 is not supported"),
        (lambda ls: ls[:1] + ["{oops\n"] + ls[2:], ":2: not valid JSON"),
    ],
)
def test_simulate_bad_trace_exit_2(tmp_path, capsys, mutate, message):
    path = dump_trace(small_trace(), tmp_path / "t.jsonl")
    path.write_text("".join(mutate(path.read_text().splitlines(keepends=True))))
    assert main(["simulate", str(path)]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_simulate_bad_hw_and_missing_files_exit_2(tmp_path, capsys):
    trace = dump_trace(small_trace(), tmp_path / "t.jsonl")
    hw = tmp_path / "hw.toml"
    hw.write_text("rows = 0\n")
    assert main(["simulate", str(trace), "--hw", str(hw)]) == 2
    assert "'rows' must be a positive integer" in capsys.readouterr().err
    assert main(["simulate", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such trace file" in capsys.readouterr().err


def test_module_entry_point_no_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "fl-accel-trace", "version": 2}\n')
    run = subprocess.run([sys.executable, "-m", "accel_sim", "simulate", str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2
    assert "trace version 2 is not supported" in run.stderr and "Traceback" not in run.stderr

"""python -m accel_sim: gemm and simulate, and clear errors with exit status 2."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accel_sim.cli import build_parser, main
from accel_sim.trace_io import dump_trace
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
    for model, reads, writes in (("scalesim_v3", 800, 967), ("on_chip_accumulation", 720, 320)):
        path = tmp_path / f"{model}.toml"
        path.write_text(hw + f'memory_model = "{model}"\n')
        assert main(["gemm", "20", "16", "20", "--dataflow", "ws", "--hw", str(path)]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["memory_model"] == model and (out["rows"], out["cols"], out["compute_cycles"]) == (8, 16, 150)
        assert (out["dram_read_bytes"], out["dram_write_bytes"]) == (4 * reads, 4 * writes)
        assert out["total_cycles"] == out["compute_cycles"] + out["stall_cycles"]
        assert (out["stall_cycles"] == 0) == (model == "scalesim_v3")


def test_gemm_bad_hardware_exits_2(tmp_path, capsys):
    path = tmp_path / "hw.toml"
    path.write_text('memory_model = "dramsim"\n')
    assert main(["gemm", "1", "2", "3", "--hw", str(path)]) == 2
    assert "memory_model = 'dramsim' is not known; choose one of on_chip_accumulation, scalesim_v3" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["gemm", "1", "2"], ["gemm", "1", "2", "-3"], ["gemm", "1", "2", "3", "--rows", "0"],
                                  ["gemm", "1", "2", "3", "--dataflow", "rs"]])
def test_gemm_bad_arguments_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error" in err and err.count("\n") == 1  # one line, not the usage


def test_simulate_table_and_json(tmp_path, capsys):
    path = dump_trace(small_trace(), tmp_path / "t.jsonl")
    assert main(["simulate", str(path)]) == 0
    text = capsys.readouterr().out
    assert "fc" in text and "latency:" in text and "peak memory: 0.000 MB" in text
    assert "mJ" in text.splitlines()[0] and "energy:" in text  # energy beside latency
    assert "NOT PRICED (unsupported ops, 0 cycles): aten.fancy_new_op.default x1" in text
    assert main(["simulate", str(path), "--json", "--hw", str(ROOT / "configs/hw/paper_default.toml")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peak_memory_bytes"] == 224 and out["unsupported_ops"] == {"aten.fancy_new_op.default": 1}
    # one spelling per quantity (docs/results.md, version 3): modeled latency in seconds, peak memory
    assert out["latency_s"] == pytest.approx(out["total_cycles"] / 100e6)
    assert out["peak_memory_at_op"] == 5 and out["peak_memory_by_kind_bytes"]["gradient"] == 60
    assert out["peak_memory_live_storages"][0] == 0  # W, 60 B, the largest live storage (ids by size, then id)
    assert not {"seconds", "peak_bytes", "peak_at_op", "peak_by_kind_bytes", "peak_live_storages"} & set(out)
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
        (lambda ls: [ls[0].replace('"version":2', '"version":7')] + ls[1:], "trace version 7 is not supported"),
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
    assert "rows = 0 is out of range; give an integer in [1, 65,536]" in capsys.readouterr().err
    assert main(["simulate", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such trace file" in capsys.readouterr().err




# ----------------------------------------------------------------------------- issue 14: fail fast and clean
# Every bad input to every subcommand: exit status 2, one line on stderr naming the input (the
# file, or the flag), nothing on stdout, no traceback, no file or folder created or changed.


def _trace_lines(tmp_path: Path) -> list[str]:
    return dump_trace(small_trace(), tmp_path / "good.jsonl").read_text().splitlines(keepends=True)


def _write(path: Path, content: str | bytes) -> str:
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return str(path)


def _trace(tmp_path: Path, edit) -> str:
    return _write(tmp_path / "bad.jsonl", "".join(edit(_trace_lines(tmp_path))))


def _hw(tmp_path: Path, text: str | bytes) -> str:
    return _write(tmp_path / "hw.toml", text)


def _sub(line: str, old: str, new: str) -> str:
    assert old in line, (old, line)
    return line.replace(old, new, 1)


# (id, argv builder (tmp_path -> argv), what stderr must say, what names the input in it: "file" for
# the bad file's path, else a literal)
CASES = [
    # bad numbers
    ("hw rows 2^63", lambda d: ["simulate", _trace(d, lambda ls: ls), "--hw", _hw(d, f"rows = {2**63 - 1}\n")],
     "rows = 9223372036854775807 is out of range; give an integer in [1, 65,536]", "hw.toml"),
    ("hw cols 1e20", lambda d: ["gemm", "8", "8", "8", "--hw", _hw(d, f"cols = {10**20}\n")],
     "cols = 100000000000000000000 is out of range; give an integer in [1, 65,536]", "hw.toml"),
    ("hw clock 1e-300", lambda d: ["simulate", _trace(d, lambda ls: ls), "--hw", _hw(d, "clock_hz = 1e-300\n")],
     "clock_hz = 1e-300 is out of range; give a number in [1000, 1e+11]", "hw.toml"),
    ("hw norm 1e308", lambda d: ["simulate", _trace(d, lambda ls: ls), "--hw", _hw(d, "[special_unit]\nnorm = 1e308\n")],
     "special_unit.norm = 1e+308 is out of range; give a number in [0.001, 1e+06]", "hw.toml"),
    ("trace negative dim", lambda d: ["simulate", _trace(d, lambda ls: [_sub(ls[0], '"shape":[5,3]', '"shape":[-5,3]')] + ls[1:])],
     "tensor field 'shape' must be a list of integers in [0, 2^40], got -5", "file"),
    ("trace gemm m 1e30", lambda d: ["simulate", _trace(d, lambda ls: ls[:1] + [_sub(ls[1], '"m":2', '"m":1e30')] + ls[2:])],
     "gemm work field 'm' must be an integer in [0, 2^40], got 1e+30", "file"),
    # within every field's range, yet 2^40 x 2^40 output tiles do not fit the fold model
    ("trace gemm too many folds", lambda d: ["simulate", _trace(d, lambda ls: ls[:1] + [
        _sub(_sub(ls[1], '"m":2', f'"m":{2**40}'), '"n":5', f'"n":{2**40}')] + ls[2:])],
     "op 0 (aten.mm.default, layer 'fc'): GEMM m=1099511627776 n=1099511627776 k=3 groups=1 takes", "file"),
    ("gemm M 2^41", lambda d: ["gemm", str(2**41), "2", "3"], "argument M: 2199023255552 is out of range; give an integer in [0, 1,099,511,627,776]", "M"),
    ("gemm --rows 2^63", lambda d: ["gemm", "1", "2", "3", "--rows", str(2**63)],
     "argument --rows: 9223372036854775808 is out of range; give an integer in [1, 65,536]", "--rows"),
    # OS maps (S_R, S_C) = (m, n): ceil(2^18 / 32) x ceil(2^16 / 64) = 8192 x 1024 = 2^23 folds > 2^22
    ("gemm too many folds", lambda d: ["gemm", str(2**18), str(2**16), "2", "--dataflow", "os"],
     "takes 8,388,608 folds on a 32 x 64 array (os); the fold model prices at most 4,194,304", "m=262144"),
    # bad types
    ("trace live_at_start string", lambda d: ["simulate", _trace(d, lambda ls: [
        _sub(ls[0], '"live_at_start":false', '"live_at_start":"false"')] + ls[1:])],
     "storage field 'live_at_start' must be true or false, got 'false'", "file"),
    ("trace batch_size string", lambda d: ["simulate", _trace(d, lambda ls: [_sub(ls[0], '"batch_size":2', '"batch_size":"2"')] + ls[1:])],
     "header field 'batch_size' must be an integer", "file"),
    ("hw rows string", lambda d: ["gemm", "1", "2", "3", "--hw", _hw(d, 'rows = "32"\n')],
     "rows = '32' must be an integer in [1, 65,536]", "hw.toml"),
    # bad files
    ("trace random bytes", lambda d: ["simulate", _write(d / "bad.jsonl", bytes(range(128, 256)) * 8)],
     "not a trace file: byte 0x80 at column 1 is not UTF-8 text", "file"),
    ("trace binary line", lambda d: ["simulate", _write(d / "bad.jsonl", _trace_lines(d)[0].encode() + b"\x00\xff\n")],
     ":2: not a trace file: byte 0xff", "file"),
    ("trace deep JSON", lambda d: ["simulate", _write(d / "bad.jsonl", "[" * 200_000 + "]" * 200_000 + "\n")],
     ":1: not a trace line: JSON nested too deeply", "file"),
    ("trace empty file", lambda d: ["simulate", _write(d / "bad.jsonl", "")], ":1: empty file", "file"),
    ("trace is a folder", lambda d: ["simulate", str(d)], "is a folder, not a trace file", "d"),
    ("trace missing", lambda d: ["simulate", str(d / "nope.jsonl")], "no such trace file", "nope.jsonl"),
    ("trace version 1", lambda d: ["simulate", _trace(d, lambda ls: [_sub(_sub(ls[0], '"version":2', '"version":1'),
                                                                          '"op_count":9,', "")] + ls[1:])],
     ":1: trace version 1 is no longer read", "file"),
    ("hw binary", lambda d: ["simulate", _trace(d, lambda ls: ls), "--hw", _hw(d, b"\x89PNG\r\n\x1a\n\x00\xff")],
     "not valid TOML: byte 0x89 at offset 0 is not UTF-8 text", "hw.toml"),
    ("hw deep", lambda d: ["gemm", "1", "2", "3", "--hw", _hw(d, "a = " + "[" * 100_000 + "]" * 100_000 + "\n")],
     "not a hardware config file: nested too deeply", "hw.toml"),
    ("hw is a folder", lambda d: ["gemm", "1", "2", "3", "--hw", str(d)], "is a folder, not a hardware config file", "d"),
    # truncated traces
    ("trace cut at a line boundary", lambda d: ["simulate", _trace(d, lambda ls: ls[:5])],
     ":6: truncated trace: the header announces 9 ops, the file ends after 4", "file"),
    ("trace cut mid-line", lambda d: ["simulate", _trace(d, lambda ls: ls[:5] + [ls[5][:20]])],
     ":6: truncated file: the last line has no newline", "file"),
    # empty names
    ("simulate --hw empty", lambda d: ["simulate", _trace(d, lambda ls: ls), "--hw", ""], "--hw is empty", "--hw"),
    ("gemm --hw empty", lambda d: ["gemm", "1", "2", "3", "--hw", ""], "--hw is empty", "--hw"),
    ("trace name empty", lambda d: ["simulate", ""], "trace is empty; give trace file", "trace file"),
]


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _run_in_process(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("case, build, message, names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_fast_and_clean(tmp_path, monkeypatch, capsys, case, build, message, names):
    work = tmp_path / "work"
    work.mkdir()
    argv = build(work)
    monkeypatch.chdir(work)
    before = _listing(tmp_path)
    code, out, err = _run_in_process(argv, capsys)
    assert code == 2
    assert out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith(("error: ", "python -m accel_sim")), err
    assert message in err, err
    name = {"file": str(work / "bad.jsonl"), "d": str(work)}.get(names, names)
    assert name in err, err
    assert _listing(tmp_path) == before  # nothing created, nothing changed


@pytest.mark.parametrize("case", ["trace cut at a line boundary", "trace random bytes", "hw norm 1e308",
                                  "simulate --hw empty", "gemm M 2^41"])
def test_real_process_exit_code_and_no_traceback(tmp_path, case):
    """The same guarantees through ``python -m accel_sim``: the real exit status and stderr."""
    _, build, message, _ = next(c for c in CASES if c[0] == case)
    work = tmp_path / "work"
    work.mkdir()
    argv = build(work)
    before = _listing(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "accel_sim", *argv], capture_output=True, text=True, cwd=work, env=env)
    assert run.returncode == 2 and run.stdout == ""
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1 and message in run.stderr
    assert _listing(tmp_path) == before


def test_subcommands_are_all_covered(tmp_path):
    """A new subcommand must join CASES: every subcommand ``--help`` lists has bad-input cases."""
    subcommands = set(re.search(r"\{(.*?)\}", build_parser().format_usage()).group(1).split(","))
    assert subcommands == {"gemm", "simulate"}
    assert {build(tmp_path)[0] for _, build, _, _ in CASES} == subcommands

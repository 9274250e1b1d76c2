"""The trace file format: round trip and clear errors on bad files."""

import json

import pytest

from accel_sim.trace_schema import (
    GemmWork,
    OpRecord,
    StorageInfo,
    TensorInfo,
    Trace,
    TraceFormatError,
    TraceHeader,
    VectorWork,
    dump_trace,
    load_trace,
)


def _small_trace() -> Trace:
    storages = (StorageInfo(0, 16, "weight", True), StorageInfo(1, 8, "input", True), StorageInfo(2, 8, "activation"))
    tensors = (
        TensorInfo(0, 0, (2, 2), "float32", 16, "weight"),
        TensorInfo(1, 1, (1, 2), "float32", 8, "input"),
        TensorInfo(2, 2, (1, 2), "float32", 8, "activation"),
    )
    ops = (
        OpRecord(0, "aten.mm.default", "fc", "fwd", GemmWork(1, 2, 2), (1, 0), (2,), allocs=(2,)),
        OpRecord(1, "aten.relu.default", "act", "fwd", VectorWork("activation", 2), (2,), (2,), frees=(2,)),
        OpRecord(2, "aten.index_add_.default", "", "fwd", VectorWork("elementwise", 1, read_bytes=12, write_bytes=4),
                 (2, 1), (2,)),
    )
    return Trace(TraceHeader("tiny", "fedavg", 1, storages, tensors, {"device": "cpu"}), ops)


def test_round_trip(tmp_path):
    trace = _small_trace()
    path = dump_trace(trace, tmp_path / "t.jsonl")
    assert load_trace(path) == trace
    assert not (tmp_path / "t.jsonl.tmp").exists()


def _lines(tmp_path):
    path = dump_trace(_small_trace(), tmp_path / "t.jsonl")
    return path, path.read_text().splitlines(keepends=True)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda ls: ls[:3] + [ls[3][:-10]], ":4: truncated file"),
        (lambda ls: [ls[0].replace('"version":1', '"version":99')] + ls[1:], ":1: trace version 99 is not supported"),
        (lambda ls: ls[:1] + [ls[1].replace('"gemm"', '"matmul"')] + ls[2:], ":2: work field 'kind' is 'matmul'"),
        (lambda ls: ls[:1] + [ls[2]], ":2: op 'idx' is 1, expected 0"),
        (lambda ls: ls[:3] + [ls[3].replace('"read_bytes":12', '"read_bytes":-1')], ":4: vector work field 'read_bytes' must be >= 0"),
        (lambda ls: ls[:1] + ["{not json\n"], ":2: not valid JSON"),
        (lambda ls: ls[:1] + [ls[1].replace('"inputs":[1,0]', '"inputs":[1,7]')] + ls[2:], "unknown tensor id(s) [7]"),
        (lambda ls: [ls[0].replace('"fl-accel-trace"', '"other"')] + ls[1:], "not a trace file"),
        (lambda ls: [], ":1: empty file"),
    ],
)
def test_malformed_files_name_the_line(tmp_path, mutate, message):
    path, lines = _lines(tmp_path)
    path.write_text("".join(mutate(lines)))
    with pytest.raises(TraceFormatError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        load_trace(path)


def test_missing_field_is_named(tmp_path):
    path, lines = _lines(tmp_path)
    op = json.loads(lines[1])
    del op["work"]["m"]
    path.write_text(lines[0] + json.dumps(op) + "\n")
    with pytest.raises(TraceFormatError, match=r":2: gemm work is missing field 'm'"):
        load_trace(path)

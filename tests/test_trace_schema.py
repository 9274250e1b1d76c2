"""The trace file format: round trip and clear errors on bad files."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_sim.hardware import HardwareConfig
from accel_sim.pricing import gemm_folds
from accel_sim.simulate import simulate
from accel_sim.trace_schema import (GemmWork, OpRecord, StorageInfo, TensorInfo, Trace, TraceFormatError,
    TraceHeader, VectorWork)
from accel_sim.trace_io import dump_trace, header_to_dict, load_trace, op_to_dict, parse_trace_lines
from tests.accel_traces import small_trace


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


def test_nan_is_not_written(tmp_path):
    trace = _small_trace()
    bad = Trace(TraceHeader("tiny", "fedavg", 1, trace.header.storages, trace.header.tensors, {"lr": float("nan")}),
                trace.ops)
    with pytest.raises(ValueError, match="t.jsonl: a trace cannot hold NaN or infinity"):
        dump_trace(bad, tmp_path / "t.jsonl")
    assert list(tmp_path.iterdir()) == []


def _lines(tmp_path):
    path = dump_trace(_small_trace(), tmp_path / "t.jsonl")
    return path, path.read_text().splitlines(keepends=True)


def _escaped(message: str) -> str:
    return "".join("\\" + c if c in "()[]^+*.?" else c for c in message)


def _sub(line: str, old: str, new: str) -> str:
    assert old in line, (old, line)
    return line.replace(old, new, 1)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda ls: ls[:3] + [ls[3][:-10]], ":4: truncated file"),
        (lambda ls: [_sub(ls[0], '"version":2', '"version":99')] + ls[1:], ":1: trace version 99 is not supported"),
        (lambda ls: [_sub(ls[0], '"version":2', '"version":"2"')] + ls[1:], ":1: trace version '2' is not supported"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"gemm"', '"matmul"')] + ls[2:], ":2: work field 'kind' is 'matmul'"),
        (lambda ls: ls[:1] + [ls[2]], ":2: op 'idx' is 1, expected 0"),
        (lambda ls: ls[:3] + [_sub(ls[3], '"read_bytes":12', '"read_bytes":-1')],
         ":4: vector work field 'read_bytes' must be an integer in [0, 2^50], got -1"),
        (lambda ls: ls[:1] + ["{not json\n"], ":2: not valid JSON"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"inputs":[1,0]', '"inputs":[1,7]')] + ls[2:], ":2: op 'inputs' refers to unknown tensor id(s) [7]"),
        (lambda ls: [_sub(ls[0], '"fl-accel-trace"', '"other"')] + ls[1:], ":1: not a trace file: header 'format' is 'other'"),
        (lambda ls: [], ":1: empty file"),
        # cut at a line boundary (`head -n`): the header's op_count says how many ops must follow
        (lambda ls: ls[:1], ":2: truncated trace: the header announces 3 ops, the file ends after 0"),
        (lambda ls: ls[:3], ":4: truncated trace: the header announces 3 ops, the file ends after 2"),
        (lambda ls: ls + [ls[3]], ":5: more lines than the header's op_count (3) announces"),
        # version 1 (no op count) is rejected, not priced
        (lambda ls: [_sub(_sub(ls[0], '"version":2', '"version":1'), '"op_count":3,', '')] + ls[1:],
         ":1: trace version 1 is no longer read: it has no op count"),
        # types: no truthiness of strings, no floats or booleans for integers
        (lambda ls: [_sub(ls[0], '"live_at_start":false', '"live_at_start":"false"')] + ls[1:],
         ":1: storage field 'live_at_start' must be true or false, got 'false'"),
        (lambda ls: [_sub(ls[0], '"live_at_start":true', '"live_at_start":1')] + ls[1:],
         ":1: storage field 'live_at_start' must be true or false, got 1"),
        (lambda ls: [_sub(ls[0], '"batch_size":1', '"batch_size":true')] + ls[1:],
         ":1: header field 'batch_size' must be an integer in [0, 2^40], got True"),
        (lambda ls: [_sub(ls[0], '"batch_size":1', '"batch_size":1.0')] + ls[1:],
         ":1: header field 'batch_size' must be an integer in [0, 2^40], got 1.0"),
        (lambda ls: [_sub(ls[0], '"op_count":3', '"op_count":"3"')] + ls[1:],
         ":1: header field 'op_count' must be an integer in [0, 9223372036854775807], got '3'"),
        (lambda ls: [_sub(ls[0], '"model":"tiny"', '"model":7')] + ls[1:], ":1: header field 'model' must be a string, got 7"),
        (lambda ls: [_sub(ls[0], '"meta":{"device":"cpu"}', '"meta":[]')] + ls[1:], ":1: header field 'meta' must be an object"),
        (lambda ls: [_sub(ls[0], '"dtype":"float32"', '"dtype":null')] + ls[1:], ":1: tensor field 'dtype' must be a string, got None"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"layer":"fc"', '"layer":null')] + ls[2:], ":2: op field 'layer' must be a string"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"inputs":[1,0]', '"inputs":[1,false]')] + ls[2:],
         ":2: op field 'inputs' must be a list of integers in [0, 9223372036854775807], got False"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"role":"fwd"', '"role":0')] + ls[2:], ":2: gemm work field 'role' must be a string"),
        # numbers beyond what the model represents
        (lambda ls: [_sub(ls[0], '"shape":[2,2]', '"shape":[-2,2]')] + ls[1:],
         ":1: tensor field 'shape' must be a list of integers in [0, 2^40], got -2"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"m":1', '"m":1e30')] + ls[2:],
         ":2: gemm work field 'm' must be an integer in [0, 2^40], got 1e+30"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"m":1', f'"m":{2**40 + 1}')] + ls[2:],
         f":2: gemm work field 'm' must be an integer in [0, 2^40], got {2**40 + 1}"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"m":1', '"m":' + "9" * 5000)] + ls[2:],
         ":2: not valid trace JSON (an integer with thousands of digits)"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"groups":1', '"groups":0')] + ls[2:],
         ":2: gemm work field 'groups' must be an integer in [1, 2^24], got 0"),
        (lambda ls: [_sub(ls[0], '"bytes":16', f'"bytes":{2**50 + 1}')] + ls[1:],
         f":1: storage field 'bytes' must be an integer in [0, 2^50], got {2**50 + 1}"),
        (lambda ls: ls[:2] + [_sub(ls[2], '"elements":2', '"elements":NaN')] + ls[3:],
         ":3: not valid trace JSON (NaN is not a number JSON allows)"),
        (lambda ls: [_sub(ls[0], '"device":"cpu"', '"device":1e400')] + ls[1:], ":1: not valid trace JSON (1e400 overflows"),
        (lambda ls: [_sub(ls[0], '"device":"cpu"', '"device":-Infinity')] + ls[1:], ":1: not valid trace JSON (-Infinity"),
        # unknown or repeated fields (a misspelt field would otherwise keep its default silently)
        (lambda ls: [_sub(ls[0], '"live_at_start":true', '"live_at_strat":true')] + ls[1:],
         ":1: storage has unknown field(s) 'live_at_strat'"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"groups":1', '"group":1')] + ls[2:], ":2: gemm work has unknown field(s) 'group'"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"idx":0', '"idx":0,"cost":5')] + ls[2:], ":2: op has unknown field(s) 'cost'"),
        (lambda ls: ls[:1] + [_sub(ls[1], '"m":1', '"m":1,"m":5')] + ls[2:], ":2: not valid trace JSON (duplicate key 'm')"),
        # files that are not traces
        (lambda ls: ["[" * 100_000 + "]" * 100_000 + "\n"], ":1: not a trace line: JSON nested too deeply"),
        (lambda ls: ["[1, 2]\n"], ":1: not a trace file: the first line must be the header object"),
    ],
)
def test_malformed_files_name_the_line(tmp_path, mutate, message):
    path, lines = _lines(tmp_path)
    path.write_text("".join(mutate(lines)))
    with pytest.raises(TraceFormatError, match=_escaped(str(path) + message)):
        load_trace(path)


def test_every_cut_at_a_line_boundary_is_detected(tmp_path):
    """`head -n k` for every k short of the whole file: rejected, never priced as a shorter trace."""
    path, lines = _lines(tmp_path)
    for k in range(len(lines)):
        path.write_text("".join(lines[:k]))
        with pytest.raises(TraceFormatError, match="empty file|truncated trace"):
            load_trace(path)
    path.write_text("".join(lines))
    assert len(load_trace(path).ops) == 3


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), ":1: not a trace file: byte 0x89 at column 1 is not UTF-8 text"),
        (None, ":2: not a trace file: byte 0xff at column 1 is not UTF-8 text"),  # a binary line after the header
    ],
    ids=["png", "binary-line"],
)
def test_binary_bytes_name_the_line(tmp_path, content, message):
    path, lines = _lines(tmp_path)
    path.write_bytes(content if content is not None else lines[0].encode() + b"\xff\xfe\x00\n" + "".join(lines[1:]).encode())
    with pytest.raises(TraceFormatError, match=_escaped(str(path) + message)):
        load_trace(path)


def test_not_a_file(tmp_path):
    with pytest.raises(TraceFormatError, match="is a folder, not a trace file"):
        load_trace(tmp_path)
    with pytest.raises(TraceFormatError, match="no such trace file"):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(TraceFormatError, match="the trace file name is empty"):
        load_trace("")


def test_live_at_start_may_be_left_out(tmp_path):
    path, lines = _lines(tmp_path)
    path.write_text(_sub(lines[0], ',"live_at_start":false', "") + "".join(lines[1:]))
    assert [s.live_at_start for s in load_trace(path).header.storages] == [True, True, False]


def test_missing_field_is_named(tmp_path):
    path, lines = _lines(tmp_path)
    op = json.loads(lines[1])
    del op["work"]["m"]
    path.write_text(lines[0] + json.dumps(op) + "\n")
    with pytest.raises(TraceFormatError, match=r":2: gemm work is missing field 'm'"):
        load_trace(path)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


_SMALL = small_trace()  # every kind of work
SMALL_TRACE_LINES = (json.dumps(header_to_dict(_SMALL.header, len(_SMALL.ops))),
                     *(json.dumps(op_to_dict(op)) for op in _SMALL.ops))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_any_field_replaced_by_any_json_value_loads_or_fails_cleanly(data):
    """Replace any field, at any depth, of any line by any JSON value: loading either succeeds
    (and then the trace prices, checked where its GEMMs take at most 4,096 folds) or raises ``TraceFormatError`` naming the line; never another
    exception (no TypeError, KeyError, OverflowError from deeper code)."""
    lines = list(SMALL_TRACE_LINES)
    line_no = data.draw(st.integers(0, len(lines) - 1), label="line")
    obj = json.loads(lines[line_no])
    node = obj
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = data.draw(st.sampled_from(keys), label="key")
        child = node[key]
        if isinstance(child, (dict, list)) and child and data.draw(st.booleans(), label="deeper"):
            node = child
            continue
        node[key] = data.draw(JSON_VALUES, label="value")
        break
    lines[line_no] = json.dumps(obj)
    try:
        loaded = parse_trace_lines([line + "\n" for line in lines], source="t.jsonl")
    except TraceFormatError as e:
        assert str(e).startswith("t.jsonl:") and "\n" not in str(e)
        return
    hw = HardwareConfig()
    if all(gemm_folds(op.work, hw) <= 4096 for op in loaded.ops if op.work.kind == "gemm"):  # keep it fast
        simulate(loaded, hw)

"""Trace files on disk: writing a ``Trace`` as JSON Lines (``dump_trace``) and reading one back, every field
type-checked and bounded, unknown fields and cut files refused with the line and field named
(``load_trace``, ``parse_trace_lines``). The format: ``accel_sim.trace_schema``'s module doc.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Mapping

from accel_sim.trace_schema import (FORMAT_NAME, GEMM_ROLES, GemmWork, LINALG_OPS, LinalgWork, MAX_BYTES, MAX_DIM,
                                    MAX_ELEMENTS, MAX_GROUPS, MAX_ID, MAX_MACS, NoWork, OpRecord, PHASES,
                                    SCHEMA_VERSION, STORAGE_KINDS, StorageInfo, TensorInfo, Trace, TraceFormatError,
                                    TraceHeader, UnsupportedWork, VECTOR_OPS, VectorWork, WORK_KINDS, Work)
from iokit.files import existing_file


def _work_to_dict(work: Work) -> dict[str, Any]:
    d = {k: v for k, v in asdict(work).items() if v is not None}  # optional fields only when set
    kind = d.pop("kind")
    return {"kind": kind, **d}


def header_to_dict(header: TraceHeader, op_count: int) -> dict[str, Any]:
    """The header line of a trace with ``op_count`` ops (the count lets a reader detect a file cut
    at a line boundary)."""
    return {
        "format": FORMAT_NAME,
        "version": SCHEMA_VERSION,
        "op_count": op_count,
        "model": header.model,
        "method": header.method,
        "batch_size": header.batch_size,
        "meta": dict(header.meta),
        "storages": [asdict(s) for s in header.storages],
        "tensors": [{**asdict(t), "shape": list(t.shape)} for t in header.tensors],
    }


def op_to_dict(op: OpRecord) -> dict[str, Any]:
    return {
        "idx": op.idx,
        "aten": op.aten,
        "layer": op.layer,
        "phase": op.phase,
        "work": _work_to_dict(op.work),
        "inputs": list(op.inputs),
        "outputs": list(op.outputs),
        "allocs": list(op.allocs),
        "frees": list(op.frees),
    }


def dump_trace(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as JSON Lines. Written to a temporary file, then renamed into place, so an
    interrupted write never leaves a truncated trace under ``path``; the header's ``op_count``
    catches a file truncated later (``head -n 50``, a partial copy)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(json.dumps(header_to_dict(trace.header, len(trace.ops)), separators=(",", ":"), allow_nan=False) + "\n")
            for op in trace.ops:
                f.write(json.dumps(op_to_dict(op), separators=(",", ":"), allow_nan=False) + "\n")
    except ValueError as e:  # NaN or infinity (in meta): the reader would refuse the file
        tmp.unlink(missing_ok=True)
        raise ValueError(f"{path}: a trace cannot hold NaN or infinity ({e}); nothing written") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return path


class _Where:
    """Builds error messages that name the file and line."""

    def __init__(self, path: str, line: int):
        self.path, self.line = path, line

    def fail(self, msg: str) -> TraceFormatError:
        return TraceFormatError(f"{self.path}:{self.line}: {msg}")


def _bound_text(value: int) -> str:
    """``2^40`` for a power of two, the number otherwise."""
    return f"2^{value.bit_length() - 1}" if value >= 2**20 and value & (value - 1) == 0 else str(value)


def _shown(value: Any) -> str:
    """``repr(value)``, cut to 60 characters (a 4,000-digit number stays one readable line)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_NAMES = {str: "a string", list: "a list", dict: "an object", bool: "true or false"}


def _get(obj: Mapping[str, Any], key: str, typ: type, where: _Where, what: str):
    """``obj[key]``, which must be of JSON type ``typ`` (``bool`` only for true / false)."""
    if key not in obj:
        raise where.fail(f"{what} is missing field '{key}'")
    value = obj[key]
    if not isinstance(value, typ):
        raise where.fail(f"{what} field '{key}' must be {_TYPE_NAMES[typ]}, got {_shown(value)}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(obj: Mapping[str, Any], key: str, where: _Where, what: str, low: int, high: int) -> int:
    """``obj[key]``, a JSON integer (not a boolean, not a float such as 1e30) in ``[low, high]``."""
    if key not in obj:
        raise where.fail(f"{what} is missing field '{key}'")
    value = obj[key]
    if not _is_int(value) or not low <= value <= high:
        raise where.fail(f"{what} field '{key}' must be an integer in [{low}, {_bound_text(high)}], got {_shown(value)}")
    return value


def _int_list(obj, key, where, what, high: int = MAX_ID) -> tuple[int, ...]:
    values = _get(obj, key, list, where, what)
    if not all(_is_int(v) and 0 <= v <= high for v in values):
        bad = next(v for v in values if not (_is_int(v) and 0 <= v <= high))
        raise where.fail(f"{what} field '{key}' must be a list of integers in [0, {_bound_text(high)}], got {_shown(bad)}")
    return tuple(values)


def _choice(obj, key, choices, where, what) -> str:
    value = _get(obj, key, str, where, what)
    if value not in choices:
        raise where.fail(f"{what} field '{key}' is {_shown(value)}; expected one of {', '.join(choices)}")
    return value


def _known_keys(obj: Mapping[str, Any], known: tuple[str, ...], where: _Where, what: str) -> None:
    unknown = [k for k in obj if k not in known]
    if unknown:
        raise where.fail(f"{what} has unknown field(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}")


_WORK_FIELDS = {
    "gemm": ("kind", "m", "n", "k", "groups", "role"),
    "vector": ("kind", "op", "elements", "read_bytes", "write_bytes"),
    "linalg": ("kind", "op", "n", "nrhs", "macs"),
    "none": ("kind",),
    "unsupported": ("kind",),
}


_HEADER_FIELDS = ("format", "version", "op_count", "model", "method", "batch_size", "meta", "storages", "tensors")


_STORAGE_FIELDS = ("id", "bytes", "kind", "live_at_start")


_TENSOR_FIELDS = ("id", "storage", "shape", "dtype", "bytes", "kind")


_OP_FIELDS = ("idx", "aten", "layer", "phase", "work", "inputs", "outputs", "allocs", "frees")


def _parse_work(obj: Any, where: _Where) -> Work:
    if not isinstance(obj, dict):
        raise where.fail(f"op field 'work' must be an object, got {_shown(obj)}")
    kind = _choice(obj, "kind", WORK_KINDS, where, "work")
    _known_keys(obj, _WORK_FIELDS[kind], where, f"{kind} work")
    what = f"{kind} work"
    if kind == "gemm":
        dims = {k: _int(obj, k, where, what, 0, MAX_DIM) for k in ("m", "n", "k")}
        groups = _int(obj, "groups", where, what, 1, MAX_GROUPS) if "groups" in obj else 1
        role = _choice(obj, "role", GEMM_ROLES, where, what) if "role" in obj else "fwd"
        return GemmWork(groups=groups, role=role, **dims)
    if kind == "vector":
        optional = {k: _int(obj, k, where, what, 0, MAX_BYTES) for k in ("read_bytes", "write_bytes") if k in obj}
        return VectorWork(
            op=_choice(obj, "op", VECTOR_OPS, where, what),
            elements=_int(obj, "elements", where, what, 0, MAX_ELEMENTS),
            **optional,
        )
    if kind == "linalg":
        return LinalgWork(
            op=_choice(obj, "op", LINALG_OPS, where, what),
            n=_int(obj, "n", where, what, 0, MAX_DIM),
            nrhs=_int(obj, "nrhs", where, what, 0, MAX_DIM),
            macs=_int(obj, "macs", where, what, 0, MAX_MACS),
        )
    return NoWork() if kind == "none" else UnsupportedWork()


def _parse_header(obj: Any, where: _Where) -> tuple[TraceHeader, int]:
    """The header and its ``op_count``."""
    if not isinstance(obj, dict):
        raise where.fail("not a trace file: the first line must be the header object")
    if obj.get("format") != FORMAT_NAME:
        raise where.fail(f"not a trace file: header 'format' is {_shown(obj.get('format'))}, expected {FORMAT_NAME!r}")
    version = obj.get("version")
    if version == 1:
        raise where.fail(
            "trace version 1 is no longer read: it has no op count, so a truncated file cannot be told from a "
            f"whole one; re-capture the trace (version {SCHEMA_VERSION}, docs/trace.md)"
        )
    if not _is_int(version) or version != SCHEMA_VERSION:
        raise where.fail(
            f"trace version {_shown(version)} is not supported (this accel_sim reads version {SCHEMA_VERSION}); "
            "re-capture the trace with the matching workloads version"
        )
    _known_keys(obj, _HEADER_FIELDS, where, "header")
    op_count = _int(obj, "op_count", where, "header", 0, MAX_ID)
    storages = _parse_storages(obj, where)
    tensors = _parse_tensors(obj, where, {s.id for s in storages})
    header = TraceHeader(
        model=_get(obj, "model", str, where, "header"),
        method=_get(obj, "method", str, where, "header"),
        batch_size=_int(obj, "batch_size", where, "header", 0, MAX_DIM),
        storages=tuple(storages),
        tensors=tuple(tensors),
        meta=_get(obj, "meta", dict, where, "header") if "meta" in obj else {},
    )
    return header, op_count


def _parse_storages(obj: Mapping[str, Any], where: _Where) -> list[StorageInfo]:
    """The header's ``storages``, each checked, their ids distinct."""
    storages = []
    for s in _get(obj, "storages", list, where, "header"):
        if not isinstance(s, dict):
            raise where.fail(f"header 'storages' entries must be objects, got {_shown(s)}")
        _known_keys(s, _STORAGE_FIELDS, where, "storage")
        storages.append(
            StorageInfo(
                id=_int(s, "id", where, "storage", 0, MAX_ID),
                bytes=_int(s, "bytes", where, "storage", 0, MAX_BYTES),
                kind=_choice(s, "kind", STORAGE_KINDS, where, "storage"),
                live_at_start=_get(s, "live_at_start", bool, where, "storage") if "live_at_start" in s else False,
            )
        )
    if len({s.id for s in storages}) != len(storages):
        raise where.fail("header 'storages' has duplicate ids")
    return storages


def _parse_tensors(obj: Mapping[str, Any], where: _Where, storage_ids: set[int]) -> list[TensorInfo]:
    """The header's ``tensors``, each checked and in a known storage, their ids distinct."""
    tensors = []
    for t in _get(obj, "tensors", list, where, "header"):
        if not isinstance(t, dict):
            raise where.fail(f"header 'tensors' entries must be objects, got {_shown(t)}")
        _known_keys(t, _TENSOR_FIELDS, where, "tensor")
        info = TensorInfo(
            id=_int(t, "id", where, "tensor", 0, MAX_ID),
            storage=_int(t, "storage", where, "tensor", 0, MAX_ID),
            shape=_int_list(t, "shape", where, "tensor", MAX_DIM),
            dtype=_get(t, "dtype", str, where, "tensor"),
            bytes=_int(t, "bytes", where, "tensor", 0, MAX_BYTES),
            kind=_choice(t, "kind", STORAGE_KINDS, where, "tensor"),
        )
        if info.storage not in storage_ids:
            raise where.fail(f"tensor {info.id} refers to unknown storage {info.storage}")
        tensors.append(info)
    if len({t.id for t in tensors}) != len(tensors):
        raise where.fail("header 'tensors' has duplicate ids")
    return tensors


def _parse_op(obj: Any, where: _Where, expected_idx: int, tensor_ids: set[int], storage_ids: set[int]) -> OpRecord:
    if not isinstance(obj, dict):
        raise where.fail("each op line must be a JSON object")
    _known_keys(obj, _OP_FIELDS, where, "op")
    idx = _int(obj, "idx", where, "op", 0, MAX_ID)
    if idx != expected_idx:
        raise where.fail(f"op 'idx' is {idx}, expected {expected_idx} (ops must be in program order, none missing)")
    op = OpRecord(
        idx=idx,
        aten=_get(obj, "aten", str, where, "op"),
        layer=_get(obj, "layer", str, where, "op"),
        phase=_choice(obj, "phase", PHASES, where, "op"),
        work=_parse_work(obj.get("work"), where),
        inputs=_int_list(obj, "inputs", where, "op"),
        outputs=_int_list(obj, "outputs", where, "op"),
        allocs=_int_list(obj, "allocs", where, "op") if "allocs" in obj else (),
        frees=_int_list(obj, "frees", where, "op") if "frees" in obj else (),
    )
    for key, ids, known in (
        ("inputs", op.inputs, tensor_ids),
        ("outputs", op.outputs, tensor_ids),
        ("allocs", op.allocs, storage_ids),
        ("frees", op.frees, storage_ids),
    ):
        unknown = [i for i in ids if i not in known]
        if unknown:
            kind = "tensor" if key in ("inputs", "outputs") else "storage"
            raise where.fail(f"op '{key}' refers to unknown {kind} id(s) {unknown[:5]}")
    return op


class _BadNumber(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _BadNumber(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(f"{text} overflows a double")
    return value


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _BadNumber(f"duplicate key {_shown(dup)}")
    return obj


def _load_json_line(line: str, where: _Where) -> Any:
    """One line's JSON value: strict (no NaN / Infinity, no float overflow, no duplicate keys)."""
    try:
        return json.loads(line, parse_constant=_reject_constant, parse_float=_finite_float,
                          object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise where.fail(f"not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise where.fail("not a trace line: JSON nested too deeply") from None
    except _BadNumber as e:
        raise where.fail(f"not valid trace JSON ({e})") from None
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise where.fail("not valid trace JSON (an integer with thousands of digits)") from None


def parse_trace_lines(lines: Iterable[str], source: str = "<trace>") -> Trace:
    """Parse a trace from its lines. Raises ``TraceFormatError`` naming ``source`` and the line."""
    header: TraceHeader | None = None
    op_count = 0
    ops: list[OpRecord] = []
    tensor_ids: set[int] = set()
    storage_ids: set[int] = set()
    line_no = 0
    for line_no, line in enumerate(lines, start=1):
        where = _Where(source, line_no)
        if not line.strip():
            raise where.fail("empty line (a trace has no blank lines)")
        if not line.endswith("\n"):
            raise where.fail("truncated file: the last line has no newline (was the write interrupted?)")
        obj = _load_json_line(line, where)
        if header is None:
            header, op_count = _parse_header(obj, where)
            tensor_ids = {t.id for t in header.tensors}
            storage_ids = {s.id for s in header.storages}
        elif len(ops) == op_count:
            raise where.fail(f"more lines than the header's op_count ({op_count}) announces")
        else:
            ops.append(_parse_op(obj, where, len(ops), tensor_ids, storage_ids))
    if header is None:
        raise TraceFormatError(f"{source}:{line_no + 1}: empty file: expected a header line")
    if len(ops) != op_count:
        raise TraceFormatError(
            f"{source}:{line_no + 1}: truncated trace: the header announces {op_count} ops, the file ends after "
            f"{len(ops)} (cut or partly copied? re-copy or re-capture it)"
        )
    return Trace(header=header, ops=tuple(ops))


def _decoded_lines(f: BinaryIO, source: str) -> Iterator[str]:
    for line_no, raw in enumerate(f, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Where(source, line_no).fail(
                f"not a trace file: byte {raw[e.start]:#04x} at column {e.start + 1} is not UTF-8 text") from None


def load_trace(path: str | Path) -> Trace:
    """Load and validate a trace file. Raises ``TraceFormatError`` (file:line: what is wrong)."""
    path = existing_file(path, TraceFormatError, "trace", empty_hint="give a trace file (JSON Lines, docs/trace.md)")
    try:
        with path.open("rb") as f:
            return parse_trace_lines(_decoded_lines(f, str(path)), source=str(path))
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read the trace file ({e.strerror or e})") from None

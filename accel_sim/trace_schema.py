"""The trace file: the one seam between workloads/ (torch) and accel_sim/ (no torch).

The consumer owns its input language, so the schema lives here. A trace is one captured region of
a program (a training step, a calibration, an aggregation) as the aten ops it ran, in program order.

File format: JSON Lines (UTF-8), version ``SCHEMA_VERSION``.

Line 1, the header object::

    {"format": "fl-accel-trace", "version": 1,
     "model": "mobilenetv2", "method": "spherefed", "batch_size": 64,
     "meta": {...free-form capture facts: classes, input shape, device, torch version...},
     "storages": [{"id": 0, "bytes": 3456, "kind": "weight", "live_at_start": true}, ...],
     "tensors":  [{"id": 0, "storage": 0, "shape": [32, 3, 3, 3], "dtype": "float32",
                   "bytes": 3456, "kind": "weight"}, ...]}

Then one object per op, in program order::

    {"idx": 0, "aten": "aten.convolution.default", "layer": "body.0.conv", "phase": "fwd",
     "work": {"kind": "gemm", "m": 65536, "n": 32, "k": 27, "groups": 1, "role": "fwd"},
     "inputs": [12, 0], "outputs": [13], "allocs": [7], "frees": [5]}

* ``tensors`` describe values (shape, dtype, ``bytes`` = numel x itemsize of the view);
  ``storages`` are the memory they live in (views share a storage). Memory accounting is per
  storage: a storage is live from the op that lists it in ``allocs`` (or from the start, if
  ``live_at_start``) until the op that lists it in ``frees`` (it is freed *after* that op ran), or
  to the end of the trace if never freed.
* ``kind`` of a storage (and of the tensors in it) is one of ``STORAGE_KINDS``.
* ``phase`` is one of ``PHASES``; ``layer`` is the state_dict-style name of the owning module
  ("" for ops outside any module; "loss" for the loss function).
* ``work`` is one of the forms in ``WORK_KINDS``:
    - ``gemm``: ``out[m x n] = A[m x k] . B[k x n]`` repeated ``groups`` times (MACs = m.n.k.groups);
      ``role`` is ``fwd`` (forward product), ``dx`` (input gradient) or ``dw`` (weight gradient),
      so that each role can be given its own dataflow.
    - ``vector``: ``elements`` element operations of ``op`` (one of ``VECTOR_OPS``) on the special
      unit. It moves its input and output tensors through memory, unless the optional
      ``read_bytes`` / ``write_bytes`` say it touches less (an in-place indexed accumulation such
      as ``index_add_`` reads and writes only the indexed slices of its accumulator).
    - ``linalg``: a dense factorization or solve (``op`` in ``LINALG_OPS``) of an ``n x n`` matrix
      with ``nrhs`` right-hand sides; ``macs`` is the lowering's count of multiply-adds.
    - ``none``: metadata only (views, reshapes, detach): no arithmetic, no data movement.
    - ``unsupported``: an aten op the lowering does not know; listed so it is never silently
      dropped. Pricing reports it instead of guessing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

FORMAT_NAME = "fl-accel-trace"
SCHEMA_VERSION = 1

PHASES = ("fwd", "bwd", "update", "calibration", "aggregation")
STORAGE_KINDS = (
    "weight",  # parameters (trainable or frozen)
    "buffer",  # non-parameter module state (BatchNorm running statistics)
    "gradient",  # parameter .grad storages
    "optimizer_state",  # e.g. SGD momentum buffers
    "input",  # the batch (data and targets)
    "activation",  # storages created during the forward phase
    "workspace",  # every other temporary (activation gradients, update temporaries, ...)
)
GEMM_ROLES = ("fwd", "dx", "dw")
VECTOR_OPS = (
    "elementwise",  # add, mul, copy-like arithmetic, fill
    "activation",  # relu, sigmoid, hardtanh, ... and their backward
    "norm",  # batch/group/feature norm and their backward
    "pool",  # max/avg pooling and their backward
    "reduce",  # sum, mean, norms over axes
    "loss",  # softmax/log-softmax/NLL/MSE and their backward
    "update",  # optimizer arithmetic on parameters, gradients and state
    "copy",  # data movement without arithmetic (cat, clone, contiguous)
    "random",  # random number generation
)
LINALG_OPS = ("cholesky", "lu", "solve", "triangular_solve", "inverse", "eigh", "qr")
WORK_KINDS = ("gemm", "vector", "linalg", "none", "unsupported")


class TraceFormatError(ValueError):
    """A trace file that does not follow the schema. The message names the file and line."""


@dataclass(frozen=True)
class StorageInfo:
    id: int
    bytes: int
    kind: str
    live_at_start: bool = False


@dataclass(frozen=True)
class TensorInfo:
    id: int
    storage: int
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    kind: str


@dataclass(frozen=True)
class GemmWork:
    m: int
    n: int
    k: int
    groups: int = 1
    role: str = "fwd"
    kind: str = "gemm"

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k * self.groups


@dataclass(frozen=True)
class VectorWork:
    op: str
    elements: int
    read_bytes: int | None = None  # None: the bytes of the op's distinct input tensors
    write_bytes: int | None = None  # None: the bytes of the op's distinct output tensors
    kind: str = "vector"


@dataclass(frozen=True)
class LinalgWork:
    op: str
    n: int
    nrhs: int
    macs: int
    kind: str = "linalg"


@dataclass(frozen=True)
class NoWork:
    kind: str = "none"


@dataclass(frozen=True)
class UnsupportedWork:
    kind: str = "unsupported"


Work = GemmWork | VectorWork | LinalgWork | NoWork | UnsupportedWork


@dataclass(frozen=True)
class OpRecord:
    idx: int
    aten: str
    layer: str
    phase: str
    work: Work
    inputs: tuple[int, ...] = ()
    outputs: tuple[int, ...] = ()
    allocs: tuple[int, ...] = ()
    frees: tuple[int, ...] = ()


@dataclass(frozen=True)
class TraceHeader:
    model: str
    method: str
    batch_size: int
    storages: tuple[StorageInfo, ...]
    tensors: tuple[TensorInfo, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Trace:
    header: TraceHeader
    ops: tuple[OpRecord, ...]

    def unsupported_ops(self) -> dict[str, int]:
        """Aten op name -> count, for every op whose work kind is ``unsupported``."""
        counts: dict[str, int] = {}
        for op in self.ops:
            if op.work.kind == "unsupported":
                counts[op.aten] = counts.get(op.aten, 0) + 1
        return counts


# ----------------------------------------------------------------------------- writing


def _work_to_dict(work: Work) -> dict[str, Any]:
    d = {k: v for k, v in asdict(work).items() if v is not None}  # optional fields only when set
    kind = d.pop("kind")
    return {"kind": kind, **d}


def header_to_dict(header: TraceHeader) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "version": SCHEMA_VERSION,
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
    interrupted write never leaves a truncated trace under ``path``."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(json.dumps(header_to_dict(trace.header), separators=(",", ":")) + "\n")
        for op in trace.ops:
            f.write(json.dumps(op_to_dict(op), separators=(",", ":")) + "\n")
    tmp.replace(path)
    return path


# ----------------------------------------------------------------------------- reading


class _Where:
    """Builds error messages that name the file and line."""

    def __init__(self, path: str, line: int):
        self.path, self.line = path, line

    def fail(self, msg: str) -> TraceFormatError:
        return TraceFormatError(f"{self.path}:{self.line}: {msg}")


def _get(obj: Mapping[str, Any], key: str, typ: type | tuple[type, ...], where: _Where, what: str):
    if key not in obj:
        raise where.fail(f"{what} is missing field '{key}'")
    value = obj[key]
    if typ is int and isinstance(value, bool) or not isinstance(value, typ):
        name = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise where.fail(f"{what} field '{key}' must be {name}, got {value!r}")
    return value


def _nonneg_int(obj, key, where, what) -> int:
    value = _get(obj, key, int, where, what)
    if value < 0:
        raise where.fail(f"{what} field '{key}' must be >= 0, got {value}")
    return value


def _int_list(obj, key, where, what) -> tuple[int, ...]:
    values = _get(obj, key, list, where, what)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise where.fail(f"{what} field '{key}' must be a list of integers")
    return tuple(values)


def _choice(obj, key, choices, where, what) -> str:
    value = _get(obj, key, str, where, what)
    if value not in choices:
        raise where.fail(f"{what} field '{key}' is {value!r}; expected one of {', '.join(choices)}")
    return value


def _parse_work(obj: Any, where: _Where) -> Work:
    if not isinstance(obj, dict):
        raise where.fail("op field 'work' must be an object")
    kind = _choice(obj, "kind", WORK_KINDS, where, "work")
    if kind == "gemm":
        dims = {k: _nonneg_int(obj, k, where, "gemm work") for k in ("m", "n", "k")}
        groups = _nonneg_int(obj, "groups", where, "gemm work") if "groups" in obj else 1
        if groups < 1:
            raise where.fail("gemm work field 'groups' must be >= 1")
        role = _choice(obj, "role", GEMM_ROLES, where, "gemm work") if "role" in obj else "fwd"
        return GemmWork(groups=groups, role=role, **dims)
    if kind == "vector":
        optional = {k: _nonneg_int(obj, k, where, "vector work") for k in ("read_bytes", "write_bytes") if k in obj}
        return VectorWork(
            op=_choice(obj, "op", VECTOR_OPS, where, "vector work"),
            elements=_nonneg_int(obj, "elements", where, "vector work"),
            **optional,
        )
    if kind == "linalg":
        return LinalgWork(
            op=_choice(obj, "op", LINALG_OPS, where, "linalg work"),
            n=_nonneg_int(obj, "n", where, "linalg work"),
            nrhs=_nonneg_int(obj, "nrhs", where, "linalg work"),
            macs=_nonneg_int(obj, "macs", where, "linalg work"),
        )
    return NoWork() if kind == "none" else UnsupportedWork()


def _parse_header(obj: Any, where: _Where) -> TraceHeader:
    if not isinstance(obj, dict):
        raise where.fail("the first line must be the header object")
    if obj.get("format") != FORMAT_NAME:
        raise where.fail(f"not a trace file: header 'format' is {obj.get('format')!r}, expected {FORMAT_NAME!r}")
    version = obj.get("version")
    if version != SCHEMA_VERSION:
        raise where.fail(
            f"trace version {version!r} is not supported (this accel_sim reads version {SCHEMA_VERSION}); "
            "re-capture the trace with the matching workloads version"
        )
    storages = []
    for s in _get(obj, "storages", list, where, "header"):
        if not isinstance(s, dict):
            raise where.fail("header 'storages' entries must be objects")
        storages.append(
            StorageInfo(
                id=_nonneg_int(s, "id", where, "storage"),
                bytes=_nonneg_int(s, "bytes", where, "storage"),
                kind=_choice(s, "kind", STORAGE_KINDS, where, "storage"),
                live_at_start=bool(s.get("live_at_start", False)),
            )
        )
    storage_ids = {s.id for s in storages}
    if len(storage_ids) != len(storages):
        raise where.fail("header 'storages' has duplicate ids")
    tensors = []
    for t in _get(obj, "tensors", list, where, "header"):
        if not isinstance(t, dict):
            raise where.fail("header 'tensors' entries must be objects")
        info = TensorInfo(
            id=_nonneg_int(t, "id", where, "tensor"),
            storage=_nonneg_int(t, "storage", where, "tensor"),
            shape=_int_list(t, "shape", where, "tensor"),
            dtype=_get(t, "dtype", str, where, "tensor"),
            bytes=_nonneg_int(t, "bytes", where, "tensor"),
            kind=_choice(t, "kind", STORAGE_KINDS, where, "tensor"),
        )
        if info.storage not in storage_ids:
            raise where.fail(f"tensor {info.id} refers to unknown storage {info.storage}")
        tensors.append(info)
    if len({t.id for t in tensors}) != len(tensors):
        raise where.fail("header 'tensors' has duplicate ids")
    batch_size = _nonneg_int(obj, "batch_size", where, "header")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise where.fail("header field 'meta' must be an object")
    return TraceHeader(
        model=_get(obj, "model", str, where, "header"),
        method=_get(obj, "method", str, where, "header"),
        batch_size=batch_size,
        storages=tuple(storages),
        tensors=tuple(tensors),
        meta=meta,
    )


def _parse_op(obj: Any, where: _Where, expected_idx: int, tensor_ids: set[int], storage_ids: set[int]) -> OpRecord:
    if not isinstance(obj, dict):
        raise where.fail("each op line must be a JSON object")
    idx = _nonneg_int(obj, "idx", where, "op")
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


def parse_trace_lines(lines: Iterable[str], source: str = "<trace>") -> Trace:
    """Parse a trace from its lines. Raises ``TraceFormatError`` naming ``source`` and the line."""
    header: TraceHeader | None = None
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
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise where.fail(f"not valid JSON ({e.msg} at column {e.colno})") from None
        if header is None:
            header = _parse_header(obj, where)
            tensor_ids = {t.id for t in header.tensors}
            storage_ids = {s.id for s in header.storages}
        else:
            ops.append(_parse_op(obj, where, len(ops), tensor_ids, storage_ids))
    if header is None:
        raise TraceFormatError(f"{source}:{line_no + 1}: empty file: expected a header line")
    return Trace(header=header, ops=tuple(ops))


def load_trace(path: str | Path) -> Trace:
    """Load and validate a trace file. Raises ``TraceFormatError`` (file:line: what is wrong)."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(f"{path}: no such trace file")
    with path.open("r", encoding="utf-8") as f:
        return parse_trace_lines(f, source=str(path))

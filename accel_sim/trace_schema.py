"""The trace file: the one seam between workloads/ (torch) and accel_sim/ (no torch).

The consumer owns its input language, so the schema lives here. A trace is one captured region of
a program (a training step, a calibration, an aggregation) as the aten ops it ran, in program order.

File format: JSON Lines (UTF-8), version ``SCHEMA_VERSION``.

Line 1, the header object::

    {"format": "fl-accel-trace", "version": 2, "op_count": 1532,
     "model": "mobilenetv2", "method": "spherefed", "batch_size": 64,
     "meta": {...free-form capture facts: classes, input shape, device, torch version...},
     "storages": [{"id": 0, "bytes": 3456, "kind": "weight", "live_at_start": true}, ...],
     "tensors":  [{"id": 0, "storage": 0, "shape": [32, 3, 3, 3], "dtype": "float32",
                   "bytes": 3456, "kind": "weight"}, ...]}

Then one object per op, in program order::

    {"idx": 0, "aten": "aten.convolution.default", "layer": "body.0.conv", "phase": "fwd",
     "work": {"kind": "gemm", "m": 65536, "n": 32, "k": 27, "groups": 1, "role": "fwd"},
     "inputs": [12, 0], "outputs": [13], "allocs": [7], "frees": [5]}

* ``op_count`` is the number of op lines that follow: a file cut at a line boundary (``head -n
  50``) has fewer and is rejected, as is one with more. Version 1 had no count and is rejected
  with a line saying so (re-capture: a trace takes seconds to capture). Every field is
  type-checked (a boolean is ``true`` / ``false``, never a string; an integer is a JSON integer,
  not a float or a boolean), bounded (``MAX_DIM`` ... below), and unknown fields are rejected.
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

Written and read (every field checked) by ``accel_sim.trace_io`` (``dump_trace``, ``load_trace``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

FORMAT_NAME = "fl-accel-trace"
SCHEMA_VERSION = 2

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

# Bounds on every number a trace holds: what the cost model represents exactly (integer cycle and
# byte counts that stay below 2^63 in numpy, finite floats for energy and seconds). Each is far
# above any real training step (MobileNetV2 at batch 64: largest GEMM dimension 65,536 = 2^16,
# largest storage 37.7 MB < 2^26 B, 960 groups); a value outside its bound is rejected on load, naming the
# file, line, field and range.
MAX_DIM = 2**40
"""GEMM ``m``, ``n``, ``k``; linalg ``n``, ``nrhs``; every entry of a tensor's ``shape``; ``batch_size``."""
MAX_GROUPS = 2**24
"""GEMM ``groups`` (depthwise channels, batched-matmul batch)."""
MAX_BYTES = 2**50
"""Storage and tensor ``bytes``, vector ``read_bytes`` / ``write_bytes`` (1 PiB)."""
MAX_ELEMENTS = 2**50
"""Vector ``elements``."""
MAX_MACS = 2**64
"""Linalg ``macs``."""
MAX_ID = 2**63 - 1
"""Storage and tensor ids, op ``idx``, the header's ``op_count``."""


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

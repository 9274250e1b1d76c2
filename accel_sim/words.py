"""What a trace's values occupy on the accelerator: one rule for every byte figure but the GEMMs'.

A trace records bytes as PyTorch held them: a float32 value is ``TRACE_FLOAT_BYTES`` = 4 bytes
(the training step is captured in float32). ``HardwareConfig.word_bytes`` is the size of such a
value as the array's GEMMs read it (``accel_sim.memory`` counts GEMM operands in words of that
size). The rule, applied by ``accel_sim.simulate`` (and ``accel_sim.batch``) to vector and
linear-algebra traffic, to the values rounded and to peak memory (``Storing.of(hw)``):

* ``word_bytes >= 4``: every floating-point value at ``word_bytes`` (a float64 tensor, such as
  CCVR's statistics, twice a float32 one); at 4, every figure is the trace's own.
* ``word_bytes < 4``, a narrow number format, priced as the emulation computes
  (``workloads.numerics``: every GEMM operand rounded to the format, everything else in FP32):

  - a storage that a GEMM reads (an operand: activations, the batch, output gradients) is stored
    in the format: its elements packed, ``word_bits / 8`` bytes per value (``element_bits``: MXFP4's
    4 bits two to a byte; whole bytes rounded up per tensor), plus ``scale_bits_per_value / 8`` of
    shared scales (MX blocks', BFP groups'), per copy: one copy, or one per GEMM role reading it (``operand_copies = "per_role"``:
    block-grouped formats regroup a tensor for the backward GEMMs, stochastic rounding draws each
    role's copy with its own bits, ``accel_sim.hardware.OPERAND_COPIES``). Writing it writes every
    copy (each rounded from the FP32 value in hand); reading it reads one;
  - a weight that a GEMM reads keeps its FP32 master copy (4 bytes; the optimizer reads and writes
    it, as mixed-precision training does: Micikevicius et al., "Mixed Precision Training", ICLR
    2018, Sec. 3.1) and its copies in the format: the optimizer's write refreshes both; with
    ``weight_master = "none"`` (``--low-precision-weights``) it lives in the format only, and the
    optimizer reads and writes that;
  - every other floating-point value stays FP32, 4 bytes per value: weight gradients, momentum and
    other optimizer state, normalization statistics and outputs, losses, buffers, every tensor no
    GEMM reads;
  - the values rounded (``rounded``): an op that writes a storage stored in the format rounds its
    values once per copy (the random bits of stochastic rounding are priced per such value,
    ``EnergyCosts.rounding_pj_per_value``). The batch, loaded into the format, is not counted.

* integer tensors (labels, indices, max-pool indices) keep their size;
* a storage is floating-point when any tensor in it is; its bytes scale as that tensor's;
* a vector op that states the bytes it touches (``VectorWork.read_bytes`` / ``write_bytes``)
  counts the integer tensors among its inputs / outputs first (they keep their size) and scales
  the rest as its floating-point tensors scale together.

Not covered here: a GEMM's output is written at ``word_bytes`` by the fold model (``accel_sim.memory``)
even where the storage holding it stays FP32 (``docs/numerics.md``, "What it costs").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from accel_sim.hardware import word_bits
from accel_sim.trace_schema import OpRecord, StorageInfo, TensorInfo, TraceHeader

TRACE_FLOAT_BYTES = 4  # a float32 value, as the trace holds it


def is_floating(dtype: str) -> bool:
    """``float16``, ``bfloat16``, ``float32``, ``float64``, ... (the trace's dtype names)."""
    return dtype.startswith(("float", "bfloat"))


def at_word(nbytes: int, word_bytes: int) -> int:
    """Floating-point bytes of the trace at ``word_bytes`` bytes per float32 value."""
    return nbytes * word_bytes // TRACE_FLOAT_BYTES


@dataclass(frozen=True)
class Storing:
    """The hardware fields the rule reads (module docstring)."""

    word_bytes: int
    per_role: bool = False
    scale_bits_per_value: float = 0.0
    weight_master: bool = True
    element_bits: int = 0

    @staticmethod
    def of(hw) -> "Storing":
        """From a ``HardwareConfig`` (or one point's values)."""
        return Storing(int(hw.word_bytes), str(hw.operand_copies) == "per_role", float(hw.scale_bits_per_value),
                       str(hw.weight_master) == "fp32", int(hw.element_bits))

    @property
    def word_bits(self) -> int:
        """Bits of a stored operand value: ``element_bits``, else the whole word."""
        return word_bits(self.word_bytes, self.element_bits)

    @property
    def narrow(self) -> bool:
        """Whether GEMM operands are stored narrower than the FP32 values around them."""
        return self.word_bytes < TRACE_FLOAT_BYTES


@dataclass(frozen=True)
class StoredBytes:
    """Per tensor id: the bytes one read moves, the bytes one write moves and the values a write
    rounds; the storages with their bytes on the accelerator (module docstring)."""

    read: Mapping[int, int]
    write: Mapping[int, int]
    rounded: Mapping[int, int]
    storages: tuple[StorageInfo, ...]


def gemm_roles(ops: Iterable[OpRecord], tensors: Mapping[int, TensorInfo]) -> dict[int, frozenset[str]]:
    """Storage id -> the GEMM roles (``fwd``, ``dx``, ``dw``) of the GEMMs that read it."""
    roles: dict[int, set[str]] = {}
    for op in ops:
        if op.work.kind == "gemm":
            for i in op.inputs:
                if is_floating(tensors[i].dtype):
                    roles.setdefault(tensors[i].storage, set()).add(op.work.role)
    return {s: frozenset(r) for s, r in roles.items()}


def _scale_bytes(nbytes: int, storing: Storing) -> int:
    """Shared-scale bytes of ``nbytes`` of float32 values, whole bytes rounded up."""
    return math.ceil(nbytes // TRACE_FLOAT_BYTES * storing.scale_bits_per_value / 8)


def stored_bytes(header: TraceHeader, ops: Iterable[OpRecord], storing: Storing) -> StoredBytes:
    """The rule of the module docstring for one trace."""
    tensors = {t.id: t for t in header.tensors}
    floating = {t.storage: t.dtype for t in header.tensors if is_floating(t.dtype)}
    if not storing.narrow:
        sized = {t.id: at_word(t.bytes, storing.word_bytes) if is_floating(t.dtype) else t.bytes for t in header.tensors}
        storages = tuple(header.storages) if storing.word_bytes == TRACE_FLOAT_BYTES else tuple(
            StorageInfo(s.id, at_word(s.bytes, storing.word_bytes), s.kind, s.live_at_start) if s.id in floating else s
            for s in header.storages)
        return StoredBytes(sized, sized, {}, storages)
    roles = gemm_roles(ops, tensors)
    kinds = {s.id: s.kind for s in header.storages}

    def copies(storage: int) -> int:
        return (len(roles[storage]) if storing.per_role else 1) if storage in roles else 0

    def in_format(nbytes: int) -> int:  # one copy: packed elements, then the scales
        return -(-(nbytes // TRACE_FLOAT_BYTES) * storing.word_bits // 8) + _scale_bytes(nbytes, storing)

    def sizes(nbytes: int, storage: int, dtype: str) -> tuple[int, int, int, int]:
        """(read, write, held, rounded values) of ``nbytes`` in ``storage``."""
        if not is_floating(dtype):
            return nbytes, nbytes, nbytes, 0
        n = copies(storage)
        if n == 0:
            return nbytes, nbytes, nbytes, 0
        master = nbytes if kinds[storage] == "weight" and storing.weight_master else 0
        stored = n * in_format(nbytes)
        return master or in_format(nbytes), master + stored, master + stored, n * (nbytes // TRACE_FLOAT_BYTES)

    read, write, rounded = {}, {}, {}
    for t in header.tensors:
        read[t.id], write[t.id], _, rounded[t.id] = sizes(t.bytes, t.storage, t.dtype)
    storages = tuple(StorageInfo(s.id, sizes(s.bytes, s.id, floating.get(s.id, "int64"))[2], s.kind, s.live_at_start)
                     for s in header.storages)
    return StoredBytes(read, write, rounded, storages)


def stated_bytes(stated: int, tensor_ids: Iterable[int], tensors: Mapping[int, TensorInfo],
                 sized: Mapping[int, int]) -> int:
    """Bytes an op states it moves, on the accelerator: the integer tensors among ``tensor_ids``
    (indices) are counted first and keep their size; the rest is floating-point and scales as the
    op's floating-point tensors do together (``sized``: their bytes on the accelerator)."""
    ids = list(dict.fromkeys(tensor_ids))
    fixed = min(stated, sum(tensors[i].bytes for i in ids if not is_floating(tensors[i].dtype)))
    trace_floating = sum(tensors[i].bytes for i in ids if is_floating(tensors[i].dtype))
    if trace_floating == 0:
        return stated
    return fixed + (stated - fixed) * sum(sized[i] for i in ids if is_floating(tensors[i].dtype)) // trace_floating

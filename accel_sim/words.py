"""The accelerator's word size applied to a trace's bytes: one rule for every byte figure.

A trace records bytes as PyTorch held them: a float32 value is ``TRACE_FLOAT_BYTES`` = 4 bytes
(the training step is captured in float32). ``HardwareConfig.word_bytes`` is the size of such a
value on the accelerator. The rule, applied by ``accel_sim.simulate`` to every kind of work and to
peak memory:

* floating-point bytes of the trace scale by ``word_bytes / 4`` (a float64 tensor, such as CCVR's
  statistics, stays twice a float32 one);
* integer tensors (labels, indices, max-pool indices) keep their size;
* GEMM operands are counted in words by the fold model (``accel_sim.memory``): one word each;
* a storage is floating-point when any tensor in it is; its bytes scale as that tensor's;
* a vector op that states the bytes it touches (``VectorWork.read_bytes`` / ``write_bytes``)
  counts the integer tensors among its inputs / outputs first (they keep their size) and scales
  the rest.

At ``word_bytes = 4`` every figure is the trace's own.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from accel_sim.trace_schema import StorageInfo, TensorInfo

TRACE_FLOAT_BYTES = 4  # a float32 value, as the trace holds it


def is_floating(dtype: str) -> bool:
    """``float16``, ``bfloat16``, ``float32``, ``float64``, ... (the trace's dtype names)."""
    return dtype.startswith(("float", "bfloat"))


def at_word(nbytes: int, word_bytes: int) -> int:
    """Floating-point bytes of the trace at ``word_bytes`` bytes per float32 value."""
    return nbytes * word_bytes // TRACE_FLOAT_BYTES


def tensor_bytes_at_word(tensors: Iterable[TensorInfo], word_bytes: int) -> dict[int, int]:
    """Tensor id -> its bytes on the accelerator."""
    return {t.id: at_word(t.bytes, word_bytes) if is_floating(t.dtype) else t.bytes for t in tensors}


def storages_at_word(storages: Iterable[StorageInfo], tensors: Iterable[TensorInfo],
                     word_bytes: int) -> tuple[StorageInfo, ...]:
    """The storages with their bytes on the accelerator (floating-point ones scaled)."""
    storages = tuple(storages)
    if word_bytes == TRACE_FLOAT_BYTES:
        return storages
    floating = {t.storage for t in tensors if is_floating(t.dtype)}
    return tuple(StorageInfo(s.id, at_word(s.bytes, word_bytes), s.kind, s.live_at_start) if s.id in floating else s
                 for s in storages)


def stated_bytes_at_word(stated: int, tensor_ids: Iterable[int], tensors: Mapping[int, TensorInfo],
                         word_bytes: int) -> int:
    """Bytes an op states it moves, on the accelerator: the integer tensors among ``tensor_ids``
    (indices) are counted first and keep their size, the rest is floating-point and scales."""
    fixed = min(stated, sum(tensors[i].bytes for i in dict.fromkeys(tensor_ids) if not is_floating(tensors[i].dtype)))
    return fixed + at_word(stated - fixed, word_bytes)

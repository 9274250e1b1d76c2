"""The C allocator's reuse of freed memory on Linux: set once for a process that trains on the CPU.

A training step allocates and frees the same tensors every step (activations, gradients, and under
a number format every GEMM operand's rounded copy: 237 MB written a MobileNetV2 step). glibc's
``malloc`` serves a block above its mmap threshold with a fresh ``mmap`` and unmaps it on ``free``;
it raises that threshold to the largest block freed (up to 32 MiB), but trims the heap's top back
to the kernel whenever more than twice the threshold lies free there, so the next step's blocks are
fresh pages again, each faulted in and zeroed by the kernel. ``mallopt(M_MMAP_THRESHOLD, 32 MiB)``
and ``mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)`` keep the freed memory for the next step
(glibc manual, "Malloc Tunable Parameters"; ``mallopt(3)``). Only the speed changes: the values
computed are the same. Measured on MobileNetV2's step (``benchmarks/bench_numerics.py``, one
thread): FP32 151 -> 131 ms, ``bfp_m4_g16`` 245 -> 200 ms, the system time a third.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit machines)
TRIM_THRESHOLD_BYTES = 1 << 30  # free memory kept at the heap's top, at most


@functools.cache
def keep_freed_memory() -> bool:
    """Tell glibc's allocator to keep freed blocks for reuse (module doc); once per process. False
    where the C library is not glibc (macOS, musl: nothing changes). Its answer is kept: a call per
    client costs nothing after the first."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))

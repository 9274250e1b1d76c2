"""The choices and bounds of ``accel_sim.hardware.HardwareConfig``'s fields, each with its source: the GEMM
mappings of grouped convolutions, the memory models, how operands are copied and weights kept, and
the range every number field is checked against (``FIELD_BOUNDS``; docs/accel_sim.md).
"""

from __future__ import annotations


GROUPED_MAPPINGS = ("per_group", "block_diagonal")
"""How a GEMM with ``groups > 1`` (grouped / depthwise convolution, batched matmul) is mapped:

* ``per_group``: one group at a time, each group its own GEMM of ``m x n x k`` with its own folds.
  This is SCALE-Sim's convention for depthwise layers (one single-channel layer per channel).
* ``block_diagonal``: ``p`` groups at once, as one GEMM ``out[m x pn] = A[m x pk] . B[pk x pn]``
  whose B is block-diagonal (each group's ``k x n`` block on the diagonal, zeros elsewhere). ``p``
  is the most groups whose packed spatial dimensions still fit one fold: WS (B stationary,
  ``pk`` rows x ``pn`` columns) ``p = min(rows // k, cols // n)``; IS (A stationary, ``pk`` rows)
  ``p = rows // k``; OS (``pn`` columns; the reduction ``pk`` streams in time)
  ``p = cols // n``; at least 1, at most ``groups``. Groups cannot be packed "across columns"
  alone: a row's streamed operand is shared by every column of that row, so groups with different
  inputs also need their own rows (WS/IS) or their own zero-padded reduction slots (OS). The zero
  MACs cost cycles but are not counted as useful MACs, nor charged MAC energy (the cells gate
  them: ``accel_sim.energy``).
"""


MEMORY_MODELS = ("on_chip_accumulation", "scalesim_v3")
"""How a GEMM's DRAM traffic and stalls are priced (``docs/scalesim.md`` compares the two):

* ``on_chip_accumulation``: ``accel_sim.memory``: partial sums accumulated on chip (spilled and
  read back only when they do not fit), one DRAM channel of ``dram_bytes_per_cycle`` shared by
  all operands, double-buffered fold-by-fold prefetch and write-back, ``dram_latency_cycles`` once
  per op.
* ``scalesim_v3``: ``accel_sim.memory_scalesim``: a validation reference equal to SCALE-Sim 3.0's
  USER-bandwidth-mode memory model, with ``buffer bytes / word_bytes`` words per SRAM
  (SCALE-Sim's ``IfmapSramSzkB`` / ``FilterSramSzkB`` / ``OfmapSramSzkB`` x 1024 with its 1-byte
  words) and ``scalesim_bandwidth_words_per_cycle`` words per cycle on each operand's port (its
  ``Bandwidth``); every row fold's partial sums are written to DRAM. Exact against SCALE-Sim
  where every operand fits its buffer's active half; an estimate otherwise (``docs/scalesim.md``).
  Vector and linear-algebra work is priced the same way under both models.
"""


OPERAND_COPIES = ("one", "per_role")
"""How many copies of a GEMM operand a narrow number format stores (``accel_sim.words``):

* ``one``: a value is stored once in the format, whichever GEMM reads it (an element format rounded
  to nearest: its values are the same read transposed);
* ``per_role``: one copy per GEMM role (forward, dX, dW) that reads it, each rounded from the FP32
  value when it is written: a block-grouped format (BFP, MX) groups a tensor along a different
  dimension for each role (``docs/numerics.md``), and stochastic rounding draws each role's copy
  with its own random bits, as the emulation does."""


WEIGHT_MASTERS = ("fp32", "none")
"""Whether a weight that GEMMs read keeps an FP32 master copy beside its copy in a narrow format
(``fp32``: mixed-precision training's rule) or lives in the format only (``none``: the clients'
weights stored in the format, Li et al., "Low Precision Local Training is Enough for Federated
Learning", NeurIPS 2024; ``--low-precision-weights``)."""


RENAMED_MEMORY_MODELS = {"ours": "on_chip_accumulation", "scalesim": "scalesim_v3"}
"""Names the memory models had before results format 4; a config that still uses one is refused
with the new name."""


FIELD_BOUNDS: dict[str, tuple[float, float]] = {
    "rows": (1, 65536),
    "cols": (1, 65536),
    "clock_hz": (1e3, 1e11),
    "word_bytes": (1, 16),
    "a_buffer_bytes": (1, 2**40),
    "b_buffer_bytes": (1, 2**40),
    "out_buffer_bytes": (1, 2**40),
    "dram_peak_bytes_per_s": (1e3, 1e15),
    "dram_efficiency": (1e-3, 1.0),
    "dram_latency_cycles": (0, 2**30),
    "linalg_efficiency": (1e-3, 1.0),
    "scale_bits_per_value": (0.0, 8.0),
    "element_bits": (0, 128),
}
"""Allowed range of each numeric field (an int lower bound: the field is an integer), inclusive.
Our choice, not a published figure: each range holds every accelerator we know of by orders of
magnitude (TPU v1's 256 x 256 array, 700 MHz, HBM's ~1e12 B/s) and keeps the cost model's figures
exact and finite (integer cycles and bytes below 2^63 for traces within ``trace_schema``'s bounds,
finite seconds and joules): an array side of 2^63 or a clock of 1e-300 Hz is rejected naming the
field and the range, not priced as "inf ms"."""


SPECIAL_UNIT_BOUNDS = (1e-3, 1e6)
"""Elements per cycle of each special-unit kind (``[special_unit]``)."""


ENERGY_BOUNDS = (0.0, 1e6)
"""Each ``[energy]`` figure (pJ per event; watts for ``static_w``)."""

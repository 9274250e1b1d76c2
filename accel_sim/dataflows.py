"""The dataflows of the systolic array as a registry of objects: ``DATAFLOWS["os" | "ws" | "is"]``.

A dataflow says how ``out[M x N] = A[M x K] . B[K x N]`` is laid on a ``rows x cols`` array, the
mapping of SCALE-Sim (Samajdar et al., "A Systematic Methodology for Characterizing Scalability
of DNN Accelerators using SCALE-Sim", ISPASS 2020, Sec. III; ``scalesim/compute/systolic_compute_
{os,ws,is}.py``): which GEMM dimension is spread over the array's rows (``S_R``), which over its
columns (``S_C``) and which is streamed through in time (``T``):

=========  ===================  =======================================  ====================
dataflow   (S_R, S_C, T)        held in the cells during a fold          ``stationary``
=========  ===================  =======================================  ====================
``os``     (M, N, K)            the outputs out[M x N]                   ``"out"``
``ws``     (K, N, M)            a K x N block of B                       ``"b"``
``is``     (K, M, N)            a K x M block of A^T                     ``"a"``
=========  ===================  =======================================  ====================

Everything the cost model branches on follows from these two facts, and each module asks the
object rather than the name:

* ``accel_sim.systolic``: the mapping (``map_gemm``) and whether a fold first preloads its
  stationary operand into the cells (``preloads``: ``rows`` extra cycles per fold, WS / IS);
* ``accel_sim.memory``: the fold-traffic family (outputs complete inside a fold under OS; partial
  sums accumulate over the row folds under WS / IS, ``partial_sums_span_row_folds``) and which
  operand is stationary;
* ``accel_sim.memory_scalesim``: SCALE-Sim's prefetch image of each operand (``operand_layout``:
  the stationary operand block by block per column fold, a streamed one per fold of the array
  side it spans);
* ``accel_sim.pricing``: how many groups of a grouped GEMM pack into one fold
  (``packing_factor``).
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_sim.elementwise import maximum, minimum

GEMM_DIMS = ("m", "n", "k")
OPERAND_DIMS = {"a": frozenset("mk"), "b": frozenset("kn"), "out": frozenset("mn")}
"""The GEMM dimensions of each matrix: A[M x K], B[K x N], out[M x N]."""


@dataclass(frozen=True)
class Dataflow:
    """One dataflow: its name, the dimensions it maps to ``(S_R, S_C, T)`` and the matrix its cells
    hold (module docstring)."""

    name: str
    title: str
    mapping: tuple[str, str, str]
    """The GEMM dimensions ("m", "n", "k") mapped to ``(S_R, S_C, T)``."""
    stationary: str
    """The matrix held in the cells during a fold: "out", "a" or "b" (the one whose two
    dimensions are ``S_R`` and ``S_C``)."""

    def __post_init__(self) -> None:
        if sorted(self.mapping) != sorted(GEMM_DIMS) or OPERAND_DIMS[self.stationary] != frozenset(self.mapping[:2]):
            raise ValueError(f"dataflow {self.name!r}: mapping {self.mapping} does not hold {self.stationary!r} stationary")

    def map_gemm(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """``(S_R, S_C, T)`` of ``out[m x n] = A[m x k] . B[k x n]``."""
        dims = {"m": m, "n": n, "k": k}
        return dims[self.mapping[0]], dims[self.mapping[1]], dims[self.mapping[2]]

    @property
    def preloads(self) -> bool:
        """Whether each fold first shifts a stationary operand block into the cells (``rows``
        cycles, WS / IS); under OS the stationary outputs build up in place."""
        return self.stationary != "out"

    @property
    def partial_sums_span_row_folds(self) -> bool:
        """Whether the reduction dimension K is spread over the array's rows, so that an output's
        partial sums accumulate over the row folds (WS / IS) rather than inside one fold (OS,
        where K is streamed)."""
        return self.mapping[0] == "k"

    def operand_layout(self, operand: str) -> str:
        """How an input operand ("a" or "b") is laid over the folds: "stationary" (its block is
        held in the cells), or the array side a streamed operand spans ("rows" or "cols": the
        side holding its dimension other than ``T``)."""
        if operand == self.stationary:
            return "stationary"
        spatial = OPERAND_DIMS[operand] - {self.mapping[2]}
        return "rows" if self.mapping[0] in spatial else "cols"

    def packing_limits(self, n, k, *, rows, cols) -> list:
        """The most groups whose packed dimension fits the array side it is laid over, one limit
        per packed dimension (``pn`` or ``pk``) that is spatial: ``side // n`` or ``side // k``
        (numbers or numpy arrays alike)."""
        packed = {"n": n, "k": k}
        return [side // packed[dim] for dim, side in zip(self.mapping[:2], (rows, cols)) if dim in packed]

    def packing_factor(self, n, k, groups, *, rows, cols):
        """Groups per packed GEMM under the ``block_diagonal`` grouped mapping: packing ``p``
        groups makes the GEMM ``m x pn x pk``; each packed dimension laid over the array (``S_R``
        or ``S_C``) must fit one fold (WS: ``pk <= rows`` and ``pn <= cols``; IS: ``pk <= rows``;
        OS: ``pn <= cols``; a streamed one is free), so ``p`` is the most that fit, at least 1 and
        at most ``groups`` (``accel_sim.hardware.GROUPED_MAPPINGS``); numbers or numpy arrays alike."""
        most = groups
        for limit in self.packing_limits(n, k, rows=rows, cols=cols):
            most = minimum(most, limit)
        return maximum(1, most)


DATAFLOWS: dict[str, Dataflow] = {
    d.name: d
    for d in (
        Dataflow("os", "output stationary", ("m", "n", "k"), "out"),
        Dataflow("ws", "weight stationary", ("k", "n", "m"), "b"),
        Dataflow("is", "input stationary", ("k", "m", "n"), "a"),
    )
}


def dataflow_named(name: str) -> Dataflow:
    """The registered dataflow called ``name``; ``ValueError`` naming the choices otherwise."""
    try:
        return DATAFLOWS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown dataflow {name!r}; expected one of {', '.join(DATAFLOWS)}") from None

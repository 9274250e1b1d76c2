"""Multiply-adds of the dense factorizations and solves: one definition, used by the trace
lowering (``workloads.capture.lowering``: what a traced linear-algebra op costs) and by the closed forms
(``bench.formulas``: SphereFed Table 1). Exact counts of the textbook algorithms (Golub & Van Loan,
*Matrix Computations*, 4th ed., Johns Hopkins University Press, 2013: Alg. 3.1.1 forward
substitution, Alg. 3.2.1 outer-product LU, Alg. 4.2.1 Cholesky); divisions and square roots are
not MACs. ``tests/test_trace_lowering.py`` checks each against a loop that counts the algorithm's
multiply-adds one by one.
"""

from __future__ import annotations


def cholesky_macs(n: int) -> int:
    """An n x n Cholesky factorization (column j: j MACs for the diagonal and j for each of the
    n-1-j entries below it): sum_j j.(n-j) = (n^3 - n)/6 (leading term n^3/6)."""
    return (n**3 - n) // 6


def lu_macs(n: int) -> int:
    """An n x n LU factorization (step k updates an (n-1-k)^2 trailing block):
    sum_{k<n} (n-1-k)^2 = (n-1).n.(2n-1)/6 (leading term n^3/3)."""
    return (n - 1) * n * (2 * n - 1) // 6


def triangular_solve_macs(n: int, nrhs: int) -> int:
    """An n x n triangular solve per right-hand side (unknown i needs i MACs): n(n-1)/2 each."""
    return nrhs * n * (n - 1) // 2


def solve_macs(n: int, nrhs: int) -> int:
    """``A X = B`` with A n x n and B n x nrhs as ``torch.linalg.solve`` computes it: LU of A,
    then a forward and a back substitution per right-hand side."""
    return lu_macs(n) + 2 * triangular_solve_macs(n, nrhs)

"""Lowering of single aten ops: hand-computed GEMM shapes, linear-algebra MAC formulas checked
against naive loops that count their own multiply-adds, FlopCounterMode on a transposed conv."""

import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from accel_sim.trace_schema import GemmWork, LinalgWork, VectorWork
from accel_sim.linalg_macs import cholesky_macs, lu_macs, solve_macs, triangular_solve_macs
from workloads.capture.lowering import LOWERINGS, conv_gemms
from workloads.capture import capture, macs, summary


def test_conv_gemms_hand_computed():
    # x [2, 3, 8, 8], w [4, 3, 3, 3], y [2, 4, 6, 6]: pix = 2*6*6 = 72, taps = 9
    g = conv_gemms((2, 3, 8, 8), (4, 3, 3, 3), (2, 4, 6, 6), 1, False)
    assert g["fwd"] == GemmWork(72, 4, 27, 1, "fwd")  # 72*4*27 = 7776 MACs
    assert g["dx"] == GemmWork(72, 27, 4, 1, "dx")
    assert g["dw"] == GemmWork(4, 27, 72, 1, "dw")
    # depthwise: x [2, 8, 4, 4], w [8, 1, 3, 3], stride 1 pad 1, y [2, 8, 4, 4], g = 8:
    # pix = 32, per group n = 1, k = 1*9 -> 32*1*9*8 = 2304 MACs, groups kept
    d = conv_gemms((2, 8, 4, 4), (8, 1, 3, 3), (2, 8, 4, 4), 8, False)
    assert d["fwd"] == GemmWork(32, 1, 9, 8, "fwd") and d["fwd"].macs == 2304
    assert d["dw"] == GemmWork(1, 9, 32, 8, "dw")


@settings(max_examples=50, deadline=None)
@given(
    b=st.integers(1, 4), c_in_g=st.integers(1, 4), c_out_g=st.integers(1, 4), groups=st.integers(1, 3),
    r=st.integers(1, 3), p=st.integers(1, 5), transposed=st.booleans(),
)
def test_conv_roles_do_equal_macs(b, c_in_g, c_out_g, groups, r, p, transposed):
    # forward, dX and dW of one convolution each take B.P.Q.C_out.C_in.R.S/g MACs (for a
    # transposed conv, with the input's pixels): the three products share their index space.
    c_in, c_out = c_in_g * groups, c_out_g * groups
    if transposed:
        g = conv_gemms((b, c_in, p, p), (c_in, c_out_g, r, r), (b, c_out, p + r - 1, p + r - 1), groups, True)
    else:
        g = conv_gemms((b, c_in, p + r - 1, p + r - 1), (c_out, c_in_g, r, r), (b, c_out, p, p), groups, False)
    expected = b * p * p * c_out * c_in * r * r // groups
    assert g["fwd"].macs == g["dx"].macs == g["dw"].macs == expected


def _linear_step(x, layer):
    layer(x).sum().backward()


def test_linear_gemms_and_roles():
    layer = nn.Linear(8, 5, bias=True)
    x = torch.randn(3, 8, requires_grad=True)
    trace = capture(_linear_step, x, layer, model=layer).trace
    gemms = [(o.phase, o.work) for o in trace.ops if isinstance(o.work, GemmWork)]
    # Y = X W^T + b with X [3, 8], W [5, 8]: fwd addmm (3, 5, 8); backward dW = dY^T . X:
    # (5, 8, 3); dX = dY . W: (3, 8, 5).
    assert sorted(gemms, key=lambda g: g[1].role) == [
        ("bwd", GemmWork(5, 8, 3, 1, "dw")),
        ("bwd", GemmWork(3, 8, 5, 1, "dx")),
        ("fwd", GemmWork(3, 5, 8, 1, "fwd")),
    ]
    assert macs(trace, phase="fwd") == 120 and macs(trace, phase="bwd") == 240


def test_transposed_conv_matches_flop_counter():
    torch.manual_seed(0)
    conv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, bias=False)
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    with FlopCounterMode(display=False) as fc_fwd:
        y = conv(x)
    with FlopCounterMode(display=False) as fc_bwd:
        y.sum().backward()
    trace = capture(_linear_step, x, conv, model=conv).trace
    assert macs(trace, phase="fwd") * 2 == fc_fwd.get_total_flops()  # FLOPs = 2 MACs
    assert macs(trace, phase="bwd") * 2 == fc_bwd.get_total_flops()
    # hand: B.H.W.C_in.C_out.R.S = 2*25*4*6*9 = 10800 per product
    assert macs(trace, phase="fwd") == 10800 and macs(trace, phase="bwd") == 21600


def _naive_cholesky_macs(n):
    count = 0
    for j in range(n):
        count += j  # L[j,j]^2 = A[j,j] - sum_{k<j} L[j,k]^2
        for _ in range(j + 1, n):
            count += j  # L[i,j] = (A[i,j] - sum_{k<j} L[i,k] L[j,k]) / L[j,j]
    return count


def _naive_lu_macs(n):
    return sum(1 for k in range(n) for _ in range(k + 1, n) for _ in range(k + 1, n))  # a_ij -= l_ik a_kj


def _naive_triangular_macs(n):
    return sum(i for i in range(n))  # x_i = (b_i - sum_{j<i} L_ij x_j) / L_ii


def test_linalg_mac_formulas_match_naive_loops():
    for n in range(1, 12):
        assert cholesky_macs(n) == _naive_cholesky_macs(n)
        assert lu_macs(n) == _naive_lu_macs(n)
        assert triangular_solve_macs(n, 3) == 3 * _naive_triangular_macs(n)
        assert solve_macs(n, 2) == _naive_lu_macs(n) + 2 * 2 * _naive_triangular_macs(n)  # LU, then L y = b, U x = y
    assert cholesky_macs(3) == 4  # (27 - 3) / 6


def _solve_region(a, b):
    torch.linalg.cholesky(a)
    return torch.linalg.solve(a, b)


def test_linalg_lowered_and_unknown_ops_listed():
    a = torch.eye(4) * 2.0
    b = torch.ones(4, 3)
    trace = capture(_solve_region, a, b, default_phase="aggregation").trace
    work = [o.work for o in trace.ops if isinstance(o.work, LinalgWork)]
    # n = 4: Cholesky (64 - 4)/6 = 10; solve = LU (3*4*7/6 = 14) + 2 * 3 * (4*3/2 = 6) = 50
    assert work == [LinalgWork("cholesky", 4, 0, 10), LinalgWork("solve", 4, 3, 50)]
    assert {o.phase for o in trace.ops} == {"aggregation"}
    qr = capture(torch.linalg.qr, torch.randn(5, 3)).trace
    assert qr.unsupported_ops() == {"aten.linalg_qr.default": 1}
    assert "aten.linalg_qr.default x1" in summary(qr)


def test_vector_work_counts_largest_tensor_and_update_kind():
    x = torch.randn(3, 4)
    trace = capture(lambda t: (t * 2).sum(), x).trace
    assert [o.work for o in trace.ops] == [VectorWork("elementwise", 12), VectorWork("reduce", 12)]
    p = nn.Parameter(torch.randn(6))
    p.grad = torch.ones(6)
    opt = torch.optim.SGD([p], lr=0.1, foreach=False)
    step = capture(opt.step).trace
    assert [(o.phase, o.work) for o in step.ops if o.work.kind == "vector"] == [("update", VectorWork("update", 6))]


def test_gathers_read_the_selected_rows_not_the_table():
    table = torch.randn(1000, 16)  # 64,000 B
    idx = torch.arange(8) * 3  # int64, 64 B
    trace = capture(lambda t, i: (t[i], t.index_select(0, i), t.gather(0, i[:, None].expand(8, 16))), table, idx).trace
    # 8 rows x 16 floats: 128 elements; reads 128 x 4 = 512 B of the table + the index, writes 512 B
    assert [o.work for o in trace.ops if o.aten.startswith(("aten.index", "aten.gather"))] == [
        VectorWork("copy", 128, read_bytes=512 + 64, write_bytes=512),           # t[i]
        VectorWork("copy", 128, read_bytes=512 + 64, write_bytes=512),           # index_select
        VectorWork("copy", 128, read_bytes=512 + 8 * 16 * 8, write_bytes=512)]   # gather: an [8, 16] index


def test_every_registry_key_is_an_aten_or_profiler_op():
    for name in LOWERINGS:
        ns, _, op = name.partition(".")
        assert hasattr(getattr(torch.ops, ns), op), name

"""Lowering: what one aten op call costs, as the trace schema's work forms.

``LOWERINGS`` is a plain dict from an aten overload-packet name (``"aten.convolution"``) to a small
function ``lower(call: OpCall) -> Work | tuple[Piece, ...]``, in the style of fvcore's handle table
and ``torch.utils.flop_counter``. Ops missing from the dict lower to ``UnsupportedWork`` (the
recorder keeps them, and ``Trace.unsupported_ops()`` lists them); nothing is dropped.

Conventions (``docs/trace.md`` has the full table):

* GEMM ``out[m x n] = A[m x k] . B[k x n]``, repeated ``groups`` times; MACs = m.n.k.groups.
  Linear ``Y = X W^T``, X ``[B, in]``: forward ``m=B, n=out, k=in``; the backward's two ``mm``
  calls are lowered as they run: dX ``m=B, n=in, k=out``, dW ``m=out, n=in, k=B``. A bias added by ``addmm`` is folded into the GEMM (accumulator
  initialization), as ``FlopCounterMode`` and fvcore do.
* Convolution via im2col (``P.Q`` output pixels, ``R.S`` kernel taps, ``g`` groups): forward
  ``m = B.P.Q, n = C_out/g, k = C_in.R.S/g``; backward dX ``m = B.P.Q, n = C_in.R.S/g,
  k = C_out/g`` (``dY . W``, then col2im); dW ``m = C_out/g, n = C_in.R.S/g, k = B.P.Q``
  (``dY^T . cols``). Groups are kept, so a depthwise conv stays ``g = C`` small GEMMs.
* ``convolution_backward`` does up to three things in one aten call (dX, dW, bias gradient per
  ``output_mask``). The schema has one work item per record, so it lowers to one ``Piece`` per
  output: the recorder writes one record per piece, all with the same ``aten`` name, each listing
  the inputs that piece reads and the output it writes.
* GEMM role: ``fwd`` outside the backward phase. Inside it, ``dx`` when an operand is a parameter
  (the weight is what an input gradient is multiplied by); ``dw`` when no operand is a parameter
  and the result has the shape (or transposed shape) of a parameter of the owning module; else
  ``dx`` (a product of two activations' gradients).
* Vector work: ``elements`` is the largest element count among the op's tensor arguments and
  results (the data the special unit streams once). Element-wise arithmetic inside an optimizer
  ``step()`` is reported as ``update``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_leaves

from accel_sim.linalg_macs import cholesky_macs, lu_macs, solve_macs, triangular_solve_macs
from accel_sim.trace_schema import GemmWork, LinalgWork, NoWork, UnsupportedWork, VectorWork, Work


@dataclass(frozen=True)
class OpCall:
    """What a lowering function sees of one aten op call (after it ran)."""

    name: str  # overload packet, e.g. "aten.convolution"
    args: tuple
    kwargs: dict
    out: Any
    phase: str
    is_param: Callable[[torch.Tensor], bool]  # does this tensor live in a parameter's storage?
    layer_param_shapes: frozenset  # shapes of the owning module's parameters


@dataclass(frozen=True)
class Piece:
    """One work item of an aten op that does several (``convolution_backward``)."""

    work: Work
    inputs: tuple  # the tensors this piece reads
    outputs: tuple  # the tensors it writes


Lowering = Callable[[OpCall], "Work | tuple[Piece, ...]"]


def _tensors(obj) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


# ----------------------------------------------------------------------------- GEMMs


def _bwd_role(call: OpCall, operands: tuple[torch.Tensor, ...], out: torch.Tensor) -> str:
    if call.phase != "bwd":
        return "fwd"
    if any(call.is_param(t) for t in operands):
        return "dx"
    shape = tuple(out.shape[-2:])
    if shape in call.layer_param_shapes or shape[::-1] in call.layer_param_shapes:
        return "dw"
    return "dx"


def lower_mm(call: OpCall) -> Work:
    """``mm(a[m,k], b[k,n])``: m.n.k MACs."""
    a, b = call.args[0], call.args[1]
    return GemmWork(a.shape[0], b.shape[1], a.shape[1], 1, _bwd_role(call, (a, b), call.out))


def lower_addmm(call: OpCall) -> Work:
    """``addmm(bias, a[m,k], b[k,n])``: m.n.k MACs (bias folded into the accumulator)."""
    a, b = call.args[1], call.args[2]
    return GemmWork(a.shape[0], b.shape[1], a.shape[1], 1, _bwd_role(call, (a, b), call.out))


def lower_bmm(call: OpCall) -> Work:
    """``bmm(a[g,m,k], b[g,k,n])``: g independent GEMMs, g.m.n.k MACs."""
    a, b = call.args[0], call.args[1]
    return GemmWork(a.shape[1], b.shape[2], a.shape[2], a.shape[0], _bwd_role(call, (a, b), call.out))


def lower_baddbmm(call: OpCall) -> Work:
    """``baddbmm(c, a[g,m,k], b[g,k,n])``: g.m.n.k MACs (the added term folded in)."""
    a, b = call.args[1], call.args[2]
    return GemmWork(a.shape[1], b.shape[2], a.shape[2], a.shape[0], _bwd_role(call, (a, b), call.out))


def lower_mv(call: OpCall) -> Work:
    """``mv(a[m,k], v[k])``: a GEMM with n = 1, m.k MACs."""
    a, v = call.args[0], call.args[1]
    return GemmWork(a.shape[0], 1, a.shape[1], 1, _bwd_role(call, (a, v), call.out))


def lower_dot(call: OpCall) -> Work:
    """``dot(a[k], b[k])``: a 1 x 1 GEMM of depth k."""
    return GemmWork(1, 1, call.args[0].shape[0], 1, "fwd" if call.phase != "bwd" else "dx")


def conv_gemms(x_shape, w_shape, out_shape, groups: int, transposed: bool) -> dict[str, GemmWork]:
    """The im2col GEMMs of one convolution and of its backward, by role.

    Non-transposed, ``x [B, C_in, H, W]``, ``w [C_out, C_in/g, R, S]``, ``y [B, C_out, P, Q]``
    (any number of spatial dims): with ``pix = B.P.Q`` and ``taps = R.S``,
    fwd ``(pix, C_out/g, C_in/g.taps)``, dx ``(pix, C_in/g.taps, C_out/g)``,
    dw ``(C_out/g, C_in/g.taps, pix)``, each ``x g``.  MACs of all three equal
    ``B.P.Q.C_out.C_in.R.S/g`` (the ``FlopCounterMode`` count of forward and dX, FLOPs = 2 MACs).

    Transposed (``w [C_in, C_out/g, R, S]``) is the dX product of the convolution it transposes,
    with the input's pixels ``pix = B.H.W``: fwd ``(pix, C_out/g.taps, C_in/g)`` (then col2im),
    dx ``(pix, C_in/g, C_out/g.taps)`` (a plain conv of dY), dw ``(C_in/g, C_out/g.taps, pix)``.
    """
    taps = prod(w_shape[2:])
    if not transposed:
        pix = x_shape[0] * prod(out_shape[2:])
        c_out, c_in = w_shape[0] // groups, x_shape[1] // groups
        return {
            "fwd": GemmWork(pix, c_out, c_in * taps, groups, "fwd"),
            "dx": GemmWork(pix, c_in * taps, c_out, groups, "dx"),
            "dw": GemmWork(c_out, c_in * taps, pix, groups, "dw"),
        }
    pix = x_shape[0] * prod(x_shape[2:])
    c_in, c_out = w_shape[0] // groups, w_shape[1]
    return {
        "fwd": GemmWork(pix, c_out * taps, c_in, groups, "fwd"),
        "dx": GemmWork(pix, c_in, c_out * taps, groups, "dx"),
        "dw": GemmWork(c_in, c_out * taps, pix, groups, "dw"),
    }


def lower_convolution(call: OpCall) -> Work:
    """``convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)``."""
    x, w = call.args[0], call.args[1]
    transposed, groups = call.args[6], call.args[8]
    work = conv_gemms(x.shape, w.shape, call.out.shape, groups, transposed)["fwd"]
    if call.phase == "bwd":  # a convolution run by a backward (double backward): an input gradient
        return GemmWork(work.m, work.n, work.k, work.groups, "dx")
    return work


def lower_convolution_backward(call: OpCall) -> tuple[Piece, ...]:
    """``convolution_backward(dy, x, w, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask) -> (dx, dw, db)``: one piece per requested output.
    The bias gradient is a sum of ``dy`` over batch and pixels (vector ``reduce``)."""
    dy, x, w = call.args[0], call.args[1], call.args[2]
    transposed, groups, mask = call.args[7], call.args[9], call.args[10]
    dx, dw, db = call.out
    gemms = conv_gemms(x.shape, w.shape, dy.shape, groups, transposed)
    pieces = []
    if mask[0]:
        pieces.append(Piece(gemms["dx"], (dy, w), (dx,)))
    if mask[1]:
        pieces.append(Piece(gemms["dw"], (dy, x), (dw,)))
    if mask[2]:
        pieces.append(Piece(VectorWork("reduce", dy.numel()), (dy,), (db,)))
    return tuple(pieces)


# ----------------------------------------------------------------------------- linear algebra


def _n_nrhs(a: torch.Tensor, b: torch.Tensor | None) -> tuple[int, int, int]:
    """(n, right-hand sides, batch) of ``a [..., n, n]`` and ``b [..., n, nrhs]`` or ``[..., n]``."""
    n = a.shape[-1]
    batch = prod(a.shape[:-2])
    if b is None:
        return n, 0, batch
    nrhs = 1 if b.dim() == a.dim() - 1 else b.shape[-1]
    return n, nrhs, batch


def lower_cholesky(call: OpCall) -> Work:
    """``linalg_cholesky_ex(a)``: ``cholesky_macs(n)`` per matrix."""
    n, _, batch = _n_nrhs(call.args[0], None)
    return LinalgWork("cholesky", n, 0, batch * cholesky_macs(n))


def lower_lu(call: OpCall) -> Work:
    """``linalg_lu_factor_ex(a)`` / ``linalg_lu(a)``: ``lu_macs(n)`` per matrix."""
    n, _, batch = _n_nrhs(call.args[0], None)
    return LinalgWork("lu", n, 0, batch * lu_macs(n))


def lower_solve(call: OpCall) -> Work:
    """``_linalg_solve_ex(a, b)``: LU of ``a`` then a forward and a back substitution per
    right-hand side: ``solve_macs(n, nrhs)``."""
    n, nrhs, batch = _n_nrhs(call.args[0], call.args[1])
    return LinalgWork("solve", n, nrhs, batch * solve_macs(n, nrhs))


def lower_lu_solve(call: OpCall) -> Work:
    """``linalg_lu_solve(LU, pivots, b)``: two triangular solves per right-hand side."""
    n, nrhs, batch = _n_nrhs(call.args[0], call.args[2])
    return LinalgWork("triangular_solve", n, nrhs, batch * 2 * triangular_solve_macs(n, nrhs))


def lower_cholesky_solve(call: OpCall) -> Work:
    """``cholesky_solve(b, L)``: ``L y = b`` then ``L^T x = y``: two triangular solves."""
    n, nrhs, batch = _n_nrhs(call.args[1], call.args[0])
    return LinalgWork("triangular_solve", n, nrhs, batch * 2 * triangular_solve_macs(n, nrhs))


def lower_triangular_solve(call: OpCall) -> Work:
    """``linalg_solve_triangular(a, b)``: ``triangular_solve_macs(n, nrhs)``."""
    n, nrhs, batch = _n_nrhs(call.args[0], call.args[1])
    return LinalgWork("triangular_solve", n, nrhs, batch * triangular_solve_macs(n, nrhs))


def lower_inverse(call: OpCall) -> Work:
    """``linalg_inv_ex(a)``: a solve with the n columns of the identity as right-hand sides."""
    n, _, batch = _n_nrhs(call.args[0], None)
    return LinalgWork("inverse", n, n, batch * solve_macs(n, n))


# ----------------------------------------------------------------------------- vector and metadata


def _vector(category: str) -> Lowering:
    def lower(call: OpCall) -> Work:
        elements = max((t.numel() for t in _tensors((call.args, call.kwargs, call.out))), default=0)
        op = "update" if call.phase == "update" and category in ("elementwise", "copy") else category
        return VectorWork(op, elements)

    lower.__doc__ = f"Vector work of kind {category!r} over the largest tensor the op touches."
    return lower


def lower_indexed_accumulate(call: OpCall) -> Work:
    """In-place indexed accumulation ``self.index_add_(dim, index, source)`` (and ``scatter_add_``,
    same argument order): one add per ``source`` element into the indexed slices of ``self``. It
    reads ``source``, ``index`` and those slices and writes the slices back; the rest of ``self``
    is not touched, so the op states its bytes instead of streaming the whole accumulator."""
    self, index, source = call.args[0], call.args[2], call.args[3]
    slices_bytes = source.numel() * self.element_size()
    read = source.numel() * source.element_size() + index.numel() * index.element_size() + slices_bytes
    return VectorWork("elementwise", source.numel(), read_bytes=read, write_bytes=slices_bytes)


def lower_gather(call: OpCall) -> Work:
    """Gathers (``x[idx]``: ``index``, ``_unsafe_index``; ``index_select``, ``gather``): one copy per
    output element. They read the index tensors and only the selected elements of the source (a
    batch of 64 rows out of a 50,000-row table reads 64 rows, not the table) and write the output,
    so the op states its bytes instead of streaming its whole source."""
    out = call.out
    indices = [t for t in _tensors((call.args[1:], call.kwargs)) if not t.is_floating_point()]
    read = out.numel() * out.element_size() + sum(t.numel() * t.element_size() for t in indices)
    return VectorWork("copy", out.numel(), read_bytes=read, write_bytes=out.numel() * out.element_size())


def lower_nothing(call: OpCall) -> Work:
    """Views, reshapes, detach, allocation without initialization: no arithmetic, no traffic."""
    return NoWork()


_NO_WORK = """view _unsafe_view reshape _reshape_alias t transpose permute expand squeeze unsqueeze detach
alias slice select as_strided unfold split split_with_sizes unbind narrow lift_fresh empty empty_like
empty_strided new_empty new_empty_strided resize_ _linalg_check_errors set_ view_as_real view_as_complex
profiler._record_function_enter_new profiler._record_function_exit""".split()

_VECTOR = {
    "elementwise": """add add_ sub sub_ rsub mul mul_ div div_ neg neg_ addcmul addcmul_ addcdiv addcdiv_
    lerp lerp_ fill fill_ zero_ zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full
    scalar_tensor arange eye where clamp clamp_ clamp_min clamp_min_ clamp_max clamp_max_ sqrt sqrt_ rsqrt
    rsqrt_ pow pow_ reciprocal reciprocal_ exp exp_ log log_ abs abs_ sign round floor ceil trunc eq ne gt lt ge le maximum
    minimum masked_fill masked_fill_ logical_not logical_and logical_or bitwise_not one_hot scatter
    scatter_ scatter_add index_add _foreach_add_ _foreach_mul_ native_dropout_backward""".split(),
    "activation": """relu relu_ threshold threshold_ threshold_backward sigmoid sigmoid_ sigmoid_backward
    tanh tanh_ tanh_backward hardtanh hardtanh_ hardtanh_backward silu silu_ silu_backward gelu
    gelu_backward leaky_relu leaky_relu_ leaky_relu_backward elu elu_ elu_backward hardswish hardswish_
    hardswish_backward hardsigmoid hardsigmoid_backward""".split(),
    "norm": """native_batch_norm native_batch_norm_backward _native_batch_norm_legit
    _native_batch_norm_legit_functional _native_batch_norm_legit_no_training batch_norm_backward
    native_group_norm native_group_norm_backward native_layer_norm native_layer_norm_backward""".split(),
    "pool": """max_pool2d_with_indices max_pool2d_with_indices_backward avg_pool2d avg_pool2d_backward
    _adaptive_avg_pool2d _adaptive_avg_pool2d_backward adaptive_max_pool2d adaptive_max_pool2d_backward
    max_pool3d_with_indices max_pool3d_with_indices_backward avg_pool3d avg_pool3d_backward""".split(),
    "reduce": """sum mean linalg_vector_norm norm amax amin max min var std var_mean std_mean argmax
    argmin aminmax prod cumsum logsumexp any all""".split(),
    "loss": """_log_softmax _log_softmax_backward_data _softmax _softmax_backward_data nll_loss_forward
    nll_loss_backward nll_loss2d_forward nll_loss2d_backward mse_loss mse_loss_backward
    binary_cross_entropy binary_cross_entropy_backward smooth_l1_loss smooth_l1_loss_backward""".split(),
    "copy": """clone copy copy_ _to_copy cat stack index_put index_put_
    constant_pad_nd repeat flip roll masked_select _local_scalar_dense""".split(),
    "random": """normal normal_ uniform uniform_ bernoulli bernoulli_ randn randn_like rand rand_like
    randint randperm random_ native_dropout multinomial""".split(),
}

LOWERINGS: dict[str, Lowering] = {
    **{f"aten.{name}" if "." not in name else name: lower_nothing for name in _NO_WORK},
    **{f"aten.{name}": _vector(category) for category, names in _VECTOR.items() for name in names},
    **{f"aten.{name}": lower_gather for name in ("index", "_unsafe_index", "index_select", "gather")},
    "aten.index_add_": lower_indexed_accumulate,
    "aten.scatter_add_": lower_indexed_accumulate,
    "aten.mm": lower_mm,
    "aten.addmm": lower_addmm,
    "aten.bmm": lower_bmm,
    "aten.baddbmm": lower_baddbmm,
    "aten.mv": lower_mv,
    "aten.dot": lower_dot,
    "aten.convolution": lower_convolution,
    "aten.convolution_backward": lower_convolution_backward,
    "aten.linalg_cholesky_ex": lower_cholesky,
    "aten.linalg_lu_factor_ex": lower_lu,
    "aten._linalg_solve_ex": lower_solve,
    "aten.linalg_lu_solve": lower_lu_solve,
    "aten.cholesky_solve": lower_cholesky_solve,
    "aten.linalg_solve_triangular": lower_triangular_solve,
    "aten.linalg_inv_ex": lower_inverse,
}


def lower(call: OpCall) -> Work | tuple[Piece, ...]:
    """The work of one op call: its registered lowering, or ``UnsupportedWork`` if none."""
    fn = LOWERINGS.get(call.name)
    return UnsupportedWork() if fn is None else fn(call)

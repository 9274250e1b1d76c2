"""Train as the accelerator computes: every GEMM operand of a step rounded to a number format.

``Arithmetic(fmt, generator)`` is a ``TorchDispatchMode`` (the mechanism the trace capture uses,
``workloads.capture.engine``): inside ``with arithmetic:``, each aten op that the lowering registry
prices as a GEMM on the array (``workloads.capture.lowering.LOWERINGS``: ``mm``, ``addmm``,
``bmm``, ``baddbmm``, ``mv``, ``dot``, ``convolution`` and ``convolution_backward``) runs on
operands rounded to the format (``workloads.numerics.quantize``); the op itself then computes in
FP32, as the MAC array accumulates. Everything else runs untouched in FP32: the special unit's
vector work (normalization, activations, losses, pooling, the bias add and the bias gradient), the
optimizer and its state (master weights, momentum), and the server. So any model, built-in or a
user's module, is emulated without a change to it, and the forward pass, the input gradient and the
weight gradient are all rounded, because autograd's backward GEMMs are aten ops too. Gradients flow
as if the rounding were the identity (the straight-through estimator every emulator of this kind
uses: QPyTorch, Zhang et al. 2019; Microsoft's microxcaling).

Which operands, rounded along which dimension (block floating point groups run along the GEMM's
reduction dimension, so that a group's values meet in one dot product and one shared exponent
scales one partial sum):

=========================  =======================================  ==========================================
op (GEMM)                  operand A, grouped along                 operand B, grouped along
=========================  =======================================  ==========================================
``mm`` / ``addmm``         ``a[m, k]``: k (its last dim)            ``b[k, n]``: k (its first)
``bmm`` / ``baddbmm``      ``a[g, m, k]``: k                        ``b[g, k, n]``: k
``mv`` / ``dot``           the matrix / vector along k              the vector along k
``convolution`` forward    ``x[B, C_in, H, W]``: input channels     ``w[C_out, C_in/g, R, S]``: input channels
conv backward, dX          ``dy[B, C_out, P, Q]``: output channels  ``w``: output channels
conv backward, dW          ``dy``: pixels (B.P.Q) per channel       ``x``: pixels (B.H.W) per channel
=========================  =======================================  ==========================================

A convolution's im2col reduction runs over input channels x kernel taps (forward), output channels
(dX) and pixels (dW). We group a stored tensor along the channels at each pixel, or along the pixels
of each channel, not along an im2col column: a value is stored once, so it must belong to exactly
one group, while im2col repeats each input value under up to R.S taps. With ``g`` dividing the
channel count, grouping channels at a pixel is exactly grouping the im2col column ordered
(tap, channel), channels innermost, as NHWC accelerators stream them. A depthwise convolution
(``C_in / groups = 1``) reduces over taps only; its operands are grouped along the channels as well
(the stored layout), which the table's rule shares. ``convolution_backward`` computes dX and dW in
one aten call; it is run once per GEMM so that each sees its own rounding (the bias gradient, a sum
on the special unit, from the unrounded ``dy``).

``Arithmetic.rounded_operands`` counts the operands rounded, per op name: a test checks it against
the GEMMs of the captured trace of the same step (two operands per GEMM).

Scaled FP8 (``e4m3_cs``, ``e4m3_ds``, ``fp8_hybrid_ds``, ...: ``accel_sim.formats``) scales each
operand of each GEMM as one tensor. Current scaling takes the operand's own largest magnitude.
Delayed scaling (Micikevicius et al. 2022, Sec. 4; NVIDIA Transformer Engine's ``DelayedScaling``)
takes the largest of the same operand's magnitudes over the previous ``AMAX_HISTORY`` steps: an
operand is the ``i``-th rounded in a step (entering the mode starts a step; a step's GEMMs come in
the same order every time), and its history lives as long as the ``Arithmetic`` (one client's
local training in a round, ``workloads.fl.loop.arithmetic_of``). A step with no history yet (the
first) scales as current scaling does. A history whose largest amax is not a positive finite
number (all-zero operands, such as a gradient that vanished for ``AMAX_HISTORY`` steps, or an
infinity or NaN) keeps the scale of the operand's previous step, as Transformer Engine's update
does (``amax_and_scale_update`` in ``transformer_engine/common/recipe/delayed_scaling.cu``: the new
scale is ``fp8_max / amax`` only where ``amax`` is finite and positive, else the old one);
scaled by 1 instead, a small operand after a run of zero ones would flush to zero. The hybrid recipe rounds gradients to E5M2 and everything
else to E4M3; a gradient is a tensor computed by the backward pass (an op run while an autograd
node runs, ``torch._C._current_autograd_node``): the output gradient ``dy`` of the dX and dW GEMMs,
never the weights or the saved activations they meet.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakTensorKeyDictionary

from accel_sim.formats import AMAX_HISTORY, NumberFormat
from workloads.numerics.quantize import largest_magnitude, round_measured, round_to_format

aten = torch.ops.aten

CHANNELS = 1
PIXELS = "pixels"


@dataclass(frozen=True)
class _Rounded:
    """The last operand rounded: the tensor, its own largest magnitude and the one its scale was
    taken from (scaled formats; None otherwise), and its rounding."""

    tensor: torch.Tensor
    own_amax: torch.Tensor | None
    amax: torch.Tensor | None
    rounded: torch.Tensor


class Arithmetic(TorchDispatchMode):
    """Inside ``with Arithmetic(fmt, generator=g):`` every GEMM operand is rounded to ``fmt``
    (module doc). ``generator`` (a ``torch.Generator`` on the tensors' device) drives stochastic
    rounding; ``fmt`` may be a name (``"bfp_m4_g16_sr"``)."""

    def __init__(self, fmt: NumberFormat | str, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.fmt = NumberFormat.parse(fmt)
        if self.fmt.rounding == "stochastic" and generator is None:
            raise ValueError(f"number format {self.fmt.name}: stochastic rounding needs a generator")
        self.generator = generator
        self.rounded_operands: Counter = Counter()
        self.amax_history: dict[int, deque] = {}  # delayed scaling: operand -> its last amaxes
        self.scaled_by: dict[int, torch.Tensor] = {}  # delayed scaling: operand -> the amax of its last scale
        self._history_numbers: dict[int, tuple[deque, list[float]]] = {}  # operand -> its history's values as floats
        self._operand = 0  # the operand's number in the current step
        self._gradients = WeakTensorKeyDictionary() if self.fmt.kind == "fp8_hybrid" else None
        self._same_values_in_every_role = self.fmt.kind not in ("bfp", "mx") and self.fmt.rounding == "nearest"
        """An element format rounding to nearest (per-tensor scaled or not): a value's rounding depends
        on no group and draws no random bits, so an operand rounded for one GEMM is that operand
        rounded for another (with a scaled format: where the scale is the same)."""

    def __enter__(self):
        self._operand = 0  # a step starts
        return super().__enter__()

    def _round(self, x: torch.Tensor, along, op: str) -> torch.Tensor:
        return self._rounding(x, along, op).rounded

    def _rounding(self, x: torch.Tensor, along, op: str, previous: _Rounded | None = None) -> _Rounded:
        """``x`` rounded as the operand of ``op`` grouped ``along``. ``previous``: the rounding of the
        same tensor as an earlier operand of the step (a convolution's output gradient, rounded for
        its dX GEMM, now for its dW GEMM): reused where the format gives the same values whatever the
        operand's role (``_same_values_in_every_role``), so the step is bitwise the same with one
        rounding less."""
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
            return _Rounded(x, None, None, x)
        self.rounded_operands[op] += 1
        again = previous is not None and previous.tensor is x and self._same_values_in_every_role
        if along == PIXELS:  # [B, C, *spatial]: each channel's values over batch and pixels
            along = (0, *range(2, x.dim()))
        if self.fmt.scaling == "none":
            rounded = previous.rounded if again else round_to_format(x, self.fmt, dim=along, generator=self.generator)
            return _Rounded(x, None, None, rounded)
        own = previous.own_amax if again else None
        gradient = self._gradients is not None and x in self._gradients
        if self.fmt.scaling == "delayed" and own is None:
            chosen = self._window_amax(x.device)
            if chosen is not None:  # past the operand's first step its scale does not depend on x: x's amax
                rounded, own = round_measured(x, self.fmt, chosen, generator=self.generator, gradient=gradient)
                self._remember(own, chosen)  # comes from the rounding's own pass over x (fused.round_whole)
                self._operand += 1
                return _Rounded(x, own, chosen, rounded)
        own = largest_magnitude(x) if own is None else own
        amax = own
        if self.fmt.scaling == "delayed":
            amax = self._delayed_amax(own)
        self._operand += 1
        if again and torch.equal(amax, previous.amax):  # the same scale
            return _Rounded(x, own, amax, previous.rounded)
        return _Rounded(x, own, amax, round_to_format(x, self.fmt, generator=self.generator, amax=amax, gradient=gradient))

    def _delayed_amax(self, own: torch.Tensor) -> torch.Tensor:
        """The amax the current operand is scaled by under delayed scaling (module doc): the largest
        of its history's, or, where that is not a positive finite number (a window of all-zero
        operands, or one holding an infinity or NaN), the one its previous step was scaled by; its
        own on its first step. ``own`` then enters the history."""
        chosen = self._window_amax(own.device)
        return self._remember(own, own if chosen is None else chosen)

    def _window_amax(self, device: torch.device) -> torch.Tensor | None:
        """``_delayed_amax``'s choice from the current operand's history (its tensors on ``device``),
        None where the history is empty (the operand's first step)."""
        history = self.amax_history.setdefault(self._operand, deque(maxlen=AMAX_HISTORY))
        if not history:
            return None
        if device.type == "cpu":  # the same choice in Python numbers (no small torch operations, ~30 us)
            values = self._history_values(history)
            window = math.nan if any(map(math.isnan, values)) else max(values)
            return history[values.index(window)] if 0 < window < math.inf else self.scaled_by[self._operand]
        window = torch.stack(tuple(history)).amax()  # on a GPU: no wait for its numbers
        return torch.where(torch.isfinite(window) & (window > 0), window, self.scaled_by[self._operand])

    def _history_values(self, history: deque) -> list[float]:
        """The current operand's ``history`` as Python floats, kept between steps (``_remember``
        extends them) instead of reading its ~16 tensors' numbers at every operand: worked out
        afresh where the history is another deque or another length than the one they were kept for."""
        kept = self._history_numbers.get(self._operand)
        if kept is None or kept[0] is not history or len(kept[1]) != len(history):
            kept = self._history_numbers[self._operand] = (history, [float(a) for a in history])
        return kept[1]

    def _remember(self, own: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
        """``own`` into the current operand's history, ``amax`` as the one it was scaled by; ``amax``."""
        history = self.amax_history[self._operand]
        kept = self._history_numbers.pop(self._operand, None)
        current = kept is not None and kept[0] is history and len(kept[1]) == len(history)
        history.append(own)
        if current and own.device.type == "cpu":  # the history's floats, then own's
            kept[1].append(float(own))
            del kept[1][:len(kept[1]) - len(history)]  # where the full deque dropped its oldest, the oldest
            self._history_numbers[self._operand] = kept
        self.scaled_by[self._operand] = amax
        return amax

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _GEMMS.get(func.overloadpacket)
        if handler is None or self.fmt.is_identity:
            out = func(*args, **kwargs)
        else:
            out = handler(self, func, list(args), kwargs)
        if self._gradients is not None and torch._C._current_autograd_node() is not None:
            for t in tree_leaves(out):  # computed by the backward pass: a gradient (module doc)
                if isinstance(t, torch.Tensor):
                    self._gradients[t] = True
        return out


def _operands(*rules: tuple[int, int]) -> Callable:
    """A handler rounding argument ``i`` along dim ``d`` for each ``(i, d)``."""

    def handle(mode: Arithmetic, func, args: list, kwargs: dict):
        name = str(func.overloadpacket)
        for i, dim in rules:
            args[i] = mode._round(args[i], dim, name)
        return func(*args, **kwargs)

    return handle


def _convolution(mode: Arithmetic, func, args: list, kwargs: dict):
    """``convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)``:
    the forward GEMM reduces over input channels (x dim 1; w dim 1, or dim 0 when transposed)."""
    name = str(func.overloadpacket)
    transposed = args[6]
    args[0] = mode._round(args[0], CHANNELS, name)
    args[1] = mode._round(args[1], 0 if transposed else 1, name)
    return func(*args, **kwargs)


def _convolution_backward(mode: Arithmetic, func, args: list, kwargs: dict):
    """``convolution_backward(dy, x, w, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask)``: dX and dW as two calls, each on its own rounded operands."""
    name = str(func.overloadpacket)
    dy, x, w = args[0], args[1], args[2]
    transposed, mask = args[7], list(args[10])
    dx = dw = db = dy_rounded = None
    if mask[0]:  # dX = dy (.) w: reduces over dy's channels (w's dim 0; dim 1 when transposed)
        call = args[:]
        dy_rounded = mode._rounding(dy, CHANNELS, name)
        call[0], call[2] = dy_rounded.rounded, mode._round(w, 1 if transposed else 0, name)
        call[10] = [True, False, False]
        dx = func(*call, **kwargs)[0]
    if mask[1]:  # dW = dy^T . cols(x): reduces over pixels
        call = args[:]
        call[0], call[1] = mode._rounding(dy, PIXELS, name, dy_rounded).rounded, mode._round(x, PIXELS, name)
        call[10] = [False, True, False]
        dw = func(*call, **kwargs)[1]
    if mask[2]:  # the bias gradient: a sum on the special unit, in FP32
        call = args[:]
        call[10] = [False, False, True]
        db = func(*call, **kwargs)[2]
    return dx, dw, db


_GEMMS = {
    aten.mm: _operands((0, -1), (1, -2)),
    aten.addmm: _operands((1, -1), (2, -2)),
    aten.bmm: _operands((0, -1), (1, -2)),
    aten.baddbmm: _operands((1, -1), (2, -2)),
    aten.mv: _operands((0, -1), (1, -1)),
    aten.dot: _operands((0, -1), (1, -1)),
    aten.convolution: _convolution,
    aten.convolution_backward: _convolution_backward,
}
GEMM_OPS = tuple(sorted(f"aten.{op.__name__}" for op in _GEMMS))
"""The aten ops rounded: the GEMMs of ``workloads.capture.lowering.LOWERINGS`` (a test checks, on
captured steps, that every GEMM the trace records is one of them and rounded as often)."""

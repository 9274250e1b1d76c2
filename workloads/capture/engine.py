"""Trace capture: a real PyTorch region (a training step, a calibration, an aggregation) as the
aten ops it ran, in program order, in the file format of ``accel_sim.trace_schema``.

How it works (``docs/trace.md`` has the details and the reasons):

* ``capture(fn, *args, model=...)`` runs ``fn`` as it is under a ``TorchDispatchMode`` that sees
  every aten op: forward, backward (the autograd engine runs on the calling thread for CPU and
  ``meta`` tensors) and the optimizer.
* Phase: ``bwd`` while the autograd engine runs a node, or inside ``torch.autograd.backward`` /
  ``torch.autograd.grad`` (the seed gradient ``ones_like`` is made there, before the engine
  starts); ``update`` inside any optimizer's ``step()`` (global optimizer step pre/post hooks);
  else ``default_phase``.
* Layer: forward pre/post hooks on every module of ``model`` keep a stack of state_dict-style
  names; ``layer_scope("loss")`` pushes a name for code outside the model. A backward op belongs to
  the module whose forward op created the running autograd node: the recorder maps each autograd
  sequence number (``torch._C._autograd._get_sequence_nr()``, read after every forward op) to the
  layer that was running, and looks the running node's ``_sequence_nr()`` up in that map.
  ``AccumulateGrad`` nodes name their parameter (``node.variable``). Update ops belong to the
  module of the parameter, gradient or optimizer state they read.
* Memory: each storage gets an id when first seen. Storages first seen as an op's result are
  allocated by that op; those first seen otherwise existed before the region (``live_at_start``).
  ``weakref.finalize`` on each ``UntypedStorage`` reports its death; it is listed in the ``frees``
  of the last op that ran before it died (of the op itself if it died while that op ran).
  Storages that died before the first op (``zero_grad`` freeing last step's gradients) are left
  out: they are never live while anything runs.
* Kinds: parameters ``weight``, module buffers ``buffer``, a parameter's ``.grad`` (at the
  optimizer step or at the end) ``gradient``, optimizer state ``optimizer_state``, tensors passed
  in ``args``/``kwargs`` or ``held`` and any other pre-existing storage ``input``, storages created in the
  ``fwd`` phase ``activation``, everything else ``workspace``.

``workloads.capture.step.capture_step`` captures one steady-state training step with this engine
(the one path every priced step takes). This package imports nothing of ``workloads.fl``: the FL
method's step is built in ``workloads.cost.step`` and handed in as a function.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from accel_sim.trace_schema import (
    PHASES,
    OpRecord,
    StorageInfo,
    TensorInfo,
    Trace,
    TraceHeader,
)
from workloads.capture.autograd_calls import backward_calls_recorded
from workloads.capture.lowering import OpCall, lower

_ACCUMULATE_GRAD = "AccumulateGrad"


@dataclass(frozen=True)
class Captured:
    """What ``capture`` returns: the trace of the region and ``fn``'s own return value."""

    trace: Trace
    result: Any


# ----------------------------------------------------------------------------- the recorder


@dataclass
class _Storage:
    bytes: int
    born: str | None  # phase of the op that allocated it; None if it existed before the region
    kind: str | None = None  # weight / buffer / gradient / optimizer_state / input, when known
    owner: str | None = None  # module name of the parameter it belongs to (update attribution)
    dropped: bool = False  # died before the first op


@dataclass
class _Record:
    aten: str
    layer: str
    phase: str
    work: Any
    inputs: list[int]
    outputs: list[int]
    allocs: list[int]
    frees: list[int]


_ACTIVE: list["_Recorder"] = []


@contextlib.contextmanager
def layer_scope(name: str) -> Iterator[None]:
    """Attribute the ops run inside to layer ``name`` (e.g. ``"loss"`` for a loss computed outside
    the model), and their backward ops too. Does nothing when no capture is running."""
    recorder = _ACTIVE[-1] if _ACTIVE else None
    if recorder is None:
        yield
        return
    recorder.module_stack.append(name)
    try:
        yield
    finally:
        recorder.module_stack.pop()


def _module_of(param_name: str) -> str:
    return param_name.rpartition(".")[0]


class _Recorder(TorchDispatchMode):
    def __init__(self, model: nn.Module | None, default_phase: str):
        super().__init__()
        self.default_phase = default_phase
        self.records: list[_Record] = []
        self.module_stack: list[str] = []
        self.storages: list[_Storage] = []
        self.sid_by_key: dict[int, int] = {}
        self.finalizers: list[weakref.finalize] = []
        self.tensors: list[TensorInfo] = []
        self.tid_by_key: dict[tuple, int] = {}
        self.pending_frees: list[int] = []
        self.seq_layer: dict[int, str] = {}
        self.seq_mark = torch._C._autograd._get_sequence_nr()
        self.bwd_root_layers: list[str] = []  # one per active torch.autograd.backward/grad call
        self.step_depth = 0
        self.model = model
        named = list(model.named_parameters()) if model is not None else []
        self.param_module = {id(p): _module_of(name) for name, p in named}
        self.layer_param_shapes: dict[str, frozenset] = {}
        if model is not None:
            for name, mod in model.named_modules():
                shapes = frozenset(tuple(p.shape) for p in mod.parameters(recurse=False))
                self.layer_param_shapes[name] = shapes

    # -- storages and tensors

    def storage_id(self, t: torch.Tensor, born: str | None) -> tuple[int, bool]:
        """(storage id, whether first seen now). ``born`` is the phase if this op made it."""
        st = t.untyped_storage()
        key = st._cdata
        sid = self.sid_by_key.get(key)
        if sid is not None:
            return sid, False
        sid = len(self.storages)
        self.sid_by_key[key] = sid
        self.storages.append(_Storage(bytes=st.nbytes(), born=born))
        self.finalizers.append(weakref.finalize(st, self._on_free, key, sid))
        return sid, True

    def _on_free(self, key: int, sid: int) -> None:
        if self.sid_by_key.get(key) == sid:
            del self.sid_by_key[key]
        if self.records:
            self.pending_frees.append(sid)
        else:
            self.storages[sid].dropped = True

    def mark(self, t: torch.Tensor, kind: str, owner: str | None = None) -> None:
        """Record what a tensor's storage is (first kind wins: a weight stays a weight)."""
        sid, _ = self.storage_id(t, None)
        info = self.storages[sid]
        info.kind = info.kind or kind
        info.owner = info.owner or owner

    def tensor_id(self, t: torch.Tensor, born: str | None) -> tuple[int, int, bool]:
        sid, new = self.storage_id(t, born)
        key = (sid, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        tid = self.tid_by_key.get(key)
        if tid is None:
            tid = len(self.tensors)
            self.tid_by_key[key] = tid
            nbytes = t.numel() * t.element_size()
            self.tensors.append(TensorInfo(tid, sid, tuple(t.shape), str(t.dtype).removeprefix("torch."), nbytes, ""))
        if not new and born is not None:  # a result may grow its storage (resize_)
            self.storages[sid].bytes = max(self.storages[sid].bytes, t.untyped_storage().nbytes())
        return tid, sid, new

    def is_param(self, t: torch.Tensor) -> bool:
        sid = self.sid_by_key.get(t.untyped_storage()._cdata)
        return sid is not None and self.storages[sid].kind == "weight"

    # -- phase and layer

    def where(self) -> tuple[str, str]:
        """(phase, layer) of the op now running."""
        node = torch._C._current_autograd_node()
        if node is not None or self.bwd_root_layers:
            if node is None:
                return "bwd", self.bwd_root_layers[-1]
            if type(node).__name__ == _ACCUMULATE_GRAD:
                return "bwd", self.param_module.get(id(node.variable), "")
            return "bwd", self.seq_layer.get(node._sequence_nr(), "")
        if self.step_depth:
            return "update", ""
        return self.default_phase, self.module_stack[-1] if self.module_stack else ""

    def note_forward_nodes(self, layer: str) -> None:
        """Autograd nodes created since the last op belong to ``layer``."""
        cur = torch._C._autograd._get_sequence_nr()
        for s in range(self.seq_mark, cur):
            self.seq_layer[s] = layer
        self.seq_mark = cur

    # -- hooks

    def enter_module(self, name: str, *_) -> None:
        self.module_stack.append(name)

    def exit_module(self, *_) -> None:
        self.module_stack.pop()

    def enter_backward(self, roots: Any) -> None:
        """Ops run by ``torch.autograd.backward``/``grad`` outside any node (the seed gradient)
        belong to the layer that made the first root."""
        fns = [t.grad_fn for t in tree_leaves(roots) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        self.bwd_root_layers.append(self.seq_layer.get(fns[0]._sequence_nr(), "") if fns else "")

    def exit_backward(self) -> None:
        self.bwd_root_layers.pop()

    def stop_watching(self) -> None:
        """Detach the storage finalizers (also when ``fn`` raised)."""
        for f in self.finalizers:
            f.detach()

    def optimizer_pre_step(self, optimizer: torch.optim.Optimizer, *_) -> None:
        self.step_depth += 1
        for group in optimizer.param_groups:
            for p in group["params"]:
                owner = self.param_module.get(id(p))
                self.mark(p, "weight", owner)
                if p.grad is not None:
                    self.mark(p.grad, "gradient", owner)
                for value in optimizer.state.get(p, {}).values():
                    if isinstance(value, torch.Tensor):
                        self.mark(value, "optimizer_state", owner)

    def optimizer_post_step(self, *_) -> None:
        self.step_depth -= 1

    # -- the op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.pending_frees:  # died between the previous op and this one
            self.records[-1].frees.extend(self.pending_frees)
            self.pending_frees.clear()
        out = func(*args, **kwargs)
        self.record(func, args, kwargs, out)
        if self.pending_frees:  # died while this op ran
            self.records[-1].frees.extend(self.pending_frees)
            self.pending_frees.clear()
        return out

    def record(self, func, args, kwargs, out) -> None:
        phase, layer = self.where()
        if phase == "update":
            layer = self.update_layer((args, kwargs))
        if phase != "bwd":
            self.note_forward_nodes(layer)
        in_tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        out_tensors = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        in_ids = {id(t): self.tensor_id(t, None)[0] for t in in_tensors}
        out_ids, allocs = {}, []
        for t in out_tensors:
            tid, sid, new = self.tensor_id(t, phase)
            out_ids[id(t)] = tid
            if new:
                allocs.append(sid)
        name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
        call = OpCall(
            name=name,
            args=args,
            kwargs=kwargs,
            out=out,
            phase=phase,
            is_param=self.is_param,
            layer_param_shapes=self.layer_param_shapes.get(layer, frozenset()),
        )
        work = lower(call)
        aten = str(func)
        if not isinstance(work, tuple):
            ids = list(dict.fromkeys(in_ids.values()))
            self.records.append(_Record(aten, layer, phase, work, ids, list(out_ids.values()), allocs, []))
            return
        remaining = list(allocs)
        for piece in work:
            outs = [out_ids[id(t)] for t in piece.outputs if t is not None]
            piece_allocs = [s for s in remaining if any(self.tensors[o].storage == s for o in outs)]
            remaining = [s for s in remaining if s not in piece_allocs]
            ins = list(dict.fromkeys(in_ids[id(t)] for t in piece.inputs))
            self.records.append(_Record(aten, layer, phase, piece.work, ins, outs, piece_allocs, []))
        if remaining:
            self.records[-1].allocs.extend(remaining)

    def update_layer(self, args: Any) -> str:
        for t in tree_leaves(args):
            if isinstance(t, torch.Tensor):
                sid = self.sid_by_key.get(t.untyped_storage()._cdata)
                if sid is not None and self.storages[sid].owner is not None:
                    return self.storages[sid].owner
        return ""

    # -- the result

    def finish(self, model_name: str, method: str, batch_size: int, meta: dict) -> Trace:
        if self.pending_frees and self.records:
            self.records[-1].frees.extend(self.pending_frees)
        if self.model is not None:
            for name, p in self.model.named_parameters():
                if p.grad is not None and p.grad.untyped_storage()._cdata in self.sid_by_key:
                    self.mark(p.grad, "gradient", _module_of(name))
        new_id: dict[int, int] = {}
        storages = []
        for sid, s in enumerate(self.storages):
            if s.dropped:
                continue
            new_id[sid] = len(storages)
            kind = s.kind or ("input" if s.born is None else "activation" if s.born == "fwd" else "workspace")
            storages.append(StorageInfo(new_id[sid], s.bytes, kind, s.born is None))
        kinds = {s.id: s.kind for s in storages}
        tensors = tuple(
            TensorInfo(t.id, new_id[t.storage], t.shape, t.dtype, t.bytes, kinds[new_id[t.storage]])
            for t in self.tensors
        )
        ops = tuple(
            OpRecord(
                idx,
                r.aten,
                r.layer,
                r.phase,
                r.work,
                tuple(r.inputs),
                tuple(r.outputs),
                tuple(new_id[s] for s in r.allocs),
                tuple(new_id[s] for s in r.frees if s in new_id),
            )
            for idx, r in enumerate(self.records)
        )
        header = TraceHeader(model_name, method, batch_size, tuple(storages), tensors, meta)
        return Trace(header, ops)


def capture(
    fn: Callable,
    *args,
    model: nn.Module | None = None,
    default_phase: str = "fwd",
    model_name: str = "",
    method: str = "",
    batch_size: int = 0,
    meta: dict | None = None,
    held: tuple[torch.Tensor, ...] = (),
    **kwargs,
) -> Captured:
    """Run ``fn(*args, **kwargs)`` as it is and record every aten op it runs (see the module
    docstring for phases, layers, kinds and lifetimes). ``model`` names the layers; ops outside
    its modules get layer ``""`` unless run under ``layer_scope``. ``held``: tensors the region
    keeps whether or not an op of it reads them (a federated method's copy of the global model,
    kept for after the step): live from its start to its end, as ``input`` storages (a parameter's
    storage stays a ``weight``)."""
    if default_phase not in PHASES:
        raise ValueError(f"default_phase {default_phase!r} is not a phase; expected one of {', '.join(PHASES)}")
    recorder = _Recorder(model, default_phase)
    if model is not None:
        for name, p in model.named_parameters():
            recorder.mark(p, "weight", _module_of(name))
            if p.grad is not None:
                recorder.mark(p.grad, "gradient", _module_of(name))
        for name, b in model.named_buffers():
            recorder.mark(b, "buffer", _module_of(name))
    for t in (*tree_leaves((args, kwargs)), *held):
        if isinstance(t, torch.Tensor):
            recorder.mark(t, "input")
    with contextlib.ExitStack() as stack:
        stack.callback(recorder.stop_watching)  # runs last: frees up to fn's return are seen
        if model is not None:
            for name, mod in model.named_modules():
                stack.enter_context(mod.register_forward_pre_hook(functools.partial(recorder.enter_module, name)))
                stack.enter_context(mod.register_forward_hook(recorder.exit_module, always_call=True))
        stack.enter_context(register_optimizer_step_pre_hook(recorder.optimizer_pre_step))
        stack.enter_context(register_optimizer_step_post_hook(recorder.optimizer_post_step))
        stack.enter_context(backward_calls_recorded(recorder))
        _ACTIVE.append(recorder)
        stack.callback(_ACTIVE.pop)
        with recorder:
            result = fn(*args, **kwargs)
    trace = recorder.finish(model_name, method, batch_size, {"torch_version": torch.__version__, **(meta or {})})
    return Captured(trace, result)

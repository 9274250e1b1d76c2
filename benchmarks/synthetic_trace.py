"""A synthetic MobileNetV2 (CIFAR, 100 classes) training-step trace, built without torch.

Stands in for a captured trace (``workloads/trace.py``) where none is available: the same layer
shapes as the paper's MobileNetV2 for 32 x 32 inputs (appendix 0.F.1; the CIFAR variant with
stride 1 in the first conv and the 24-channel stage), each conv followed by BatchNorm and ReLU6,
residual adds, global average pooling, the 1280 x 100 classifier, cross-entropy, the backward
pass (input- and weight-gradient GEMMs, norm / activation backward), and an SGD-with-momentum
update of every parameter. Forward outputs stay live until their backward op; gradients until
the next op consumes them. Its forward MACs can be checked against NOTES.md's measured figure
(FLOPs 11,682,578,432 = 2 x 5,841,289,216 MACs at batch 64).
"""

from __future__ import annotations

from accel_sim.trace_schema import GemmWork, NoWork, OpRecord, StorageInfo, TensorInfo, Trace, TraceHeader, VectorWork

# (expansion, out_channels, blocks, stride): MobileNetV2 for CIFAR
CFG = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class _Builder:
    def __init__(self) -> None:
        self.storages: list[StorageInfo] = []
        self.tensors: list[TensorInfo] = []
        self.ops: list[dict] = []
        self.params: list[tuple[str, int]] = []  # (layer, tensor id)

    def tensor(self, shape: tuple[int, ...], kind: str, at_start: bool = False) -> int:
        numel = 1
        for d in shape:
            numel *= d
        sid = len(self.storages)
        self.storages.append(StorageInfo(sid, 4 * numel, kind, at_start))
        self.tensors.append(TensorInfo(len(self.tensors), sid, shape, "float32", 4 * numel, kind))
        return len(self.tensors) - 1

    def op(self, aten, layer, phase, work, inputs, outputs, frees=()) -> None:
        allocs = [self.tensors[t].storage for t in outputs if not self.storages[self.tensors[t].storage].live_at_start]
        self.ops.append(
            dict(aten=aten, layer=layer, phase=phase, work=work, inputs=tuple(inputs), outputs=tuple(outputs),
                 allocs=tuple(allocs), frees=tuple(self.tensors[t].storage for t in frees))
        )

    def numel(self, t: int) -> int:
        return self.storages[self.tensors[t].storage].bytes // 4

    def param(self, layer: str, shape: tuple[int, ...]) -> int:
        t = self.tensor(shape, "weight", at_start=True)
        self.params.append((layer, t))
        return t


def mobilenetv2_training_step(batch: int = 64, num_classes: int = 100) -> Trace:
    b = _Builder()
    grads: dict[int, int] = {}  # parameter tensor -> its gradient tensor
    x = b.tensor((batch, 3, 32, 32), "input", at_start=True)

    def conv_bn(name, x, c_in, c_out, k, stride, groups, hw, relu=True):
        """Forward ops of conv + BN (+ ReLU6); returns (output, output size, backward closure)."""
        out_hw = hw // stride
        w = b.param(f"{name}.conv", (c_out, c_in // groups, k, k))
        gamma, beta = b.param(f"{name}.bn", (c_out,)), b.param(f"{name}.bn", (c_out,))
        m, n, kk = batch * out_hw * out_hw, c_out // groups, (c_in // groups) * k * k
        y = b.tensor((batch, c_out, out_hw, out_hw), "activation")
        b.op("aten.convolution.default", f"{name}.conv", "fwd", GemmWork(m, n, kk, groups, "fwd"), (x, w), (y,))
        z = b.tensor((batch, c_out, out_hw, out_hw), "activation")
        b.op("aten.native_batch_norm.default", f"{name}.bn", "fwd", VectorWork("norm", b.numel(y)), (y, gamma, beta), (z,))
        out = z
        if relu:
            out = b.tensor((batch, c_out, out_hw, out_hw), "activation")
            b.op("aten.hardtanh.default", f"{name}.relu", "fwd", VectorWork("activation", b.numel(z)), (z,), (out,))

        def bwd(g, free_g=True):
            """Backward ops; frees the incoming gradient ``g`` unless another branch still needs it."""
            if relu:
                g2 = b.tensor(b.tensors[z].shape, "workspace")
                b.op("aten.hardtanh_backward.default", f"{name}.relu", "bwd", VectorWork("activation", b.numel(z)),
                     (g, z), (g2,), frees=((g,) if free_g else ()) + (z, out))
                g, free_g = g2, True
            g3 = b.tensor(b.tensors[y].shape, "workspace")
            grads[gamma], grads[beta] = b.tensor((c_out,), "gradient"), b.tensor((c_out,), "gradient")
            b.op("aten.native_batch_norm_backward.default", f"{name}.bn", "bwd", VectorWork("norm", 2 * b.numel(y)),
                 (g, y, gamma), (g3, grads[gamma], grads[beta]), frees=((g,) if free_g else ()) + (y,) + (() if relu else (z,)))
            grads[w] = b.tensor(b.tensors[w].shape, "gradient")
            b.op("aten.convolution_backward.default", f"{name}.conv", "bwd", GemmWork(n, kk, m, groups, "dw"), (g3, x), (grads[w],))
            if c_in == 3:  # the first conv needs no input gradient
                b.op("aten.detach.default", f"{name}.conv", "bwd", NoWork(), (g3,), (), frees=(g3,))
                return None
            gx = b.tensor(b.tensors[x].shape, "workspace")
            b.op("aten.convolution_backward.default", f"{name}.conv", "bwd", GemmWork(m, kk, n, groups, "dx"), (g3, w), (gx,), frees=(g3,))
            return gx

        return out, out_hw, bwd

    def add(layer, phase, a, c, frees=()):
        r = b.tensor(b.tensors[a].shape, "activation" if phase == "fwd" else "workspace")
        b.op("aten.add.Tensor", layer, phase, VectorWork("elementwise", b.numel(a)), (a, c), (r,), frees=frees)
        return r

    backward = []  # closures taking the output gradient, run in reverse order
    h, hw, bwd = conv_bn("conv1", x, 3, 32, 3, 1, 1, 32)
    backward.append(bwd)
    c_in = 32
    for i, (e, c_out, blocks, stride) in enumerate(CFG):
        for j in range(blocks):
            s = stride if j == 0 else 1
            name = f"layers.{i}.{j}"
            inp = h
            t, thw, b1 = conv_bn(f"{name}.1", inp, c_in, e * c_in, 1, 1, 1, hw)
            t, thw, b2 = conv_bn(f"{name}.2", t, e * c_in, e * c_in, 3, s, e * c_in, thw)
            t, thw, b3 = conv_bn(f"{name}.3", t, e * c_in, c_out, 1, 1, 1, thw, relu=False)
            residual = s == 1
            bsc = None
            if residual:
                sc = inp
                if c_in != c_out:
                    sc, _, bsc = conv_bn(f"{name}.shortcut", inp, c_in, c_out, 1, 1, 1, hw, relu=False)
                t = add(name, "fwd", t, sc)

            def block_bwd(g, b1=b1, b2=b2, b3=b3, bsc=bsc, residual=residual, name=name):
                g_in = b1(b2(b3(g, free_g=not residual)))
                if not residual:
                    return g_in
                g_sc = bsc(g) if bsc else g
                return add(name, "bwd", g_in, g_sc, frees=(g_in, g_sc))

            backward.append(block_bwd)
            h, hw, c_in = t, thw, c_out
    h, hw, bwd = conv_bn("conv2", h, 320, 1280, 1, 1, 1, hw)
    backward.append(bwd)
    pooled = b.tensor((batch, 1280), "activation")
    b.op("aten.avg_pool2d.default", "pool", "fwd", VectorWork("pool", b.numel(h)), (h,), (pooled,))
    fc = b.param("classifier", (num_classes, 1280))
    logits = b.tensor((batch, num_classes), "activation")
    b.op("aten.mm.default", "classifier", "fwd", GemmWork(batch, num_classes, 1280, 1, "fwd"), (pooled, fc), (logits,))
    target = b.tensor((batch,), "input", at_start=True)
    loss = b.tensor((), "activation")
    b.op("aten.cross_entropy", "loss", "fwd", VectorWork("loss", 3 * b.numel(logits)), (logits, target), (loss,))
    g_logits = b.tensor((batch, num_classes), "workspace")
    b.op("aten.cross_entropy_backward", "loss", "bwd", VectorWork("loss", 2 * b.numel(logits)), (loss, logits),
         (g_logits,), frees=(loss, logits))
    grads[fc] = b.tensor((num_classes, 1280), "gradient")
    b.op("aten.mm.default", "classifier", "bwd", GemmWork(num_classes, 1280, batch, 1, "dw"), (g_logits, pooled), (grads[fc],))
    g_pooled = b.tensor((batch, 1280), "workspace")
    b.op("aten.mm.default", "classifier", "bwd", GemmWork(batch, 1280, num_classes, 1, "dx"), (g_logits, fc),
         (g_pooled,), frees=(g_logits, pooled))
    g = b.tensor(b.tensors[h].shape, "workspace")
    b.op("aten.avg_pool2d_backward.default", "pool", "bwd", VectorWork("pool", b.numel(h)), (g_pooled,), (g,), frees=(g_pooled,))
    for bwd in reversed(backward):
        g = bwd(g)
    # SGD with momentum and weight decay: three passes over every parameter
    for layer, p in b.params:
        grad, n = grads[p], b.numel(p)
        mom = b.tensor(b.tensors[p].shape, "optimizer_state", at_start=True)
        b.op("aten.add.Tensor", layer, "update", VectorWork("update", n), (grad, p), (grad,))
        b.op("aten.add_.Tensor", layer, "update", VectorWork("update", n), (mom, grad), (mom,))
        b.op("aten.add_.Tensor", layer, "update", VectorWork("update", n), (p, mom), (p,))
    ops = tuple(OpRecord(idx=i, **o) for i, o in enumerate(b.ops))
    header = TraceHeader("mobilenetv2", "fedavg", batch, tuple(b.storages), tuple(b.tensors), {"synthetic": True})
    return Trace(header, ops)

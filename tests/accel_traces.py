"""A small hand-built trace shared by the accel_sim tests: every kind of work, known sizes."""

from accel_sim.trace_schema import (
    GemmWork,
    LinalgWork,
    NoWork,
    OpRecord,
    StorageInfo,
    TensorInfo,
    Trace,
    TraceHeader,
    UnsupportedWork,
    VectorWork,
)


def small_trace() -> Trace:
    """x[2 x 3] . W^T (W[5 x 3]) -> y[2 x 5]; relu; loss; backward dW; an SGD update; a solve;
    one op the lowering did not know."""
    storages = (
        StorageInfo(0, 60, "weight", True),  # W 5 x 3
        StorageInfo(1, 24, "input", True),  # x 2 x 3
        StorageInfo(2, 40, "activation"),  # y 2 x 5
        StorageInfo(3, 40, "activation"),  # relu(y)
        StorageInfo(4, 4, "activation"),  # loss
        StorageInfo(5, 40, "workspace"),  # dy
        StorageInfo(6, 60, "gradient"),  # dW
        StorageInfo(7, 36, "workspace"),  # solve output
    )
    shapes = ((5, 3), (2, 3), (2, 5), (2, 5), (), (2, 5), (5, 3), (3, 3))
    kinds = [s.kind for s in storages]
    tensors = tuple(TensorInfo(i, i, shape, "float32", storages[i].bytes, kinds[i]) for i, shape in enumerate(shapes))
    ops = (
        OpRecord(0, "aten.mm.default", "fc", "fwd", GemmWork(2, 5, 3, role="fwd"), (1, 0), (2,), allocs=(2,)),
        OpRecord(1, "aten.relu.default", "act", "fwd", VectorWork("activation", 10), (2,), (3,), allocs=(3,)),
        OpRecord(2, "aten.view.default", "act", "fwd", NoWork(), (3,), (3,)),
        OpRecord(3, "aten.mse_loss.default", "loss", "fwd", VectorWork("loss", 10), (3,), (4,), allocs=(4,), frees=(3,)),
        OpRecord(4, "aten.mse_loss_backward.default", "loss", "bwd", VectorWork("loss", 10), (4, 2), (5,), allocs=(5,), frees=(4,)),
        OpRecord(5, "aten.mm.default", "fc", "bwd", GemmWork(5, 3, 2, role="dw"), (5, 1), (6,), allocs=(6,), frees=(5, 2)),
        OpRecord(6, "aten.add_.Tensor", "fc", "update", VectorWork("update", 15), (0, 6), (0,)),
        OpRecord(7, "aten.linalg_solve.default", "", "calibration", LinalgWork("solve", 3, 3, 18), (0,), (7,), allocs=(7,)),
        OpRecord(8, "aten.fancy_new_op.default", "", "calibration", UnsupportedWork(), (7,), (7,)),
    )
    return Trace(TraceHeader("tiny", "fedavg", 2, storages, tensors), ops)

"""accel_sim on real captured traces (workloads.capture): the simulator's bookkeeping agrees with the
capture's own, independent queries, and SphereFed's frozen classifier shows up as exactly one
missing weight-gradient GEMM."""

import pytest
import torch

from accel_sim.simulate import simulate
from workloads import capture as wt
from workloads.cost.step import method_setup

BATCH, CLASSES = 4, 100


def captured(method: str):
    model, loss_fn = method_setup(method, "mobilenetv2", num_classes=CLASSES, image_size=32, norm="bn")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-5, foreach=False)
    x, y = torch.zeros(BATCH, 3, 32, 32), torch.arange(BATCH) % CLASSES
    return wt.capture_training_step(model, x, y, loss_fn=loss_fn, optimizer=optimizer, model_name="mobilenetv2", method=method)


@pytest.fixture(scope="module")
def traces():
    return {method: captured(method) for method in ("fedavg", "spherefed")}


@pytest.mark.slow
def test_every_op_priced_and_bookkeeping_agrees(traces):
    for trace in traces.values():
        report = simulate(trace)
        assert report.unsupported_ops() == {}
        # the schema's lifetime rule recomputed by hand: live from allocs (or the start) to after frees
        size = {s.id: s.bytes for s in trace.header.storages}
        live, during = {s.id for s in trace.header.storages if s.live_at_start}, []
        for op in trace.ops:
            live |= set(op.allocs)
            during.append(sum(size[i] for i in live))
            live -= set(op.frees)
        assert list(report.peak.live_bytes_per_op) == during
        assert report.peak_memory_bytes == max(during)
        by_work = report.by_work()
        for role in ("fwd", "dx", "dw"):
            assert by_work[f"gemm:{role}"].macs == wt.macs(trace, role=role)
        assert report.total_cycles == sum(t.total_cycles for t in report.by_phase().values())


def test_spherefed_drops_exactly_the_classifier_weight_gradient(traces):
    fedavg, spherefed = simulate(traces["fedavg"]), simulate(traces["spherefed"])
    # the frozen 1280 x 100 classifier has no dW GEMM: m=100, n=1280, k=batch
    assert fedavg.by_work()["gemm:dw"].macs - spherefed.by_work()["gemm:dw"].macs == CLASSES * 1280 * BATCH
    assert fedavg.by_work()["gemm:fwd"].macs == spherefed.by_work()["gemm:fwd"].macs
    classifier_dw = [c for c in fedavg.ops if c.layer == "classifier" and c.work_op == "dw"]
    assert [c.macs for c in classifier_dw] == [CLASSES * 1280 * BATCH]
    assert not [c for c in spherefed.ops if c.layer == "classifier" and c.work_op == "dw"]

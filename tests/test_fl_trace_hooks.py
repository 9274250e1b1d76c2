"""The FL loop's own training step and calibration run under the trace capture on ``meta``."""

import pytest
import torch

from accel_sim.simulate import simulate

from workloads.fl.hparams import Hparams
from workloads.fl.local import ClientContext, client_trainer, example_received, per_sample_loss, prepare_model
from workloads.fl.methods import CALIBRATIONS, NAME_PARTS, parse_method
from workloads.models import build_model
from workloads.capture import capture

HP = Hparams(lr=0.1, batch_size=8)


def meta_step_trace(name):
    method = parse_method(name)
    model = prepare_model(build_model("convnet", num_classes=10, image_size=16, head=method.head),
                          method, seed=0).to("meta")
    state = model.state_dict()
    received = example_received(model, method, HP, 2)  # FedCos's d_t, SCAFFOLD's c
    trainer = client_trainer(model, state, HP.with_knobs(method.knobs), method,
                             ClientContext(round=2, received=received))
    x = torch.empty(8, 3, 16, 16, device="meta")
    y = torch.empty(8, dtype=torch.long, device="meta")
    trainer.step(x, y)  # warm-up: SGD creates its momentum buffers on the first step
    return capture(trainer.step, x, y, model=model, method=name, batch_size=8).trace


def classifier_gemms(trace, role):
    return [op for op in trace.ops if op.layer == "classifier" and op.work.kind == "gemm" and op.work.role == role]


def test_spherefed_step_has_no_classifier_weight_gradient():
    fedavg, sphere = meta_step_trace("fedavg"), meta_step_trace("spherefed")
    # FedAvg: dW of the 10 x 256 classifier at batch 8: m = 10, n = 256, k = 8 (docs/trace.md, "Lowering")
    (dw,) = classifier_gemms(fedavg, "dw")
    assert (dw.work.m * dw.work.n * dw.work.k) == 10 * 256 * 8
    assert classifier_gemms(sphere, "dw") == []
    assert len(classifier_gemms(sphere, "fwd")) == 1 and len(classifier_gemms(sphere, "dx")) == 1
    assert not [op for op in sphere.ops if op.phase == "update" and op.layer == "classifier"]
    assert [op for op in fedavg.ops if op.phase == "update" and op.layer == "classifier"]


@pytest.mark.parametrize("name", ["fedprox", "fedcos", "doublehead", "fedbabu"])
def test_penalized_and_headed_steps_capture_on_meta(name):
    trace = meta_step_trace(name)
    base = meta_step_trace("fedavg")
    assert {op.phase for op in trace.ops} >= {"fwd", "bwd", "update"}
    if name in ("fedprox", "fedcos", "doublehead"):  # the penalty / second head adds work
        assert len(trace.ops) > len(base.ops)
    if name == "doublehead":
        assert [op for op in trace.ops if op.layer == "local_classifier" and op.work.kind == "gemm"]


def calibration_traces(name):
    """(client statistics trace, server calibration trace) of ``name`` on a meta ConvNet."""
    method = parse_method(name)
    hp = Hparams(declared=(*parse_method("ccvr").knobs, *parse_method("ffc").knobs), batch_size=8, ccvr_virtual_per_class=4, ccvr_epochs=1)
    model = prepare_model(build_model("convnet", num_classes=10, image_size=16, head=method.head),
                          method, seed=0).to("meta").eval()
    calib = CALIBRATIONS[method.calibration]
    x = torch.empty(8, 3, 16, 16, device="meta")
    y = torch.zeros(8, dtype=torch.long, device="meta")
    client = capture(calib.client_statistics, model, [(x, y)], num_classes=10, hp=hp, model=model,
                     default_phase="calibration").trace
    stats = calib.client_statistics(model, [(x, y)], num_classes=10, hp=hp)
    server = capture(calib.server_calibrate, [stats, stats], classifier_weight=model.classifier.weight,
                     loss_fn=per_sample_loss(method), hp=hp, default_phase="calibration").trace
    return client, server


@pytest.mark.parametrize("name", ["spherefed+ffc", "ccvr"])
def test_calibration_hooks_capture_on_meta(name):
    client, server = calibration_traces(name)
    assert {op.phase for op in client.ops} == {"calibration"}
    assert [op for op in client.ops if op.work.kind == "gemm"]
    kinds = {op.work.kind for op in server.ops}
    assert ("linalg" in kinds) if name.endswith("ffc") else ("gemm" in kinds)


STEP_METHODS = [name for name, role in NAME_PARTS.items() if role != "calibration"]  # 8 algorithms + spherefed
CALIBRATED = [f"{base}{name}" for name in CALIBRATIONS for base in ("", "spherefed+")]


@pytest.mark.parametrize("name", STEP_METHODS)
def test_every_method_step_lowers_completely(name):
    trace = meta_step_trace(name)
    assert trace.unsupported_ops() == {}


@pytest.mark.parametrize("name", CALIBRATED)
def test_every_calibration_lowers_completely(name):
    client, server = calibration_traces(name)
    assert client.unsupported_ops() == {} and server.unsupported_ops() == {}


def test_ccvr_class_statistics_are_accumulated_in_place_and_priced_by_slice():
    client, _ = calibration_traces("ccvr")
    adds = [op for op in client.ops if op.aten.startswith("aten.index_add")]
    # One single-class batch of B = 8 on the 16x16 ConvNet (l = 256), float64 statistics, int64
    # labels. index_add_ adds one source element each into the indexed slices; it reads source +
    # index + those slices and writes the slices back, never the whole [C, l, l] accumulator:
    #   counts: source [8]          -> 8 elements;      read 8*8 + 8*8 + 8*8 = 192;            write 64
    #   sums:   source [8, 256]     -> 2048 elements;   read 2048*8 + 8*8 + 2048*8 = 32832;    write 16384
    #   second: source [1, 256, 256] -> 65536 elements; read 65536*8 + 1*8 + 65536*8 = 1048584; write 524288
    assert [op.aten for op in adds] == ["aten.index_add_.default"] * 3
    assert [(op.work.op, op.work.elements, op.work.read_bytes, op.work.write_bytes) for op in adds] == [
        ("elementwise", 8, 192, 64), ("elementwise", 2048, 32832, 16384), ("elementwise", 65536, 1048584, 524288)]
    priced = {c.idx: c for c in simulate(client).ops}
    assert [(priced[op.idx].dram_read_bytes, priced[op.idx].dram_write_bytes) for op in adds] == [
        (192, 64), (32832, 16384), (1048584, 524288)]

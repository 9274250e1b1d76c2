"""Issue 56 ("Nothing lost, round four"), items 1 to 3: scaled FP8 finite for every positive amax a
float32 holds, delayed scaling's history after all-zero operands, stochastic rounding idempotent and
unbiased. Each test is named after its input and fails on the code before the fix."""

from __future__ import annotations

import math
from collections import deque

import ml_dtypes
import numpy as np
import pytest
import torch

from accel_sim.formats import AMAX_HISTORY, ELEMENT_FORMATS, NumberFormat
from workloads.numerics.emulate import Arithmetic
from workloads.numerics.quantize import MAX_SCALE_EXPONENT, round_to_format, tensor_scale, tensor_scale_value, uniform_draws

ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
SCALED = ["e4m3_cs", "e5m2_cs", "fp8_hybrid_cs", "e4m3_ds", "e5m2_ds", "fp8_hybrid_ds"]


def every_float32_amax() -> list[float]:
    """Positive float32 values over the whole exponent range: each binade from the smallest subnormal
    2^-149 to the largest finite value, with significands 1, 1.25, 1.75 (E4M3's largest), 1.875 and
    the largest below 2; subnormals as 2^e times the same significands where they are representable."""
    out = []
    for e in range(-149, 128):
        for significand in (1.0, 1.25, 1.75, 1.875, 2 - 2 ** -23):
            v = np.float32(significand * 2.0 ** e) if e < 128 else None
            if v is not None and np.isfinite(v) and v > 0:
                out.append(float(v))
    return sorted(set(out))


def reference_scaled(x: np.ndarray, amax: float, element: str) -> np.ndarray:
    """An independent scaled cast: 2^s with s = floor(log2(max / amax)) from Python's exact frexp,
    at most 2^127 (Transformer Engine's cap), x * 2^s in float64 (exact), clipped to the largest
    value, cast by ml_dtypes, divided back in float64 (2^128, where FP32's largest values round to,
    saturating at FP32's largest value on the grid)."""
    top = ELEMENT_FORMATS[element].max_finite
    mantissa, exponent = math.frexp(top / amax)  # top / amax = mantissa * 2^exponent, mantissa in [0.5, 1)
    s = min(exponent - 1, MAX_SCALE_EXPONENT)
    scaled = np.clip(x.astype(np.float64) * 2.0 ** s, -top, top)
    p = {"e4m3": 4, "e5m2": 3}[element]
    largest = (2 - 2.0 ** (1 - p)) * 2.0 ** 127  # FP32's largest value on the grid: 2^128 saturates to it
    return np.clip(scaled.astype(ML[element]).astype(np.float64) / 2.0 ** s, -largest, largest).astype(np.float32)


@pytest.mark.parametrize("name", SCALED)
def test_scaled_fp8_of_every_float32_amax_1e_minus_37_and_subnormals_included_is_finite(name):
    # round_to_format(torch.full((64,), 1e-37), "e4m3_cs") was all NaN: 2^s overflowed for every
    # amax <= max_finite x 2^-128 (E4M3: 448 x 2^-128 = 1.3e-36). Every positive float32 amax:
    # the tensor [amax, -amax / 3, amax / 32, 0] is finite and equals the independent cast
    fmt = NumberFormat.parse(name)
    for amax in every_float32_amax():
        x = torch.tensor([amax, -amax / 3, amax / 32, 0.0], dtype=torch.float32)
        for gradient in (False, True):
            element = "e4m3" if fmt.kind == "e4m3" or (fmt.kind == "fp8_hybrid" and not gradient) else "e5m2"
            given = None if fmt.scaling == "current" else x.abs().max()
            ours = round_to_format(x, fmt, amax=given, gradient=gradient)
            assert torch.isfinite(ours).all(), (name, amax, ours)
            np.testing.assert_array_equal(ours.numpy(), reference_scaled(x.numpy(), float(x.abs().max()), element),
                                          err_msg=f"{name} amax {amax!r}")
    assert round_to_format(torch.full((64,), 1e-37), fmt).isfinite().all()


@pytest.mark.parametrize("name", ["e4m3_ds", "e5m2_ds", "fp8_hybrid_ds"])
def test_delayed_scaling_with_a_tiny_history_amax_and_a_huge_value_1e38_saturates(name):
    # a history amax of 2^-149 (scale capped at 2^127) meets 1e38: 1e38 x 2^127 overflows FP32,
    # and the rounding made it NaN; it saturates at the format's largest value / 2^127, as 1.0 does
    fmt = NumberFormat.parse(name)
    top = fmt.element.max_finite
    out = round_to_format(torch.tensor([1e38, -1.0, 0.0]), fmt, amax=torch.tensor(2.0 ** -149))
    assert out.tolist() == [top * 2.0 ** -127, -top * 2.0 ** -127, 0.0]
    # an infinity stays what it was before: NaN (the tensor has overflowed; the run's guard sees it)
    assert round_to_format(torch.tensor([float("inf"), 1.0]), fmt, amax=torch.tensor(1.0))[0].isnan()


def test_tensor_scale_caps_at_2_to_the_127_for_amax_1e_minus_37():
    # 1e-37 = 1.088 x 2^-123: uncapped s = 8 + 123 = 131 (2^131 overflows FP32); capped: 2^127
    assert tensor_scale(torch.tensor(1e-37), ELEMENT_FORMATS["e4m3"]).item() == 2.0 ** 127
    # 1.0 is untouched: 2^8 (1.0 x 256 = 256 <= 448)
    assert tensor_scale(torch.tensor(1.0), ELEMENT_FORMATS["e4m3"]).item() == 2.0 ** 8


def test_delayed_scaling_after_16_all_zero_operands_keeps_the_previous_scale():
    # a 1 x 1 GEMM x @ w with w = 1, e4m3_ds. Step 1: x = 0.25 (amax 0.25 = 2^-2, so 2^s = 2^(8 + 2)
    # = 2^10). Steps 2 to 17: x = 0, sixteen all-zero operands (AMAX_HISTORY = 16). Step 18: x =
    # -2^-11; the window holds steps 2 to 17, all 0. Scaled by 1 (the old rule), -2^-11 = -0.000488
    # is below half of E4M3's smallest subnormal 2^-9 and rounds to -0; keeping the previous scale
    # 2^10 (Transformer Engine: a zero window keeps the old scale), -2^-11 x 2^10 = -0.5 is on the
    # grid and comes back exactly
    assert AMAX_HISTORY == 16
    arithmetic = Arithmetic("e4m3_ds")
    w = torch.ones(1, 1)
    outs = []
    for x in [0.25] + [0.0] * 16 + [-2.0 ** -11]:
        with arithmetic:
            outs.append(torch.mm(torch.tensor([[x]]), w).item())
    assert outs[-1] == -2.0 ** -11
    assert outs[0] == 0.25 and outs[1:17] == [0.0] * 16
    # the history itself holds what was seen, zeros included (as Transformer Engine's does)
    assert [float(a) for a in arithmetic.amax_history[0]] == [0.0] * 15 + [2.0 ** -11]


def test_delayed_scaling_after_a_nan_operand_keeps_the_previous_scale():
    # step 1: x = 1.0 (2^s = 2^8); step 2: x = NaN (its own rounding is NaN); step 3: x = 1.9, the
    # window [1.0, NaN] has no finite largest value: the previous scale 2^8 is kept, 1.9 x 256 =
    # 486.4 saturates at 448 -> 1.75 (scaled by 1, the old rule, 1.9 -> 1.875)
    arithmetic = Arithmetic("e4m3_ds")
    w = torch.ones(1, 1)
    outs = []
    for x in (1.0, float("nan"), 1.9):
        with arithmetic:
            outs.append(torch.mm(torch.tensor([[x]]), w).item())
    assert outs[0] == 1.0 and math.isnan(outs[1]) and outs[2] == 1.75


SR_FORMATS = ["fp16_sr", "e4m3_sr", "e5m2_sr", "mxfp8_e4m3_sr", "mxfp6_e2m3_sr", "mxint8_sr", "bfp_m4_g16_sr",
              "bfp_m8_g16_sr", "e4m3_cs_sr", "fp8_hybrid_ds_sr"]


@pytest.mark.parametrize("name", SR_FORMATS)
def test_stochastic_rounding_of_4194304_values_already_on_the_grid_moves_none(name):
    # the case: 2^22 normal draws rounded to the format (to nearest), then rounded again
    # stochastically with a seeded generator. floor(v / ulp + u) with a 24-bit u near 1 rounded
    # q + u up to q + 1 in float32 (before the fix: fp16_sr moved 242 values, e4m3_sr,
    # mxfp8_e4m3_sr, bfp_m4_g16_sr each 1 to 3)
    fmt = NumberFormat.parse(name)
    nearest = NumberFormat.parse(name[: -len("_sr")])
    x = torch.randn(1 << 22, generator=torch.Generator().manual_seed(0))
    on_grid = round_to_format(x, nearest)
    again = round_to_format(on_grid, fmt, generator=torch.Generator().manual_seed(1))
    assert int((again != on_grid).sum()) == 0


@pytest.mark.parametrize("name", ["fp16_sr", "e4m3_sr", "e5m2_sr", "mxfp8_e4m3_sr", "mxint8_sr", "bfp_m4_g16_sr"])
def test_stochastic_rounding_of_a_quarter_ulp_above_the_grid_rounds_up_a_quarter_of_the_time(name):
    # 1 + 2^-2 ulp, where the grid's ulp at 1 is 2^(1 - p) (p the significand bits; BFP m4: the
    # group's unit 2^(0 - 4 + 1); MXINT8 at 1: 2^-6): 2^20 draws round up with probability 1/4
    # exactly. The mean's standard error is sqrt(0.25 x 0.75 / 2^20) = 0.00042 ulp; we allow 0.003
    # ulp (7 sigma). With the draws cut to 24 - p bits the expectation is exact, not just close.
    fmt = NumberFormat.parse(name)
    p = {"fp16_sr": 11, "e4m3_sr": 4, "e5m2_sr": 3, "mxfp8_e4m3_sr": 4, "mxint8_sr": 7, "bfp_m4_g16_sr": 4}[name]
    ulp = 2.0 ** (1 - p)
    x = torch.full((1 << 20,), 1 + ulp / 4)  # BFP, MX: every group's largest is 1 + ulp / 4, its unit ulp
    measured = round_to_format(x, fmt, generator=torch.Generator().manual_seed(3)).double()
    assert set(measured.unique().tolist()) == {1.0, 1.0 + ulp}
    up = float((measured - 1.0).mean() / ulp)
    assert abs(up - 0.25) < 0.003, up


def test_uniform_draws_take_each_of_2_to_the_b_values_equally():
    # b = 4: 16 values k / 16; 2^18 draws, each count 16,384 +- 121 (1 sigma): within 6 sigma
    u = uniform_draws((1 << 18,), torch.Generator().manual_seed(0), torch.device("cpu"), 4)
    counts = torch.bincount((u * 16).long(), minlength=16)
    assert torch.equal(u * 16, (u * 16).floor()) and len(counts) == 16
    assert (counts - (1 << 14)).abs().max() < 6 * 121


# --- found by fuzzing the quantizers at extremes (inputs the issue does not name) ----------------


@pytest.mark.parametrize("name", ["e4m3_cs", "e5m2_ds", "fp8_hybrid_cs", "bfp_m4_g16", "mxfp8_e4m3_sr", "e4m3_sr"])
def test_an_empty_tensor_4_by_0_comes_back_empty(name):
    # scaled FP8 took amax() of an empty tensor: "Expected reduction dim to be specified"
    x = torch.zeros(4, 0)
    out = round_to_format(x, NumberFormat.parse(name), generator=torch.Generator().manual_seed(0))
    assert out.shape == (4, 0)


@pytest.mark.parametrize("name", ["bfp_m4_g16", "bfp_m4_g16_sr", "mxfp8_e4m3", "mxint8"])
def test_a_scalar_0_3_in_a_block_format_is_a_group_of_one(name):
    # a 0-dim tensor raised ZeroDivisionError (integer modulo by zero) cutting groups; as a group of
    # one, 0.3 in BFP m4: unit 2^(-2 - 4 + 1) = 2^-5, 0.3 x 32 = 9.6 -> 10 (nearest) -> 0.3125; MXFP8
    # E4M3: scale 2^(-2 - 8), 0.3 x 1024 = 307.2: binade 256, unit 32, 9.6 -> 10 -> 320 -> 0.3125;
    # MXINT8: scale 2^-2, 1.2 x 64 = 76.8 -> 77 -> 77 / 256 = 0.30078125
    fmt = NumberFormat.parse(name)
    out = round_to_format(torch.tensor(0.3), fmt, generator=torch.Generator().manual_seed(0))
    assert out.shape == ()
    if fmt.rounding == "nearest":
        assert out.item() == {"bfp_m4_g16": 0.3125, "mxfp8_e4m3": 0.3125, "mxint8": 0.30078125}[name]
    else:
        assert out.item() in (0.28125, 0.3125)


def test_a_float64_tensor_is_refused_with_one_line_naming_the_format():
    with pytest.raises(TypeError, match="e4m3_cs: rounds float32 tensors, not torch.float64"):
        round_to_format(torch.ones(3, dtype=torch.float64), NumberFormat.parse("e4m3_cs"))


@pytest.mark.parametrize("name", ["mxfp6_e3m2_ru", "mxfp8_e4m3_ru", "mxint8_ru"])
def test_mx_rounded_up_scale_of_float32_max_3_4e38_is_finite(name):
    # the rounded-up scale of a block holding FP32's largest value is E8M0's largest, 2^127, and
    # the element rounds to 2^128 / 2^127 = 2: beyond FP32. Saturated at FP32's largest value on the
    # grid, (2 - 2^(1 - p)) 2^127 (E3M2, p = 3: 1.75 x 2^127), as scaled FP8 does
    fmt = NumberFormat.parse(name)
    out = round_to_format(torch.tensor([3.4028234663852886e38, -3.3e38, 1.0]), fmt)
    assert torch.isfinite(out).all()
    assert out[0].item() == (2 - 2.0 ** (1 - fmt.element.significand_bits)) * 2.0 ** 127


def test_bfp_group_of_float32_max_is_nan_as_its_8_bit_shared_exponent_overflows():
    # documented, not changed: a BFP group whose largest value rounds past (2 - 2^(1-m)) 2^127 needs
    # the shared exponent 128, beyond BFP_EXPONENT_BITS = 8 bits' range (as FP32's own exponent):
    # the group is NaN, as a group holding an infinity is (docs/numerics.md)
    out = round_to_format(torch.tensor([3.4e38, 1.0] + [0.0] * 14 + [1.0] * 16), NumberFormat.parse("bfp_m4_g16"))
    assert out[:16].isnan().all() and out[16:].eq(1.0).all()


# --- item 4: bench.run's ledger check at participation 0.5 ----------------------------------------


def _half_participation_run(method_name: str):
    """A real 2-round run of ``method_name`` on 4 clients at participation 0.5 (2 clients a round):
    ConvNet on 16 x 16 random images, 10 classes."""
    import numpy as np

    from bench.lib.fl.jobs import Job, JobResult, RunInputs
    from workloads import model_spec
    from workloads.cost.system import SystemModel
    from workloads.fl.dataset import Dataset
    from workloads.fl.hparams import FLConfig, Hparams
    from workloads.fl import loop
    from workloads.fl.loop import RunPlan
    from workloads.fl.methods import parse_method

    g = torch.Generator().manual_seed(0)
    train = Dataset("synthetic", torch.randn(64, 3, 16, 16, generator=g), torch.arange(64) % 10, 10, "random")
    fl = FLConfig(dataset="synthetic", model="convnet", num_clients=4, rounds=2, participation=0.5, seed=0)
    parts = tuple(np.arange(k, 64, 4) for k in range(4))
    spec = model_spec.ModelSpec("convnet", (3, 16, 16))
    inputs = RunInputs(spec, fl, train, train, parts, None, SystemModel(), (), 0)
    job = Job(method_name, Hparams(local_epochs=1, batch_size=16))
    method = parse_method(method_name)
    result = loop.train(RunPlan(method, model_fn=lambda: model_spec.build(spec, num_classes=10, head=method.head),
                                train=train, test=train, parts=parts, cfg=fl, hp=job.hp))
    return inputs, job, JobResult(result, [], 0.0, 0.0)


@pytest.mark.slow
def test_bench_run_ledger_check_at_participation_0_5_agrees_with_the_closed_form():
    # 4 clients at participation 0.5: 2 clients a round, so the ledger is half of what every client
    # in every round would send; the closed form was computed for all 4 (FedAvg 103,968 vs 207,936 B
    # in the run) and every run was reported a mismatch
    from bench.lib.run.figures import accuracy_figures, ledger_mismatches

    runs = [_half_participation_run(name) for name in ("fedavg", "scaffold")]
    inputs = runs[0][0]
    _, ledger, _ = accuracy_figures(["fedavg", "scaffold"], inputs, [job for _, job, _ in runs],
                                    [("fedavg", None), ("scaffold", None)], [outcome for _, _, outcome in runs])
    for name in ("fedavg", "scaffold"):
        assert ledger[name]["ledger"]["total_bytes"] == ledger[name]["closed_form"]["total_bytes"] > 0, name
    assert ledger_mismatches({"ledger_check": {"convnet": ledger}}) == {}


def test_ledger_mismatches_of_two_runs_of_one_model_and_one_of_another_names_all_three():
    # keyed by model, two mismatched runs of one model showed as one
    bad = {"ledger": {"total_bytes": 100}, "closed_form": {"total_bytes": 200}}
    good = {"ledger": {"total_bytes": 200}, "closed_form": {"total_bytes": 200}}
    summary = {"ledger_check": {"convnet": {"fedavg": bad, "scaffold": bad, "moon": good},
                                "resnet18": {"fedavg": bad}}}
    from bench.lib.run.figures import ledger_mismatches

    assert ledger_mismatches(summary) == {
        "convnet fedavg": {"ledger_bytes": 100, "closed_form_bytes": 200},
        "convnet scaffold": {"ledger_bytes": 100, "closed_form_bytes": 200},
        "resnet18 fedavg": {"ledger_bytes": 100, "closed_form_bytes": 200}}


# --- item 5: SCAFFOLD's copy of the global model is held through the step, and priced -------------


def _two_layers():
    """Linear 12 -> 8 (no bias: 96 floats = 384 B), ReLU, classifier 8 -> 4 (no bias: 32 floats =
    128 B): 512 B of weights, no buffers."""
    from workloads.models import FLNet

    return FLNet(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 8, bias=False), torch.nn.ReLU()), 8, 4)


def _scaffold_step_peak(hold_the_copy: bool):
    from accel_sim.hardware import HardwareConfig
    from accel_sim.simulate import simulate
    from workloads.capture import HeldStep, capture_step
    from workloads.fl.hparams import Hparams
    from workloads.fl.local import ClientContext, client_trainer, example_received, prepare_model
    from workloads.fl.methods import parse_method

    method, hp = parse_method("scaffold"), Hparams(batch_size=2, momentum=0.9)
    torch.manual_seed(0)
    model = prepare_model(_two_layers(), method, seed=0).train()

    def make_step(step_model):
        trainer = client_trainer(step_model, step_model.state_dict(), hp, method,
                                 ClientContext(round=2, received=example_received(step_model, method, hp, 2)))
        copy = {id(t) for t in trainer.ctx.global_params.values()}
        held = trainer.held() if hold_the_copy else tuple(t for t in trainer.held() if id(t) not in copy)
        return HeldStep(trainer.step, held)

    trace = capture_step(make_step, model, torch.zeros(2, 3, 2, 2), torch.zeros(2, dtype=torch.long))
    return simulate(trace, HardwareConfig()).peak


def test_scaffold_on_a_two_layer_model_prices_its_copy_of_the_global_model_at_512_bytes():
    # the client keeps x (w_t, 512 B) through training for option II's c_i+ = c_i - c + (x - y) / (K eta),
    # but no op of the step reads it, so it was missing from the step's storages and its peak.
    # Resident ("input") at the peak, by hand: the batch x, 2 x 12 floats = 96 B, and y, 2 int64 =
    # 16 B; c and c_i, 512 B each; the copy of w_t, 512 B: 96 + 16 + 3 x 512 = 1,648 B
    from workloads.cost.step import local_step_trace
    from workloads.fl.hparams import Hparams
    from workloads.fl.methods import parse_method
    from accel_sim.hardware import HardwareConfig
    from accel_sim.simulate import simulate

    trace = local_step_trace(_two_layers, parse_method("scaffold"), Hparams(batch_size=2, momentum=0.9), batch_size=2,
                             input_shape=(3, 2, 2), round=2)
    peak = simulate(trace, HardwareConfig()).peak
    assert peak.by_kind_bytes["input"] == 96 + 16 + 3 * 512
    # the copy is live at every op, so it lifts the peak by exactly its bytes: 512 B over the same
    # step priced without it (3,584 B: +14.3 %)
    without = _scaffold_step_peak(hold_the_copy=False)
    assert peak.peak_memory_bytes == _scaffold_step_peak(hold_the_copy=True).peak_memory_bytes \
        == without.peak_memory_bytes + 512


# --- items 8 (a user's aggregate returning None) and 14 (messages that blame the wrong thing) -----

USER_SOURCE = '''
import torch
from workloads.fl.methods.base import FedAvg
from workloads.fl.methods.scaffold import CONTROL, Scaffold


class NanPenalty(FedAvg):
    def penalty(self, model, ctx, hp):
        return torch.tensor(float("nan"))


class InfBatchLoss(FedAvg):
    def batch_loss(self, model, x, y, outputs, loss_fn, ctx, hp):
        return super().batch_loss(model, x, y, outputs, loss_fn, ctx, hp) + float("inf")


class NanExtras(Scaffold):
    def aggregate(self, server, updates, hp, keys):
        new = super().aggregate(server, updates, hp, keys)
        control = {k: torch.full_like(v, float("nan")) for k, v in new.extras[CONTROL].items()}
        return type(new)(**{**new.__dict__, "extras": {**new.extras, CONTROL: control}})


class NanServerExtras(FedAvg):
    def aggregate(self, server, updates, hp, keys):
        new = super().aggregate(server, updates, hp, keys)
        step = server.extras.get("step", torch.tensor(float("nan")))  # NaN kept in ServerState.extras, used here
        return self._advance(server, {k: v + 0 * step if v.is_floating_point() else v for k, v in new.weights.items()},
                             extras={"step": step})


class HugeAggregate(FedAvg):
    def aggregate(self, server, updates, hp, keys):
        new = super().aggregate(server, updates, hp, keys)
        return self._advance(server, {k: torch.full_like(v, 1e30) for k, v in new.weights.items()
                                      if v.is_floating_point()})


class NoneAggregate(FedAvg):
    def aggregate(self, server, updates, hp, keys):
        return None


class VectorPenalty(FedAvg):
    def penalty(self, model, ctx, hp):
        return torch.zeros(3)


class PerSampleLoss(FedAvg):
    def batch_loss(self, model, x, y, outputs, loss_fn, ctx, hp):
        return torch.nn.functional.cross_entropy(outputs[0], y, reduction="none")


class TensorHead(FedAvg):
    def head_outputs(self, model, x):
        return model(x)


class StateOnlyAfterTraining(Scaffold):
    def after_training(self, model, ctx, steps, hp):
        return super().after_training(model, ctx, steps, hp)[0]


class NoneExtras(Scaffold):
    def server_extras(self, server, keys, round, hp):
        return None


class NoneState(Scaffold):
    def initial_client_state(self, model, hp):
        return None


class DetachedLoss(FedAvg):
    def batch_loss(self, model, x, y, outputs, loss_fn, ctx, hp):
        return super().batch_loss(model, x, y, outputs, loss_fn, ctx, hp).detach()


class UnknownSharedKey(FedAvg):
    def shared_keys(self, model, round, hp):
        return ["nonexistent.weight"]


class DroppedKeyAggregate(FedAvg):
    def aggregate(self, server, updates, hp, keys):
        new = super().aggregate(server, updates, hp, keys)
        return type(new)(**{**new.__dict__, "weights": {k: v for k, v in new.weights.items() if k != "body.1.weight"}})


class FlattenedAggregate(FedAvg):
    def aggregate(self, server, updates, hp, keys):
        new = super().aggregate(server, updates, hp, keys)
        return type(new)(**{**new.__dict__, "weights": {k: v.reshape(-1) for k, v in new.weights.items()}})
'''


@pytest.fixture
def roundfour(tmp_path, monkeypatch):
    import sys

    from workloads.fl import methods

    (tmp_path / "roundfour.py").write_text(USER_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "roundfour", raising=False)
    methods._own.cache_clear()
    yield
    methods._own.cache_clear()
    sys.modules.pop("roundfour", None)


def _run_standins(name: str, rounds: int = 2, lr: float = 0.05):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from fl_standins import TinyNet, blobs
    from workloads.fl.hparams import FLConfig, Hparams
    from workloads.fl import loop
    from workloads.fl.loop import RunPlan
    from workloads.fl.methods import parse_method
    from workloads.fl.partition import dirichlet_partition

    train = blobs(160)
    parts = dirichlet_partition(train.y.numpy(), 4, 0.5, min_size=5, seed=0)
    m = parse_method(name)
    return loop.train(RunPlan(m, model_fn=lambda: TinyNet(head=m.head), train=train, test=blobs(40, seed=1),
                              parts=parts, cfg=FLConfig(dataset="blobs", num_clients=4, rounds=rounds),
                              hp=Hparams(lr=lr, local_epochs=1, batch_size=16)))


BLAMED = {  # the input -> what its one line says (each said "lower the learning rate" before, or was a traceback)
    "penalty returning NaN": ("roundfour:NanPenalty", "round 1, client 0 (roundfour:NanPenalty), local epoch 1: "
                              "roundfour:NanPenalty.penalty returned nan at the round's starting weights"),
    "batch_loss returning inf": ("roundfour:InfBatchLoss", "roundfour:InfBatchLoss.batch_loss returned inf at the "
                                 "round's starting weights"),
    "NaN left in ServerState.extras": ("roundfour:NanExtras", "round 2, client 0 (roundfour:NanExtras), local epoch 1: "
                                       "what the client received in group 'scaffold_control' holds NaN or inf "
                                       "('body.1.weight'); it comes from roundfour:NanExtras.server_extras (the "
                                       "ServerState.extras roundfour:NanExtras.aggregate keeps)"),
    "1e30 weights from aggregate": ("roundfour:HugeAggregate", "(its largest weight magnitude 1e+30); it is what "
                                    "roundfour:HugeAggregate.aggregate returned in round 1: check what it returns"),
}


def test_nan_in_serverstate_extras_used_by_aggregate_names_it_not_a_divergence(roundfour):
    # NaN kept in ServerState.extras and used by the user's aggregate only (never sent): the global
    # model holds NaN; the line names the aggregate and asks to check it ("a diverged run" before)
    from workloads.fl.guard import DivergedError

    with pytest.raises(DivergedError, match=r"round 1: roundfour:NanServerExtras's aggregate: the global model's "
                                            r"'body.1.weight' holds NaN or inf \(check what your aggregate returns\)"):
        _run_standins("roundfour:NanServerExtras")


@pytest.mark.parametrize("case", BLAMED)
def test_a_non_finite_loss_names_the_hook_that_made_it(roundfour, case):
    from workloads.fl.local import NonFiniteLossError

    name, said = BLAMED[case]
    with pytest.raises(NonFiniteLossError) as caught:
        _run_standins(name)
    message = str(caught.value)
    assert said in message and "learning rate" not in message and "\n" not in message, message


def test_a_learning_rate_of_1e9_still_blames_the_learning_rate():
    # every hook's result is finite at the round's starting weights: the loss became NaN while training
    from workloads.fl.guard import DivergedError
    from workloads.fl.local import NonFiniteLossError

    with pytest.raises((NonFiniteLossError, DivergedError), match="lower the learning rate"):
        _run_standins("fedavg", rounds=2, lr=1e9)


WRONG_TYPES = {  # a hook returning the wrong type or shape -> its one line (each was a traceback)
    "aggregate returning None (item 8)": ("roundfour:NoneAggregate", "roundfour:NoneAggregate.aggregate returned None, "
                                          "not a ServerState"),
    "penalty returning a vector of 3": ("roundfour:VectorPenalty", "roundfour:VectorPenalty.penalty returned a tensor "
                                        "of shape (3,); it must return a 0-dim tensor, a number or None"),
    "batch_loss returning a per-sample loss": ("roundfour:PerSampleLoss", "roundfour:PerSampleLoss.batch_loss returned "
                                               "a tensor of shape (16,); it must return the loss as a 0-dim tensor"),
    "head_outputs returning a tensor": ("roundfour:TensorHead", "roundfour:TensorHead.head_outputs returned a tensor "
                                        "of shape (16, 4); it must return a list of tensors"),
    "batch_loss returning a detached loss": ("roundfour:DetachedLoss", "roundfour:DetachedLoss.batch_loss returned a "
                                             "loss without a gradient (detached?)"),
    "after_training returning only the state": ("roundfour:StateOnlyAfterTraining", "roundfour:StateOnlyAfterTraining."
                                                "after_training returned a dict; it must return a pair"),
    "server_extras returning None": ("roundfour:NoneExtras", "roundfour:NoneExtras.server_extras returned None in "
                                     "round 1"),
    "initial_client_state returning None": ("roundfour:NoneState", "roundfour:NoneState.initial_client_state returned "
                                            "a NoneType; it must return a dict of tensors"),
    "shared_keys naming a key the model lacks": ("roundfour:UnknownSharedKey", "roundfour:UnknownSharedKey.shared_keys "
                                                 "in round 1 named ['nonexistent.weight']"),
    "aggregate dropping a key": ("roundfour:DroppedKeyAggregate", "roundfour:DroppedKeyAggregate.aggregate returned "
                                 "weights without ['body.1.weight']"),
    "aggregate flattening the weights": ("roundfour:FlattenedAggregate", "roundfour:FlattenedAggregate.aggregate returned "
                                         "'body.1.weight' as (144,) torch.float32, where the global model holds (12, 12)"),
}


@pytest.mark.parametrize("case", WRONG_TYPES)
def test_a_hook_returning_the_wrong_type_is_one_line_naming_it(roundfour, case):
    from workloads.fl.guard import UserCodeError

    name, said = WRONG_TYPES[case]
    with pytest.raises(UserCodeError) as caught:
        _run_standins(name)
    assert said in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


@pytest.mark.parametrize("name", ["e4m3_cs", "e4m3_ds", "fp8_hybrid_ds"])
def test_a_gemm_on_an_empty_batch_of_0_rows_in_scaled_fp8_runs(name):
    # the emulation took amax() of the empty operand ("Expected reduction dim to be specified"); an
    # empty tensor's largest magnitude is 0, and its product is empty, forward and backward
    x = torch.zeros(0, 4, requires_grad=True)
    w = torch.ones(3, 4, requires_grad=True)
    with Arithmetic(name):
        out = torch.nn.functional.linear(x, w)
        out.sum().backward()
    assert out.shape == (0, 3) and w.grad.eq(0).all()


@pytest.mark.parametrize("element", ["e4m3", "e5m2"])
def test_tensor_scale_value_equals_tensor_scale_over_every_float32_binade(element):
    # the kernel's scale (issue 55: computed in Python numbers, no torch operations) against the torch
    # one, bit for bit: every binade with five significands, subnormals, 0, -0, infinity and NaN
    spec = ELEMENT_FORMATS[element]
    amaxes = every_float32_amax() + [0.0, -0.0, math.inf, math.nan]
    torch_scales = tensor_scale(torch.tensor(amaxes, dtype=torch.float32), spec).tolist()
    assert [tensor_scale_value(a, spec) for a in amaxes] == torch_scales


@pytest.mark.parametrize("window", [[0.5, 2.0, 1.0], [0.0, 0.0], [1.0, math.inf], [math.nan, 4.0], [4.0, math.nan]])
def test_delayed_amax_in_python_numbers_equals_the_torch_choice(window):
    # the CPU's choice of delayed scaling's amax (Python numbers) against the GPU's (torch operations)
    # on the same history: its largest where positive and finite (2.0), else the previous scale's (3.0)
    def choose(arithmetic, own):
        arithmetic.amax_history[0] = deque([torch.tensor(a) for a in window], maxlen=AMAX_HISTORY)
        arithmetic.scaled_by[0] = torch.tensor(3.0)
        return float(arithmetic._delayed_amax(own))

    cpu = choose(Arithmetic("e4m3_ds"), torch.tensor(7.0))
    meta_like = torch.tensor(7.0)
    gpu_path = Arithmetic("e4m3_ds")
    with pytest.MonkeyPatch.context() as m:  # the same tensor, taken as a device's: the torch branch
        m.setattr(torch.Tensor, "device", property(lambda self: torch.device("meta")))
        gpu = choose(gpu_path, meta_like)
    expected = 2.0 if window == [0.5, 2.0, 1.0] else 3.0
    assert cpu == gpu == expected

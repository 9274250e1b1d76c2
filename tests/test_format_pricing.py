"""A run in a number format is priced as it is emulated (accel_sim.words, accel_sim.mac_energy,
docs/numerics.md "What it costs"): the rules on a hand-worked step, each format's settings, and the
exploration's points priced as ``simulate`` prices the hardware in that format."""

from __future__ import annotations

import math

import pytest

from accel_sim.batch import TraceWork, price_points
from accel_sim.formats import NumberFormat
from accel_sim.hardware import HardwareConfig
from accel_sim.mac_energy import hardware_in_format, random_bits, rounding_pj
from accel_sim.simulate import simulate
from accel_sim.space import space_from_dict
from tests.accel_traces import small_trace
from workloads.cost.fleet import load_fleet
from workloads.cost.rounds import fleet_devices
from workloads.fl.execution import Execution
from workloads.fl.loop import arithmetic_of

BIG = dict(rows=4, cols=4, a_buffer_bytes=1 << 20, b_buffer_bytes=1 << 20, out_buffer_bytes=1 << 20)


def test_each_format_sets_how_it_stores_and_what_its_random_bits_cost():
    hw = HardwareConfig()
    assert hardware_in_format(hw, "fp32") is hw
    # (word bytes, packed element bits, copies of an operand, scale bits per value, random bits per value)
    expected = {"bf16": (2, 16, "one", 0.0, 0), "e4m3_ds": (1, 8, "one", 0.0, 0),
                "bf16_sr": (2, 16, "per_role", 0.0, 24 - 8),  # BF16's 8-bit significand: 16 bits dropped
                # block-grouped: regrouped per role; a sign and 4 mantissa bits packed, the group's
                # 8-bit exponent per 16 values apart (main: 1 byte per value, the exponent inside it)
                "bfp_m4_g16": (1, 5, "per_role", 0.5, 0),
                "bfp_m4_g16_sr": (1, 5, "per_role", 0.5, 24 - 4),
                "mxfp4_e2m1": (1, 4, "per_role", 0.25, 0),  # two E2M1 to a byte, an 8-bit scale per 32 values
                "mxfp6_e3m2": (1, 6, "per_role", 0.25, 0),
                "mxfp8_e4m3_sr": (1, 8, "per_role", 0.25, 24 - 4),
                "mxint8": (1, 8, "per_role", 0.25, 0)}
    for name, (word, element, copies, scale_bits, bits) in expected.items():
        in_format = hardware_in_format(hw, name)
        assert (in_format.word_bytes, in_format.element_bits, in_format.operand_copies,
                in_format.scale_bits_per_value) == (word, element, copies, scale_bits), name
        assert random_bits(NumberFormat.parse(name)) == bits
        # one LFSR shift per random bit, 0.1 / 32 pJ each
        assert in_format.energy.rounding_pj_per_value == pytest.approx(bits * 0.1 / 32, abs=1e-15)
    assert rounding_pj("bfp_m4_g16_sr") == 0.0625


def test_a_step_in_bfp_with_stochastic_rounding_by_hand():
    # small_trace in bfp_m4_g16_sr (1-byte words, one copy per GEMM role, 20 random bits per value).
    # GEMMs read W (forward), x (forward and dW) and dy (dW).
    trace = small_trace()
    hw = hardware_in_format(HardwareConfig(**BIG), "bfp_m4_g16_sr")
    report = simulate(trace, hw)
    # the update writes W's FP32 master (15 x 4 = 60) and one packed copy for its one role: 15 x 5
    # bits = 75 bits -> 10 bytes, + its group exponents 15 x 8 / 16 bits -> 1 byte (main: 15 bytes)
    assert (report.ops[6].dram_read_bytes, report.ops[6].dram_write_bytes) == (60 + 60, 60 + 10 + 1)
    # values rounded: dy's 10 (op 4), W's 15 (op 6); x, the batch, arrives in the format
    assert [c.rounded_values for c in report.ops] == [0, 0, 0, 0, 10, 0, 15, 0, 0]
    # their random bits: 25 values x 20 bits x 0.003125 pJ = 1.5625 pJ, in the special unit's energy
    nearest = simulate(trace, hardware_in_format(HardwareConfig(**BIG), "bfp_m4_g16"))
    extra = report.summary()["energy_by_component_j"]["special_unit"] - \
        nearest.summary()["energy_by_component_j"]["special_unit"]
    assert math.isclose(extra, 25 * 20 * 0.003125e-12, rel_tol=1e-9)
    # peak at op 5: W 60 + 11, x twice (forward and dW groupings) 2 x (6 x 5 bits -> 4 bytes + 1 byte
    # of exponent), y 40, dy 10 x 5 bits -> 7 + 1, dW 60 = 189 (main, byte-aligned: 197)
    assert report.peak.live_bytes_per_op[5] == 60 + 11 + 2 * 5 + 40 + 8 + 60
    # FP32 prices the same step at 224 B: weights' master, gradients and y stay 4 bytes per value
    assert simulate(trace, HardwareConfig(**BIG)).peak.live_bytes_per_op[5] == 224


def test_fp32_points_are_priced_as_before_and_format_points_as_simulate_prices_them():
    # the exploration's number_format axis sets each point as hardware_in_format does, so a point's
    # batch price equals simulate on that hardware, figure for figure
    space = space_from_dict({"axes": {"rows": [4, 8], "number_format": ["fp32", "bf16_sr", "bfp_m4_g16",
                                                                         "mxfp6_e3m2_sr"]}},
                            HardwareConfig(**{k: v for k, v in BIG.items() if k != "rows"}))
    chunk = next(iter(space.chunks()))
    costs = price_points([TraceWork.of(small_trace())], chunk.points)[0]
    for i, name in enumerate(chunk.number_formats.tolist()):
        hw, _ = space.point(int(chunk.index[i]))
        summary, row = simulate(small_trace(), hw).summary(), costs.row(i)
        in_format = hardware_in_format(HardwareConfig(), name)
        assert (hw.word_bytes, hw.operand_copies, hw.scale_bits_per_value, hw.energy) == \
            (in_format.word_bytes, in_format.operand_copies, in_format.scale_bits_per_value, in_format.energy), name
        for key in ("dram_read_bytes", "dram_write_bytes", "peak_memory_bytes", "rounded_values"):
            assert row[key] == summary[key], (name, key)
        assert math.isclose(row["energy_j"], summary["energy_j"], rel_tol=1e-9), name


def test_a_fleet_trains_and_prices_each_class_in_its_own_format():
    fleet = load_fleet("mixed-formats")
    assert [c.format_in("fp32") for c in fleet.classes] == ["bfp_m4_g16_sr", "mxfp8_e4m3", "bf16", "fp32"]
    assert fleet.describe()["classes"]["phone"]["number_format"] == "bf16"
    assert "number_format" not in load_fleet("mixed").describe()["classes"]["phone"]  # old fleets keep their record
    classes = (0, 1, 2, 3, 0)
    devices = fleet_devices(fleet, classes, number_format="fp32")
    # each client's accelerator in its class's format: word size and MAC figure
    assert [d.hw.word_bytes for d in devices] == [1, 1, 2, fleet.classes[3].hw.word_bytes, 1]
    assert devices[1].hw == hardware_in_format(fleet.classes[1].hw, "mxfp8_e4m3")
    assert devices[3].hw == fleet.classes[3].hw  # fp32: the class's hardware file as given
    # training: client k rounds in its class's format (fp32: no arithmetic at all)
    execution = Execution(client_formats=tuple(fleet.classes[c].format_in("fp32") for c in classes))
    arithmetics = [arithmetic_of(execution, 0, 1, k) for k in range(len(classes))]
    assert [a.fmt.name if a else None for a in arithmetics] == ["bfp_m4_g16_sr", "mxfp8_e4m3", "bf16", None,
                                                                "bfp_m4_g16_sr"]
    assert execution.describe()["client_formats"][2] == "bf16"
    assert "client_formats" not in Execution().settings()  # a run without a fleet keeps its identity


def test_weights_without_an_fp32_master_copy_are_priced_in_the_format_only():
    # small_trace at 2-byte words, weight_master = "none" (--low-precision-weights): W lives in the
    # format only, 15 values x 2 B = 30; the update reads it (30) and dW (60) and writes it (30)
    trace = small_trace()
    hw = HardwareConfig(**BIG, word_bytes=2)
    master, none = simulate(trace, hw), simulate(trace, hw.with_(weight_master="none"))
    assert (master.ops[6].dram_read_bytes, master.ops[6].dram_write_bytes) == (120, 90)
    assert (none.ops[6].dram_read_bytes, none.ops[6].dram_write_bytes) == (90, 30)
    # live at op 5: W 30, x 12, y 40, dy 20, dW 60 = 162 (with the master: 222)
    assert (none.peak.live_bytes_per_op[5], master.peak.live_bytes_per_op[5]) == (162, 222)
    assert none.ops[6].rounded_values == 15  # the update still rounds W into the format


@pytest.mark.slow  # ~2-7 s: two emulated training steps
def test_low_precision_weights_store_every_gemm_weight_in_the_format_after_each_step():
    import torch

    from workloads.fl.hparams import Hparams
    from workloads.fl.local import client_trainer
    from workloads.fl.methods import parse_method
    from workloads.numerics.quantize import round_to_format

    def small_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                   torch.nn.Flatten(), torch.nn.Linear(16 * 6 * 6, 10))

    method, fmt = parse_method("fedavg"), NumberFormat.parse("bfp_m4_g16")
    model = small_model()
    x, y = torch.randn(8, 3, 8, 8), torch.arange(8) % 10
    execution = Execution(number_format="bfp_m4_g16", low_precision_weights=True)
    trainer = client_trainer(model, model.state_dict(), Hparams(lr=0.05), method,
                             arithmetic=arithmetic_of(execution, 0, 1, 0), low_precision_weights=True)
    trainer.step(x, y)
    weights = {n: p for n, p in model.named_parameters() if p.dim() >= 2}
    assert weights and all(torch.equal(p, round_to_format(p, fmt, dim=1)) for p in weights.values())
    # without the option the update leaves them off the format's grid (the FP32 master)
    other = small_model()
    client_trainer(other, other.state_dict(), Hparams(lr=0.05), method,
                   arithmetic=arithmetic_of(execution, 0, 1, 0)).step(x, y)
    assert not all(torch.equal(p, round_to_format(p, fmt, dim=1)) for p in other.parameters() if p.dim() >= 2)
    with pytest.raises(ValueError, match="--low-precision-weights"):
        Execution(low_precision_weights=True)  # fp32 has no narrower copy
    assert "low_precision_weights" not in Execution(number_format="bf16").settings()  # old runs keep their identity


def test_sub_byte_elements_are_packed():
    # MXFP4 stores two E2M1 elements to a byte and a scale byte per 32 values: 4.25 bits a value, not
    # main's 8.25 (one element per byte). The emulation's values do not change; only the bytes priced.
    assert [NumberFormat.parse(f).bits_per_value for f in ("mxfp4_e2m1", "mxfp6_e3m2", "mxfp8_e4m3")] == [4.25, 6.25, 8.25]
    trace = small_trace()
    # the update writes W's FP32 master (60) and its copy in the format: 15 values x 4 bits = 60 bits ->
    # 8 bytes (7.5 rounded up), + one scale byte (15 x 8 / 32 = 3.75 bits -> 1); E3M2: 90 bits -> 12 + 1;
    # E4M3: 15 + 1
    writes = {f: simulate(trace, hardware_in_format(HardwareConfig(**BIG), f)).ops[6].dram_write_bytes
              for f in ("mxfp4_e2m1", "mxfp6_e3m2", "mxfp8_e4m3")}
    assert writes == {"mxfp4_e2m1": 60 + 8 + 1, "mxfp6_e3m2": 60 + 12 + 1, "mxfp8_e4m3": 60 + 15 + 1}
    # the fold model moves GEMM operands at 4 bits: an 8 x 8 x 8 GEMM's DRAM traffic is an eighth of
    # FP32's, a half of FP8's, exactly (every block an even number of values), and counts in half-bytes
    from accel_sim.memory import gemm_fold_schedule
    dram = {f: gemm_fold_schedule(8, 8, 8, hw=hardware_in_format(HardwareConfig(**BIG), f), dataflow="os").dram_bytes
            for f in ("fp32", "mxfp8_e4m3", "mxfp4_e2m1")}
    assert [r * 8 for r in dram["mxfp4_e2m1"]] == list(dram["fp32"])
    assert [r * 2 for r in dram["mxfp4_e2m1"]] == list(dram["mxfp8_e4m3"])
    assert gemm_fold_schedule(8, 8, 8, hw=hardware_in_format(HardwareConfig(**BIG), "mxfp4_e2m1"),
                              dataflow="os").byte_scale == 2

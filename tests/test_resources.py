"""The resource model (``accel_sim.resources``) on hand-worked points of the paper's board, with the
arithmetic and its sources: configs/devices/xc7vx485t.toml cites DS180 (2,800 DSP48E1, 1,030
BRAM36, 303,600 LUTs), UG473 (4,096 9-bit bytes per BRAM36, 72-bit ports), Zhang et al. FPGA 2015
(5 DSP48E1 per FP32 multiply-add on this device) and DS255 (a 9 x 9 LUT multiplier: 115 LUTs);
the areas are Horowitz ISSCC 2014 Fig. 1.1.9's 45 nm figures (the default cost table) and Intel's
45 nm SRAM cell. What a cell holds is accel_sim.mac_cells'; a shifter's bit-stage is
4.28125 x (519.7551 / 160) / (277.9792 / 32) = 1.600982 um^2 under horowitz45 (Aladdin's shifter-per-
adder-bit ratio times Horowitz's 137 / 32 um^2 per adder bit)."""

from pathlib import Path

import numpy as np
import pytest

from accel_sim.hardware import HardwareConfig
from accel_sim.points import HardwarePoints
from accel_sim.formats import NumberFormat, NumberFormatError
from accel_sim.resources import ResourceModelError, fpga_resources, load_device

DEVICE = load_device(Path(__file__).resolve().parents[1] / "configs" / "devices" / "xc7vx485t.toml")


def resources(hw: HardwareConfig, fmt: str) -> dict:
    r = fpga_resources(HardwarePoints.of([hw]), fmt, DEVICE)
    return {name: column[0].item() for name, column in r.columns().items()}


def test_the_papers_point_does_not_fit_in_fp32():
    # 32 x 64 = 2,048 FP32 MACs x 5 DSP48E1 = 10,240, plus the special unit's 64 lanes (its largest
    # throughput, 64 elements/cycle) x 5 = 320: 10,560 DSP48E1 of 2,800 = 377 %.
    # BRAM36: A (streamed along the 32 rows under ws/ws/os): half of 1.5 MiB = 786,432 B / 4,096 =
    # 192 blocks (its width, 32 lanes x 4 B / 8 B per port = 16, is less), x 2 halves = 384; B
    # (64 columns wide: stationary under WS, streamed along the columns under OS) 384; outputs:
    # half of 1 MiB / 4,096 = 128, x 2 = 256. 1,024 of 1,030 = 99.4 %.
    r = resources(HardwareConfig(), "fp32")
    assert (r["dsp_slices"], r["bram36_blocks"], r["luts"]) == (10_560, 1_024, 0)
    assert r["dsp_utilization"] == pytest.approx(10_560 / 2_800)
    assert r["bram36_utilization"] == pytest.approx(1_024 / 1_030)
    assert (r["fits"], r["limiting_resource"]) == (False, "dsp")
    # area at 45 nm: 2,048 x (7,700 + 4,184) um2 + 64 lanes x 11,884 + 4 MiB x 8 bits x 0.346 um2 / 0.5
    # = 24,338,432 + 760,576 + 23,219,666.9 um2 = 48.32 mm2
    assert r["asic_area_mm2"] == pytest.approx((2048 * 11_884 + 64 * 11_884 + 4 * 2**20 * 8 * 0.346 / 0.5) / 1e6)


def test_it_fits_in_block_floating_point():
    # FAST-style BFP, 4-bit mantissas in groups of 16: 1 + 4 + 8/16 = 5.5 bits, stored in 1 byte,
    # so word_bytes = 1. Per cell (product): LUTs ceil(115 x 4^2 / 81) = ceil(22.7) = 23 for the
    # multiplier + a 2 x 4 + log2(16) = 12-bit accumulator at 1 LUT/bit = 35; per group of 16 cells:
    # the 8-bit exponent adder 8 + the normalization (a 12-bit leading-zero count 12, a 12-bit
    # 4-stage shift 12 x 2 LUTs = 24) = 44 LUTs and the FP32 adder's 2 DSP48E1. 2,048 cells, 128
    # groups: 71,680 + 5,632 = 77,312 LUTs (25.5 % of 303,600); 256 DSP + the FP32 special unit's
    # 320 = 576 (20.6 %). (Main charged no FP32 adder: 320 DSP, 71,680 LUTs.) BRAM36 as for FP32
    # (the capacity, not the 1-byte width, decides): 1,024 (99.4 %), the limiting resource.
    bfp = NumberFormat.parse("bfp_m4_g16")
    assert (bfp.bits_per_value, bfp.storage_bytes) == (5.5, 1)
    r = resources(HardwareConfig(word_bytes=1), "bfp_m4_g16")
    assert (r["dsp_slices"], r["bram36_blocks"], r["luts"]) == (576, 1_024, 77_312)
    assert (r["fits"], r["limiting_resource"]) == (True, "bram36")
    # area per cell: 282 x (4/8)^2 + 36 x 12/8 = 70.5 + 54 = 124.5 um2; per group (36 + 54 + 48 x
    # 1.600982 + 4,184) / 16 = 271.928: 396.43 um2 (main: 121.875, without the group's FP32 add);
    # + the FP32 lanes and the SRAM as above
    cell = 124.5 + (36 + 54 + 48 * 1.600982 + 4184) / 16
    assert r["asic_area_mm2"] == pytest.approx((2048 * cell + 64 * 11_884 + 4 * 2**20 * 8 * 0.346 / 0.5) / 1e6,
                                               rel=1e-7)


def test_bf16_and_a_smaller_array():
    # BF16 (2-byte words): 1 DSP48E1 for the 8 x 8 significand product + 2 for the FP32 adder = 3 per
    # MAC: 32 x 64 needs 6,144 + 320 = 6,464 (231 %); 16 x 32 needs 1,536 + 320 = 1,856 (66 %) and
    # its buffers (as above, 2-byte words: widths 32 x 2 / 8 = 8 and 32 x 2 / 8 = 8 < capacities) fit
    assert resources(HardwareConfig(word_bytes=2), "bf16")["dsp_slices"] == 6_464
    small = resources(HardwareConfig(rows=16, cols=32, word_bytes=2), "bf16")
    assert (small["dsp_slices"], small["fits"], small["limiting_resource"]) == (1_856, True, "bram36")


def test_an_fp8_point():
    # E4M3 (1-byte words), 16 x 32 array of 32-lane FP8 dot-product cells (accel_sim.mac_cells: a
    # 30-bit fixed-point window). Per cell, from LUTs: the 4 x 4 significand multiplier ceil(115 x 16
    # / 81) = 23 + a 5-bit exponent adder 5 + a 6-bit exponent compare 6 + the 30-bit, 5-stage
    # alignment shifter 30 x 3 = 90 + the 30-bit accumulator 30 = 154; per 32 cells: normalization
    # (30 + 30 x 3 = 120 LUTs) and the FP32 adder's 2 DSP48E1. 512 cells, 16 blocks: 32 DSP + the
    # special unit's 64 lanes x 5 = 320 -> 352 (12.6 %; main: 2 per cell, 1,344); 512 x 154 + 16 x
    # 120 = 80,768 LUTs (26.6 %). BRAM36 as the paper's buffers (capacity decides): 384 + 384 + 256 =
    # 1,024 (99.4 %), the limiting resource.
    r = resources(HardwareConfig(rows=16, cols=32, word_bytes=1), "e4m3_sr")
    assert (r["dsp_slices"], r["luts"], r["bram36_blocks"]) == (352, 80_768, 1_024)
    assert (r["fits"], r["limiting_resource"]) == (True, "bram36")
    # area per cell: 282/4 + 36 x 5/8 + 36 x 6/8 + 150 x 1.600982 + 137 x 30/32 = 70.5 + 22.5 + 27 +
    # 240.147 + 128.4375; per 32: (128.4375 + 240.147 + 4,184) / 32 (main: 4,425.54, an FP32 add each)
    cell = 70.5 + 22.5 + 27 + 150 * 1.600982 + 128.4375 + (128.4375 + 150 * 1.600982 + 4184) / 32
    assert r["asic_area_mm2"] == pytest.approx((512 * cell + 64 * 11_884 + 4 * 2**20 * 8 * 0.346 / 0.5) / 1e6,
                                               rel=1e-7)
    # E5M2: a 3 x 3 multiplier ceil(115 x 9 / 81) = 13 + a 6-bit exponent adder + a 7-bit compare +
    # 30 x ceil(log2 25) = 5 stages -> 90 + 30 = 146 per cell; 120 per block
    assert resources(HardwareConfig(rows=16, cols=32, word_bytes=1), "e5m2")["luts"] == 512 * 146 + 16 * 120


def test_fp16_and_bf16_areas():
    # FP16: Horowitz's FP16 multiplier 1,640 + FP32 adder 4,184 um2; DSP48E1 as BF16's (3 per MAC):
    # 32 x 64 -> 6,144 + 320 = 6,464. BF16 (no figure: built, accel_sim.mac_cells.fp_multiplier_units):
    # 8 x 8 multiplier 282 + 9-bit exponent adder 36 x 9/8 = 40.5 + 16-bit one-stage shift 16 x
    # 1.600982 + 8-bit rounding adder 36 = 384.116 um2 + 4,184 (main's fitted law: 880.84).
    lanes_and_sram = 64 * 11_884 + 4 * 2**20 * 8 * 0.346 / 0.5
    fp16 = resources(HardwareConfig(word_bytes=2), "fp16")
    assert fp16["dsp_slices"] == 6_464 and fp16["luts"] == 0
    assert fp16["asic_area_mm2"] == pytest.approx((2048 * (1640 + 4184) + lanes_and_sram) / 1e6)
    bf16 = resources(HardwareConfig(word_bytes=2), "bf16")
    assert bf16["asic_area_mm2"] == pytest.approx((2048 * (282 + 40.5 + 16 * 1.600982 + 36 + 4184) + lanes_and_sram)
                                                  / 1e6, rel=1e-7)


def test_a_wide_array_is_limited_by_buffer_width():
    # 256 x 256 BFP array with 64 KiB buffers of 1-byte words: A feeds 256 rows, 256 B per cycle over
    # 8-byte ports = 32 blocks per half, more than 32 KiB / 4,096 = 8 for capacity; likewise B and
    # the outputs: 3 buffers x 2 halves x 32 = 192 blocks
    hw = HardwareConfig(rows=256, cols=256, word_bytes=1, a_buffer_bytes=65536, b_buffer_bytes=65536,
                        out_buffer_bytes=65536)
    assert resources(hw, "bfp_m4_g16")["bram36_blocks"] == 192


def test_the_format_must_match_the_word_size_simulate_prices():
    with pytest.raises(ResourceModelError, match="point 0: number format bf16 stores 2-byte values but word_bytes is 4: "
                                                 "give word_bytes = 2"):
        resources(HardwareConfig(), "bf16")
    for bad in ("fp64", "bfp_m0_g16", "bfp_m4_g0", "bfp_m4"):
        with pytest.raises(NumberFormatError, match="number format"):
            NumberFormat.parse(bad)


def test_formats_per_point():
    points = HardwarePoints.of([HardwareConfig(), HardwareConfig(word_bytes=1)])
    r = fpga_resources(points, np.array(["fp32", "bfp_m2_g16"]), DEVICE)
    # bfp_m2_g16: ceil(115 x 4 / 81) = 6 LUTs + 2 x 2 + 4 = 8 accumulator bits = 14 per cell; per
    # group of 16 an 8-bit exponent adder, an 8-bit leading-zero count and an 8-bit 3-stage shift
    # (8 x 2): 32 LUTs, 128 groups
    assert r.luts.tolist() == [0, 2048 * 14 + 128 * 32] and r.fits.tolist() == [False, True]


def test_a_bad_device_file_is_named(tmp_path):
    text = (Path(__file__).resolve().parents[1] / "configs" / "devices" / "xc7vx485t.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("dsp_slices = 2800", "dsp_slices = -1"))
    with pytest.raises(ResourceModelError, match="bad.toml: device field 'dsp_slices' must be a non-negative integer"):
        load_device(bad)
    bad.write_text(text.replace("bf16_multiply = 1", "fp64_multiply = 1"))
    with pytest.raises(ResourceModelError, match=r"\[dsp_per_unit\] gives DSP slices per arithmetic unit: "
                                                 r"fp32_multiply, fp32_add and any of bf16_multiply, fp16_multiply; "
                                                 r"got fp32_multiply, fp32_add, fp64_multiply, fp16_multiply"):
        load_device(bad)
    # a device file without a DSP figure for BF16's multiplier builds it from LUTs (8 x 8: ceil(115 x
    # 64 / 81) = 91, a 9-bit exponent adder 9, a 16-bit one-stage shift 16, an 8-bit rounding adder 8)
    bad.write_text(text.replace("bf16_multiply = 1", ""))
    r = fpga_resources(HardwarePoints.of([HardwareConfig(word_bytes=2)]), "bf16", load_device(bad))
    assert (r.dsp_slices[0], r.luts[0]) == (2048 * 2 + 320, 2048 * (91 + 9 + 16 + 8))


def test_more_dram_bandwidth_needs_memory_channels_the_board_may_not_have():
    # the VC707 has one DDR3-1600 SODIMM: 64 bits x 1,600 MT/s = 12.8 GB/s per channel, one channel.
    # The BFP point that fits at 12.8 GB/s needs ceil(25.6 / 12.8) = 2 channels at 25.6 GB/s: 200 %.
    base = HardwareConfig(word_bytes=1)
    assert (DEVICE.memory_channels, DEVICE.memory_channel_bytes_per_s) == (1, 12.8e9)
    one, two = resources(base, "bfp_m4_g16"), resources(base.with_(dram_peak_bytes_per_s=25.6e9), "bfp_m4_g16")
    assert (one["memory_channels"], one["memory_channel_utilization"], one["fits"]) == (1, 1.0, True)
    assert (two["memory_channels"], two["memory_channel_utilization"], two["fits"]) == (2, 2.0, False)
    assert two["limiting_resource"] == one["limiting_resource"] == "bram36"  # channels enter fits only
    assert resources(base.with_(dram_peak_bytes_per_s=6.4e9), "bfp_m4_g16")["memory_channels"] == 1

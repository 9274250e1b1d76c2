"""MAC energy per number format (``accel_sim.mac_energy``), worked by hand from Horowitz, "Computing's
energy problem (and what we can do about it)", ISSCC 2014, Fig. 1.1.9 (45 nm): FP32 multiply 3.7 pJ,
add 0.9 pJ; FP16 multiply 1.1 pJ; INT8 multiply 0.2 pJ; INT32 add 0.1 pJ. The array accumulates
in FP32, so every element format's MAC is its multiply + 0.9 pJ."""

from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, strategies as st

from accel_sim.energy import mac_energy_j
from accel_sim.formats import ELEMENT_KINDS, MX_ELEMENTS, NumberFormat
from accel_sim.hardware import EnergyCosts, HardwareConfig
from accel_sim.mac_energy import format_mac_pj, hardware_in_format, int_add_pj, int_multiply_pj, mac_pj_exact


def test_fp32_is_todays_default_exactly():
    # 3.7 + 0.9 = 4.6 pJ, the EnergyCosts default, bit for bit (3.7 + 0.9 in floats is 4.6000000000000005)
    assert format_mac_pj("fp32") == EnergyCosts().mac_pj == 4.6
    assert mac_pj_exact(NumberFormat("fp32")) == Fraction("4.6")


def test_element_formats_by_hand():
    # FP16: Horowitz's 1.1 pJ multiply + the FP32 add 0.9 = 2.0 pJ (FP16's own 0.4 pJ add does not enter)
    assert format_mac_pj("fp16") == 2.0
    # the fit a s^2 + c through (24, 3.7) and (11, 1.1): a = 2.6 / (576 - 121) = 1/175,
    # multiply(s) = 3.7 - (576 - s^2) / 175
    # E4M3, s = 4: 3.7 - 560/175 = 3.7 - 3.2 = 0.5; + 0.9 = 1.4
    # E5M2, s = 3: 3.7 - 567/175 = 3.7 - 3.24 = 0.46; + 0.9 = 1.36
    # BF16, s = 8: 3.7 - 512/175 = 0.774286; + 0.9 = 1.674286 (= 293/175)
    assert (format_mac_pj("e4m3"), format_mac_pj("e5m2")) == (1.4, 1.36)
    assert mac_pj_exact(NumberFormat("bf16")) == Fraction(293, 175)


def test_block_floating_point_by_hand():
    # bfp_m4_g16: 4-bit mantissa multiply 0.2 x (4/8)^2 = 0.05; accumulator 2 x 4 + log2 16 = 12 bits,
    # add 0.1 x 12/32 = 0.0375; per group of 16 products an 8-bit exponent add 0.1 x 8/32 = 0.025 and an
    # FP32 add 0.9: 0.925 / 16 = 0.0578125. Total 0.05 + 0.0375 + 0.0578125 = 0.1453125 pJ (31.7x below FP32)
    assert format_mac_pj("bfp_m4_g16") == 0.1453125
    # bfp_m8_g16: 0.2 x 1 = 0.2; 2 x 8 + 4 = 20 bits: 0.1 x 20/32 = 0.0625; + 0.0578125 = 0.3203125 pJ
    assert format_mac_pj("bfp_m8_g16") == 0.3203125
    # stochastic rounding's random bits are not priced
    assert format_mac_pj("bfp_m4_g16_sr") == format_mac_pj("bfp_m4_g16")
    assert format_mac_pj("bf16_sr") == format_mac_pj("bf16")


def test_the_integer_laws_against_horowitzs_other_figures():
    # the square law from INT8's 0.2 pJ gives 0.2 x 16 = 3.2 pJ at 32 bits; the figure's INT32
    # multiply is 3.1 pJ (3 % apart). The linear add law from INT32's 0.1 pJ gives 0.025 pJ at 8 bits;
    # the figure's INT8 add is 0.03 pJ (the law is 17 % low for a small adder).
    assert int_multiply_pj(32) == Fraction("3.2")
    assert float(int_multiply_pj(32)) == pytest.approx(3.1, rel=0.04)
    assert int_add_pj(8) == Fraction("0.025")
    assert float(int_add_pj(8)) == pytest.approx(0.03, rel=0.17)


def test_the_group_size_has_an_optimum():
    # doubling g adds at most one accumulator bit (0.1/32 = 0.003125 pJ) and saves 0.925/(2g) of the
    # group's overhead: a saving while g < 148. 128 -> 256: 12 + 7 = 15 -> 16 bits, +0.003125, and
    # 0.925/128 - 0.925/256 = 0.0036133 saved; 256 -> 512: the same bit, 0.0018066 saved: dearer.
    e = {g: mac_pj_exact(NumberFormat("bfp", 4, g)) for g in range(1, 1025)}
    assert e[128] - e[256] == Fraction(925, 256000) - Fraction(1, 320)
    assert e[512] > e[256] and min(e, key=e.get) == 256
    # one product past a power of two: 32 -> 33 adds the bit (+0.003125) and saves 0.925/32 - 0.925/33 = 0.000876
    assert e[33] - e[32] == Fraction(1, 320) - (Fraction(925, 32000) - Fraction(925, 33000))


@given(m=st.integers(1, 22), g=st.integers(1, 1024))
def test_more_mantissa_bits_cost_more(m, g):
    assert mac_pj_exact(NumberFormat("bfp", m + 1, g)) > mac_pj_exact(NumberFormat("bfp", m, g))


@given(m=st.integers(1, 23), log2_g=st.integers(0, 6))
def test_larger_groups_cost_less_up_to_128(m, log2_g):
    g = 2 ** log2_g  # 1 .. 64, doubled to 2 .. 128 (test_the_group_size_has_an_optimum: not beyond ~148)
    assert mac_pj_exact(NumberFormat("bfp", m, 2 * g)) < mac_pj_exact(NumberFormat("bfp", m, g))


@given(m=st.integers(1, 23), g=st.integers(1, 1024), kind=st.sampled_from(sorted(set(ELEMENT_KINDS) - {"fp32"}) + list(MX_ELEMENTS) + ["e4m3_cs", "fp8_hybrid_ds"]))
def test_every_format_costs_less_than_fp32(m, g, kind):
    fp32 = mac_pj_exact(NumberFormat("fp32"))
    assert mac_pj_exact(NumberFormat("bfp", m, g)) < fp32 and mac_pj_exact(NumberFormat.parse(kind)) < fp32


def test_mx_and_scaled_fp8_macs_by_hand():
    # MXFP8 E4M3: E4M3's MAC (fp_multiply_pj(4) + 0.9 = 1.4 pJ) + an 8-bit add of the block scales per
    # 32 products: 0.1 x 8 / 32 / 32 = 0.00078125 pJ; MXINT8 is BFP's m = 7, g = 32 datapath:
    # 0.2 x (7/8)^2 + 0.1 x (14 + 5) / 32 + (0.025 + 0.9) / 32 = 0.153125 + 0.059375 + 0.02890625
    assert mac_pj_exact(NumberFormat.parse("mxfp8_e4m3")) == Fraction("1.4") + Fraction("0.00078125")
    assert mac_pj_exact(NumberFormat.parse("mxint8")) == Fraction("0.24140625")
    # a scaled FP8 format computes in its element; the hybrid in E4M3 (its wider multiplier)
    assert mac_pj_exact(NumberFormat.parse("e5m2_ds")) == mac_pj_exact(NumberFormat("e5m2"))
    assert mac_pj_exact(NumberFormat.parse("fp8_hybrid_cs")) == mac_pj_exact(NumberFormat("e4m3"))


def test_hardware_in_a_format():
    hw = HardwareConfig(energy=replace(EnergyCosts(), mac_pj=10.0))
    assert hardware_in_format(hw, "fp32") is hw  # fp32: the hardware file as given (its own technology's figure)
    bfp = hardware_in_format(HardwareConfig(), "bfp_m4_g16_sr")
    assert (bfp.word_bytes, bfp.energy.mac_pj) == (1, 0.1453125)
    # one copy per GEMM role (block-grouped, stochastic), 20 random bits x 0.003125 pJ per value rounded
    assert bfp == HardwareConfig().with_(word_bytes=1, operand_copies="per_role",
                                         energy=replace(EnergyCosts(), mac_pj=0.1453125, rounding_pj_per_value=0.0625))
    assert hardware_in_format(bfp, "bfp_m4_g16_sr") == bfp  # applying it again changes nothing
    assert hardware_in_format(bfp, "bfp_m4_g16").energy.rounding_pj_per_value == 0.0  # to nearest: no random bits
    assert hardware_in_format(HardwareConfig(), "bf16", master_weights=False).weight_master == "none"
    # the 45 nm figure replaces another technology's: the per-format figures are Horowitz's
    assert hardware_in_format(hw, "e4m3").energy.mac_pj == 1.4
    # 1,000 MACs in bf16 (2-byte words) at 293/175 pJ each
    bf16 = hardware_in_format(HardwareConfig(), NumberFormat("bf16"))
    assert bf16.word_bytes == 2
    assert mac_energy_j(1000, bf16.energy) == pytest.approx(1000 * 293 / 175 * 1e-12, rel=1e-15)

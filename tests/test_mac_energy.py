"""MAC energy per number format (``accel_sim.mac_energy``): what a cell holds (``accel_sim.mac_cells``)
priced from a cost table (``accel_sim.cost_tables``), worked by hand under the default table,
Horowitz's 45 nm figures (M. Horowitz, "Computing's energy problem (and what we can do about it)",
ISSCC 2014, Fig. 1.1.9): FP32 multiply 3.7 pJ, add 0.9; FP16 multiply 1.1; INT8 multiply 0.2,
INT32 multiply 3.1; INT8 add 0.03, INT32 add 0.1; no shifter (Aladdin's shifter-per-adder-bit ratio:
(0.7968859 / 160) / (0.2104162 / 32) = 0.7574383 adder bits per bit-stage, so 0.1 / 32 x 0.7574383 =
0.00236699 pJ per bit-stage). The regression against published ratios is tests/test_published_ratios.py."""

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from accel_sim.cost_tables import COST_TABLES
from accel_sim.energy import mac_energy_j
from accel_sim.formats import ELEMENT_KINDS, MX_ELEMENTS, NumberFormat
from accel_sim.hardware import EnergyCosts, HardwareConfig
from accel_sim.mac_cells import cell_cost
from accel_sim.mac_energy import format_mac_pj, hardware_in_format

BIT_STAGE_PJ = 0.1 / 32 * (0.7968859 / 160) / (0.2104162 / 32)  # a shifter's bit-stage under horowitz45


@pytest.mark.parametrize("table", COST_TABLES)
def test_fp32_is_todays_default_exactly(table):
    # every table is read as ratios to its own FP32 cell, placed at Horowitz's 3.7 + 0.9 = 4.6 pJ
    assert format_mac_pj("fp32", table) == EnergyCosts().mac_pj == 4.6


def test_element_formats_by_hand():
    # FP16: Horowitz's 1.1 pJ multiply + the FP32 add 0.9 = 2.0 pJ (FP16's own 0.4 pJ add does not enter)
    assert format_mac_pj("fp16") == pytest.approx(2.0, rel=1e-12)
    # BF16 (no figure: built): an 8 x 8 multiply 0.2 + a 9-bit exponent add 0.03 x 9/8 = 0.03375 + a
    # 16-bit one-stage shift 16 x 0.00236699 = 0.0378718 + an 8-bit rounding add 0.03 = 0.3016218;
    # + the FP32 add 0.9 = 1.2016218 pJ
    assert format_mac_pj("bf16") == pytest.approx(0.2 + 0.03375 + 16 * BIT_STAGE_PJ + 0.03 + 0.9, rel=1e-12)


def test_block_floating_point_by_hand():
    # bfp_m4_g16, per product: a 4 x 4 multiply 0.2 x (4/8)^2 = 0.05 and a 12-bit accumulator add
    # (2 x 4 + log2 16) 0.03 x 12/8 = 0.045; per group of 16: the 8-bit exponent add 0.03, the
    # normalization of the 12-bit sum (a 12-bit leading-zero count 0.045 and a 12 x 4-stage shift
    # 48 x 0.00236699 = 0.1136155) and the FP32 add 0.9: 1.0886155 / 16 = 0.0680385.
    # Total 0.05 + 0.045 + 0.0680385 = 0.1630385 pJ (28x below FP32; 0.1453 before the normalization
    # was charged and with the 32-bit adder's per-bit figure)
    assert format_mac_pj("bfp_m4_g16") == pytest.approx(0.05 + 0.045 + (0.03 + 0.045 + 48 * BIT_STAGE_PJ + 0.9) / 16,
                                                        rel=1e-12)
    # stochastic rounding's random bits are not priced in the MAC
    assert format_mac_pj("bfp_m4_g16_sr") == format_mac_pj("bfp_m4_g16")
    assert format_mac_pj("bf16_sr") == format_mac_pj("bf16")


def test_an_fp8_dot_product_by_hand():
    # E4M3 (s = 4, e = 4; emax 8, emin -6): exact window 2 x (8 + 6 + 4) + log2 32 + 1 = 42 bits,
    # capped at 24 + 5 + 1 = 30. Per product: 4 x 4 multiply 0.05; 5-bit exponent add 0.03 x 5/8 =
    # 0.01875; 6-bit exponent compare 0.0225; alignment 30 bits x ceil(log2(30 - 8 + 1)) = 5 stages
    # = 150 x 0.00236699 = 0.3550485; 30-bit accumulator add (nearest listed: 32 bits) 0.1 x 30/32 =
    # 0.09375. Per 32 products: normalization 0.09375 + 30 x 5 = 150 bit-stages 0.3550485, FP32 add 0.9
    per_product = 0.05 + 0.01875 + 0.0225 + 150 * BIT_STAGE_PJ + 0.09375
    per_block = 0.09375 + 150 * BIT_STAGE_PJ + 0.9
    assert format_mac_pj("e4m3") == pytest.approx(per_product + per_block / 32, rel=1e-12)
    # MXFP8 adds the two E8M0 scales once per block: an 8-bit add, 0.03 / 32
    assert format_mac_pj("mxfp8_e4m3") == pytest.approx(per_product + (per_block + 0.03) / 32, rel=1e-12)
    # MXFP4 E2M1 (s = 2, e = 2; emax 2, emin 0): exact window 2 x (2 + 0 + 2) + 5 + 1 = 14 bits, no
    # compare; 2 x 2 multiply 0.2 x (2/8)^2 = 0.0125; 3-bit exponent add 0.01125; 14 x ceil(log2 11) =
    # 4 stages = 56 bit-stages; 14-bit add 0.03 x 14/8 = 0.0525 (nearest listed: 8 bits). Per block:
    # scales 0.03 + normalization 0.0525 + 14 x 4 = 56 bit-stages + 0.9
    assert format_mac_pj("mxfp4_e2m1") == pytest.approx(
        0.0125 + 0.01125 + 56 * BIT_STAGE_PJ + 0.0525 + (0.03 + 0.0525 + 56 * BIT_STAGE_PJ + 0.9) / 32, rel=1e-12)
    # a scaled FP8 format computes in its element; the hybrid in E4M3 (its wider multiplier)
    assert format_mac_pj("e5m2_ds") == format_mac_pj("e5m2")
    assert format_mac_pj("fp8_hybrid_cs") == format_mac_pj("e4m3")


def test_the_group_size_has_an_optimum():
    # doubling g adds one accumulator bit per product and a shifter bit-stage or so per group, and
    # halves the group's ~1.1 pJ of overhead per product: under horowitz45 the optimum is g = 256
    e = {g: cell_cost(NumberFormat("bfp", 4, g), "horowitz45").energy for g in (64, 128, 256, 512, 1024)}
    assert e[128] > e[256] < e[512] < e[1024]


@given(m=st.integers(1, 22), g=st.integers(1, 1024), table=st.sampled_from(COST_TABLES))
def test_more_mantissa_bits_cost_more(m, g, table):
    assert cell_cost(NumberFormat("bfp", m + 1, g), table).energy > cell_cost(NumberFormat("bfp", m, g), table).energy


@given(m=st.integers(1, 23), log2_g=st.integers(0, 6), table=st.sampled_from(COST_TABLES))
def test_larger_groups_cost_less_up_to_128(m, log2_g, table):
    g = 2 ** log2_g  # 1 .. 64, doubled to 2 .. 128
    assert cell_cost(NumberFormat("bfp", m, 2 * g), table).energy < cell_cost(NumberFormat("bfp", m, g), table).energy


@given(m=st.integers(1, 23), g=st.integers(1, 1024), kind=st.sampled_from(sorted(set(ELEMENT_KINDS) - {"fp32"}) + list(MX_ELEMENTS) + ["e4m3_cs", "fp8_hybrid_ds"]))
def test_every_format_costs_less_than_fp32(m, g, kind):
    # under the default table (under epfl28 a BFP product of 17+ mantissa bits, one per group, costs
    # more than FP32's: its normalization per product outweighs the FP32 multiplier it replaces)
    assert format_mac_pj(NumberFormat("bfp", m, g)) < 4.6 and format_mac_pj(kind) < 4.6


def test_hardware_in_a_format():
    hw = HardwareConfig(energy=replace(EnergyCosts(), mac_pj=10.0))
    assert hardware_in_format(hw, "fp32") is hw  # fp32: the hardware file as given (its own technology's figure)
    bfp = hardware_in_format(HardwareConfig(), "bfp_m4_g16_sr")
    assert (bfp.word_bytes, bfp.energy.mac_pj) == (1, format_mac_pj("bfp_m4_g16"))
    # one copy per GEMM role (block-grouped, stochastic), 20 random bits x 0.003125 pJ per value rounded;
    # 5-bit packed elements and the group's 8-bit exponent over 16 values
    assert bfp == HardwareConfig().with_(word_bytes=1, element_bits=5, scale_bits_per_value=0.5,
                                         operand_copies="per_role", energy=replace(
        EnergyCosts(), mac_pj=format_mac_pj("bfp_m4_g16"), rounding_pj_per_value=0.0625))
    assert hardware_in_format(bfp, "bfp_m4_g16_sr") == bfp  # applying it again changes nothing
    assert hardware_in_format(bfp, "bfp_m4_g16").energy.rounding_pj_per_value == 0.0  # to nearest: no random bits
    assert hardware_in_format(HardwareConfig(), "bf16", master_weights=False).weight_master == "none"
    # the 45 nm-anchored figure replaces another technology's
    assert hardware_in_format(hw, "e4m3").energy.mac_pj == format_mac_pj("e4m3")
    # the hardware's cost table prices the format
    epfl = hardware_in_format(HardwareConfig(cost_table="epfl28"), "bfp_m4_g16")
    assert epfl.energy.mac_pj == format_mac_pj("bfp_m4_g16", "epfl28") != format_mac_pj("bfp_m4_g16")
    # 1,000 MACs in bf16 (2-byte words)
    bf16 = hardware_in_format(HardwareConfig(), NumberFormat("bf16"))
    assert bf16.word_bytes == 2
    assert mac_energy_j(1000, bf16.energy) == pytest.approx(1000 * format_mac_pj("bf16") * 1e-12, rel=1e-15)


def test_an_unknown_cost_table_is_one_line_naming_the_known_ones():
    from accel_sim.hardware import HardwareConfigError, hardware_config_from_dict
    with pytest.raises(HardwareConfigError, match=r"cost_table = 'horowitz' is not known; choose one of "
                                                  r"aladdin40, epfl28, horowitz45"):
        hardware_config_from_dict({"cost_table": "horowitz"}, "hw.toml")

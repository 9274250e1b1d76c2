"""The cost model held against published hardware: each ratio below is one a paper measured or
synthesized, checked under the default table (``horowitz45``) and under every table whose source
covers it (``accel_sim.cost_tables``), with its tolerance written here. None of the model's figures
was fitted to these: a cell is what it holds (``accel_sim.mac_cells``), priced from a table's own
figures. The values each table gives, and the ones no table reaches, are in docs/accel_sim.md
("Cost tables")."""

import pytest

from accel_sim.mac_cells import relative_to_fp32
from accel_sim.mac_energy import format_mac_pj
from accel_sim.resources import FP32_CELL_UM2, mac_area_um2


def area_ratio(a: str, b: str, table: str) -> float:
    return mac_area_um2(a, table) / mac_area_um2(b, table)


def energy_ratio(a: str, b: str, table: str) -> float:
    return format_mac_pj(a, table) / format_mac_pj(b, table)


# EPFL's synthesized HBFP model (Accuracy Boosters, arXiv 2211.10737; github.com/jnbrq/hbfp_hardware_model,
# Synopsys DC, 28 nm): a bfp_m4_g16 dot-product lane is 21.3x smaller than an FP32 MAC. Tolerance: 1.5x
# either way (the issue's), i.e. 14.2x .. 31.95x. On main the cell was 97x smaller (the FP32 add once per
# group was left out of the area). horowitz45 gives 30.0x, epfl28 16.2x.
@pytest.mark.parametrize("table", ["horowitz45", "epfl28"])
def test_a_bfp_m4_g16_cell_is_about_21x_smaller_than_fp32(table):
    smaller = 1 / area_ratio("bfp_m4_g16", "fp32", table)
    assert 21.3 / 1.5 <= smaller <= 21.3 * 1.5


# The same database: BF16 multiplier 135.8 + FP32 adder 485.3 against FP32's 1,009.1 + 485.3 um^2:
# 0.416. Tolerance 10 % of 0.42 (0.378 .. 0.462). horowitz45 has no BF16 figure: its built multiplier
# gives 0.384 (main's fitted a s^2 + c law gave 0.426; this test held on main for horowitz45 and fails
# there for want of the epfl28 table).
@pytest.mark.parametrize("table", ["horowitz45", "epfl28"])
def test_bf16_is_near_042_of_fp32_in_area(table):
    assert area_ratio("bf16", "fp32", table) == pytest.approx(0.42, rel=0.10)


# van Baalen et al., "FP8 versus INT8 for efficient deep learning inference" (Qualcomm, arXiv
# 2303.17951, 2023): FP8 MACs are 50-180 % less efficient than INT8 ones, i.e. 1.5x .. 2.8x an
# INT8-class MAC. Their figures are not a cost table; only the default table is held to them. On main
# an E4M3 MAC cost 4.4x bfp_m8_g16's and 5.8x MXINT8's (a full FP32 add per product). horowitz45:
# 1.72x and 2.22x.
@pytest.mark.parametrize("int8_class", ["bfp_m8_g16", "mxint8"])
@pytest.mark.parametrize("fp8", ["e4m3", "fp8_hybrid_ds", "mxfp8_e4m3"])
def test_an_fp8_mac_costs_at_most_28x_an_int8_class_mac(fp8, int8_class):
    assert 1.5 <= energy_ratio(fp8, int8_class, "horowitz45") <= 2.8


# Vmxdotp (an MX dot-product unit in 12 nm): MXFP8 1,632 GFLOPS/W, MXFP4 843 -> an MXFP4 MAC costs
# 843 / 1,632 = 0.517 of an MXFP8 one. The bound: at most 0.55x, within 20 % of 0.517
# (0.413 .. 0.55). Default table only (no table's source covers MX units). On main: 0.95x.
# horowitz45: 0.418.
def test_an_mxfp4_mac_costs_about_half_an_mxfp8_mac():
    ratio = energy_ratio("mxfp4_e2m1", "mxfp8_e4m3", "horowitz45")
    assert 0.517 * 0.8 <= ratio <= 0.55


def test_the_area_is_the_cells_share_of_fp32_at_45_nm():
    # a table's cells are read as ratios to its own FP32 cell, placed at Horowitz's 7,700 + 4,184 um^2
    assert mac_area_um2("fp32", "epfl28") == FP32_CELL_UM2 == 11_884
    assert mac_area_um2("bf16", "epfl28") == pytest.approx(11_884 * (135.837 + 485.271) / (1009.0575 + 485.271))
    assert relative_to_fp32("bf16", "epfl28").energy == relative_to_fp32("bf16", "epfl28").area_um2  # area-only table

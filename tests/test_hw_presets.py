"""The hardware presets of configs/hw/: each loads, every value cites its source or says
"assumption", and the cited numbers are the published ones (tabled here with the source)."""

import re
import tomllib
from pathlib import Path

import pytest

from accel_sim.hardware import load_hardware_config

HW = Path(__file__).resolve().parents[1] / "configs" / "hw"
KIB, MIB = 1024, 1024 * 1024

# file -> (tag used in its comments, full citation its header must give, {key: published value})
CITED = {
    "gemmini_like.toml": ("Genc 2021", ("Genc et al.", "Gemmini: Enabling Systematic Deep-Learning Architecture",
                                        "DAC 2021"), {
        "rows": 16, "cols": 16,            # the generator's default 16x16 mesh
        "dataflow_fwd": "ws",              # one of the two dataflows it builds (Dataflow.BOTH)
        "out_buffer_bytes": 64 * KIB,      # 64 KiB accumulator
    }),
    "tpu_v1_like.toml": ("Jouppi 2017", ("Jouppi et al.", "In-Datacenter Performance Analysis of a Tensor "
                                         "Processing Unit", "ISCA 2017"), {
        "rows": 256, "cols": 256,          # 65,536 MACs
        "clock_hz": 700e6,
        "dataflow_fwd": "ws",              # weights preloaded, stationary
        "a_buffer_bytes": 24 * MIB,        # Unified Buffer
        "b_buffer_bytes": 4 * 64 * KIB,    # Weight FIFO: four tiles of 256 x 256 x 8 bit
        "out_buffer_bytes": 4096 * 256 * 4,  # 4096 accumulators of 256 x 32 bit = 4 MiB
        "dram_peak_bytes_per_s": 34e9,     # DDR3 Weight Memory
    }),
    "eyeriss_like.toml": ("Chen 2017", ("Chen", "Eyeriss: An Energy-Efficient Reconfigurable Accelerator",
                                        "JSSC"), {
        "rows": 12, "cols": 14,            # 168 PEs
        "clock_hz": 200e6,
        "b_buffer_bytes": 168 * 224 * 2,   # filter scratchpads: 224 16-bit words per PE
    }),
    "zhang2015_vc707.toml": ("Zhang 2015", ("Zhang", "Optimizing FPGA-based Accelerator Design for Deep "
                                            "Convolutional Neural Networks", "FPGA 2015"), {
        "rows": 7, "cols": 64,             # Tn = 7 input x Tm = 64 output channels: 448 MACs
        "clock_hz": 100e6,
        "word_bytes": 4,                   # 32-bit floating point
        "dataflow_fwd": "ws",              # weights fixed while the pipelined pixel loops stream
    }),
    "eftrain_zcu102.toml": ("Tang 2022", ("Tang", "EF-Train: Enable Efficient On-device CNN Training",
                                          "TODAES"), {
        "rows": 16, "cols": 16,            # HLS/source.h: Tm = Tn = 16
        "clock_hz": 100e6,                 # finetune2.py: clock = 10 ns
        "word_bytes": 4,                   # typedef float FPGA_DATA
        "a_buffer_bytes": 2 * 16 * 2486 * 4,        # IFM + IFM_DB
        "b_buffer_bytes": 2 * 16 * 16 * 64 * 9 * 4,  # WEIGHT + WEIGHT_DB
        "out_buffer_bytes": 2 * 16 * 2016 * 4,      # OFM + OFM_DB
    }),
}
WHAT_IF = {"gemmini_like.toml", "tpu_v1_like.toml", "eyeriss_like.toml"}  # training priced on an inference chip
ASSUMED_SPLITS = {  # buffers we split by assumption, checked against the published total
    "gemmini_like.toml": (("a_buffer_bytes", "b_buffer_bytes"), 256 * KIB),  # one 256 KiB scratchpad
    "eyeriss_like.toml": (("a_buffer_bytes", "out_buffer_bytes"), 108 * KIB),  # one 108 KB global buffer
}


def _value_comments(path: Path) -> dict[str, str]:
    """key -> the comment on its line, for every top-level ``key = value`` line."""
    out, table = {}, ""
    for line in path.read_text().splitlines():
        if line.startswith("["):
            table = line.split("]")[0].strip("[")
            continue
        m = re.match(r"^(\w+)\s*=\s*[^#]+(?:#\s*(.*))?$", line)
        if m and not table:
            out[m.group(1)] = m.group(2) or ""
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in HW.glob("*.toml")))
def test_every_preset_loads(name):
    hw = load_hardware_config(HW / name)
    assert hw.rows * hw.cols >= 1


@pytest.mark.parametrize("name", sorted(CITED))
def test_cited_numbers_are_the_published_ones(name):
    tag, citation, published = CITED[name]
    text = (HW / name).read_text()
    assert all(part in text for part in citation), f"{name} header must cite {citation}"
    assert ("WHAT-IF" in text) == (name in WHAT_IF)  # training on an inference chip is labelled as such
    hw = load_hardware_config(HW / name)
    comments = _value_comments(HW / name)
    for key, value in published.items():
        assert getattr(hw, key) == value, key
        assert comments[key].startswith(f"[{tag}]"), f"{name}: {key} must cite [{tag}]"
    # every value cites the source or says it is an assumption; nothing cited is left out of the table
    for key, comment in comments.items():
        assert comment.startswith(f"[{tag}]") or comment.startswith("assumption"), f"{name}: {key}"
        assert not comment.startswith(f"[{tag}]") or key in published, f"{name}: cited {key} not tabled here"


@pytest.mark.parametrize("name", sorted(ASSUMED_SPLITS))
def test_assumed_buffer_splits_add_up_to_the_published_buffer(name):
    keys, total = ASSUMED_SPLITS[name]
    doc = tomllib.loads((HW / name).read_text())
    assert sum(doc[k] for k in keys) == total

"""workloads.allocator: glibc keeps freed memory for the next step (issue 55's speed; values unchanged)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workloads import allocator

STEPS = """
import resource, numpy as np
from workloads.allocator import keep_freed_memory
if {keep}:
    assert keep_freed_memory()
def step():  # a step's pattern: three 8 MiB tensors written, then all freed
    tensors = [np.empty(1 << 21, np.float32) for _ in range(3)]
    for t in tensors:
        t.fill(1.0)
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults_of_ten_steps(keep: bool) -> int:
    out = subprocess.run([sys.executable, "-c", STEPS.format(keep=keep)], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not allocator.keep_freed_memory(), reason="glibc's mallopt only")
def test_ten_steps_of_three_8_mib_tensors_fault_no_fresh_pages_once_freed_memory_is_kept():
    # each step writes 3 x 8 MiB = 6,144 pages of 4 KiB. By default glibc gives memory back to the
    # kernel as the step frees it (more than twice its threshold lies free at the heap's top), so ten
    # steps fault fresh pages again (15,154 on the 2-core VM: more than a whole step's 6,144); kept,
    # they reuse the first step's pages (0 there): under a tenth of one step's
    assert page_faults_of_ten_steps(keep=False) > 6144
    assert page_faults_of_ten_steps(keep=True) < 614

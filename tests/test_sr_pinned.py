"""Stochastic rounding's bits pinned: the outputs of the SplitMix64 draws (``workloads.numerics.splitmix``,
since issue 55's generator change on 2026-11-28; before it, Philox2x32-10's at 8d421ca), so that a
faster quantizer cannot change them unnoticed. Each golden value is the first 16 hex digits of the
SHA-256 of a result's bytes (``Tensor.numpy().tobytes()``: the values in the tensor's logical
order), printed by ``PYTHONPATH=.:tests python tests/test_sr_pinned.py`` (``regenerate``: the same
code as the tests, with the fused kernel and with the torch operations it falls back to, which it
checks give the same bytes), never typed. The pins fail when the generator's counter increment
``GAMMA`` is changed by 2 (checked by hand, in the kernel and in the torch definition). A
regression pin, not a property: the properties (on a neighbouring grid point, unbiased,
independent streams) are tested in ``tests/test_fused_quantize.py``."""

from __future__ import annotations

import hashlib

import pytest
import torch

from accel_sim.formats import NumberFormat
from workloads.fl.execution import Execution
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.loop import arithmetic_of
from workloads.fl.methods import parse_method
from workloads.models import build_model
from workloads.numerics import fused
from workloads.numerics.quantize import round_to_format

from test_fused_quantize import STEP_LAYOUTS

# one digest per layout of STEP_LAYOUTS, in its order; x = randn(shape, seed = the layout's index) x 3,
# rounded with torch.Generator().manual_seed(7)
PINNED = {
    "bfp_m4_g16_sr": ["f1285714deedbbd2", "9021d535de2626b6", "c54e7409537c94eb", "a22e0731903ed14d",
                      "7ea8543b2c1cfd71", "f0935481405dc421", "a33c0984a44bede9", "fe2520113021c14d", "547b5ccc0eb726b6"],
    "e4m3_cs_sr": ["6a10b9ef2cbb56b3", "0a0bff76c3bca292", "d1ffb3152c803ae1", "efb0037e2dbdfdd7",
                   "f731ce29dc9635d9", "9fe8abbce977a20f", "fd1e753205eb3339", "4dff9414f05bf3b8", "9524e9589f4cd679"],
    "mxfp4_e2m1_sr": ["df25fbb5bbeecc55", "ccf4fe709faeaf1c", "fea32c787b6fd33a", "7c7f2af21462086a",
                      "493a4aaf2ba62ab0", "6834be0d24de4dba", "14d8d1be7244df4c", "8c378732be4fc8b9", "bf8374f18e594a9c"],
    "mxfp8_e4m3_sr": ["0c6494ab660686ae", "576ceded9360f307", "a38138e1b466b8cb", "b80ca446bce253de",
                      "b965010ea3fb8cfd", "492c7d925d7ea06c", "c2cdb78a42c463fd", "cddcff979ed5c1fa", "1a686f1392fc711f"],
}
# two SGD steps of a ConvNet in bfp_m4_g16_sr (client 1 of round 2, run seed 3), NCHW and channels-last
PINNED_STEPS = {(1, False): "16e41c45bdf5ee4e", (1, True): "78c0228eb546f80c",
                (2, False): "16e41c45bdf5ee4e", (2, True): "c21b982baeb63d3a"}
"""The weights after the two steps, per torch thread count (a GEMM's reduction order
follows it: the studies train on one thread, the default here is two) and memory layout; NCHW's
two agree since the SplitMix64 draws (at 8d421ca, with Philox's, they differed)."""
PINNED_ON = "AVX512"  # torch.backends.cpu.get_cpu_capability() where the digests were taken


def digest(*chunks: bytes) -> str:
    """The first 16 hex digits of the SHA-256 of ``chunks`` in order."""
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()[:16]


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("name", sorted(PINNED))
def test_stochastic_rounding_gives_the_pinned_bits(name, kernel, monkeypatch):
    monkeypatch.setattr(fused, "_kernel_enabled", kernel)
    assert layout_digests(name) == PINNED[name], name


def layout_digests(name: str) -> list[str]:
    """The digests of ``name``'s roundings of STEP_LAYOUTS' tensors (PINNED's order)."""
    digests = []
    for i, (shape, channels_last, dim) in enumerate(STEP_LAYOUTS):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(i)) * 3
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        out = round_to_format(x, NumberFormat.parse(name), dim=dim, generator=torch.Generator().manual_seed(7))
        digests.append(digest(out.numpy().tobytes()))
    return digests


@pytest.mark.slow  # ~5 s each on the 2-core machine
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_stochastic_training_step_gives_the_pinned_weights(channels_last, threads):
    if torch.backends.cpu.get_cpu_capability() != PINNED_ON:
        pytest.skip(f"pinned on {PINNED_ON} kernels; this CPU's FP32 GEMMs ({torch.backends.cpu.get_cpu_capability()}) "
                    "sum in another order")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert _two_steps_digest(channels_last) == PINNED_STEPS[threads, channels_last]
    finally:
        torch.set_num_threads(before)


def _two_steps_digest(channels_last: bool) -> str:
    torch.manual_seed(0)
    method = parse_method("fedavg")
    model = prepare_model(build_model("convnet", num_classes=10, image_size=16), method, seed=0)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    trainer = client_trainer(model, model.state_dict(), Hparams(lr=0.05), method,
                             arithmetic=arithmetic_of(Execution(device="cpu", number_format="bfp_m4_g16_sr"), 3, 2, 1))
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        x = torch.randn(8, 3, 16, 16, generator=g)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        trainer.step(x, torch.randint(0, 10, (8,), generator=g))
    chunks = [c for name, value in sorted(model.state_dict().items()) for c in (name.encode(), value.contiguous().numpy().tobytes())]
    return digest(*chunks)


def regenerate() -> None:
    """Print today's digests in PINNED's and PINNED_STEPS' layout (``python tests/test_sr_pinned.py``),
    after checking that the kernel and the torch operations agree: how the pins were taken."""
    layouts = {}
    for name in sorted(PINNED):
        per_path = []
        for kernel in (True, False):
            fused._kernel_enabled = kernel
            per_path.append(layout_digests(name))
        fused._kernel_enabled = True
        assert per_path[0] == per_path[1], f"{name}: the kernel and the torch operations disagree"
        layouts[name] = per_path[0]
    steps = {}
    before = torch.get_num_threads()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for channels_last in (False, True):
            steps[threads, channels_last] = _two_steps_digest(channels_last)
    torch.set_num_threads(before)
    print(f"PINNED = {layouts!r}\nPINNED_STEPS = {steps!r}\nPINNED_ON = {torch.backends.cpu.get_cpu_capability()!r}")


if __name__ == "__main__":
    regenerate()

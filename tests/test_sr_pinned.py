"""Stochastic rounding's bits pinned: the outputs of commit 8d421ca (main on 2026-11-28, the code the
`_sr` runs of the studies trained then were trained with), so that a faster quantizer cannot change
them unnoticed. Each golden value is the first 16 hex digits of the SHA-256 of a result's bytes
(``Tensor.numpy().tobytes()``: the values in the tensor's logical order), computed at 8d421ca by
the same code as below, with the fused kernel and with the torch operations it falls back to (both
gave the same bytes). A regression pin, not a property: the properties (on a neighbouring grid
point, unbiased, independent streams) are tested in ``tests/test_fused_quantize.py``."""

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
    "bfp_m4_g16_sr": ["db0d6a1221f9b1b7", "88ea6e6bb441ec60", "82ce9711c6b51a42", "fc9560d0cd7e2aba",
                      "b8753fc1d6c9d0d7", "bf8a9ca75e0d35e7", "ca40d9fdda9363ef", "ec18fea9e652ca92", "2a40d05cad857b65"],
    "mxfp4_e2m1_sr": ["29fe575a658f8d8a", "14a0216e9fdc00d8", "7bb9b1f515d7b6fd", "334c89140d250c25",
                      "aebe4ed66e689f71", "c3f5adba00d61078", "69308791ca590b70", "20eea3082da59496", "bb8e12098a5a88d2"],
    "mxfp8_e4m3_sr": ["1a9d5f40d39347a5", "7ed7cef9f4f66336", "2e43c27befa9eb23", "03e3bac90867780f",
                      "d4c94654e21f8894", "2f5ac3e1a3607174", "cc3a2b60230f3e87", "7d9c1591b71b582a", "9b74e859e4a20e3c"],
    "e4m3_cs_sr": ["5579b0f1826fccc1", "8e10a12583e591e5", "53727e5021f03bdd", "22523bbcb9d3c8ab",
                   "295890190b51a023", "9ef8c80aa8dbac8d", "055e6cc856735905", "5cfe1aca984497b3", "b6276e82bc99e03a"],
}
# two SGD steps of a ConvNet in bfp_m4_g16_sr (client 1 of round 2, run seed 3), NCHW and channels-last
PINNED_STEPS = {(1, False): "3e9bb67b8d1eae1d", (1, True): "7cd4c64ad6ff87f7",
                (2, False): "b2f55e031e71aa10", (2, True): "e826714da285cb2d"}
"""main's (8d421ca) weights after the two steps, per torch thread count (a GEMM's reduction order
follows it: the studies train on one thread, the default here is two) and memory layout."""
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
    for i, (shape, channels_last, dim) in enumerate(STEP_LAYOUTS):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(i)) * 3
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        out = round_to_format(x, NumberFormat.parse(name), dim=dim, generator=torch.Generator().manual_seed(7))
        assert digest(out.numpy().tobytes()) == PINNED[name][i], (name, shape, channels_last, dim)


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

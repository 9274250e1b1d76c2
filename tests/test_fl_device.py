"""The run's device, the on-device data path, augmentation, resume and the forecast (issue 18).

CI has no GPU: the device test runs on the CPU with torch's default device switched to ``meta``
so that any tensor the loop creates without naming the run's device lands on ``meta`` and the
dispatch-mode guard sees it."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fl_standins import TinyNet, blobs
from workloads.fl.dataset import Dataset
from workloads.fl.dataset import NORMALIZATION
from workloads.fl.execution import DeviceData, Execution, random_crop_flip, resolve_device
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl import loop
from workloads.fl.loop import RunPlan, forecast, planned_samples
from workloads.fl.methods import parse_method
from workloads.fl.partition import dirichlet_partition
from workloads.models import Head

TRAIN, TEST = blobs(120), blobs(40, seed=1)
PARTS = dirichlet_partition(TRAIN.y.numpy(), 3, 0.5, min_size=5, seed=0)
CFG = FLConfig(dataset="blobs", num_clients=3, rounds=2, participation=1.0)
HP = Hparams(declared=(*parse_method("ffc").knobs, *parse_method("ccvr").knobs),
             lr=0.05, local_epochs=1, batch_size=16, ffc_ridge=1e-3,  # ridge: dead ReLU features
             ccvr_virtual_per_class=20, ccvr_epochs=2)
EVERY_PATH = ["fedavg", "fedprox", "fednova", "fedopt", "fedavgm", "fedcos", "fedbabu", "doublehead",
              "spherefed+ffc", "fedavg+ccvr"]


def run(name, *, train=TRAIN, test=TEST, cfg=CFG, hp=HP, model_fn=None, **kw):
    m = parse_method(name)
    return loop.train(RunPlan(m, model_fn=model_fn or (lambda: TinyNet(head=m.head)), train=train, test=test,
                              parts=PARTS, cfg=cfg, hp=hp, **kw))


def same(a, b):
    assert a.accuracy == b.accuracy and a.accuracy_before_calibration == b.accuracy_before_calibration
    assert a.history == b.history and a.transfers == b.transfers and a.samples_trained == b.samples_trained
    assert a.weights.keys() == b.weights.keys()
    for k in a.weights:
        assert torch.equal(a.weights[k], b.weights[k]), k


class DeviceGuard(TorchDispatchMode):
    """Records every aten op whose tensor arguments or outputs are not on ``device``."""

    def __init__(self, device):
        super().__init__()
        self.device, self.strays, self.ops = torch.device(device), [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        for t in tree_flatten((args, kwargs, out))[0]:
            if isinstance(t, torch.Tensor) and t.device != self.device:
                self.strays.append(f"{func} on {t.device}")
        return out


@pytest.mark.parametrize("name", EVERY_PATH)
def test_every_tensor_of_a_run_is_on_the_runs_device(name):
    guard = DeviceGuard("cpu")
    with torch.device("meta"), guard:  # a factory call without device= would make a meta tensor
        run(name, execution=Execution(device="cpu"))
    assert guard.ops > 1000 and guard.strays == []


def test_the_guard_catches_a_tensor_left_on_the_default_device():
    # a method whose penalty forgets device=: the guard must see it (else the test above cannot fail)
    from workloads.fl.methods import ALGORITHMS
    from workloads.fl.methods.base import FedAvg

    class Careless(FedAvg):
        def penalty(self, model, ctx, hp):
            return torch.zeros(())

    guard = DeviceGuard("cpu")
    old = ALGORITHMS["fedavg"]
    ALGORITHMS["fedavg"] = Careless()
    try:
        with torch.device("meta"), guard, pytest.raises(Exception):
            run("fedavg")
    finally:
        ALGORITHMS["fedavg"] = old
    assert any("meta" in s for s in guard.strays)


def test_resolve_device():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda:0" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="not a device"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA device"):
            resolve_device("cuda:0")


def cifar_like(n, seed):
    """A 'cifar10' split whose float32 pixels are exact decodings of uint8 images, as
    workloads.fl.dataset.to_tensor makes them."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randint(0, 256, (n, 3, 4, 4), generator=g, dtype=torch.uint8)
    norm = NORMALIZATION["cifar10"]
    mean, std = torch.tensor(norm.mean).view(1, 3, 1, 1), torch.tensor(norm.std).view(1, 3, 1, 1)
    x = (u.to(torch.float32) / 255.0 - mean) / std
    return Dataset("cifar10", x, torch.arange(n) % 4, 4, "synthetic uint8 images"), u


class PixelNet(TinyNet):
    def __init__(self, head=Head()):
        super().__init__(head=head)
        self.body[1] = torch.nn.Linear(48, self.feature_dim)


def test_uint8_storage_is_exact_and_gives_the_float_paths_results(monkeypatch):
    monkeypatch.setattr("workloads.fl.execution.UINT8_DEVICE_TYPES", {"cuda", "cpu"})  # as on a GPU
    train, pixels = cifar_like(120, 0)
    test, _ = cifar_like(40, 1)
    held = DeviceData.from_dataset(train, "cpu")
    assert held.uint8 and torch.equal(held.store, pixels)  # 4x smaller, and the very pixels
    assert torch.equal(held.take(torch.arange(120)), train.x)  # decoding reproduces the loader's floats
    as_float = lambda d: Dataset("other", d.x, d.y, d.num_classes, d.note)  # no NORMALIZATION: float32
    assert not DeviceData.from_dataset(as_float(train), "cpu").uint8
    for name in ("fedavg", "spherefed+ffc"):
        head = parse_method(name).head
        same(run(name, train=train, test=test, model_fn=lambda: PixelNet(head)),
             run(name, train=as_float(train), test=as_float(test), model_fn=lambda: PixelNet(head)))


def test_a_resized_split_is_kept_as_float(monkeypatch):
    train, _ = cifar_like(8, 0)
    assert not DeviceData.from_dataset(train, "cpu").uint8  # the CPU uses the loaded float32 as it is
    monkeypatch.setattr("workloads.fl.execution.UINT8_DEVICE_TYPES", {"cuda", "cpu"})
    assert DeviceData.from_dataset(train, "cpu").uint8
    blurred = Dataset("cifar10", train.x * 0.999, train.y, 4, "not exact uint8")
    assert not DeviceData.from_dataset(blurred, "cpu").uint8


def test_random_crop_flip_by_hand():
    x = torch.arange(2 * 1 * 3 * 3, dtype=torch.float32).view(2, 1, 3, 3) + 1
    gen = torch.Generator().manual_seed(0)
    out = random_crop_flip(x, gen, padding=1)
    # redraw the same numbers: row offsets, column offsets, flips, each in [0, 2] / {0, 1}
    g2 = torch.Generator().manual_seed(0)
    rows, cols = torch.randint(0, 3, (2,), generator=g2), torch.randint(0, 3, (2,), generator=g2)
    flips = torch.randint(0, 2, (2,), generator=g2)
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1))
    for b in range(2):
        crop = padded[b, :, rows[b]:rows[b] + 3, cols[b]:cols[b] + 3]
        assert torch.equal(out[b], crop.flip(2) if flips[b] else crop)
    assert torch.equal(random_crop_flip(x, torch.Generator().manual_seed(0), padding=1), out)
    # uint8 pixels pad with 0 (black), as torchvision's RandomCrop(padding=4) does
    u = torch.full((64, 3, 5, 5), 200, dtype=torch.uint8)
    au = random_crop_flip(u, torch.Generator().manual_seed(1))
    assert au.dtype == torch.uint8 and au.shape == u.shape and (au == 0).any() and (au == 200).any()


def test_augmentation_is_seeded_and_off_by_default():
    plain = run("fedavg")
    same(plain, run("fedavg", execution=Execution(augment=False)))
    a, b = run("fedavg", execution=Execution(augment=True)), run("fedavg", execution=Execution(augment=True))
    same(a, b)
    assert a.history != plain.history


@pytest.mark.parametrize("name", ["fedopt+ccvr", "doublehead", "fedcos"])
def test_resume_after_an_interrupted_round_gives_identical_results(tmp_path, name):
    # server momentum (fedopt), CCVR's seeded sampling, clients' local heads (double head) and
    # the previous global state (fedcos) all cross the interruption
    cfg = FLConfig(**{**CFG.__dict__, "rounds": 3, "participation": 0.67})
    whole = run(name, cfg=cfg)

    class Stop(Exception):
        pass

    def stop_after_2(t):
        if t == 2:
            raise Stop

    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(Stop):
        run(name, cfg=cfg, checkpoint=ckpt, after_round=stop_after_2)
    torch.manual_seed(12345)  # the resumed process's RNG state must not matter
    resumed = run(name, cfg=cfg, checkpoint=ckpt, resume=True)
    assert resumed.resumed_after_round == 2
    same(whole, resumed)
    with pytest.raises(ValueError, match="another run"):
        run(name, cfg=cfg, hp=Hparams(**{**HP.__dict__, "lr": 0.01}), checkpoint=ckpt, resume=True)


@pytest.mark.parametrize("name", ["fedavg", "doublehead"])
def test_forecast_counts_the_runs_samples_and_changes_nothing(name):
    before = run(name)
    m = parse_method(name)
    f = forecast(m, model_fn=lambda: TinyNet(head=m.head), train=TRAIN, parts=PARTS, cfg=CFG, hp=HP)
    after = run(name)
    same(before, after)
    assert f.samples == after.samples_trained == planned_samples(PARTS, CFG, HP)
    assert f.samples_per_s > 0 and f.wall_s == f.samples / f.samples_per_s
    assert f"{f.samples:,} samples" in f.line()


def test_throughput_options_run():
    # channels_last needs 4-d inputs: PixelNet on 3x4x4 images; bf16 autocast runs on CPU too
    train, _ = cifar_like(120, 0)
    test, _ = cifar_like(40, 1)
    base = run("fedavg", train=train, test=test, model_fn=lambda: PixelNet())
    cl = run("fedavg", train=train, test=test, model_fn=lambda: PixelNet(), execution=Execution(channels_last=True))
    for k in base.weights:  # a memory format changes no value of a Linear model
        torch.testing.assert_close(cl.weights[k], base.weights[k], rtol=0, atol=1e-6)
    bf = run("fedavg", train=train, test=test, model_fn=lambda: PixelNet(), execution=Execution(bf16=True))
    assert bf.history[-1]["mean_loss"] != base.history[-1]["mean_loss"]  # bf16 changes numerics
    assert abs(bf.history[-1]["mean_loss"] - base.history[-1]["mean_loss"]) < 0.1


def test_the_kernel_environment_names_what_chooses_the_cpu_kernels(monkeypatch):
    from workloads.fl.execution import KERNEL_VARIABLES, kernel_environment

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.delenv("MKL_CBWR", raising=False)
    found = kernel_environment()
    assert found["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert found["torch_threads"] == torch.get_num_threads()
    assert found["environment"]["ONEDNN_MAX_CPU_ISA"] == "AVX2" and "MKL_CBWR" not in found["environment"]
    assert set(found["environment"]) <= set(KERNEL_VARIABLES)

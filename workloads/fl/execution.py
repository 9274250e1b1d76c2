"""Where and how a federated run executes: the device, the on-device data path and the throughput
options. None of this changes what a method computes, except the options marked so below.

* ``resolve_device("auto" | "cpu" | "cuda" | "cuda:N")``: ``auto`` is the current CUDA device when
  torch sees one, else the CPU. Under Ray with ``num_gpus=1`` the worker sees only the GPU Ray
  assigned (``CUDA_VISIBLE_DEVICES``), so ``auto`` and ``cuda`` pick exactly that one. Asking for a
  CUDA device torch cannot see is a ``ValueError`` raised before any work starts.
* ``DeviceData``: one split held once on the run's device. On a GPU, pixels that
  ``workloads.fl.data`` loaded from uint8 files at their native size (CIFAR, TinyImageNet) are
  stored back as uint8 (4x less device memory) when decoding them reproduces the loaded float32
  tensor bit for bit (checked for every sample at load, so the stored form can never change a
  result); anything else (a resized split, digits, a synthetic set) is stored as the float32 it
  was loaded as. On the CPU the loaded float32 tensor itself is used (no copy, and no decoding
  per batch: ``benchmarks/bench_device.py`` measures gathering float32 faster there than
  gathering and decoding uint8). Batches are
  gathered by index on the device and decoded there, ``(u / 255 - mean[c]) / std[c]``, the very
  float32 operations of ``workloads.fl.dataset.to_tensor``.
* ``random_crop_flip``: the CIFAR augmentation of He et al. ("Deep Residual Learning for Image
  Recognition", CVPR 2016, Sec. 4.2: 4-pixel zero padding, a random 32x32 crop, random horizontal
  flip), per sample, on the device, from a seeded generator. SphereFed (Dong et al., ECCV 2022)
  does not say whether its clients augment: off by default, our option (``--augment``). It changes
  numerics (that is its purpose).
* ``number_format`` (default ``fp32``): the number format of the clients' accelerator
  (``accel_sim.formats``: ``bf16``, ``fp16``, ``e4m3``, ``e5m2``, ``bfp_m<m>_g<g>``, each with an
  ``_sr`` suffix for stochastic rounding). Every GEMM operand of local training and of a calibration's
  client statistics is rounded to it, products accumulated in FP32 (``workloads.numerics``,
  docs/numerics.md); it changes numerics (that is its purpose). ``fp32`` rounds nothing: the run is
  bitwise the one without the option.
* ``precision_schedule`` (default none): the clients' number format per round instead of one
  (``workloads.numerics.schedule``: ``1:bfp_m2_g16_sr,11:bfp_m4_g16_sr`` or a shipped name such as
  ``fast``, laid out over the run's rounds by ``execution_of``), each round trained and priced in
  its own format; ``number_format`` stays ``fp32`` beside it.
* ``comm_format`` (default ``fp32``): the format the model, its updates and FedCos's direction
  travel in (``workloads.fl.comm``: rounded when sent, the ledger charging the format's packed
  payload); a cheaper link, and what it costs in accuracy.
* ``server_average`` (default 0: off): the decay of the server's exponential moving average of the
  aggregated models (Li et al., "Low Precision Local Training is Enough for Federated Learning",
  NeurIPS 2024): the average is the global model, evaluated and sent to the clients
  (``workloads.fl.aggregate.moving_average``, docs/numerics.md "Recipes"); it changes numerics.
* Throughput options, all off by default: ``channels_last`` (NHWC memory format for the models and
  image batches), ``bf16`` (``torch.autocast`` with bfloat16 around the forward pass and loss;
  changes numerics), ``compile`` (``torch.compile`` of the client model's forward, reused by
  every client and round; the optimizer step stays eager).
* ``clients_together`` (off by default): a round's clients trained as one batched computation
  (``workloads.fl.together``: stacked models under ``torch.func.vmap``); the same samples, steps,
  generators and method hooks per client, results equal to the sequential loop's to float
  rounding (a grouped convolution reduces in another order); a run it cannot batch (a number
  format, ``bf16``, ``compile``, a method not declared batchable) trains one client after another
  and says so once.
* ``client_threads`` (default 1): a round's clients trained that many at once, each on its own
  thread, copy of the client model and, on a GPU, CUDA stream (``workloads.fl.threads``); the
  sequential loop's own code per client, so the results equal it bit for bit on the CPU. A
  resource, like torch's thread count: recorded in results files, not in a run's identity
  (``RESOURCE_SETTINGS``). Not with ``clients_together`` or ``compile``.
* ``capture_step`` (off by default): each round's local step recorded once and replayed, as a
  CUDA graph on a GPU (``workloads.fl.capture``); on the CPU the same static step runs eagerly,
  equal to the sequential loop bit for bit. A run that cannot record (a number format, ``bf16``,
  a model drawing from torch's global generator) trains as before and says so once. Not with
  ``clients_together``, ``compile`` or ``client_threads``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from typing import Any, Mapping

import torch

from workloads.fl.dataset import NORMALIZATION, Dataset
from workloads.numerics import NumberFormat
from workloads.numerics.schedule import SCHEDULES, format_at, is_schedule, schedule_text, steps_of

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
CROP_PADDING_PX = 4  # He et al. 2016, Sec. 4.2
_CHECK_CHUNK = 4096  # samples decoded at a time when checking the uint8 form
UINT8_DEVICE_TYPES = {"cuda"}  # device types whose DeviceData store exact uint8 images as uint8


@dataclass(frozen=True)
class Execution:
    """How a run executes. ``device`` is a resolved torch device string ("cpu", "cuda:0")."""

    device: str = "cpu"
    augment: bool = False  # random crop (pad 4) + horizontal flip per training batch
    channels_last: bool = False
    bf16: bool = False  # autocast forward + loss in bfloat16
    compile: bool = False  # torch.compile of the client model's forward
    low_precision_weights: bool = False  # GEMM weights stored in number_format, no FP32 master copy
    number_format: str = "fp32"  # the clients' arithmetic: every GEMM operand rounded to it
    comm_format: str = "fp32"  # the model and its updates sent rounded to it, charged its payload
    precision_schedule: str = ""  # the clients' format per round, ROUND:FORMAT,... (empty: number_format every round)
    server_average: float = 0.0  # decay of the server's moving average of the aggregates (0: none)
    client_formats: tuple[str, ...] = ()  # a fleet's: client k's arithmetic, its device class's (empty: all number_format)
    client_widths: tuple[float, ...] = ()  # a fleet's: client k's largest submodel width (empty: all 1; workloads.fl.width)
    clients_together: bool = False  # a round's clients trained as one batched computation (workloads.fl.together)
    client_threads: int = 1  # a round's clients trained this many at once, each on its own thread (workloads.fl.threads)
    capture_step: bool = False  # the local step recorded once a round and replayed, a CUDA graph on a GPU (workloads.fl.capture)
    run_options: tuple[tuple[str, Any], ...] = ()  # (name, value) of every run option set beyond these (run_option)

    def __post_init__(self) -> None:
        fmt = NumberFormat.parse(self.number_format)  # NumberFormatError (a ValueError) names a bad one
        object.__setattr__(self, "number_format", fmt.name)
        object.__setattr__(self, "comm_format", NumberFormat.parse(self.comm_format).name)
        object.__setattr__(self, "client_formats", tuple(NumberFormat.parse(f).name for f in self.client_formats))
        if self.precision_schedule:
            object.__setattr__(self, "precision_schedule", schedule_text(steps_of(self.precision_schedule)))
            if not fmt.is_identity or self.client_formats or self.bf16:
                raise ValueError(f"--precision-schedule {self.precision_schedule} sets the clients' format per round: "
                                 "drop " + ("--bf16" if self.bf16 else "the fleet's per-class formats"
                                            if self.client_formats else f"--number-format {fmt.name}"))
        if self.low_precision_weights and fmt.is_identity and not self.client_formats and not self.precision_schedule:
            raise ValueError("--low-precision-weights stores the clients' weights in their number format: give "
                             "--number-format (bf16, bfp_m4_g16, ...; fp32 has no narrower copy)")
        if not 0.0 <= self.server_average < 1.0:
            raise ValueError(f"server_average = {self.server_average!r}: the moving average's decay is in [0, 1) "
                             "(0: none; Li et al. 2024's code uses 0.9)")
        if any(not 0.0 < w <= 1.0 for w in self.client_widths):
            raise ValueError(f"client widths {list(self.client_widths)}: each is in (0, 1] (1: the full model)")
        if self.client_threads < 1:
            raise ValueError(f"--client-threads {self.client_threads}: give 1 (one client after another) or more")
        if self.client_threads > 1 and (self.clients_together or self.compile):
            raise ValueError(f"--client-threads {self.client_threads} and "
                             f"{'--clients-together' if self.clients_together else '--compile'} both choose how the "
                             "clients train: drop one (docs/fl.md, \"Clients at once\")")
        if self.capture_step and (self.clients_together or self.compile or self.client_threads > 1):
            other = ("--clients-together" if self.clients_together else "--compile" if self.compile
                     else f"--client-threads {self.client_threads}")
            raise ValueError(f"--capture-step and {other} both choose how the clients train: drop one (docs/fl.md, "
                             "\"A recorded step\")")
        if self.bf16 and not fmt.is_identity:
            raise ValueError(f"--bf16 (autocast) and --number-format {fmt.name} both set the arithmetic: drop one "
                             f"(--number-format bf16 rounds every GEMM operand to bfloat16 and accumulates in FP32)")

    @property
    def arithmetic(self) -> NumberFormat:
        return NumberFormat.parse(self.number_format)

    @property
    def rounds_arithmetic(self) -> bool:
        """Whether local training rounds its operands in some round or for some client: a number
        format, a precision schedule, or a fleet's per-class formats."""
        return bool(self.precision_schedule or self.client_formats or not self.arithmetic.is_identity)

    def arithmetic_of_client(self, client: int, round: int = 1) -> NumberFormat:
        """Client ``client``'s arithmetic in round ``round``: its device class's format in a fleet
        that declares one (``client_formats``), the schedule's for that round
        (``precision_schedule``, ``schedule.format_at``), else the run's."""
        if self.client_formats:
            return NumberFormat.parse(self.client_formats[client])
        return NumberFormat.parse(self.format_of_round(round))

    def width_of_client(self, client: int) -> float:
        """Client ``client``'s largest submodel width (``client_widths``; 1 where none is given):
        what a width-scaled method (HeteroFL, FjORD) trains it at; other methods train the full model."""
        return float(self.client_widths[client]) if self.client_widths else 1.0

    def format_of_round(self, round: int) -> str:
        """The clients' format in round ``round`` (a fleet's per-class formats aside)."""
        return format_at(steps_of(self.precision_schedule), round) if self.precision_schedule else self.number_format

    def round_formats(self, rounds: int) -> tuple[str, ...]:
        """The clients' format in each of rounds 1..``rounds`` and the calibration round after them
        (index t - 1: round t); () without a schedule."""
        return tuple(self.format_of_round(t) for t in range(1, rounds + 2)) if self.precision_schedule else ()

    @property
    def communication(self) -> NumberFormat:
        return NumberFormat.parse(self.comm_format)

    def settings(self) -> dict:
        """The options as a dict, for identities (checkpoint fingerprints, study points) and results
        files: ``number_format`` and ``comm_format`` only where they are not ``fp32``, so that runs
        from before number formats keep their identity."""
        return {k: dict(v) if k == "run_options" else list(v) if isinstance(v, tuple) else v
                for k, v in asdict(self).items()
                if not (k in FORMAT_SETTINGS and v == "fp32") and not (k in RECIPE_SETTINGS and not v)
                and k not in RESOURCE_SETTINGS}

    def run_option(self, name: str, default: Any = None) -> Any:
        """The value of a run option that no field here holds (``run_options``: a field added to
        ``bench.lib.spec.RunSpec``, carried here by its declaration alone), else ``default``; what
        the code acting on a new option reads (docs/cli.md, "Adding a run option")."""
        return dict(self.run_options).get(name, default)

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return torch.bfloat16 if self.bf16 else None

    def describe(self) -> dict:
        """What results files record: the options and the device's name."""
        return {"device": self.device, "device_name": device_name(self.torch_device), "augment": self.augment,
                "channels_last": self.channels_last, "bf16": self.bf16, "compile": self.compile,
                "number_format": self.number_format, "comm_format": self.comm_format,
                "low_precision_weights": self.low_precision_weights, "server_average": self.server_average,
                "clients_together": self.clients_together, "client_threads": self.client_threads,
                "capture_step": self.capture_step,
                **({"precision_schedule": self.precision_schedule} if self.precision_schedule else {}),
                **({"client_formats": list(self.client_formats)} if self.client_formats else {}),
                **({"client_widths": list(self.client_widths)} if self.client_widths else {}),
                **({"run_options": dict(self.run_options)} if self.run_options else {})}


KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_CBWR", "OMP_NUM_THREADS")
"""Environment variables that choose the CPU kernels a run computes with (docs/results.md,
"Reproducibility across machines")."""


def kernel_environment() -> dict:
    """What selects this process's CPU kernels: the instruction set PyTorch dispatches to, its
    thread count, and the variables of ``KERNEL_VARIABLES`` that are set. Two machines that differ
    here may train the same seed to different accuracies (docs/results.md)."""
    import os

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads(),
            "environment": {k: os.environ[k] for k in KERNEL_VARIABLES if k in os.environ}}


def resolve_device(text: str) -> str:
    """``auto | cpu | cuda | cuda:N`` -> a concrete device string; one-line ValueError otherwise."""
    choice = str(text).strip().lower()
    if choice == "auto":
        return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
    if choice == "cpu":
        return "cpu"
    try:
        dev = torch.device(choice)
    except RuntimeError:
        dev = None
    if dev is None or dev.type != "cuda":
        raise ValueError(f"--device {text!r} is not a device: use {DEVICE_CHOICES}")
    if not torch.cuda.is_available():
        raise ValueError(f"--device {text}: torch {torch.__version__} sees no CUDA device here; "
                         "use --device cpu (or auto)")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if index >= torch.cuda.device_count():
        raise ValueError(f"--device {text}: only {torch.cuda.device_count()} CUDA device(s) visible "
                         f"(cuda:0..cuda:{torch.cuda.device_count() - 1})")
    return f"cuda:{index}"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return platform.processor() or platform.machine() or "cpu"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (for honest wall-clock timing)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class DeviceData:
    """One split on the run's device: ``store`` (uint8 pixels or float32 inputs), labels, and the
    per-channel constants that decode uint8 pixels (None for float storage)."""

    store: torch.Tensor
    y: torch.Tensor
    mean: torch.Tensor | None = None  # float32 [1, C, 1, 1]
    std: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.y)

    @property
    def uint8(self) -> bool:
        return self.store.dtype == torch.uint8

    @classmethod
    def from_dataset(cls, data: Dataset, device: torch.device | str) -> "DeviceData":
        device = torch.device(device)
        y = data.y.to(device)
        pixels = exact_uint8(data) if device.type in UINT8_DEVICE_TYPES else None
        if pixels is None:
            return cls(data.x.to(device), y)
        norm = NORMALIZATION[data.name]
        mean = torch.tensor(norm.mean, dtype=torch.float32, device=device).view(1, 3, 1, 1)
        std = torch.tensor(norm.std, dtype=torch.float32, device=device).view(1, 3, 1, 1)
        return cls(pixels.to(device), y, mean, std)

    def decode(self, raw: torch.Tensor) -> torch.Tensor:
        """Stored form -> the float32 inputs the models see."""
        if not self.uint8:
            return raw
        return (raw.to(torch.float32) / 255.0 - self.mean) / self.std

    def take(self, idx: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Inputs of samples ``idx`` (a device index tensor), augmented when ``generator`` is given."""
        raw = self.store[idx]
        if generator is not None:
            raw = random_crop_flip(raw, generator)
        return self.decode(raw)


def exact_uint8(data: Dataset) -> torch.Tensor | None:
    """The uint8 pixels that decode to exactly ``data.x``, or None when there are none."""
    norm = NORMALIZATION.get(data.name)
    x = data.x
    if norm is None or x.dtype != torch.float32 or x.dim() != 4 or x.shape[1] != 3:
        return None
    mean = torch.tensor(norm.mean, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(norm.std, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    out = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    for s in range(0, len(x), _CHECK_CHUNK):
        chunk = x[s:s + _CHECK_CHUNK]
        pixels = ((chunk * std + mean) * 255.0).round().clamp(0, 255).to(torch.uint8)
        if not torch.equal((pixels.to(torch.float32) / 255.0 - mean) / std, chunk):
            return None  # resized or otherwise not an exact uint8 image: keep float32
        out[s:s + _CHECK_CHUNK] = pixels
    return out


def random_crop_flip(x: torch.Tensor, generator: torch.Generator, padding: int = CROP_PADDING_PX) -> torch.Tensor:
    """Per sample of ``x`` [B, C, H, W]: zero-pad by ``padding``, crop H x W at a random offset,
    flip horizontally with probability 1/2 (He et al. 2016, Sec. 4.2). Draws, in this order,
    B row offsets, B column offsets and B flips from ``generator`` (on ``x``'s device)."""
    b, c, h, w = x.shape
    dev = x.device
    padded = torch.nn.functional.pad(x, (padding, padding, padding, padding))
    rows = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=dev)
    cols = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=dev)
    flip = torch.randint(0, 2, (b,), generator=generator, device=dev).bool()
    row_idx = rows[:, None] + torch.arange(h, device=dev)  # [B, H]
    col_idx = cols[:, None] + torch.arange(w, device=dev)  # [B, W]
    col_idx = torch.where(flip[:, None], col_idx.flip(1), col_idx)
    return padded[torch.arange(b, device=dev)[:, None, None, None], torch.arange(c, device=dev)[None, :, None, None],
                  row_idx[:, None, :, None], col_idx[:, None, None, :]]


OPTIONS = ("augment", "channels_last", "bf16", "compile", "low_precision_weights",
           "clients_together", "capture_step")  # a preset's [execution] switches
RECIPE_SETTINGS = ("client_formats", "client_widths", "low_precision_weights", "server_average", "precision_schedule", "clients_together",
                   "capture_step", "run_options")
"""Recorded in a run's identity only where set, so that runs from before them keep theirs."""
FORMAT_SETTINGS = ("number_format", "comm_format")
RESOURCE_SETTINGS = ("client_threads",)
"""How much of the machine a run uses, not what it computes (the results are the same bit for bit):
recorded in results files (``describe``), never in a run's identity (``settings``), so that a run
resumes, and a study reuses it, whatever it is set to."""
DECAY_SETTINGS = ("server_average",)  # a number in [0, 1)
SCHEDULE_SETTINGS = ("precision_schedule",)  # a schedule's text or a shipped name (workloads.numerics.schedule)
SETTINGS = (*OPTIONS, *FORMAT_SETTINGS, *DECAY_SETTINGS, *SCHEDULE_SETTINGS)  # what [execution] may set


def preset_options(table: object, *, where: str) -> dict[str, bool | str]:
    """A preset's ``[execution]`` table checked: a subset of ``SETTINGS``, each switch true or false,
    ``number_format`` a format's name."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: execution must be a table ([execution]) of {', '.join(SETTINGS)}")
    for key, value in table.items():
        if key not in SETTINGS:
            raise ValueError(f"{where} [execution]: unknown key {key!r}; known keys: {list(SETTINGS)} "
                             "(the device is a flag, --device, not a preset setting)")
        if key in FORMAT_SETTINGS:
            if not isinstance(value, str):
                raise ValueError(f"{where} [execution]: {key} = {value!r} must be a format's name (\"bf16\")")
            try:
                NumberFormat.parse(value)
            except ValueError as err:
                raise ValueError(f"{where} [execution]: {err}") from None
        elif key in SCHEDULE_SETTINGS:
            if not isinstance(value, str):
                raise ValueError(f"{where} [execution]: {key} = {value!r} must be text (\"1:bfp_m2_g16,11:bfp_m4_g16\" "
                                 "or \"fast\")")
            try:
                if value.strip() not in SCHEDULES:  # a shipped one is laid out over the run's rounds later
                    steps_of(value)
            except ValueError as err:
                raise ValueError(f"{where} [execution]: {err}") from None
        elif key in DECAY_SETTINGS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"{where} [execution]: {key} = {value!r} must be a decay in [0, 1) (0.9; 0: none)")
        elif not isinstance(value, bool):
            raise ValueError(f"{where} [execution]: {key} = {value!r} must be true or false")
    return dict(table)


def clients_computing(execution: Execution, name: str, rounds: int) -> Execution:
    """``execution`` with the clients computing in ``name`` (a study setting's number format): a
    format's name, or a precision schedule laid out over the run's ``rounds``
    (``schedule.is_schedule``), either one replacing the other."""
    if is_schedule(name):
        return replace(execution, number_format="fp32", precision_schedule=schedule_text(steps_of(name, rounds)))
    return replace(execution, number_format=name, precision_schedule="")


def execution_of(device: str = "auto", flags: Mapping[str, bool | str | None] | None = None,
                 preset: Mapping[str, bool | str] | None = None, *, rounds: int | None = None) -> Execution:
    """The ``Execution`` of ``device`` and the option ``flags`` given (None: not given) over a
    preset's ``[execution]`` options (a flag given wins). The device is resolved now, so a CUDA
    device that is not there fails before any work starts. ``rounds``: the run's, over which a
    precision schedule is laid out and checked (``schedule.steps_of``)."""
    flags, preset = flags or {}, preset or {}
    formats = {k: preset.get(k, "fp32") if flags.get(k) is None else flags[k] for k in FORMAT_SETTINGS}
    given = {k: f"--{k.replace('_', '-')}" if flags.get(k) is not None else f"the preset's [execution] {k}"
             for k in SETTINGS}  # where each value came from: an error names what the user wrote
    for key, name in formats.items():
        try:
            NumberFormat.parse(name)
        except ValueError as err:
            raise ValueError(f"{given[key]}: {err}") from None
    bf16 = preset.get("bf16", False) if flags.get("bf16") is None else flags["bf16"]
    if bf16 and not NumberFormat.parse(formats["number_format"]).is_identity:
        raise ValueError(f"{given['bf16']} (autocast) and {given['number_format']} {formats['number_format']} both "
                         "set the arithmetic: drop one (number format bf16 rounds every GEMM operand to bfloat16 "
                         "and accumulates in FP32)")
    decays = {k: float(preset.get(k, 0.0) if flags.get(k) is None else flags[k]) for k in DECAY_SETTINGS}
    for key, value in decays.items():
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{given[key]} {value:g}: the moving average's decay is in [0, 1) (0.9; 0: none)")
    schedule = preset.get("precision_schedule", "") if flags.get("precision_schedule") is None \
        else flags["precision_schedule"]
    if schedule:
        try:
            schedule = schedule_text(steps_of(schedule, rounds))
        except ValueError as err:
            raise ValueError(f"{given['precision_schedule']}: {err}") from None
        if not NumberFormat.parse(formats["number_format"]).is_identity:
            raise ValueError(f"{given['precision_schedule']} and {given['number_format']} {formats['number_format']} "
                             "both set the clients' format: drop one (a schedule names every round's)")
    return Execution(device=resolve_device(device), **formats, **decays, precision_schedule=schedule,
                     **{k: bool(preset.get(k, False) if flags.get(k) is None else flags[k]) for k in OPTIONS})

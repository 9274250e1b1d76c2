"""The space file of ``python -m bench.dse`` (docs/dse.md): what to price and on which points.

```toml
[dse]
models = ["mobilenetv2"]                     # paper models or package.module:factory (docs/byom.md)
methods = ["fedavg", "spherefed", "ccvr", "ffc"]
batch_size = 64                              # the priced step's batch
classes = 100                                # the classifier's classes (CIFAR-100's, as bench.run prices)
image_size = 32                              # a paper model's input: 3 x S x S
hw = "configs/hw/paper_default.toml"         # optional: the base every axis varies (default: the paper's)
device = "configs/devices/xc7vx485t.toml"    # optional: the FPGA a point must fit (default: the paper's board)
cost_table = "horowitz45"                    # optional: the published table MACs are priced from
                                             # (accel_sim.cost_tables; default: the hw file's, else horowitz45)

[space]                                      # accel_sim.space: axes over HardwareConfig fields, constraints
constraints = ["rows * cols <= 4096"]
[space.axes]
rows = [16, 32, 64]
```

Every key is checked before any capture; a bad one is one ``DseError`` line naming the file, the
key and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_sim.hardware import HardwareConfig, HardwareConfigError, load_hardware_config
from accel_sim.formats import NumberFormatError
from accel_sim.resources import FpgaDevice, ResourceModelError, load_device
from accel_sim.space import DEFAULT_MAX_POINTS, Space, SpaceError, space_from_dict
from iokit import checks
from iokit.toml import read_toml
from workloads.fl.methods import distinct_methods, is_calibration, parse_method

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DEVICE = ROOT / "configs" / "devices" / "xc7vx485t.toml"
DSE_KEYS = ("models", "methods", "batch_size", "classes", "image_size", "hw", "device", "cost_table")
IMAGE_SIZES = (16, 32, 64)


class DseError(ValueError):
    """A space file that cannot be explored; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Dse:
    """A resolved space file."""

    name: str
    models: tuple[str, ...]
    methods: tuple[str, ...]  # training methods (any FL method) and calibrations (ccvr, ffc)
    batch_size: int
    classes: int
    image_size: int
    base: HardwareConfig
    hw_path: str | None
    device: FpgaDevice
    device_path: str
    space: Space
    space_table: Mapping[str, Any]

    def config(self) -> dict[str, Any]:
        """The resolved file as plain data (hashed for the results folder, recorded in summary.json)."""
        return {"name": self.name, "models": list(self.models), "methods": list(self.methods),
                "batch_size": self.batch_size, "classes": self.classes, "image_size": self.image_size,
                "hw": self.hw_path, "device": self.device_path, "cost_table": self.base.cost_table,
                "space": self.space.describe()}


def check_method(name: Any, where: str) -> str:
    """A training method (``fedavg``, ``fedprox+spherefed``, ...) or a calibration (``ccvr``, ``ffc``)."""
    try:
        if isinstance(name, str) and is_calibration(name):
            return name
        method = parse_method(name) if isinstance(name, str) else None
    except ValueError as err:
        raise DseError(f"{where}: {err}") from None
    if method is None or method.calibration:
        raise DseError(f"{where}: {name!r} is not a training method or a calibration; give e.g. fedavg, spherefed, "
                       f"fedprox, ccvr or ffc (a calibration is priced on its own: ccvr, not fedavg+ccvr)")
    return name


def load_dse(path: str | Path, *, max_points: int = DEFAULT_MAX_POINTS, stream: bool = False,
             cost_table: str | None = None) -> Dse:
    """Read and check the space file ``path`` (module doc); ``cost_table`` (``--cost-table``) replaces
    the file's."""
    doc = read_toml(path, DseError, "design space")
    where = str(path)
    checks.unknown_keys(doc, ("dse", "space"), where=where, error=DseError)
    table = doc.get("dse")
    if not isinstance(table, dict):
        raise DseError(f"{where}: a design-space file needs a [dse] table (models, methods, batch_size, ...)")
    if not isinstance(doc.get("space"), dict):
        raise DseError(f"{where}: a design-space file needs a [space] table with [space.axes] (docs/dse.md)")
    checks.unknown_keys(table, DSE_KEYS, where=f"{where} [dse]", error=DseError)
    models = table.get("models", ["mobilenetv2"])
    methods = table.get("methods", ["fedavg", "spherefed", "ccvr", "ffc"])
    for key, values in (("models", models), ("methods", methods)):
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v.strip() for v in values):
            raise DseError(f"{where} [dse]: {key} must be a non-empty list of names, got {values!r}")
        checks.distinct(values, name=f"{where} [dse] {key}", error=DseError)
    methods = [check_method(m, f"{where} [dse] methods") for m in methods]
    distinct_methods(methods, name=f"{where} [dse] methods", error=DseError)  # one method under two spellings
    batch = checks.integer_in(table.get("batch_size", 64), 1, checks.BATCH_SIZE_MAX, name="batch_size", error=DseError)
    classes = checks.integer_in(table.get("classes", 100), 2, checks.CLASSES_MAX, name="classes", error=DseError)
    image_size = table.get("image_size", 32)
    if image_size not in IMAGE_SIZES or isinstance(image_size, bool):
        raise DseError(f"{where} [dse]: image_size = {image_size!r}; give one of {', '.join(map(str, IMAGE_SIZES))}")
    hw_path, device_path = table.get("hw"), table.get("device", str(DEFAULT_DEVICE.relative_to(ROOT)))
    try:
        base = load_hardware_config(_near(hw_path, path)) if hw_path is not None else HardwareConfig()
        table_name = cost_table if cost_table is not None else table.get("cost_table")
        if table_name is not None:
            base = base.with_(cost_table=table_name)
        device = load_device(_near(device_path, path))
        space = space_from_dict(doc["space"], base, max_points=max_points, stream=stream)
    except (HardwareConfigError, ResourceModelError, NumberFormatError) as err:
        raise DseError(f"{where}: {err}") from None
    except SpaceError as err:
        raise DseError(f"{where}: {err}") from None
    return Dse(Path(path).stem, tuple(models), tuple(methods), batch, classes, image_size, base, hw_path, device,
               str(device_path), space, doc["space"])


def _near(name: Any, space_file: str | Path) -> Path:
    """A file named in the space file: as given (relative to the current folder), else beside the space
    file, else under the checkout (``configs/...``)."""
    if not isinstance(name, str) or not name.strip():
        raise DseError(f"{space_file} [dse]: a file name must be a non-empty string, got {name!r}")
    for candidate in (Path(name), Path(space_file).parent / name, ROOT / name):
        if candidate.is_file():
            return candidate
    return Path(name)  # the reader names it as missing

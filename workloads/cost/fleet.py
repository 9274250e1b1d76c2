"""A fleet of real devices: which accelerator, memory, link and availability each client has, and
which of a round's sampled clients arrive before the round closes. Torch-free and pure.

A fleet file (``configs/fleets/*.toml``, docs/fleets.md) declares device classes, each a hardware
TOML (a ``configs/hw/`` preset or a ``python -m bench.dse --write-hw`` point), its on-device memory,
its link and its availability, with a share of the clients; and the round's rule: a deadline and
an over-commitment factor. Clients are assigned to classes from the run's seed (or listed one by
one), so the same seed gives the same fleet.

The round with a deadline and over-commitment, who takes part in it and what it costs:
``workloads.cost.participation``.

"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from accel_sim.formats import NumberFormat
from accel_sim.hardware import HardwareConfig, HardwareConfigError, load_hardware_config
from iokit import checks
from iokit.cli import is_default
from iokit.toml import read_toml
from workloads.cost.system import Link, SystemModelError

FLEET_DIR = Path(__file__).resolve().parents[2] / "configs" / "fleets"
"""Fleet files shipped with the suite; ``--fleet NAME`` names one of them."""
ASSIGN_STREAM = 0xF1EE7  # numpy seed part of the client-to-class permutation: (seed, ASSIGN_STREAM)
SHARE_TOLERANCE = 1e-9  # shares must sum to one within this
OVERCOMMIT_BOUNDS = (1.0, 10.0)  # our choice: Bonawitz et al. select ~1.3x; 10x is far past any deployment
MEMORY_BYTES_BOUNDS = (1.0, 1e15)  # a positive byte count (or inf: no limit)
DEADLINE_S_BOUNDS = (1e-9, 1e9)  # a positive number of seconds (or inf: no deadline)
PERIOD_ROUNDS_MAX = 100_000
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
CLASS_KEYS = ("hw", "memory_bytes", "share", "downlink_bytes_per_s", "uplink_bytes_per_s", "latency_s",
              "availability", "number_format", "width")
ROUND_KEYS = ("deadline_s", "overcommit")
TOP_KEYS = ("name", "round", "classes", "assignment")


class FleetError(ValueError):
    """A fleet file that cannot be used; the message names the file, the key and the fix."""


# ---- availability ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Availability:
    """When a device is online: ``always``; with ``probability`` p each round, drawn independently
    per client and round from the run's seed; or a day/night pattern of ``period_rounds`` rounds of
    which ``online_rounds`` are online, each client at its own phase (its time zone) drawn from the
    seed."""

    probability: float = 1.0
    period_rounds: int = 0  # 0: no day/night pattern
    online_rounds: int = 0

    def __post_init__(self) -> None:
        checks.number_in(self.probability, 0.0, 1.0, name="availability probability", error=FleetError,
                         low_open=True)
        if self.period_rounds:
            checks.integer_in(self.period_rounds, 1, PERIOD_ROUNDS_MAX, name="availability period_rounds",
                              error=FleetError)
            checks.integer_in(self.online_rounds, 1, self.period_rounds, name="availability online_rounds",
                              error=FleetError)

    @property
    def label(self) -> str:
        if self.period_rounds:
            return f"online {self.online_rounds} of every {self.period_rounds} rounds"
        return "always" if self.probability == 1.0 else f"online with probability {self.probability:g} per round"


ALWAYS = Availability()


def availability_of(value: Any, where: str) -> Availability:
    """``"always"``, ``{probability = p}`` or ``{period_rounds = P, online_rounds = N}``."""
    if value == "always":
        return ALWAYS
    if not isinstance(value, Mapping):
        raise FleetError(f"{where}: availability = {value!r}; give \"always\", {{probability = 0.8}} or "
                         "{period_rounds = 24, online_rounds = 8}")
    checks.unknown_keys(value, ("probability", "period_rounds", "online_rounds"), where=f"{where}.availability",
                        error=FleetError)
    if "probability" in value and ("period_rounds" in value or "online_rounds" in value):
        raise FleetError(f"{where}.availability: give either probability or period_rounds and online_rounds")
    if ("period_rounds" in value) != ("online_rounds" in value):
        raise FleetError(f"{where}.availability: a day/night pattern needs both period_rounds and online_rounds")
    if "period_rounds" in value:  # a pattern given is a pattern: period_rounds = 0 is not "always"
        checks.integer_in(value["period_rounds"], 1, PERIOD_ROUNDS_MAX, name=f"{where}.availability period_rounds",
                          error=FleetError)
    try:
        return Availability(**value)
    except FleetError as e:
        raise FleetError(f"{where}: {e}") from None


# ---- the fleet ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceClass:
    """One kind of device: its accelerator, memory, link, availability and share of the clients."""

    name: str
    hw_path: str  # as the fleet file names it
    hw: HardwareConfig = field(repr=False)
    memory_bytes: float  # on-device memory for training (inf: no limit)
    link: Link
    availability: Availability = ALWAYS
    share: float | None = None  # None: the fleet lists its clients (``Fleet.assignment``)
    number_format: str | None = None  # the class's arithmetic (accel_sim.formats); None: the run's
    width: float | str | None = None  # a width-scaled method's submodel width, or "auto" (workloads.cost.widths)

    def format_in(self, run_format: str) -> str:
        """The format this class's clients train and are priced in: its own, else the run's."""
        return self.number_format or run_format


@dataclass(frozen=True)
class Fleet:
    """Device classes and the round's rule (``deadline_s``: inf for none; ``overcommit`` >= 1)."""

    name: str
    classes: tuple[DeviceClass, ...]
    deadline_s: float = math.inf
    overcommit: float = 1.0
    assignment: tuple[str, ...] = ()  # client k's class name; empty: drawn from the shares and the seed
    overridden: tuple[str, ...] = ()  # the [round] keys a run set instead of the file (``with_round``)

    def describe(self) -> dict:
        """The fleet as results files record it (JSON: infinities as ``"inf"``); ``overridden`` names
        the round keys a run set instead of the file's (only where there are some: a run that
        overrides nothing keeps its record, and so its config hash)."""
        def finite(value):
            return "inf" if isinstance(value, float) and math.isinf(value) else value

        doc = {"name": self.name, "deadline_s": finite(self.deadline_s), "overcommit": self.overcommit,
               "assignment": list(self.assignment),
               "classes": {c.name: {"hw": c.hw_path, "memory_bytes": finite(c.memory_bytes), "share": c.share,
                                    "downlink_bytes_per_s": finite(c.link.downlink_bytes_per_s),
                                    "uplink_bytes_per_s": finite(c.link.uplink_bytes_per_s),
                                    "latency_s": c.link.latency_s, "availability": c.availability.label,
                                    **({"number_format": c.number_format} if c.number_format else {}),
                                    **({"width": c.width} if c.width is not None else {})}
                           for c in self.classes}}
        return {**doc, "overridden": list(self.overridden)} if self.overridden else doc

    @property
    def sets_every_format(self) -> bool:
        """Whether every class declares its number format: then no client computes in the run's own
        (``client_formats``), and a run's format other than FP32 is a setting no client follows."""
        return all(c.number_format for c in self.classes)

    def check_run_format(self, number_format: str, precision_schedule: str | None, source: str) -> None:
        """A run's arithmetic (``number_format``, or a ``precision_schedule``; ``source`` names where it
        was given) that no client of this fleet would follow is refused (FleetError): results would record
        a format nobody trained in. FP32, the default, is the run's format by default, not a choice."""
        given = precision_schedule or (number_format if number_format != "fp32" else None)
        if given and self.sets_every_format:
            formats = ", ".join(f"{c.name} {c.number_format}" for c in self.classes)
            raise FleetError(f"{source} {given}: every class of fleet {self.name!r} sets its own number format "
                             f"({formats}), so no client would compute in {given}; leave it out (or leave a class's "
                             "number_format out, for its clients to compute in the run's)")

    def check_clients(self, num_clients: int, source: str = "--fleet") -> None:
        """An explicit assignment must list every client of the run, no more."""
        if self.assignment and len(self.assignment) != num_clients:
            raise FleetError(f"{source}: fleet {self.name!r} lists {len(self.assignment)} client(s) in 'assignment' "
                             f"but the run has {num_clients}; list one class per client or give shares instead")


def _positive_or_inf(value: Any, bounds: tuple[float, float], name: str, where: str) -> float:
    if isinstance(value, float) and value == math.inf:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not value > 0:
        raise FleetError(f"{where}: {name} = {value!r} must be > 0 (or inf)")
    try:
        return float(checks.number_in(value, *bounds, name=name, error=FleetError))
    except FleetError as e:
        raise FleetError(f"{where}: {e} (or inf)") from None


def _device_class(name: str, table: Any, *, folder: Path, where: str, listed: bool) -> DeviceClass:
    if not isinstance(table, Mapping):
        raise FleetError(f"{where}: [classes.{name}] must be a table")
    if not SAFE_NAME.fullmatch(name):
        raise FleetError(f"{where}: class name {name!r}: use letters, digits, '_', '.', '-'")
    at = f"{where} [classes.{name}]"
    checks.unknown_keys(table, CLASS_KEYS, where=at, error=FleetError)
    for key in ("hw", "memory_bytes", "downlink_bytes_per_s", "uplink_bytes_per_s", "latency_s"):
        if key not in table:
            raise FleetError(f"{at}: '{key}' is missing (docs/fleets.md lists every key)")
    if listed and "share" in table:
        raise FleetError(f"{at}: 'share' given beside a fleet 'assignment'; give one or the other")
    if not listed and "share" not in table:
        raise FleetError(f"{at}: 'share' is missing (each class's fraction of the clients; they sum to 1)")
    hw_path = table["hw"]
    if not isinstance(hw_path, str) or not hw_path:
        raise FleetError(f"{at}: hw = {hw_path!r} must name a hardware TOML (a configs/hw/ preset or a "
                         "bench.dse --write-hw point)")
    try:
        hw = load_hardware_config(resolve_hw_path(hw_path, folder))
    except HardwareConfigError as e:
        raise FleetError(f"{at}: hw: {e}") from None
    memory = _positive_or_inf(table["memory_bytes"], MEMORY_BYTES_BOUNDS, "memory_bytes", at)
    try:
        link = Link(table["downlink_bytes_per_s"], table["uplink_bytes_per_s"], table["latency_s"])
    except SystemModelError as e:
        raise FleetError(f"{at}: {e}") from None
    availability = availability_of(table.get("availability", "always"), at)
    share = None
    if not listed:
        try:
            share = float(checks.number_in(table["share"], 0.0, 1.0, name="share", error=FleetError, low_open=True))
        except FleetError as e:
            raise FleetError(f"{at}: {e}") from None
    number_format = None
    if "number_format" in table:
        try:
            number_format = NumberFormat.parse(table["number_format"]).name
        except ValueError as e:
            raise FleetError(f"{at}: number_format: {e}") from None
    return DeviceClass(name, hw_path, hw, memory, link, availability, share, number_format,
                       class_width(table["width"], at) if "width" in table else None)


def class_width(value: Any, where: str) -> float | str:
    """A class's ``width``: a number in (0, 1] (its submodel's, HeteroFL's rate r, FjORD's p_max) or
    ``"auto"`` (the widest of the method's declared widths that fits and meets the deadline)."""
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise FleetError(f"{where}: width = {value!r}; give a number in (0, 1] (1: the full model) or \"auto\"")
    return float(value)


def resolve_hw_path(hw_path: str, folder: Path) -> Path:
    """A class's hardware file: a ``configs/hw/`` preset name (``gemmini_like``) or a path, relative
    to the fleet file's folder."""
    preset = Path(__file__).resolve().parents[2] / "configs" / "hw" / f"{hw_path}.toml"
    if "/" not in hw_path and not hw_path.endswith(".toml") and preset.is_file():
        return preset
    path = Path(hw_path)
    return path if path.is_absolute() else folder / path


def fleet_from_dict(data: Mapping[str, Any], source: str = "<fleet>", folder: Path = Path(".")) -> Fleet:
    """A ``Fleet`` from a TOML-shaped dict (docs/fleets.md); ``FleetError`` naming ``source`` and the key."""
    checks.unknown_keys(data, TOP_KEYS, where=source, error=FleetError)
    round_table = data.get("round", {})
    if not isinstance(round_table, Mapping):
        raise FleetError(f"{source}: 'round' must be a table ([round] deadline_s = ..., overcommit = ...)")
    checks.unknown_keys(round_table, ROUND_KEYS, where=f"{source} [round]", error=FleetError)
    deadline = _positive_or_inf(round_table.get("deadline_s", math.inf), DEADLINE_S_BOUNDS, "deadline_s",
                                f"{source} [round]")
    try:
        overcommit = float(checks.number_in(round_table.get("overcommit", 1.0), *OVERCOMMIT_BOUNDS,
                                            name="overcommit", error=FleetError))
    except FleetError as e:
        raise FleetError(f"{source} [round]: {e}") from None
    tables = data.get("classes")
    if not isinstance(tables, Mapping) or not tables:
        raise FleetError(f"{source}: no device classes; add at least one [classes.NAME] table")
    assignment = data.get("assignment", [])
    if not isinstance(assignment, list) or not all(isinstance(a, str) for a in assignment):
        raise FleetError(f"{source}: assignment = {assignment!r} must be a list of class names, one per client")
    listed = bool(assignment)
    classes = tuple(_device_class(name, table, folder=folder, where=source, listed=listed)
                    for name, table in tables.items())
    names = [c.name for c in classes]
    for a in assignment:
        if a not in names:
            hint = checks.closest(a, names)
            raise FleetError(f"{source}: assignment names unknown class {a!r}"
                             + (f" (did you mean {hint!r}?)" if hint else "") + f"; classes: {', '.join(names)}")
    if not listed:
        total = math.fsum(c.share for c in classes)
        if abs(total - 1.0) > SHARE_TOLERANCE:
            raise FleetError(f"{source}: the classes' shares sum to {total:.12g}, not 1 "  # 12 digits: off by > 1e-9, never "1"
                             f"({', '.join(f'{c.name} {c.share!r}' for c in classes)}); make them sum to 1")
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise FleetError(f"{source}: name = {name!r}: use letters, digits, '_', '.', '-'")
    return Fleet(name, classes, deadline, overcommit, tuple(assignment))


def fleet_path(name_or_path: str | Path) -> Path:
    """A fleet under ``configs/fleets/`` by name (``mixed``), or a path."""
    text = str(name_or_path)
    if "/" not in text and not text.endswith(".toml") and (FLEET_DIR / f"{text}.toml").is_file():
        return FLEET_DIR / f"{text}.toml"
    return Path(text)


def load_fleet(name_or_path: str | Path) -> Fleet:
    """Read a fleet file (every hardware file it names loaded and so checked)."""
    path = fleet_path(name_or_path)
    text = str(name_or_path)
    if not path.exists() and "/" not in text and not text.endswith(".toml"):  # a name, not a path
        shipped = sorted(p.stem for p in FLEET_DIR.glob("*.toml"))
        hint = checks.closest(text, shipped)
        raise FleetError(f"fleet {text!r} is not a file nor a fleet under configs/fleets/"
                         + (f" (did you mean {hint!r}?)" if hint else "")
                         + f"; give a fleet file's path or one of {', '.join(shipped)}")
    data = read_toml(path, FleetError, "fleet")
    return fleet_from_dict(data, source=str(path), folder=path.parent)


def with_round(fleet: Fleet, *, deadline_s: float | None = None, overcommit: float | None = None) -> Fleet:
    """``fleet`` with its round rule's ``deadline_s`` and/or ``overcommit`` replaced (None keeps the
    file's), checked as the file's keys are (``FleetError`` naming the flag); the replaced keys are
    recorded in ``overridden``. A deadline sweep over one fleet file: ``--deadline-s`` / grid key
    ``deadline_s`` (docs/fleets.md)."""
    changed = {}
    if deadline_s is not None:
        changed["deadline_s"] = _positive_or_inf(deadline_s, DEADLINE_S_BOUNDS, "deadline_s", "--deadline-s")
    if overcommit is not None:
        try:
            changed["overcommit"] = float(checks.number_in(overcommit, *OVERCOMMIT_BOUNDS, name="overcommit",
                                                           error=FleetError))
        except FleetError as e:
            raise FleetError(f"--overcommit: {e}") from None
    if not changed:
        return fleet
    return replace(fleet, **changed, overridden=tuple(dict.fromkeys((*fleet.overridden, *changed))))


def run_fleet(path: str | Path | None, *, deadline_s: float | None = None,
              overcommit: float | None = None) -> Fleet | None:
    """A run's fleet: the file ``path`` names (None: no fleet) with the run's overrides of its round
    rule (``with_round``). An override without a fleet is a ``FleetError`` naming it: there is no
    round rule to override."""
    if path is None:
        given = [f"{flag} {value:g}" for flag, value in (("--deadline-s", deadline_s), ("--overcommit", overcommit))
                 if value is not None]
        if given:
            raise FleetError(f"{' and '.join(given)}: overrides a fleet's round rule; give --fleet FILE too "
                             "(e.g. --fleet mixed), or leave it out (docs/fleets.md)")
        return None
    return with_round(load_fleet(path), deadline_s=deadline_s, overcommit=overcommit)


def check_fleet_flags(fleet: str | None, system: str | Path) -> None:
    """A fleet gives every client's device and link: it and a ``--system`` file other than the
    default are not combined (``bench.fl``, ``bench.run``, ``bench.flower``; the flags are
    ``bench.lib.spec``'s); the default file typed out is a system file given too (``iokit.cli.Default``
    tells the flag's default from it)."""
    if fleet is not None and system is not None and not is_default(system):
        raise FleetError(f"--fleet {fleet} and --system {system}: a fleet gives every client's device and link; "
                         "leave --system out (or --fleet, for the system model's synchronous rounds)")


# ---- clients to classes -----------------------------------------------------------------------------

def class_counts(shares: Sequence[float], num_clients: int) -> list[int]:
    """Clients per class: ``floor(share x K)``, the rest one each to the largest remainders (ties
    to the earlier class): Hamilton's largest-remainder rule, so the counts sum to K."""
    exact = [s * num_clients for s in shares]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(shares)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:num_clients - sum(counts)]:
        counts[i] += 1
    return counts


def client_formats(fleet: Fleet, classes: Sequence[int], run_format: str) -> tuple[str, ...]:
    """Client k's number format, its class's (``DeviceClass.format_in``), for
    ``Execution.client_formats``; empty when no class declares one (every client in the run's)."""
    if not any(c.number_format for c in fleet.classes):
        return ()
    return tuple(fleet.classes[c].format_in(run_format) for c in classes)


def assign_classes(fleet: Fleet, num_clients: int, *, seed: int) -> tuple[int, ...]:
    """Client k's class index: the fleet's list, or ``class_counts`` clients per class in a random
    order drawn from ``numpy.random.default_rng([seed, ASSIGN_STREAM])`` (the same seed, the same
    fleet)."""
    names = [c.name for c in fleet.classes]
    if fleet.assignment:
        fleet.check_clients(num_clients)
        return tuple(names.index(a) for a in fleet.assignment)
    ordered = [i for i, n in enumerate(class_counts([c.share for c in fleet.classes], num_clients)) for _ in range(n)]
    order = np.random.default_rng([seed, ASSIGN_STREAM]).permutation(num_clients)
    return tuple(ordered[int(j)] for j in order)

"""A hardware design space: axes over ``HardwareConfig`` fields and the MAC number format, constraints
between them, and its points in chunks (so a space larger than memory is priced piece by piece).

Declared as data (the ``[space]`` table a command reads from TOML)::

    axes = {rows = [16, 32, 64],                                  # a list of values
            cols = {start = 16, stop = 128, factor = 2},          # geometric: 16, 32, 64, 128
            "special_unit.norm" = {start = 8, stop = 32, step = 8},   # arithmetic: 8, 16, 24, 32
            dataflow_dw = ["os", "ws"],
            number_format = ["fp32", "bfp_m4_g16"]}
    constraints = ["rows * cols <= 4096", "a_buffer_bytes == b_buffer_bytes"]

An axis is any field path of ``accel_sim.points.FIELD_PATHS`` (sub-tables as ``table.field``), or
``number_format`` (``accel_sim.resources.NumberFormat``), which sets each point's ``word_bytes`` to
the format's storage and its ``energy.mac_pj`` to the format's MAC figure
(``accel_sim.mac_energy.format_mac_pj``, under the point's ``cost_table``; an FP32 point keeps the
base's, as ``hardware_in_format`` does); without it, 4-byte words are FP32 and 2-byte words BF16. Fields
without an axis keep the base config's value. The points are the product of the axes in
row-major order (the last axis fastest): a point's *index* is its place in that product, stable
whatever the constraints, so one point can be rebuilt from its index (``Space.point``).

A constraint is a condition over field paths in a small expression language parsed with
Python's ``ast`` module and evaluated on numpy columns, never ``eval``: names, numbers, quoted
names, ``+ - * / // %``, comparisons (chains too), ``and``, ``or``, ``not``, parentheses. Its
arithmetic is Python's, exactly (``Constraint.evaluate``): integers never wrap (``a_buffer_bytes *
b_buffer_bytes`` of two 4 GiB buffers is 2**64, not 0), a division by zero at any point is an error
naming the constraint, and a name combined with a number (``dataflow_dw + 1``) too. Every part of
a constraint is evaluated at every point (``and`` / ``or`` do not skip their right side).

Everything is checked before any work, each failure one ``SpaceError`` line naming the axis (or
constraint) and the fix: an unknown field, an empty axis, a malformed range, a value outside
``HardwareConfig``'s bounds or choices, an ``energy.mac_pj`` axis beside formats other than
fp32 (they set it), constraints that keep no point, and a space over ``max_points`` unless it is
streamed. The product of the axes' lengths is bounded before any point is enumerated: the
constraints are counted over every point of that product, so it may hold at most
``MAX_GRID_POINTS`` (``GRID_FACTOR`` x ``max_points`` unless streamed).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from accel_sim.hardware import HardwareConfig, HardwareConfigError
from accel_sim.mac_energy import format_mac_pj, hardware_in_format
from accel_sim.points import HardwarePoints, field_kind, field_value, python_value, with_field
from accel_sim.formats import NumberFormat
from accel_sim.resources import ResourceModelError
from accel_sim.space_constraints import AXIS_NAMES, NUMBER_FORMAT, Constraint, SpaceError, compile_constraint

DEFAULT_MAX_POINTS = 1_000_000
"""The most points a space may hold unless the caller streams it (``stream=True``): a million
points' results fit in memory (~100 columns x 8 bytes x 1e6 ~ 1 GB at most)."""
MAX_AXIS_VALUES = 100_000
GRID_FACTOR = 64
"""Without streaming, the product of the axes may hold at most this many times ``max_points``
points before the constraints (the constraints are evaluated at every one of them)."""
MAX_GRID_POINTS = 2**28
"""The most points the product of the axes may hold even when streamed (~2.7e8: counting the
constraints over 2**32 took 119 s on the development machine; 4e19 would never end)."""
CHUNK_POINTS = 16_384
FORMAT_OF_WORD = {4: "fp32", 2: "bf16"}
"""The number format of a point without a ``number_format`` axis, by its word size."""
MAC_PJ = "energy.mac_pj"
"""Set by each point's number format (``mac_pj_column``), as ``word_bytes`` is."""
STORING_FIELDS = ("word_bytes", "element_bits", "operand_copies", "scale_bits_per_value",
                  "energy.rounding_pj_per_value")
"""The fields a ``number_format`` axis sets for each point, as ``hardware_in_format`` does: how the
format stores values (``accel_sim.words``) and what its rounding's random bits cost."""


def storing_columns(formats: np.ndarray, base) -> dict[str, np.ndarray]:
    """``STORING_FIELDS`` of each point from its number format (``hardware_in_format``; an FP32
    point keeps the base's)."""
    distinct = {name: hardware_in_format(base, name) for name in np.unique(formats).tolist()}
    getters = {"word_bytes": lambda hw: hw.word_bytes, "element_bits": lambda hw: hw.element_bits,
               "operand_copies": lambda hw: hw.operand_copies,
               "scale_bits_per_value": lambda hw: hw.scale_bits_per_value,
               "energy.rounding_pj_per_value": lambda hw: hw.energy.rounding_pj_per_value}
    types = {"word_bytes": np.int64, "element_bits": np.int64, "operand_copies": object, "scale_bits_per_value": np.float64,
             "energy.rounding_pj_per_value": np.float64}
    columns = {}
    for path, get in getters.items():
        values = {name: get(hw) for name, hw in distinct.items()}
        columns[path] = np.array([values[f] for f in formats.tolist()], dtype=types[path])
        if path == "operand_copies":
            columns[path] = columns[path].astype(str) if formats.size else np.zeros(0, dtype=str)
    return columns


def mac_pj_column(formats: np.ndarray, fp32_mac_pj, cost_tables) -> np.ndarray:
    """Each point's ``energy.mac_pj``: its number format's MAC figure under its cost table
    (``accel_sim.mac_energy.format_mac_pj``; ``cost_tables`` one name or one per point); an FP32 point
    keeps ``fp32_mac_pj`` (the base's, or its ``energy.mac_pj`` axis value), as ``hardware_in_format``
    keeps an FP32 hardware's."""
    column = np.array(np.broadcast_to(np.asarray(fp32_mac_pj, dtype=np.float64), formats.shape))
    tables = np.broadcast_to(np.asarray(cost_tables, dtype=str), formats.shape)
    for name in np.unique(formats).tolist():
        if not NumberFormat.parse(name).is_identity:
            for table in np.unique(tables[formats == name]).tolist():
                column[(formats == name) & (tables == table)] = format_mac_pj(name, table)
    return column


@dataclass(frozen=True)
class Axis:
    """One axis: a field path (or ``number_format``) and its values, in order."""

    path: str
    values: tuple

    def array(self) -> np.ndarray:
        if self.path == NUMBER_FORMAT or field_kind(self.path) == "choice":
            return np.asarray(self.values, dtype=str)
        return np.asarray(self.values, dtype=np.int64 if field_kind(self.path) == "integer" else np.float64)


def axis_values(path: str, spec: Any) -> tuple:
    """The values of an axis declared as a list, ``{start, stop, step}`` or ``{start, stop,
    factor}`` (module docstring); ``SpaceError`` naming the axis otherwise."""
    where = f"space axis '{path}'"
    if isinstance(spec, (list, tuple)):
        values = tuple(spec)
    elif isinstance(spec, Mapping):
        if path == NUMBER_FORMAT or field_kind(path) == "choice":
            raise SpaceError(f"{where} takes a list of names, not a range")
        values = _range_values(where, spec)
    else:
        raise SpaceError(f"{where}: give a list of values, {{start, stop, step}} or {{start, stop, factor}}, "
                         f"got {spec!r}")
    if not values:
        raise SpaceError(f"{where} is empty: give at least one value")
    if len(values) > MAX_AXIS_VALUES:
        raise SpaceError(f"{where} has {len(values):,} values, more than {MAX_AXIS_VALUES:,}: widen its step or factor")
    seen: set = set()
    for v in values:  # by value: 1 and 1.0 are one value (equal numbers hash equal)
        try:
            if v in seen:
                raise SpaceError(f"{where} lists {v!r} more than once (by value): give each value once")
            seen.add(v)
        except TypeError:  # unhashable (a table in the list): _checked names it
            pass
    return values


def _number(where: str, spec: Mapping, key: str) -> int | float:
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpaceError(f"{where}: range '{key}' must be a finite number, got {value!r}")
    return value


def _range_values(where: str, spec: Mapping) -> tuple:
    keys = set(spec)
    if keys not in ({"start", "stop", "step"}, {"start", "stop", "factor"}):
        raise SpaceError(f"{where}: a range is {{start, stop, step}} or {{start, stop, factor}}, got keys "
                         f"{', '.join(sorted(map(str, keys))) or 'none'}")
    start, stop = _number(where, spec, "start"), _number(where, spec, "stop")
    if stop < start:
        raise SpaceError(f"{where}: range stop {stop!r} is below start {start!r}: give stop >= start")
    if "step" in keys:
        step = _number(where, spec, "step")
        if step <= 0:
            raise SpaceError(f"{where}: range step must be positive, got {step!r}")
        span = (stop - start) / step * (1 + 1e-12)  # inf for a step of 1e-300
        if not span < MAX_AXIS_VALUES:
            raise SpaceError(f"{where}: the range has more than {MAX_AXIS_VALUES:,} values ((stop - start) / step = "
                             f"{(stop - start) / step:.3g}): widen its step")
        return tuple(start + i * step for i in range(math.floor(span) + 1))
    factor = _number(where, spec, "factor")
    if factor <= 1 or start <= 0:
        raise SpaceError(f"{where}: a geometric range needs factor > 1 and start > 0, got factor {factor!r}, "
                         f"start {start!r}")
    values, value = [], start
    while value <= stop * (1 + 1e-12) and len(values) <= MAX_AXIS_VALUES:
        values.append(value)
        value = value * factor
    return tuple(values)





@dataclass(frozen=True, eq=False)
class SpaceChunk:
    """Consecutive points of a space that satisfy its constraints: their indices in the product of
    the axes, the hardware points and each one's number format."""

    index: np.ndarray
    points: HardwarePoints
    number_formats: np.ndarray

    def __len__(self) -> int:
        return len(self.index)


@dataclass(frozen=True, eq=False)
class Space:
    """Axes, constraints and a base config (module docstring); ``size`` points satisfy the constraints."""

    base: HardwareConfig
    axes: tuple[Axis, ...]
    constraints: tuple[Constraint, ...]
    size: int

    @property
    def grid_size(self) -> int:
        """Points of the product of the axes, before the constraints."""
        return math.prod(len(a.values) for a in self.axes)

    def _columns(self, index: np.ndarray, names=None) -> dict[str, np.ndarray]:
        """Each axis' value at the grid points ``index`` (only ``names`` if given), ``word_bytes``,
        ``number_format`` and ``energy.mac_pj`` resolved together (``mac_pj_column``), and the base
        value of any other name asked for."""
        digits = np.unravel_index(index, tuple(len(a.values) for a in self.axes)) if self.axes else ()
        columns = {a.path: a.array()[d] for a, d in zip(self.axes, digits) if names is None or a.path in names
                   or a.path in (NUMBER_FORMAT, "cost_table")}
        if NUMBER_FORMAT in columns:
            columns.update(storing_columns(columns[NUMBER_FORMAT], self.base))
        elif names is None or NUMBER_FORMAT in names or MAC_PJ in names:
            words = columns.get("word_bytes", np.full(len(index), self.base.word_bytes, dtype=np.int64))
            columns[NUMBER_FORMAT] = np.vectorize(FORMAT_OF_WORD.__getitem__, otypes=[str])(words) if words.size \
                else np.zeros(0, dtype=str)
        if names is None or MAC_PJ in names:
            columns[MAC_PJ] = mac_pj_column(columns[NUMBER_FORMAT], columns.get(MAC_PJ, self.base.energy.mac_pj),
                                            columns.get("cost_table", self.base.cost_table))
        for name in names or ():
            if name not in columns:
                columns[name] = np.full(len(index), field_value(self.base, name))
        return columns

    def _keep(self, index: np.ndarray) -> np.ndarray:
        keep = np.ones(len(index), dtype=bool)
        if self.constraints:
            needed = set().union(*(c.names for c in self.constraints))
            columns = self._columns(index, needed)
            for constraint in self.constraints:
                keep &= constraint.evaluate(columns, len(index))
        return keep

    def chunks(self, chunk_points: int = CHUNK_POINTS) -> Iterator[SpaceChunk]:
        """The points that satisfy the constraints, ``chunk_points`` grid points at a time (a chunk
        holds at most that many; empty chunks are skipped)."""
        for start in range(0, self.grid_size, chunk_points):
            index = np.arange(start, min(start + chunk_points, self.grid_size), dtype=np.int64)
            index = index[self._keep(index)]
            if index.size:
                columns = self._columns(index)
                formats = columns.pop(NUMBER_FORMAT)
                yield SpaceChunk(index, HardwarePoints.from_columns(columns, self.base), formats)

    def point(self, index: int) -> tuple[HardwareConfig, NumberFormat]:
        """The point at ``index`` of the grid (``SpaceChunk.index``): its config and number format;
        ``SpaceError`` if there is no such point or the constraints exclude it."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self.grid_size:
            raise SpaceError(f"no point {index!r} in this space: give an index in [0, {self.grid_size - 1}]")
        at = np.array([index], dtype=np.int64)
        if not self._keep(at)[0]:
            raise SpaceError(f"point {index} is excluded by the space's constraints: give the index of a point it keeps")
        columns = self._columns(at)
        fmt = NumberFormat.parse(str(columns.pop(NUMBER_FORMAT)[0]))
        return HardwarePoints.from_columns(columns, self.base).config(0), fmt

    def describe(self) -> dict:
        """The resolved space as plain data (for a results file)."""
        return {"axes": {a.path: [v for v in a.values] for a in self.axes},
                "constraints": [c.text for c in self.constraints], "grid_points": self.grid_size, "points": self.size}


def space_from_dict(data: Mapping[str, Any], base: HardwareConfig | None = None, *,
                    max_points: int = DEFAULT_MAX_POINTS, stream: bool = False) -> Space:
    """The space ``data`` declares (``{"axes": {...}, "constraints": [...]}``, module docstring)
    around ``base`` (default: the paper's hardware), checked entirely before it is returned."""
    base = base if base is not None else HardwareConfig()
    unknown_keys = sorted(set(data) - {"axes", "constraints"})
    if unknown_keys:
        raise SpaceError(f"space: unknown key(s) {', '.join(unknown_keys)}; a space has axes and constraints")
    axes = _axes(data, base)
    texts = data.get("constraints", [])
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise SpaceError(f"space constraints: give a list of conditions, got {texts!r}")
    constraints = tuple(compile_constraint(t) for t in texts)
    space = Space(base, tuple(axes), constraints, 0)
    walk_limit = MAX_GRID_POINTS if stream else min(MAX_GRID_POINTS, GRID_FACTOR * max_points)
    if space.grid_size > walk_limit:  # the product of the lengths, before a single point is enumerated
        raise SpaceError(f"space axes give {space.grid_size:,} points ({' x '.join(f'{len(a.values):,}' for a in axes)}) "
                         f"before the constraints, more than the {walk_limit:,} that can be walked"
                         + ("" if stream else f" ({GRID_FACTOR} x the limit of {max_points:,} points; --stream walks up "
                                              f"to {MAX_GRID_POINTS:,})") + ": narrow an axis")
    size = space.grid_size if not constraints else sum(
        int(space._keep(np.arange(s, min(s + 4 * CHUNK_POINTS, space.grid_size), dtype=np.int64)).sum())
        for s in range(0, space.grid_size, 4 * CHUNK_POINTS))  # the constraints counted chunk by chunk
    if size == 0:
        raise SpaceError(f"space constraints {'; '.join(c.text for c in constraints)} keep none of the "
                         f"{space.grid_size:,} points: loosen them")
    if size > max_points and not stream:
        raise SpaceError(f"space has {size:,} points, over the limit of {max_points:,}: narrow an axis, or stream the "
                         f"points in chunks to disk (--stream)")
    return Space(base, tuple(axes), constraints, size)


def _axes(data: Mapping[str, Any], base: HardwareConfig) -> list[Axis]:
    """The declared axes, each a known field with checked values, and checked together: one axis
    sets the word size, a number format's fields are not axes beside it, an ``energy.mac_pj`` axis
    only beside FP32 points."""
    axes = []
    for path, spec in _flatten(data.get("axes", {})).items():
        if path not in AXIS_NAMES:
            close = difflib.get_close_matches(path, AXIS_NAMES, n=1)
            raise SpaceError(f"space axis '{path}': unknown field" + (f" (did you mean '{close[0]}'?)" if close else
                                                                      "; axes are HardwareConfig fields (sub-tables as "
                                                                      "table.field) and number_format"))
        axes.append(Axis(path, _checked(path, axis_values(path, spec), base)))
    paths = {a.path for a in axes}
    if NUMBER_FORMAT in paths and "word_bytes" in paths:
        raise SpaceError("space axes 'number_format' and 'word_bytes' both set the word size: drop the word_bytes "
                         "axis (each number format stores its values in its own bytes)")
    clash = [p for p in STORING_FIELDS[1:] if p in paths]
    if clash:
        raise SpaceError(f"space axis '{clash[0]}': a point's number format sets it (accel_sim.mac_energy."
                         f"hardware_in_format): drop the axis and vary number_format")
    if NUMBER_FORMAT in paths:
        formats = next(a.values for a in axes if a.path == NUMBER_FORMAT)
    else:
        words = next((a.values for a in axes if a.path == "word_bytes"), (base.word_bytes,))
        odd = [w for w in words if w not in FORMAT_OF_WORD]
        if odd:
            raise SpaceError(f"space axis 'word_bytes': {odd[0]}-byte words have no default number format: add a "
                             f"number_format axis (fp32, bf16, bfp_m<mantissa bits>_g<group size>)")
        formats = [FORMAT_OF_WORD[w] for w in words]
    narrow = [str(f) for f in formats if not NumberFormat.parse(f).is_identity]
    if MAC_PJ in paths and narrow:
        raise SpaceError(f"space axis '{MAC_PJ}': a point in {narrow[0]} costs its format's MAC figure "
                         f"(accel_sim.mac_energy), so the axis would vary the fp32 points only: drop it, or price "
                         f"fp32 points only")
    return axes


def _flatten(axes: Any, prefix: str = "") -> dict[str, Any]:
    """``{"special_unit": {"norm": [...]}}`` (a TOML sub-table) as ``{"special_unit.norm": [...]}``;
    a range table (``start`` / ``stop`` / ...) is a value, not a sub-table."""
    if not isinstance(axes, Mapping):
        raise SpaceError(f"space axes: give a table of field = values, got {axes!r}")
    flat = {}
    for key, value in axes.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and not {"start", "stop"} & set(value) and value:
            flat.update(_flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def _checked(path: str, values: tuple, base: HardwareConfig) -> tuple:
    """``values`` if ``HardwareConfig`` (or ``NumberFormat``) takes each; ``SpaceError`` naming the
    axis, the value and the allowed range otherwise."""
    for value in values:
        try:
            if path == NUMBER_FORMAT:
                NumberFormat.parse(value)
            else:
                numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
                with_field(base, path, python_value(path, value) if numeric and field_kind(path) != "choice" else value)
        except (HardwareConfigError, ResourceModelError, ValueError, TypeError) as e:
            message = str(e).removeprefix("<config>: ")
            raise SpaceError(f"space axis '{path}': value {value!r}: {message}") from None
    return values

"""Many hardware points at once: ``HardwarePoints``, one numpy column per ``HardwareConfig`` field.

A point is a ``HardwareConfig``; ``N`` of them are held as columns so that they can be priced
together (``accel_sim.batch``) and declared as a design space (``accel_sim.space``) without building
``N`` objects. Fields are addressed by *path*: a top-level field by its name (``rows``,
``dataflow_dw``), a sub-table's field by ``table.field`` (``special_unit.norm``,
``energy.dram_pj_per_byte``): the names of the hardware TOML. Integer fields are int64 columns,
numbers float64, choices (dataflows, grouped mapping, memory model) strings. Every value is checked
by ``HardwareConfig`` itself (its bounds and choices), once per distinct value of a column.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from accel_sim.cost_tables import COST_TABLES
from accel_sim.dataflows import DATAFLOWS
from accel_sim.hardware import EnergyCosts, HardwareConfig, HardwareConfigError, SpecialUnit
from accel_sim.hardware_fields import GROUPED_MAPPINGS, MEMORY_MODELS, OPERAND_COPIES, WEIGHT_MASTERS

SUB_TABLES = {"special_unit": SpecialUnit, "energy": EnergyCosts}


@cache
def field_paths(config_class: type = HardwareConfig) -> tuple[str, ...]:
    """Every field of a hardware config class, sub-tables flattened (``special_unit.norm``)."""
    return tuple(
        path
        for f in fields(config_class)
        for path in ([f"{f.name}.{sub.name}" for sub in fields(SUB_TABLES[f.name])] if f.name in SUB_TABLES
                     else [f.name])
    )


FIELD_PATHS: tuple[str, ...] = field_paths(HardwareConfig)
"""Every field of a ``HardwareConfig``, sub-tables flattened (``special_unit.norm``)."""
CHOICES: dict[str, tuple[str, ...]] = {
    "dataflow_fwd": tuple(DATAFLOWS), "dataflow_dx": tuple(DATAFLOWS), "dataflow_dw": tuple(DATAFLOWS),
    "grouped_mapping": GROUPED_MAPPINGS, "memory_model": MEMORY_MODELS, "operand_copies": OPERAND_COPIES,
    "weight_master": WEIGHT_MASTERS, "cost_table": COST_TABLES,
}
"""The fields whose values are names, and their choices."""


def field_kind(path: str, config_class: type = HardwareConfig) -> str:
    """"choice", "integer" (a field declared ``int``) or "number"; ``KeyError`` for a path that
    names no field."""
    return _field_kinds(config_class)[path]


@cache
def _field_kinds(config_class: type) -> dict[str, str]:
    def kind(path: str) -> str:
        if path in CHOICES:
            return "choice"
        table, _, name = path.rpartition(".")
        declared = {f.name: f.type for f in fields(SUB_TABLES[table] if table else config_class)}[name]
        return "integer" if declared in (int, "int") else "number"

    return {path: kind(path) for path in field_paths(config_class)}


def field_value(hw: HardwareConfig, path: str) -> Any:
    """The value of ``path`` in ``hw``."""
    table, _, name = path.rpartition(".")
    return getattr(getattr(hw, table), name) if table else getattr(hw, name)


def with_field(hw: HardwareConfig, path: str, value: Any) -> HardwareConfig:
    """``hw`` with ``path`` set to ``value``, checked by ``HardwareConfig`` (``HardwareConfigError``
    naming the field otherwise)."""
    table, _, name = path.rpartition(".")
    if table:
        return hw.with_(**{table: replace(getattr(hw, table), **{name: value})})
    return hw.with_(**{name: value})


def python_value(path: str, value: Any, config_class: type = HardwareConfig) -> Any:
    """A column's entry as the Python value ``HardwareConfig`` takes: int, float or str (an integer
    field keeps a non-integral number as it is, so that the check names it)."""
    kind = field_kind(path, config_class)
    if kind == "choice":
        return str(value)
    if kind == "integer" and float(value).is_integer():
        return int(value)
    return float(value)


def _column(path: str, values: Iterable, config_class: type) -> np.ndarray:
    kind = field_kind(path, config_class)
    values = list(values) if not isinstance(values, np.ndarray) else values
    if kind == "choice":
        return np.asarray(values, dtype=str)
    if kind == "integer":
        array = np.asarray(values)
        return array.astype(np.int64) if array.dtype.kind in "iub" else np.asarray(values, dtype=np.float64)
    return np.asarray(values, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class HardwarePoints:
    """``N`` hardware points: ``columns[path]`` holds the value of ``path`` at every point;
    ``config_class``: what a point is (``HardwareConfig``, or a subclass with more fields)."""

    columns: Mapping[str, np.ndarray]
    config_class: type = HardwareConfig

    def __post_init__(self) -> None:
        paths = field_paths(self.config_class)
        missing = [p for p in paths if p not in self.columns]
        unknown = sorted(set(self.columns) - set(paths))
        if missing or unknown:
            raise ValueError(f"hardware points need exactly the fields {paths}: missing {missing}, unknown {unknown}")
        sizes = {len(c) for c in self.columns.values()}
        if len(sizes) != 1:
            raise ValueError(f"hardware point columns differ in length: {sorted(sizes)}")

    @staticmethod
    def of(configs: Sequence[HardwareConfig]) -> "HardwarePoints":
        """The points of these configs, in order (all of one class)."""
        classes = {type(hw) for hw in configs}
        if len(classes) > 1:
            raise ValueError(f"hardware points are of one config class, got {sorted(c.__name__ for c in classes)}")
        cls = classes.pop() if classes else HardwareConfig
        return HardwarePoints({path: _column(path, [field_value(hw, path) for hw in configs], cls)
                               for path in field_paths(cls)}, cls)

    @staticmethod
    def from_columns(columns: Mapping[str, Iterable], base: HardwareConfig | None = None) -> "HardwarePoints":
        """Points whose ``columns`` vary some fields; every other field is ``base``'s (default the
        paper's hardware). Each distinct value of each column is checked by ``HardwareConfig``:
        ``HardwareConfigError`` names the field and the allowed range or choices."""
        base = base if base is not None else HardwareConfig()
        cls, paths = type(base), field_paths(type(base))
        unknown = [p for p in columns if p not in paths]
        if unknown:
            raise HardwareConfigError(f"unknown hardware field(s) {', '.join(unknown)}; known fields: "
                                      f"{', '.join(paths)}")
        varied = {path: _column(path, values, cls) for path, values in columns.items()}
        sizes = {len(c) for c in varied.values()}
        if len(sizes) > 1:
            raise ValueError(f"hardware point columns differ in length: {sorted(sizes)}")
        size = sizes.pop() if sizes else 1
        for path, column in varied.items():
            for value in np.unique(column):
                with_field(base, path, python_value(path, value, cls))
        full = {path: varied[path] if path in varied else _column(path, [field_value(base, path)] * size, cls)
                for path in paths}
        return HardwarePoints(full, cls)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def config(self, i: int) -> HardwareConfig:
        """Point ``i`` as a ``HardwareConfig`` (of ``config_class``)."""
        cls = self.config_class
        top = {f.name: python_value(f.name, self.columns[f.name][i], cls) for f in fields(cls)
               if f.name not in SUB_TABLES}
        subs = {table: sub(**{f.name: python_value(f"{table}.{f.name}", self.columns[f"{table}.{f.name}"][i], cls)
                              for f in fields(sub)})
                for table, sub in SUB_TABLES.items()}
        return cls(**top, **subs)

    def take(self, index) -> "HardwarePoints":
        """The points at ``index`` (an integer array or a boolean mask)."""
        return HardwarePoints({path: column[index] for path, column in self.columns.items()}, self.config_class)

    def __getitem__(self, path: str) -> np.ndarray:
        return self.columns[path]


class PointColumns:
    """Points read as one ``HardwareConfig`` whose every field is a numpy column: ``hw.rows`` is
    the rows of every point. The formulas of ``accel_sim.effects`` read it as they read a
    ``HardwareConfig``, so a field they read reaches both evaluations without being passed on.
    Top-level fields only."""

    def __init__(self, points: HardwarePoints, python_ints: bool = False):
        self._points, self._python_ints = points, python_ints

    def __getattr__(self, name: str) -> np.ndarray:
        if name.startswith("_") or name not in self._points.columns:
            raise AttributeError(f"hardware points have no field {name!r}")
        column = self._points[name]
        if self._python_ints and column.dtype.kind == "i":
            column = column.astype(object)
        setattr(self, name, column)  # read once
        return column

    def in_python_ints(self) -> "PointColumns":
        """The same columns with every integer field as Python integers (``dtype=object``: no sum
        can wrap, ``accel_sim.memory.INT64_SAFE``)."""
        return PointColumns(self._points, python_ints=True)

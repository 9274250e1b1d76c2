"""A grid's tables from its finished runs: ``runs.csv``, ``table_mean_std.csv`` and Table 2's layout
(``table2.csv``, ``table2.md``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from bench.lib.results import FORMAT_VERSION, ResultsError
from iokit.files import atomic_write, atomic_write_text
from bench.lib.grid.point import read_record


RECORD_COLUMNS = ("run_id", "elapsed_s", "git_commit")  # a runs.csv row's columns that are neither config nor metric


def _flat(prefix: str, obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(f"{prefix}.{k}" if prefix else str(k), v))
        return out
    if isinstance(obj, list):
        return {prefix: json.dumps(obj)}
    return {prefix: obj}


def collect(out: str | Path, run_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """One flat row per finished run (of ``run_ids`` when given: the grid's current points): run_id,
    the config keys, ``metric.*`` columns, elapsed_s and git_commit (empty for a run recorded before
    runs recorded it)."""
    rows = []
    wanted = None if run_ids is None else set(run_ids)
    for point in sorted(Path(out).glob("runs/*/point.json")):
        if wanted is not None and point.parent.name not in wanted:
            continue
        data = read_record(point)
        if data is None:
            continue  # unreadable (said so): the point runs again on the next run of the grid
        if data.get("version") != FORMAT_VERSION:
            raise ResultsError(f"{point} has results format version {data.get('version')!r}; this code reads "
                               f"{FORMAT_VERSION} (docs/results.md): run the grid into a new --out")
        rows.append({"run_id": data["run_id"], **_flat("", data["config"]), **_flat("metric", data["metrics"]),
                     "elapsed_s": data["elapsed_s"], "git_commit": data.get("git_commit", "")})
    return rows


def aggregate(out: str | Path, *, across: str = "seed", run_ids: Iterable[str] | None = None) -> Path | None:
    """Write the grid's tables from every finished run:

    * ``runs.csv``: one row per run, config columns then ``metric.*`` columns;
    * ``table_mean_std.csv``: each metric's mean, std and count over ``across`` (the seeds) for
      each combination of the other config columns;
    * ``table2.csv`` / ``table2.md``: Table 2's layout for runners whose metrics are named
      ``<model>.<method>.<figure>`` (bench.run's): one row per model and method, one column per
      data setting (the remaining config columns), cells "mean ± std" over seeds; accuracy first,
      then the efficiency figures (latency, peak memory, communication) in the same layout."""
    import pandas as pd

    rows = collect(out, run_ids)
    if not rows:
        return None
    df = pd.DataFrame(rows)
    out = Path(out)
    _write_csv(df, out / "runs.csv")
    metrics = [c for c in df.columns if c.startswith("metric.") and pd.api.types.is_numeric_dtype(df[c])]
    group = [c for c in df.columns if c not in metrics and c not in (*RECORD_COLUMNS, across)]
    if metrics and group:
        table = df.groupby(group, dropna=False)[metrics].agg(["mean", "std", "count"])
        table.columns = [f"{m}.{stat}" for m, stat in table.columns]
        _write_csv(table.reset_index(), out / "table_mean_std.csv")
    long = table2_long(df, metrics, across)
    if long is not None:
        _write_csv(long, out / "table2.csv")
        atomic_write_text(out / "table2.md", table2_markdown(long))
    return out / "runs.csv"


TABLE2_FIGURES = ("accuracy_pct", "round_latency_s", "peak_memory_bytes", "calibration_latency_s",
                  "total_bytes")


def table2_long(df, metrics: list[str], across: str = "seed"):
    """Mean, std and count over seeds of every ``metric.<model>.<method>.<figure>`` column, in long
    form: (setting, model, method, figure, mean, std, n). None when no metric has that form."""
    import pandas as pd

    named = [c for c in metrics if len(c.split(".")) == 4 and c.split(".")[3] in TABLE2_FIGURES]
    if not named:
        return None
    setting_cols = [c for c in df.columns
                    if c not in metrics and c not in (*RECORD_COLUMNS, across, "model", "methods")
                    and not c.startswith("metric.")]
    records = []
    for _, row in df.iterrows():
        setting = ", ".join(f"{c}={row[c]}" for c in setting_cols) or "default"
        for c in named:
            if pd.notna(row[c]):
                _, model, method, figure = c.split(".")
                records.append({"setting": setting, "model": model, "method": method, "figure": figure,
                                "value": float(row[c])})
    long = pd.DataFrame(records)
    stats = long.groupby(["figure", "model", "method", "setting"], sort=False)["value"].agg(["mean", "std", "count"])
    return stats.reset_index().rename(columns={"count": "n"})


def table2_markdown(long) -> str:
    """One Markdown table per figure: rows model / method, columns data settings, "mean ± std"."""
    parts = []
    for figure in TABLE2_FIGURES:
        sub = long[long["figure"] == figure]
        if sub.empty:
            continue
        cells = sub.assign(cell=[f"{m:.4g} ± {0.0 if s != s else s:.2g} (n={n})"
                                 for m, s, n in zip(sub["mean"], sub["std"], sub["n"])])
        pivot = cells.pivot(index=["model", "method"], columns="setting", values="cell")
        header = "| model | method | " + " | ".join(pivot.columns) + " |"
        lines = [f"### {figure} (mean ± std over seeds)", "", header,
                 "|" + "---|" * (len(pivot.columns) + 2)]
        for (model, method), values in pivot.iterrows():
            lines.append(f"| {model} | {method} | " + " | ".join(str(v) for v in values) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _write_csv(df, path: Path) -> None:
    atomic_write(path, lambda tmp: df.to_csv(tmp, index=False))

"""A study's registered plan: what it fixed before its evaluation ran, kept in its results folder
and binding from then on (docs/study.md, "A plan that binds").

When a study's first evaluation run starts, ``bench.study`` writes ``registration.json`` into its
folder: the planned part of the study (``planned``: the evaluation seeds, the seed plan's counts,
the equivalence margin, the families of comparisons, the primary test, the correction and the
power), its SHA-256 and the commit. Every later invocation compares the study file's planned part
with it (``undeclared``): a change is refused unless the study file declares it as a deviation
(``[[deviations]]`` naming the key, what changed and why), and the report and docs/findings.md
print every deviation. The seed plan's counts are not re-planned: the registered counts are the
ones run.

A study whose evaluation ran before this record existed is registered retroactively from what its
last report recorded (``from_summary``: the plan its runs were judged by, the paired t-test its
words then followed), marked so; it binds from then on.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from iokit.files import atomic_write_text

REGISTRATION = "registration.json"
COMPARED = ("seeds", "equivalence_margin_pts", "families", "primary_test", "correction", "power")
"""The planned keys compared with the study file on every invocation (``spec.PLAN_KEYS`` but the seed
plan's counts, which bind by being used, and ``code``, which is checked against the runs' commits)."""
PRIMARY_BEFORE_REGISTRATION = "t"  # the test whose p-values decided the words before studies declared one


def planned(described: Mapping[str, Any], seed_counts: Mapping[str, int] | None) -> dict[str, Any]:
    """A study's planned part from its description (``Study.describe()``, or a summary's ``study``)
    and its seed plan's counts (``"<model> <setting>"`` -> n; None without a seed plan)."""
    v = described.get("verdicts", {})
    return {"seeds": list(described["seeds"]), "seed_counts": None if seed_counts is None else dict(seed_counts),
            "equivalence_margin_pts": described["equivalence_margin_pts"],
            "families": {"models": list(described["models"]), "methods": list(described["methods"]),
                         "base": described["base"], "settings": list(described["settings"]),
                         "compare": [list(p) for p in described.get("compare", [])]},
            "primary_test": v.get("primary_test", PRIMARY_BEFORE_REGISTRATION),
            "correction": v.get("correction", "none"), "power": v.get("power")}


def sha256(plan: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()


def counts(plans: Sequence[Any]) -> dict[str, int] | None:
    """The seed plan's counts of ``bench.lib.study.power.SettingPlan`` records; None for none."""
    return {f"{p.model} {p.setting}": p.seeds for p in plans} or None


def record(plan: Mapping[str, Any], commit: str, note: str) -> dict[str, Any]:
    return {"planned": dict(plan), "sha256": sha256(plan), "git_commit": commit, "note": note}


def read(out: Path) -> dict[str, Any] | None:
    """The folder's registration, or None; ValueError naming the file where it is not one."""
    path = Path(out) / REGISTRATION
    if not path.is_file():
        return None
    try:
        reg = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{path}: not readable JSON ({err}); restore it from version control") from None
    if not isinstance(reg, dict) or not isinstance(reg.get("planned"), dict) or reg.get("sha256") != sha256(reg["planned"]):
        raise ValueError(f"{path}: not a registration whose planned part matches its sha256; restore it from version "
                         "control (a registered plan is not edited: declare a deviation in the study file)")
    return reg


def write(out: Path, reg: Mapping[str, Any]) -> None:
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(out) / REGISTRATION, json.dumps(reg, indent=1, sort_keys=True) + "\n")


def from_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A retroactive registration from a folder's last report (module doc)."""
    plans = summary.get("seed_plans") or []
    seed_counts = {f"{p['model']} {p['setting']}": p["seeds"] for p in plans} or None
    return record(planned(summary["study"], seed_counts), summary.get("git_commit", "unknown"),
                  f"registered retroactively from the report written at commit {summary.get('git_commit', 'unknown')} "
                  "(the evaluation ran before plans were registered): the plan its runs were judged by; binds from "
                  "this record on")


def changed(current: Mapping[str, Any], reg: Mapping[str, Any]) -> list[str]:
    """The compared keys (``COMPARED``) whose value differs between ``current`` and the registration."""
    return [k for k in COMPARED if current.get(k) != reg["planned"].get(k)]


def undeclared(current: Mapping[str, Any], reg: Mapping[str, Any], declared: Sequence[str]) -> list[str]:
    """The changed keys no deviation declares."""
    return [k for k in changed(current, reg) if k not in declared]


def refusal(source: str, out: Path, key: str, current: Mapping[str, Any], reg: Mapping[str, Any]) -> str:
    """One line: which planned key changed, from what to what, and the two ways out."""
    return (f"{source}: {key} changed since the plan registered in {Path(out) / REGISTRATION} (commit "
            f"{reg.get('git_commit', 'unknown')}): registered {json.dumps(reg['planned'].get(key))}, now "
            f"{json.dumps(current.get(key))}; restore it, or declare it in the study file: [[deviations]] keys = "
            f"[\"{key}\"], what = \"what changed, with the facts\", reason = \"why\"")

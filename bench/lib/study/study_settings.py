"""A study file's data settings: IID and the Dirichlet alphas, crossed with its number formats (formats
or precision schedules), its fleets and their reporting deadlines, each checked; one ``Setting`` per
combination that trains something of its own (docs/study.md, docs/fleets.md).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from bench.lib.study.study_keys import key_list
from bench.lib.study.spec import Setting, StudyError
from iokit import checks, identity
from workloads.numerics import NumberFormat
from workloads.numerics.schedule import canonical, format_at, is_schedule, steps_of


def data_settings(doc: Mapping[str, Any], where: str) -> list[Setting]:
    """``iid`` and ``alphas``: the data settings, before formats and fleets multiply them."""
    settings = [Setting("iid")] if doc.get("iid", False) else []
    if not isinstance(doc.get("iid", False), bool):
        raise StudyError(f"{where}: iid = {doc['iid']!r} must be true or false")
    if "alphas" in doc:
        settings += [Setting("dirichlet", float(a)) for a in key_list(doc, "alphas", where, float, low=0.0, high=1e6)]
    if not settings:
        raise StudyError(f"{where}: no data setting: give iid = true and / or alphas = [0.5, 0.1]")
    return settings


def crossed_settings(doc: Mapping[str, Any], where: str, data: list[Setting], rounds: int) -> list[Setting]:
    """The data settings crossed with the number formats, the fleets and each fleet's deadlines; a
    format on a fleet that sets every client's format is its FP32 setting, kept once."""
    formats = number_formats(doc, where, rounds)
    fleet_names, deadlines_s = fleets(doc, where), deadlines(doc, where)
    return [replace(s, number_format=f, fleet=fleet, deadline_s=own_deadline(fleet, d))
            for s in data for f in formats for fleet in fleet_names for d in (deadlines_s if fleet else (None,))
            if f == "fp32" or not sets_every_format(fleet)]  # one setting under two names: its FP32 one


def number_formats(doc: Mapping[str, Any], where: str, rounds: int) -> list[str]:
    """``number_formats``: format names (``accel_sim.formats``) or precision schedules
    (``workloads.numerics.schedule``: a shipped name as written, ``ROUND:FORMAT,...`` canonical,
    checked over the study's ``rounds``), FP32 among them when there are others (it is where they
    are tuned and what they are compared with); canonical, file order."""
    if "number_formats" not in doc:
        return ["fp32"]
    names = key_list(doc, "number_formats", where, str)
    try:
        formats = [canonical(n, rounds) if is_schedule(n) else NumberFormat.parse(n).name for n in names]
    except ValueError as err:
        raise StudyError(f"{where}: number_formats: {err}") from None
    identity.distinct_resolved(  # one arithmetic under two spellings: "fast" and its steps, "bf16" and "1:bf16"
        names, lambda n: rounds_formats(n, rounds), name=f"{where}: number_formats (over the study's {rounds} rounds)",
        error=StudyError)
    if "fp32" not in formats:
        raise StudyError(f"{where}: number_formats = {names}: add \"fp32\": the other formats run at the "
                         "hyper-parameters tuned in FP32 and are compared with it")
    return ["fp32", *(f for f in formats if f != "fp32")]


def rounds_formats(text: str, rounds: int) -> str:
    """What a ``number_formats`` entry trains over the study's ``rounds``, whether written as a format
    or a schedule: the format of each round as its shortest schedule (``1:bfp_m2_g16_sr,2:bfp_m4_g16_sr``),
    a format alone where every round computes in it (``bf16`` for ``1:bf16``). A calibration after
    the last round computes in the last round's format, so the rounds decide it too."""
    if not is_schedule(text):
        return NumberFormat.parse(text).name
    per_round = [format_at(steps_of(text, rounds), t) for t in range(1, rounds + 1)]
    steps = [f"{t}:{f}" for t, f in enumerate(per_round, 1) if t == 1 or per_round[t - 2] != f]
    return per_round[0] if len(steps) == 1 else ",".join(steps)


def fleets(doc: Mapping[str, Any], where: str) -> list[str | None]:
    """``fleets``: ``"none"`` (every sampled client, synchronous rounds: where the hyper-parameters
    are tuned) and fleet files or names under configs/fleets/ (docs/fleets.md), each loaded and so
    checked; None for ``"none"``, file order after it."""
    if "fleets" not in doc:
        return [None]
    from workloads.cost.fleet import FleetError, fleet_path, load_fleet

    names = identity.distinct_resolved(  # each fleet once by its file, not its spelling ("mixed", its path)
        key_list(doc, "fleets", where, str), lambda n: n if n == "none" else identity.resolved_file(fleet_path(n)),
        name=f"{where}: fleets", error=StudyError)
    if "none" not in names:
        raise StudyError(f"{where}: fleets = {names}: add \"none\": the fleets run at the hyper-parameters tuned "
                         "with every client taking part, and are compared with that run")
    for name in names:
        if name != "none":
            try:
                load_fleet(name)
            except FleetError as err:
                raise StudyError(f"{where}: fleets: {err}") from None
    return [None, *(n for n in names if n != "none")]


def deadlines(doc: Mapping[str, Any], where: str) -> tuple[float | None, ...]:
    """``deadlines_s``: every fleet of ``fleets`` run at each of these reporting deadlines (seconds,
    ``inf``: none) instead of its file's own (docs/fleets.md, "Which deadline minimizes
    time-to-accuracy"); ``(None,)`` without the key: the file's."""
    if "deadlines_s" not in doc:
        return (None,)
    if not any(name != "none" for name in doc.get("fleets", [])):
        raise StudyError(f"{where}: deadlines_s needs a fleet: add fleets = [\"none\", \"mixed\"] (the deadlines "
                         "apply to each fleet's rounds)")
    values = doc["deadlines_s"]
    if (not isinstance(values, list) or not values
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and not math.isnan(v)
                       for v in values)):
        raise StudyError(f"{where}: deadlines_s = {values!r}: give a list of seconds > 0, e.g. deadlines_s = [6.0, 20.0, inf]")
    from workloads.cost.fleet import DEADLINE_S_BOUNDS

    for v in values:  # a fleet's own bounds (1e308 s is not a deadline: inf is none)
        if not math.isinf(v):
            checks.number_in(v, *DEADLINE_S_BOUNDS, name="deadlines_s", error=StudyError)
    return tuple(checks.distinct([float(v) for v in values], name=f"{where}: deadlines_s", error=StudyError))


def sets_every_format(fleet: str | None) -> bool:
    """Whether every class of ``fleet`` sets its own number format (``Fleet.sets_every_format``): then
    the study's other formats on it train exactly its FP32 setting (no client computes in the run's
    format), so they are one setting, kept once, as its FP32 setting (docs/study.md)."""
    from workloads.cost.fleet import load_fleet

    return fleet is not None and load_fleet(fleet).sets_every_format


def own_deadline(fleet: str | None, deadline_s: float | None) -> float | None:
    """A setting's ``deadline_s``: None without a fleet, or where it is the fleet file's own (so
    the fleet's runs at its file's deadline keep the points, and ids, of a study without
    ``deadlines_s``)."""
    if fleet is None or deadline_s is None:
        return None
    from workloads.cost.fleet import load_fleet

    return None if deadline_s == load_fleet(fleet).deadline_s else deadline_s

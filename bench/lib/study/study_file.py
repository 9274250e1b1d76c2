"""Reading a study file (TOML) into a checked ``bench.lib.study.spec.Study``: every key, section and
value checked before anything runs, each refusal one ``StudyError`` naming the file, the key and the
fix (the file's format: ``bench.lib.study.spec``'s module doc, docs/study.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from bench.lib.study.compare import DEFAULT_PRIMARY_TEST, TESTS
from bench.lib.study.stats import CORRECTIONS, DEFAULT_EQUIVALENCE_MARGIN_PTS, DEFAULT_POWER
from bench.lib.study.spec import (DEFAULT_CORRECTION, DEFAULT_EXTEND_STEPS, DEFAULT_RATE_FRACTION, PLAN_KEYS, Deviation,
                                  Plateau, SeedPlan, Study, StudyError, Targets, training_method)
from bench.lib.study.study_keys import key_list, key_method, key_table, key_text
from bench.lib.study.study_settings import crossed_settings, data_settings
from bench.lib.study.tuning import NEAR_TIE_RULES
from iokit import checks
from iokit.outputs import CHECKOUT_ROOT
from iokit.toml import read_toml
from workloads.fl.data import DATASETS
from workloads.fl.execution import resolve_device
from workloads.fl.hparams import Hparams
from workloads.fl.methods import distinct_methods, method_identity, parse_method
from workloads.fl.presets import Preset, accuracy_targets_pct, foreign_knob, load_preset


STUDY_DIR = CHECKOUT_ROOT / "configs" / "studies"
KEYS = ("name", "preset", "models", "methods", "base", "iid", "alphas", "number_formats", "rounds", "local_epochs",
        "holdout_fraction", "seeds", "tuning_seeds", "device", "hw", "system", "search", "tuning", "convergence",
        "targets", "equivalence_margin_pts", "dataset", "fleets", "deadlines_s", "verdicts", "seed_plan",
        "compare", "equivalence_margin_argument", "deviations")
REQUIRED = ("name", "preset", "models", "methods", "base", "rounds", "seeds", "tuning_seeds", "search")
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
DEFAULT_HOLDOUT_FRACTION = 0.15  # SphereFed Sec. 5.1: "we use 15 % of training data for validation"


def study_path(study: str) -> Path:
    return Path(study) if study.endswith(".toml") else STUDY_DIR / f"{study}.toml"


def load_study(study: str | Path) -> Study:
    """A study by name (under configs/studies/) or .toml path, checked; StudyError naming the key."""
    path = study_path(str(study))
    return parse_study(read_toml(path, StudyError, "study"), str(path))


def parse_study(doc: Mapping[str, Any], source: str = "<study>") -> Study:
    """A study file's table, checked (module doc); StudyError naming ``source``, the key and the fix
    (every message starts with ``source``, the shared checks' too)."""
    try:
        return _parse_study(doc, source)
    except StudyError as err:
        if str(err).startswith(source):
            raise
        raise StudyError(f"{source}: {err}") from None


def _parse_study(doc: Mapping[str, Any], source: str) -> Study:
    where = source
    checks.unknown_keys(doc, KEYS, where=where, error=StudyError)
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise StudyError(f"{where}: missing key {missing[0]!r} (configs/studies/digits.toml shows every key)")
    name = doc["name"]
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise StudyError(f"{where}: name = {name!r} must be a file-name-safe word (letters, digits, '.', '_', '-'): "
                         "it names the results folder results/study-<name>")
    preset, models = _preset(doc, where), _models(doc, where)
    methods, base = _methods(doc, where, preset)
    settings = data_settings(doc, where)
    rounds = checks.integer_in(doc["rounds"], 1, checks.ROUNDS_MAX, name="rounds", error=StudyError)
    settings = crossed_settings(doc, where, settings, rounds)
    local_epochs, holdout = _local_epochs_and_holdout(doc)
    seeds, tuning_seeds = _seeds(doc, where)
    search = _search(doc["search"], methods, where)
    tuning = key_table(doc, "tuning", ("last_rounds", "extend_steps", "near_tie"), where)
    near_tie = tuning.get("near_tie", "best")
    if near_tie not in NEAR_TIE_RULES:
        raise StudyError(f"{where}: [tuning] near_tie = {near_tie!r}: give \"best\" (ties are equal scores) or "
                         "\"centre\" (scores within one validation sample tie too)")
    primary_test, correction, power = _verdicts(doc, where)
    seed_plan = _seed_plan(doc, where, seeds)
    tuning_last = checks.integer_in(tuning.get("last_rounds", 3), 1, rounds, name="[tuning] last_rounds",
                                    error=StudyError)
    extend_steps = checks.integer_in(tuning.get("extend_steps", DEFAULT_EXTEND_STEPS), 0, 20,
                                     name="[tuning] extend_steps", error=StudyError)
    plateau = _plateau(doc, where)
    margin = checks.number_in(doc.get("equivalence_margin_pts", DEFAULT_EQUIVALENCE_MARGIN_PTS), 0.0, 100.0,
                              name="equivalence_margin_pts", error=StudyError, low_open=True)
    dataset = _dataset(doc, where)
    if 2 * plateau.last_rounds > rounds:
        raise StudyError(f"{where}: [convergence] last_rounds = {plateau.last_rounds} needs at least "
                         f"{2 * plateau.last_rounds} rounds (two windows); rounds = {rounds}")
    targets = _targets(key_table(doc, "targets", ("accuracy_pct", "base_validation_fraction"), where), where)
    device = _device(doc, where)
    _check_files(doc, where)
    compare = _compare(doc.get("compare", []), methods, base, where)
    study = Study(name, preset, tuple(models), tuple(methods), base, tuple(settings), rounds, local_epochs,
                  float(holdout), tuple(seeds), tuple(tuning_seeds), search, tuning_last, plateau, targets, device,
                  doc.get("hw"), doc.get("system"), source, equivalence_margin_pts=float(margin), dataset=dataset,
                  extend_steps=extend_steps, near_tie=near_tie, correction=correction, power=power,
                  seed_plan=seed_plan, compare=compare, primary_test=primary_test,
                  margin_argument=key_text(doc, "equivalence_margin_argument", where),
                  deviations=_deviations(doc.get("deviations", []), where))
    _check_trials(study, where)
    return study


def _local_epochs_and_holdout(doc: Mapping[str, Any]) -> tuple[int | None, float]:
    local_epochs = doc.get("local_epochs")
    if local_epochs is not None:
        checks.integer_in(local_epochs, 1, 10_000, name="local_epochs", error=StudyError)
    holdout = doc.get("holdout_fraction", DEFAULT_HOLDOUT_FRACTION)
    checks.number_in(holdout, 0.0, 0.95, name="holdout_fraction", error=StudyError, low_open=True)
    return local_epochs, holdout


def _seeds(doc: Mapping[str, Any], where: str) -> tuple[list[int], list[int]]:
    """The evaluation seeds (at least 2) and the tuning seeds."""
    seeds = key_list(doc, "seeds", where, int, low=0, high=checks.SEED_MAX)
    if len(seeds) < 2:
        raise StudyError(f"{where}: seeds = {seeds}: give at least 2 evaluation seeds (3 or more for a "
                         "confidence interval worth the name)")
    return seeds, key_list(doc, "tuning_seeds", where, int, low=0, high=checks.SEED_MAX)


def _dataset(doc: Mapping[str, Any], where: str) -> str | None:
    dataset = doc.get("dataset")
    if dataset is not None and dataset not in DATASETS:
        raise StudyError(f"{where}: dataset = {dataset!r} is not a dataset bench.fl reads; give one of "
                         f"{', '.join(sorted(DATASETS))} (or leave it out for the preset's)")
    return dataset


def _check_files(doc: Mapping[str, Any], where: str) -> None:
    """``hw`` and ``system``: TOML files that exist, where given."""
    for key in ("hw", "system"):
        if key in doc and (not isinstance(doc[key], str) or not Path(doc[key]).is_file()):
            raise StudyError(f"{where}: {key} = {doc[key]!r} is not a TOML file; give its path or leave {key} out")


def _preset(doc: Mapping[str, Any], where: str) -> Preset:
    if not isinstance(doc["preset"], str):
        raise StudyError(f"{where}: preset = {doc['preset']!r}: give a preset name (configs/presets/) or a .toml path")
    try:
        return load_preset(doc["preset"])
    except ValueError as err:
        raise StudyError(f"{where}: preset: {err}") from None


def _models(doc: Mapping[str, Any], where: str) -> list[str]:
    models = key_list(doc, "models", where, str)
    from workloads.models import MODELS

    for model in models:
        if model not in MODELS and ":" not in model:
            raise StudyError(f"{where}: models: {model!r} is not a model; give one of {', '.join(sorted(MODELS))} "
                             "or package.module:factory (docs/byom.md)")
    return models


def _methods(doc: Mapping[str, Any], where: str, preset: Preset) -> tuple[list[str], str]:
    """The methods (canonical names) and the base method: one spelling each, the base among them, the
    preset's knobs for them only, each training method calibrated once."""
    given = key_list(doc, "methods", where, str)
    methods = [key_method(m, key=f"{where}: methods").name for m in given]
    distinct_methods(given, name=f"{where}: methods", error=StudyError)  # one method under two spellings
    base = key_method(doc["base"], key=f"{where}: base").name
    same = [m for g, m in zip(given, methods) if method_identity(g) == method_identity(doc["base"]) and m != base]
    if same:  # one method under two spellings (a class's path, a calibration alone): the methods' spelling
        raise StudyError(f"{where}: base = {doc['base']!r} is the method {same[0]!r} of methods under another "
                         f"spelling; write base = {same[0]!r}")
    if base not in methods:
        raise StudyError(f"{where}: base = {doc['base']!r} is not one of the methods {methods}; name the method the "
                         "others are compared with")
    try:  # a knob the preset's [hparams] sets for a method the study does not train
        preset.check_knobs([parse_method(m) for m in methods])
    except ValueError as err:
        raise StudyError(f"{where}: preset: {err}") from None
    by_training: dict[str, list[str]] = {}
    for m in methods:
        if parse_method(m).calibration:
            by_training.setdefault(training_method(m), []).append(m)
    for training, calibrated in by_training.items():
        if len(calibrated) > 1:
            raise StudyError(f"{where}: methods {calibrated} calibrate the same run of {training}; a study calibrates "
                             "each training method once: give one of them (or a second study)")
    return methods, base


def _verdicts(doc: Mapping[str, Any], where: str) -> tuple[str, str, float]:
    """``[verdicts]``: the primary test, the correction and the power."""
    verdict_table = key_table(doc, "verdicts", ("correction", "power", "primary_test"), where)
    primary_test = verdict_table.get("primary_test", DEFAULT_PRIMARY_TEST)
    if primary_test not in TESTS:
        raise StudyError(f"{where}: [verdicts] primary_test = {primary_test!r}: give \"permutation\" (the exact "
                         "sign-flip test, the default) or \"t\" (the paired t-test; docs/study.md)")
    correction = verdict_table.get("correction", DEFAULT_CORRECTION)
    if correction not in CORRECTIONS:
        raise StudyError(f"{where}: [verdicts] correction = {correction!r}: give \"holm\" (family-wise error), "
                         "\"bh\" (Benjamini-Hochberg, false discovery rate) or \"none\"")
    power = float(checks.number_in(verdict_table.get("power", DEFAULT_POWER), 0.0, 1.0, name="[verdicts] power",
                                   error=StudyError, low_open=True))
    if power >= 1:
        raise StudyError(f"{where}: [verdicts] power = {power:g} must be below 1, e.g. 0.8")
    return primary_test, correction, power


def _seed_plan(doc: Mapping[str, Any], where: str, seeds: list[int]) -> SeedPlan | None:
    if "seed_plan" not in doc:
        return None
    plan = key_table(doc, "seed_plan", ("min_seeds", "max_seeds"), where)
    low = checks.integer_in(plan.get("min_seeds", 3), 2, len(seeds), name="[seed_plan] min_seeds",
                            error=StudyError)
    high = checks.integer_in(plan.get("max_seeds", len(seeds)), low, len(seeds), name="[seed_plan] max_seeds",
                             error=StudyError)
    return SeedPlan(low, high)


def _plateau(doc: Mapping[str, Any], where: str) -> Plateau:
    conv = key_table(doc, "convergence", ("last_rounds", "tolerance_pct", "rate_fraction"), where)
    return Plateau(checks.integer_in(conv.get("last_rounds", 3), 1, checks.ROUNDS_MAX,
                                     name="[convergence] last_rounds", error=StudyError),
                   float(checks.number_in(conv.get("tolerance_pct", 1.0), 0.0, 100.0,
                                          name="[convergence] tolerance_pct", error=StudyError, low_open=True)),
                   float(checks.number_in(conv.get("rate_fraction", DEFAULT_RATE_FRACTION), 0.0, 1.0,
                                          name="[convergence] rate_fraction", error=StudyError, low_open=True)))


def _device(doc: Mapping[str, Any], where: str) -> str:
    device = doc.get("device", "auto")
    if not isinstance(device, str):
        raise StudyError(f"{where}: device = {device!r}: give auto, cpu, cuda or cuda:N")
    try:
        resolve_device(device)
    except ValueError as err:  # its words are the flag's (--device); here it is the key
        raise StudyError(f"{where}: device = {device!r}" + str(err).split(device, 1)[-1].lstrip("'")
                         .replace("use --device cpu (or auto)", 'use device = "cpu" (or "auto")')) from None
    return device


def _check_trials(study: Study, where: str) -> None:
    """Every trial's hyper-parameters are valid ``Hparams``."""
    for training in study.training_methods:
        for trial in study.trials(training):
            for m in study.labels(training):
                try:
                    study.hparams(m, trial)
                except ValueError as err:
                    raise StudyError(f"{where}: [search.{training}] {trial}: {err}") from None


def _deviations(table: Any, where: str) -> tuple[Deviation, ...]:
    """``[[deviations]]``: each names the planned keys it changes (``PLAN_KEYS``), what changed and why."""
    fix = ('add [[deviations]] tables, each keys = ["seeds"], what = "what changed, with the facts", '
           'reason = "why"')
    if not isinstance(table, list) or not all(isinstance(d, dict) for d in table):
        raise StudyError(f"{where}: deviations = {table!r}: {fix}")
    out = []
    for i, d in enumerate(table):
        checks.unknown_keys(d, ("keys", "what", "reason"), where=f"{where} [[deviations]] {i + 1}", error=StudyError)
        keys = d.get("keys")
        if not isinstance(keys, list) or not keys or any(k not in PLAN_KEYS for k in keys):
            raise StudyError(f"{where}: [[deviations]] {i + 1}: keys = {keys!r}: name the planned keys it changes, "
                             f"of {', '.join(PLAN_KEYS)}")
        for key in ("what", "reason"):
            if not isinstance(d.get(key), str) or not d[key].strip():
                raise StudyError(f"{where}: [[deviations]] {i + 1}: no {key}: {fix}")
        out.append(Deviation(tuple(keys), d["what"], d["reason"]))
    return tuple(out)


def _compare(pairs: Any, methods: list[str], base: str, where: str) -> tuple[tuple[str, str], ...]:
    """``compare``: pairs of the study's methods (canonical), each once, none the base comparison again."""
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise StudyError(f"{where}: compare = {pairs!r} must be a list of [a, b] method pairs, e.g. "
                         "[[\"spherefed+ffc\", \"fedavg+ccvr\"]]")
    out = []
    for a, b in pairs:
        pair = (key_method(a, key=f"{where}: compare").name, key_method(b, key=f"{where}: compare").name)
        for m in pair:
            if m not in methods:
                raise StudyError(f"{where}: compare: {m!r} is not one of the study's methods {methods}")
        if pair[0] == pair[1] or pair[1] == base:
            raise StudyError(f"{where}: compare = {[a, b]}: compare two different methods, neither against the base "
                             f"{base!r} (every method is compared with it already)")
        out.append(pair)
    return tuple(checks.distinct(out, name=f"{where}: compare", error=StudyError))


def _search(table: Any, methods: list[str], where: str) -> dict[str, dict[str, tuple]]:
    """[search.<method>] tables: one per training method, each an Hparams field -> candidate list."""
    if not isinstance(table, dict):
        raise StudyError(f"{where}: search must be tables [search.<method>] with lr = [...]")
    trainings = list(dict.fromkeys(training_method(m) for m in methods))
    search: dict[str, dict[str, tuple]] = {}
    for key, space in table.items():
        method = key_method(key, key=f"{where}: [search.{key}]")
        if method.calibration or method.name not in trainings:
            raise StudyError(f"{where}: [search.{key}] names no training method of the study; give one table per "
                             f"training method: {', '.join(trainings)} (a calibrated method takes its training "
                             "method's values)")
        if method.name in search:
            raise StudyError(f"{where}: [search.{key}] repeats the search of {method.name}")
        if not isinstance(space, dict) or "lr" not in space:
            raise StudyError(f"{where}: [search.{key}] must search at least lr, e.g. lr = [0.025, 0.05, 0.1]")
        searchable = Hparams(declared=method.knobs)  # the local training's knobs and the method's own
        foreign = foreign_knob(searchable, space)
        if foreign:
            knob, owners = foreign
            raise StudyError(f"{where}: [search.{key}] {knob} is a knob of {' and '.join(owners)}, which "
                             f"{method.name} does not have; search it in [search.{owners[0]}] (a study that trains "
                             f"{owners[0]})")
        checks.unknown_keys(space, searchable.names(), where=f"{where} [search.{key}]", error=StudyError)
        for field, values in space.items():
            if not isinstance(values, list) or not values:
                raise StudyError(f"{where}: [search.{key}] {field} = {values!r} must be a non-empty list of values")
            for value in values:  # of the field's type (lr = ["0.1"] is refused here, not by a traceback later)
                problem = searchable.knob(field).type_problem(value)
                if problem:
                    raise StudyError(f"{where} [search.{key}]: {problem}")
            checks.distinct(values, name=f"{where}: [search.{key}] {field}", error=StudyError)
        search[method.name] = {field: tuple(values) for field, values in space.items()}
    missing = [t for t in trainings if t not in search]
    if missing:
        raise StudyError(f"{where}: no [search.{missing[0]}] table: every training method needs one, at least "
                         "lr = [...] (a single value tunes nothing)")
    return {t: search[t] for t in trainings}


def _targets(table: Mapping[str, Any], where: str) -> Targets:
    pct = accuracy_targets_pct(table.get("accuracy_pct", []), where=f"{where}: [targets]", error=StudyError)
    fraction = table.get("base_validation_fraction")
    if fraction is not None:
        checks.number_in(fraction, 0.0, 1.0, name="[targets] base_validation_fraction", error=StudyError,
                         low_open=True)
    if not pct and fraction is None:
        raise StudyError(f"{where}: [targets] declares no target: give accuracy_pct = [90.0] and / or "
                         "base_validation_fraction = 0.95")
    return Targets(pct, None if fraction is None else float(fraction))

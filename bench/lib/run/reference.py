"""The reference studies behind ``bench.run``'s accuracy run (issue 23 item 4; docs/study.md).

A reference study (``python -m bench.study``, results under ``results/reference/<name>/``) tuned
each method on a validation hold-out and ran the choice on several paired seeds. ``bench.run``
uses it three ways, and only where it *covers* the run: the study's chosen run of that model,
data setting and training method has the run's federated setting (``FLConfig`` but the seed) and
hyper-parameters (``Hparams`` but the searched ones), so the two differ in the seed alone. A
calibration's knobs (CCVR's ``ccvr_lr``, ...) do not change the training: they decide only whether
the calibrated method's own figures are the study's.

* ``rates``: with ``--lr-from study``, the run takes the study's chosen hyper-parameters (the
  learning rate), and every job's rate is recorded with its source;
* ``reference_figures``: each method's reference mean ± std over the study's seeds, the reference's
  paired differences (SphereFed vs FedAvg, CCVR vs FedAvg, FFC vs SphereFed) and, for this run's
  difference, the verdict against the t prediction interval for one new seed from the reference's
  per-seed differences, their spread floored at one test sample
  (``bench.lib.study.stats.prediction_interval``; wording: ``bench.lib.study.verdicts``) -- or, when this run *is* one of the reference's seeds (same seed, same
  learning rate, same configuration), that it is not new evidence; the convergence verdicts
  of the reference's seeds, and, from a study of the same setting run for more rounds (the
  converged reference), its mean curve and the round at which that curve reaches this run's
  accuracy: where on the converged curve this run stopped;
* ``target``: the time-to-accuracy target, fixed before any run: ``--target``, else the preset's
  first ``[targets] accuracy_pct``, else the covering study's first declared target.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from bench.lib.study import verdicts
from bench.lib.study.spec import Setting
from bench.lib.study.stats import Estimate, paired_difference, prediction_interval, resolution_pts
from iokit.outputs import CHECKOUT_ROOT
from workloads.fl.hparams import FLConfig
from workloads.fl.knob import LOCAL_TRAINING
from workloads.fl.methods import MethodConfig, calibration_named, is_calibration, parse_method

REFERENCE_DIR = CHECKOUT_ROOT / "results" / "reference"
COMPARED = (("spherefed", "fedavg"), ("ccvr", "fedavg"), ("ffc", "spherefed"))
"""The paper's claims, as pairs of bench.run's method names (method, the one it is compared with)."""


@dataclass(frozen=True)
class Reference:
    """One reference study's results folder."""

    name: str
    folder: Path
    summary: Mapping[str, Any]
    runs: pd.DataFrame  # runs.csv
    curves: pd.DataFrame  # curves.csv

    @property
    def rounds(self) -> int:
        return int(self.summary["study"]["rounds"])


def studies(root: Path = REFERENCE_DIR) -> list[Reference]:
    """Every study results folder under ``root`` (``summary.json`` of ``bench.study``, ``runs.csv``,
    ``curves.csv``); other folders are not references."""
    out = []
    for summary_path in sorted(Path(root).glob("*/summary.json")):
        folder = summary_path.parent
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
            if "study" not in summary or "choices" not in summary:
                continue
            out.append(Reference(folder.name, folder, summary, pd.read_csv(folder / "runs.csv"),
                                 pd.read_csv(folder / "curves.csv")))
        except (OSError, ValueError, pd.errors.EmptyDataError):
            continue  # not a complete study folder
    return out


def setting_label(fl: FLConfig) -> str:
    return Setting(fl.partition, fl.alpha if fl.partition == "dirichlet" else None).label


def training_name(method: MethodConfig) -> str:
    return method.training.name


def covering_choice(ref: Reference, model: str, fl: FLConfig, method: MethodConfig, hp, *,
                    ignore: Sequence[str] = (), calibrated: bool = False) -> Mapping[str, Any] | None:
    """The study's choice for ``model``, ``fl``'s data setting and ``method``'s training method
    whose runs had ``fl`` (but the seed and ``ignore``) and ``hp`` (but the searched values); None
    if the study has none. The knobs compared are the local training's and those of ``method``'s
    training method (a run's point holds its own method's only); its calibration's only when
    ``calibrated`` (the calibrated method's own figures): they do not change the training."""
    ours_fl = {k: v for k, v in asdict(fl).items() if k not in ("model", "seed")}
    compared = {k.name for k in (*LOCAL_TRAINING, *(method if calibrated else method.training).knobs)}
    for choice in ref.summary["choices"]:
        point = choice.get("point")
        if (choice["model"], choice["setting"], choice["method"]) != (model, setting_label(fl), training_name(method)) \
                or not point or choice["trial"] is None:
            continue
        if any(ours_fl.get(k) != v for k, v in point["fl"].items() if k not in ignore):
            continue
        ours = {k: v for k, v in hp.replace(**choice["trial"]).as_dict().items() if k in compared}
        if ours != {k: v for k, v in point["hparams"].items() if k in compared}:
            continue
        return choice
    return None


def reruns_choice(ref: Reference, model: str, fl: FLConfig, job, execution=None, *, calibrated: bool = False) -> bool:
    """Whether ``job`` on ``fl`` has exactly the settings of the study's chosen runs but the seed
    (the chosen values included: same learning rate, same configuration, the calibration's knobs
    too when ``calibrated``, and, when ``execution`` is given, the same device and execution
    options); with a seed the study ran, it then *is* that run of the study."""
    choice = covering_choice(ref, model, fl, job.method, job.hp, calibrated=calibrated)
    return choice is not None and all(getattr(job.hp, k) == v for k, v in choice["trial"].items()) and (
        execution is None or execution.settings() == choice["point"]["execution"])


def covering(refs: Sequence[Reference], model: str, fl: FLConfig, method: MethodConfig, hp, *,
             chosen: bool = False):
    """(reference, choice) of the first study that covers the run exactly (module doc), or (None,
    None); with ``chosen``, only a study whose choice is the run's own searched values (the run
    trains at the study's rates: what its accuracy may be set beside)."""
    for ref in refs:
        choice = covering_choice(ref, model, fl, method, hp)
        if choice is not None and (not chosen or all(getattr(hp, k) == v for k, v in choice["trial"].items())):
            return ref, choice
    return None, None


def rates(jobs: Sequence, model: str, fl: FLConfig, preset, lr_from: str,
          refs: Sequence[Reference] | None = None) -> tuple[list, dict[str, dict[str, Any]]]:
    """``jobs`` with their learning rates from ``lr_from`` (``bench.lib.spec.RunSpec.lr_from``):
    ``preset``, the preset's; ``study``, the chosen values of the first reference study that covers
    the job (``covering``; ``refs`` default: every study under ``REFERENCE_DIR``), else the
    preset's. Per job name, its ``lr`` and where it comes from (``from``), and a study's choice
    (``study``, ``trial``, ``validation_score_pct``), as results files record them."""
    out, sources = [], {}
    for job in jobs:
        ref, choice = (None, None) if lr_from == "preset" else covering(
            studies() if refs is None else refs, model, fl, job.method, job.hp)
        if ref is None:
            out.append(job)
            sources[job.name] = {"lr": job.hp.lr, "from": preset_source(preset, job.method, "lr", lr_from)}
            continue
        tuned = replace(job, hp=job.hp.replace(**choice["trial"]))
        out.append(tuned)
        sources[job.name] = {"lr": tuned.hp.lr, "from": f"reference study {ref.name} (--lr-from study: its choice on "
                                                       "validation)",
                             "study": ref.name, "trial": dict(choice["trial"]),
                             "validation_score_pct": choice["score_pct"]}
    return out, sources


def preset_source(preset, method: MethodConfig, key: str, lr_from: str) -> str:
    """Where the preset's value of ``key`` for ``method`` comes from: the last of its
    ``[methods.<name>]`` tables that sets it (``workloads.fl.presets.method_hparams``' order), else
    ``[hparams]`` (or the default there); with ``lr_from = "study"``, that no study covers the run."""
    tables = [method.algorithm] + ([method.modifier] if method.modifier else []) \
        + ([method.calibration] if method.calibration else []) + [method.name]
    table = next((f"[methods.{t}]" for t in reversed(tables) if key in preset.overrides.get(t, {})), "[hparams]")
    why = "--lr-from preset" if lr_from == "preset" else "--lr-from study, but no reference study covers this run"
    return f"preset {preset.name} {table} ({why})"


def study_label(name: str) -> str:
    """The study's method label of one of ``bench.run``'s method names (a calibration on its base)."""
    return parse_method(f"{calibration_named(name).trained_with}+{name}" if is_calibration(name) else name).name


def _finite(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def reference_figures(model: str, names: Sequence[str], jobs: Sequence, accuracy: Mapping[str, Mapping],
                      fl: FLConfig, refs: Sequence[Reference], execution=None) -> dict[str, Any] | None:
    """What ``bench.run`` reports beside its own accuracies (module doc); None when no study covers the
    run. ``execution``: the run's (``workloads.fl.execution.Execution``), for ``reruns_choice``."""
    job_of = {n: next(j for j in jobs if training_name(j.method) == training_name(parse_method(study_label(n))))
              for n in names}
    ref = None
    for n in names:
        ref, _ = covering(refs, model, fl, job_of[n].method, job_of[n].hp, chosen=True)
        if ref is not None:
            break
    if ref is None:
        return None
    setting = setting_label(fl)
    cells = {c["method"]: c for c in ref.summary["cells"] if (c["model"], c["setting"]) == (model, setting)}
    runs = ref.runs[(ref.runs["model"] == model) & (ref.runs["setting"] == setting)]
    floor = resolution_pts(int(runs["test_samples"].max())) if len(runs) else 0.0  # one test sample (stats)
    methods = {}
    for n in names:
        cell = cells.get(study_label(n))
        if not cell or not cell.get("n") or not _calibration_covered(ref, model, fl, n, job_of[n]):
            continue
        final = cell["final_accuracy_pct"]
        own = runs[(runs["method"] == study_label(n)) & (runs["seed"] == fl.seed)]
        per_seed = list(runs[runs["method"] == study_label(n)]["final_accuracy_pct"])
        pi = prediction_interval(per_seed, floor=floor) if len(per_seed) >= 2 else None
        methods[n] = {"mean": final["mean"], "std": _finite(final["std"]), "n": cell["n"],
                      "ci_low": _finite(final["ci_low"]), "ci_high": _finite(final["ci_high"]),
                      "prediction_low": None if pi is None else pi.low,
                      "prediction_high": None if pi is None else pi.high,
                      "converged": cell["converged"], "verdicts": cell["verdicts"], "lr": job_of[n].hp.lr,
                      "same_seed_pct": float(own["final_accuracy_pct"].iloc[0]) if len(own) else None,
                      "same_settings": len(own) > 0 and reruns_choice(ref, model, fl, job_of[n], execution,
                                                                      calibrated=is_calibration(n))}
        # the same settings reproduce the reference's run only on the same kernels: to the digit, or not at all
        here = accuracy.get(n, {}).get("accuracy_pct")
        methods[n]["is_reference_run"] = methods[n]["same_settings"] and here is not None and \
            abs(here - methods[n]["same_seed_pct"]) < 1e-9
    pairs = []
    for a, b in COMPARED:
        if a in methods and b in methods and a in accuracy and b in accuracy:
            per_seed = {m: dict(zip(runs[runs["method"] == study_label(m)]["seed"],
                                    runs[runs["method"] == study_label(m)]["final_accuracy_pct"])) for m in (a, b)}
            if not (set(per_seed[a]) & set(per_seed[b])):
                continue
            d = paired_difference(per_seed[a], per_seed[b], floor=floor)
            seeds = sorted(set(per_seed[a]) & set(per_seed[b]))
            pi = prediction_interval([per_seed[a][s] - per_seed[b][s] for s in seeds], floor=floor) \
                if len(seeds) >= 2 else None
            here = accuracy[a]["accuracy_pct"] - accuracy[b]["accuracy_pct"]
            same = fl.seed in seeds and all(methods.get(m, {}).get("is_reference_run") for m in (a, b))
            settings = fl.seed in seeds and all(methods.get(m, {}).get("same_settings") for m in (a, b))
            verdict = (verdicts.same_run(fl.seed) if same else verdicts.same_settings(fl.seed) if settings
                       else "one reference seed: no verdict" if pi is None else verdicts.new_seed(here, pi))
            pairs.append({"method": a, "versus": b, "difference_pct": here, "reference_mean_pct": d.mean,
                          "reference_std_pct": _finite(d.std), "reference_ci_low": _finite(d.low),
                          "reference_ci_high": _finite(d.high), "n": d.n,
                          "prediction_low": None if pi is None else pi.low,
                          "prediction_high": None if pi is None else pi.high, "is_reference_run": same,
                          "inside_prediction": None if settings or pi is None else verdicts.inside(here, pi),
                          "verdict": verdict})
    targets = ref.summary["study"]["targets"]["accuracy_pct"]
    return {"study": ref.name, "folder": _shown(ref.folder), "rounds": ref.rounds, "setting": setting,
            "machines": sorted({m.get("cpu", "?") for m in ref.summary.get("run_machines", [])}),
            "methods": methods, "pairs": pairs, "declared_target_pct": targets[0] if targets else None,
            "converged_reference": _converged(model, names, job_of, accuracy, fl, refs, ref)}


def _calibration_covered(ref: Reference, model: str, fl: FLConfig, name: str, job, *, ignore: Sequence[str] = ()) -> bool:
    """Whether the study's runs of ``name`` had the job's calibration knobs too (always, for a
    training method): a calibrated method's figures are the study's only if they did."""
    return not is_calibration(name) or \
        covering_choice(ref, model, fl, job.method, job.hp, ignore=ignore, calibrated=True) is not None


def _converged(model: str, names: Sequence[str], job_of: Mapping, accuracy: Mapping, fl: FLConfig,
               refs: Sequence[Reference], covering_ref: Reference) -> dict[str, Any] | None:
    """The same setting run for more rounds: each method's mean curve (accuracy and cumulative cost
    per round) and the first round at which it reaches this run's accuracy."""
    for ref in refs:
        if ref is covering_ref or ref.rounds <= fl.rounds:
            continue
        if not all(covering_choice(ref, model, fl, job_of[n].method, job_of[n].hp, ignore=("rounds",)) is not None
                   for n in names):
            continue
        curves = ref.curves[(ref.curves["model"] == model) & (ref.curves["setting"] == setting_label(fl))]
        out = {}
        for n in names:
            mine = curves[(curves["method"] == study_label(n)) & curves["accuracy_pct"].notna()]
            if mine.empty or not _calibration_covered(ref, model, fl, n, job_of[n], ignore=("rounds",)):
                continue
            mean = mine.groupby("round", sort=True)[["accuracy_pct", "cum_wall_s", "cum_energy_j", "cum_bytes"]].mean()
            std = mine.groupby("round", sort=True)["accuracy_pct"].std().fillna(0.0)
            reached = mean.index[mean["accuracy_pct"] >= accuracy[n]["accuracy_pct"]] if n in accuracy else []
            final = mine[mine["round"] == mine["round"].max()]["accuracy_pct"]
            out[n] = {"round": [int(r) for r in mean.index], "mean_pct": list(mean["accuracy_pct"]),
                      "std_pct": list(std), **{k: list(mean[k]) for k in ("cum_wall_s", "cum_energy_j", "cum_bytes")},
                      "final_mean_pct": float(final.mean()), "final_std_pct": _finite(float(final.std())),
                      "n": int(final.count()), "reaches_this_run_at_round": int(reached[0]) if len(reached) else None}
        if out:
            return {"study": ref.name, "folder": _shown(ref.folder), "rounds": ref.rounds, "methods": out}
    return None


def _shown(folder: Path) -> str:
    try:
        return str(folder.resolve().relative_to(REFERENCE_DIR.parents[1]))
    except ValueError:
        return str(folder)


def target(cli_pct: float | None, preset_pcts: tuple[float, ...], figures: Mapping[str, Any] | None
           ) -> tuple[float | None, str]:
    """The time-to-accuracy target in percent and where it comes from (module doc)."""
    if cli_pct is not None:
        return cli_pct, "--target"
    if preset_pcts:
        return preset_pcts[0], "declared in the preset ([targets] accuracy_pct)"
    if figures and figures.get("declared_target_pct") is not None:
        return figures["declared_target_pct"], f"declared in the reference study {figures['study']}"
    return None, "no target declared: give --target PCT, or [targets] accuracy_pct in the preset"


def format_reference(model: str, figures: Mapping[str, Any] | None, accuracy: Mapping[str, Mapping],
                     fl: FLConfig) -> str:
    """The lines ``bench.run`` prints about the reference (module doc)."""
    if figures is None:
        return (f"{model}: no reference study covers this setting ({setting_label(fl)}, {fl.rounds} rounds, these "
                "hyper-parameters): one seed, no spread to compare with (docs/study.md)")
    machines = ", ".join(figures["machines"]) or "?"
    lines = [f"{model}, {figures['setting']}, {figures['rounds']} rounds: accuracy beside the reference study "
             f"{figures['study']} ({figures['folder']}; its learning rates, tuned on validation; mean ± std over its "
             f"seeds; {machines})"]
    for n, v in figures["methods"].items():
        own = accuracy.get(n, {}).get("accuracy_pct")
        spread = f" ± {v['std']:.1f}" if v["std"] is not None else ""
        lr = f"lr {v['lr']:g}, " if v.get("lr") is not None else ""
        if v["is_reference_run"]:
            verdict = f"{verdicts.same_run(fl.seed)} (there {v['same_seed_pct']:.1f} %)"
        elif v.get("same_settings"):
            verdict = f"{verdicts.same_settings(fl.seed)} (there {v['same_seed_pct']:.1f} %)"
        elif v["prediction_low"] is not None and own is not None:
            verdict = verdicts.new_seed(own, Estimate(v["n"], v["mean"], v["std"] or 0.0, v["prediction_low"],
                                                      v["prediction_high"]), signed=False)
        else:
            verdict = ""
        lines.append(f"  {n:<10} {own:6.1f} % ({lr}reference {v['mean']:.1f}{spread} %, n={v['n']})"
                     + (f": {verdict}" if verdict else ""))
    for p in figures["pairs"]:
        ci = "" if p["reference_ci_low"] is None else \
            f", 95 % interval [{p['reference_ci_low']:+.2f}, {p['reference_ci_high']:+.2f}]"
        lines.append(f"  {p['method']} - {p['versus']}: {p['difference_pct']:+.2f} points here; reference "
                     f"{p['reference_mean_pct']:+.2f} (n={p['n']}{ci}): {p['verdict']}")
    unconverged = {n: v for n, v in figures["methods"].items() if v["converged"] < v["n"]}
    if unconverged:
        conv = figures.get("converged_reference")
        where = ""
        if conv:
            stops = [f"{n} at round {m['reaches_this_run_at_round']}" if m["reaches_this_run_at_round"] else
                     f"{n} never ({m['final_mean_pct']:.1f} % at the end)" for n, m in conv["methods"].items()]
            finals = ", ".join(f"{n} {m['final_mean_pct']:.1f}" + (f" ± {m['final_std_pct']:.1f}" if m["final_std_pct"]
                               is not None else "") for n, m in conv["methods"].items())
            where = (f"; the {conv['rounds']}-round reference {conv['study']} ends at {finals} %, and its mean curve "
                     f"reaches this run's accuracy: {', '.join(stops)} (of {conv['rounds']})")
        lines.append(f"  not converged in {figures['rounds']} rounds (convergence rule on the reference's seeds: "
                     + ", ".join(f"{n} {v['converged']}/{v['n']}" for n, v in unconverged.items()) + ")" + where)
    return "\n".join(lines)

"""What ``bench.run`` prints: the figures table, the paper's claims beside ours, the
time-to-accuracy table."""

from __future__ import annotations

from bench.lib.paper import PAPER
from workloads.model_spec import DEFAULT_INPUT_SHAPE

ROWS = (  # section, figure, normalized to, unit, scale
    ("communication", "total_bytes", "fedavg", "MB", 1e-6),
    ("training", "peak_memory_bytes", "fedavg", "MB", 1e-6),
    ("training", "step_latency_s", "fedavg", "ms", 1e3),
    ("training", "round_latency_s", "fedavg", "s", 1),
    ("training", "step_energy_j", "fedavg", "mJ", 1e3),
    ("training", "round_energy_j", "fedavg", "J", 1),
    ("calibration", "latency_s", "ccvr", "s", 1),
    ("calibration", "energy_j", "ccvr", "J", 1),
    ("accuracy", "accuracy_pct", None, "%", 1),
)


def shapes_label(config: dict) -> str:
    """"CIFAR-100 shapes" for the paper's input and classes, else "input CxHxW, C classes"."""
    shape = tuple(config.get("input_shape") or DEFAULT_INPUT_SHAPE)
    classes = config.get("classes", PAPER.num_classes)
    if (shape, classes) == (DEFAULT_INPUT_SHAPE, PAPER.num_classes):
        return "CIFAR-100 shapes"
    return f"input {'x'.join(map(str, shape))}, {classes} classes"


def format_time_to_accuracy(model: str, tta: dict) -> str:
    """The time-to-accuracy table of one model."""
    if tta["target_accuracy_pct"] is None:
        return f"time to accuracy, {model}: {tta['rule']}"
    lines = [f"time to {tta['target_accuracy_pct']:.1f} % test accuracy ({tta['rule']}), {model}, modeled",
             f"{'method':<12} {'round':>6} {'wall time':>12} {'device time':>12} {'energy':>12} {'bytes':>12}"]
    for method, v in tta["methods"].items():
        if v["reached"]:
            lines.append(f"{method:<12} {v['round']:>6} {v['wall_s']:>10.4g} s {v['device_s']:>10.4g} s "
                         f"{v['energy_j']:>10.4g} J {v['bytes'] / 1e6:>9.4g} MB")
        else:
            lines.append(f"{method:<12} {'not reached':>6}")
    return "\n".join(lines)


def format_table(summary: dict) -> str:
    """Every model's figures (absolute and normalized to FedAvg / CCVR, as Fig. 5), the step
    energy by component, the paper's claims beside ours and the time-to-accuracy tables."""
    lines = []
    for model, s in summary["models"].items():
        lines.append(f"== {model} ({shapes_label(summary['config'])}, batch {summary['config']['batch_size']}, "
                     f"{summary['hardware_label']})")
        lines.append(f"{'figure':<34} {'method':<12} {'value':>16} {'normalized':>11}")
        for section, metric, base, unit, scale in ROWS:
            for method, v in s[section].items():
                value = v[metric]
                norm = f"{value / s[section][base][metric]:.4f}" if base and base in s[section] else ""
                lines.append(f"{section + ' ' + metric:<34} {method:<12} {value * scale:>13.4g} {unit:<2} {norm:>11}")
        for method, v in s["training"].items():
            parts = v["step_energy_by_component_j"]
            lines.append(f"step energy {method}: " + ", ".join(
                f"{k} {100 * e / v['step_energy_j']:.1f}%" for k, e in sorted(parts.items(), key=lambda kv: -kv[1])))
    lines.append("")
    lines.append(f"{'paper claim (Sec. 5.4)':<58} {'paper':>8} {'ours':>8}  model")
    for row in summary["paper_vs_model"]:
        lines.append(f"{row['claim']:<58} {row['paper_up_to_pct']:>7.1f}% {row['model_up_to_pct']:>7.2f}%  "
                     f"{row['model_with_most']}")
    lines.append(f"accuracy: {summary['accuracy_setting']['note']}")
    for model, s in summary["models"].items():
        lines.append("")
        lines.append(format_time_to_accuracy(model, s["time_to_accuracy"]))
    return "\n".join(lines)


def format_references(summary: dict) -> list[str]:
    """Per model: the accuracy beside the reference study's seeds (``bench.lib.run.reference``)."""
    from bench.lib.run.reference import format_reference
    from workloads.fl.hparams import FLConfig

    fl = summary["accuracy_setting"]["fl"]
    return [format_reference(model, s.get("reference"), s["accuracy"],
                             FLConfig(**{**fl, "model": model, "seed": summary["config"]["seed"]}))
            for model, s in summary["models"].items()]


def format_rates(summary: dict) -> list[str]:
    """Per model whose runs do not all train at a reference study's rates (which the reference
    lines name): each run's learning rate and where it comes from (``--lr-from``)."""
    lines = []
    for model, s in summary["models"].items():
        rates = s.get("learning_rates", {})
        if any("study" not in r for r in rates.values()):
            lines.append(f"{model} learning rates: " + "; ".join(f"{job} {r['lr']:g} from {r['from']}"
                                                                   for job, r in rates.items()))
    return lines

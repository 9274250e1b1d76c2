"""One run, one vocabulary: ``RunSpec``, the federated run every command is turned into, and the
one declaration of every flag the commands share (docs/cli.md, "The same flag means the same
thing everywhere").

A field of ``RunSpec`` that a command takes from its command line declares its flag once, beside
the field (``flag(...)``): the spelling, the one help text, the argparse settings, and which
commands take it. From those declarations alone:

* ``add_flags(parser, command)`` gives ``bench.run`` and ``bench.fl`` their run flags (and
  ``add_flags(parser, command, names)`` a shared flag to any other command: ``--workers``);
* ``from_args(args, command)`` turns the parsed command line into a ``RunSpec``;
* ``from_point(point, command)`` turns a grid point (its keys are the flags without the dashes)
  into the same ``RunSpec``, through the same parser, so a point and a command line are checked
  by one set of rules and answered in one vocabulary;
* ``dataclasses.asdict(spec)`` is what results files record (``config``).

Adding a run option is one field here (docs/cli.md walks through it); the code that acts on it
reads ``spec.<field>``. ``None`` in a field means "the preset's" (or, where said, the command's
default), taken when the command loads the preset; ``bench.run`` records the spec with its seed
resolved.

The learning-rate source is a field too (``lr_from``): ``preset`` trains every method at its
preset's rates (``[hparams]`` and ``[methods.<name>]``), ``study`` at the rates a reference study
chose on validation where one covers the run, else the preset's; ``bench.lib.run.reference.rates``
says, per run, where each rate came from, and results files record it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Callable, Mapping, Sequence

from iokit import checks, cli
from workloads.cost.system import DEFAULT_SYSTEM_PATH
from workloads.fl.data import PACKAGED_DATASETS
from workloads.fl.execution import DEVICE_CHOICES, SETTINGS, Execution, execution_of
from workloads.model_spec import DEFAULT_INPUT_SHAPE, ModelSpec
from workloads.models import MODELS

RUN, FL, FLOWER = "bench.run", "bench.fl", "bench.flower"
ALL = (RUN, FL, FLOWER)  # a flag of every command that trains (bench.flower: the Flower example's few)
LR_SOURCES = ("preset", "study")


@dataclass(frozen=True)
class Flag:
    """A flag declared once: its names, its one help text, argparse's settings, the commands that
    take it as part of a run, and how a parsed value becomes the field's (``to_field``)."""

    names: tuple[str, ...]
    help: str
    settings: Mapping[str, Any]
    commands: tuple[str, ...] = (RUN, FL)
    to_field: Callable[[Any], Any] | None = None
    unset: str | None = None  # what a command without a default takes ("the preset's")


def flag(*names: str, help: str, default: Any = None, commands: tuple[str, ...] = (RUN, FL),
         to_field: Callable[[Any], Any] | None = None, unset: str | None = None, resource: bool = False,
         **settings: Any) -> Any:
    """A ``RunSpec`` field (default ``default``) whose flag is ``names`` (module doc); ``resource``:
    how much of the machine a run uses, not what it computes, so never part of a run's identity
    (``identity_fields``)."""
    return field(default=default, metadata={"flag": Flag(names, help, settings, commands, to_field, unset),
                                            "resource": resource})


def _tuple(value: Any) -> Any:
    return None if value is None else tuple(value)


def _input_shape(text: str | None) -> tuple[int, int, int] | None:
    from workloads.model_spec import parse_input_shape

    return None if text is None else parse_input_shape(text)


MODEL_HELP = (f"a paper model ({', '.join(sorted(MODELS))}), package.module:factory, torchvision:NAME or timm:NAME "
              "(docs/byom.md)")


@dataclass(frozen=True)
class RunSpec:
    """A federated run (``bench.run``: one per model) as every command declares it. Field order and
    names are what results files record (``config``)."""

    models: tuple[str, ...] = flag("--models", help=f"several models: {MODEL_HELP}", nargs="+", metavar="MODEL",
                                   default=(), to_field=_tuple, commands=ALL)  # (): the preset's
    methods: tuple[str, ...] | None = flag(
        "--methods", nargs="+", metavar="METHOD", to_field=_tuple, unset="the preset's [run] methods",
        help="FL methods (fedavg, fedprox+spherefed, spherefed+ffc, ...: docs/fl.md; yours: package.module:Class), "
             "separated by spaces, each once; a name means the same method in every command (ffc alone is "
             "spherefed+ffc, ccvr alone fedavg+ccvr)", commands=ALL)
    batch_size: int = flag("--batch-size", type=cli.int_in(1, checks.BATCH_SIZE_MAX), default=64, commands=(RUN,),
                           help=f"local batch size of the priced step (at most {checks.BATCH_SIZE_MAX:,})")
    seed: int | None = flag("--seed", type=cli.int_in(0, checks.SEED_MAX), unset="the preset's", commands=ALL,
                            help=f"0 to {checks.SEED_MAX:,}: partition, initial weights, sampling, shuffling")
    preset: str = flag("--preset", default="quick",
                       help="the federated run's settings: a name under configs/presets/ (quick, smoke, small, paper, "
                            "...) or a .toml path", commands=ALL)
    data_dir: str | None = flag("--data-dir", metavar="DIR",
                                help="the dataset's folder (CIFAR-10/100, TinyImageNet); not for the offline "
                                     f"{' or '.join(PACKAGED_DATASETS)}")
    hw_path: str | None = flag("--hw", nargs="+", metavar="HW_TOML",
                               help="hardware TOML of the modeled accelerator (default: the paper's); bench.run prices "
                                    "several side by side, the first the run's (docs/byom.md)", commands=ALL)
    alpha: float | None = flag("--alpha", type=cli.finite_float(positive=True), unset="the preset's",
                               help="Dirichlet concentration of the partition")
    target_accuracy_pct: float | None = flag(
        "--target", type=cli.finite_float(positive=True, high=100.0), metavar="PCT", commands=(RUN,),
        help="time-to-accuracy target, test accuracy in percent (default: the preset's [targets] accuracy_pct, else "
             "the covering reference study's declared target)")
    system_path: str = flag("--system", default=cli.Default(DEFAULT_SYSTEM_PATH), metavar="SYSTEM_TOML",
                            help="system-model TOML of the priced rounds: the clients' links and devices "
                                 "(default configs/system/default.toml; docs/rounds.md)", commands=ALL)
    input_shape: tuple[int, int, int] | None = flag(
        "--input-shape", metavar="C,H,W", commands=(RUN,), to_field=_input_shape,
        help="one sample's input shape, priced and trained (3,S,S; default: 3,32,32 priced, the preset's size trained)")
    classifier: str | None = flag("--classifier", metavar="DOTTED.NAME",
                                  help="the nn.Linear of a user model the methods act on (default: its last)")
    classes: int = flag("--classes", type=cli.int_in(2, checks.CLASSES_MAX), default=100, commands=(RUN,),
                        help=f"classes of the priced figures (at most {checks.CLASSES_MAX:,})")
    compare_hw: tuple[str, ...] = ()  # every --hw when several are given (bench.run); the first is hw_path
    workers: int | None = flag(
        "--workers", type=cli.int_in(1, checks.WORKERS_MAX), metavar="N", commands=(RUN,), resource=True,
        help="work side by side in N processes: bench.run, bench.study and bench.grid their runs (bench.run gives "
             "each cores/N torch threads, a study's or grid's run its --resources-per-run cpus; on a GPU the N share "
             "it), bench.dse chunks of the design space; 1: one after another in this process")
    device: str = flag("--device", default="auto",
                       help=f"where the federated runs train: {DEVICE_CHOICES} (auto: CUDA when torch sees one, else "
                            "the CPU)")
    augment: bool | None = flag("--augment", action=argparse.BooleanOptionalAction,
                                help="random crop (4-pixel padding) + horizontal flip of every training batch, seeded, "
                                     "on the device (our option; the paper is silent; default: the preset's, else off)")
    channels_last: bool | None = flag("--channels-last", action=argparse.BooleanOptionalAction,
                                      help="NHWC memory format (throughput; default: the preset's, else off)")
    bf16: bool | None = flag("--bf16", action=argparse.BooleanOptionalAction,
                             help="bfloat16 autocast of forward and loss (throughput; changes numerics; default: the "
                                  "preset's, else off)")
    compile: bool | None = flag("--compile", action=argparse.BooleanOptionalAction,
                                help="torch.compile the client model's forward (throughput; default: the preset's, "
                                     "else off)")
    clients_together: bool | None = flag(
        "--clients-together", action=argparse.BooleanOptionalAction,
        help="train each round's clients as one batched computation (torch.func.vmap over stacked models; "
             "throughput; equal to one after another to float rounding; a run it cannot batch says so and trains "
             "them one after another: docs/fl.md; default: the preset's, else off)")
    capture_step: bool | None = flag(
        "--capture-step", action=argparse.BooleanOptionalAction,
        help="record each round's local step once and replay it, a CUDA graph on a GPU (one launch per step; the "
             "sequential loop's results, bit for bit on the CPU, where it gains nothing); a run it cannot record "
             "says so and trains as before (docs/fl.md, \"A recorded step\"; default: the preset's, else off)")
    client_threads: int = flag(
        "--client-threads", type=cli.int_in(1, checks.THREADS_MAX), default=1, metavar="N", resource=True,
        help="train N of each round's clients at once, each on its own thread (and CUDA stream on a GPU); the "
             "sequential loop's code per client, equal to one after another bit for bit on the CPU; with --threads 1 "
             "on a CPU of N cores (docs/fl.md, \"Clients at once\"); 1: one after another")
    number_format: str | None = flag(
        "--number-format", metavar="FORMAT",
        help="the clients' arithmetic: every GEMM operand of local training rounded to fp32, bf16, fp16, e4m3, e5m2, "
             "scaled FP8 (e4m3_cs, e4m3_ds, e5m2_cs, e5m2_ds, fp8_hybrid_cs, fp8_hybrid_ds), OCP MX (mxfp8_e4m3, "
             "mxfp8_e5m2, mxfp6_e3m2, mxfp6_e2m3, mxfp4_e2m1, mxint8; _ru: scale rounded up) or "
             "bfp_m<mantissa bits>_g<group size>, a _sr suffix for stochastic rounding (docs/numerics.md; default: "
             "the preset's, else fp32)")
    low_precision_weights: bool | None = flag(
        "--low-precision-weights", action=argparse.BooleanOptionalAction,
        help="store the clients' GEMM weights in --number-format after every local step, with no FP32 master copy "
             "(Li et al., NeurIPS 2024; priced so: docs/numerics.md; default: the preset's, else off)")
    precision_schedule: str | None = flag(
        "--precision-schedule", metavar="SCHEDULE",
        help="the clients' number format per round instead of --number-format: ROUND:FORMAT,... (1:bfp_m2_g16_sr,"
             "11:bfp_m4_g16_sr: each format from its round on) or a shipped schedule (fast: after FAST, HPCA 2022); each "
             "round trained and priced in its own format (docs/numerics.md; default: the preset's, else none)")
    server_average: float | None = flag(
        "--server-average", type=cli.finite_float(low=0.0, high=1.0), metavar="DECAY",
        help="the server keeps an exponential moving average of the aggregated models, a_t = DECAY a_(t-1) + "
             "(1 - DECAY) w_t from round 2 (round 1: its aggregate), and evaluates and sends that average (Li et "
             "al., NeurIPS 2024; their code: 0.9); in [0, 1), 0: none (docs/numerics.md; default: the preset's, "
             "else 0)")
    comm_format: str | None = flag(
        "--comm-format", metavar="FORMAT",
        help="send the model and its updates rounded to this format, the ledger charging its packed payload "
             "(docs/numerics.md; default: the preset's, else fp32)")
    fleet_path: str | None = flag(
        "--fleet", metavar="FLEET_TOML",
        help="fleet TOML (or a name under configs/fleets/): each client's device class, memory, link and "
             "availability; rounds with a deadline aggregate only the clients that arrive (docs/fleets.md); "
             "replaces --system", commands=ALL)
    deadline_s: float | None = flag("--deadline-s", type=float, metavar="S",
                                    help="with --fleet: the round's reporting deadline in seconds, instead of the "
                                         "fleet file's (inf: none); a deadline sweep over one fleet file", commands=ALL)
    overcommit: float | None = flag("--overcommit", type=float, metavar="X",
                                    help="with --fleet: sample ceil(X x wanted) clients per round, instead of the "
                                         "fleet file's over-commitment (1 to 10)", commands=ALL)
    rounds: int | None = flag("--rounds", type=cli.int_in(1, checks.ROUNDS_MAX), commands=(FL, FLOWER),
                              unset="the preset's", help="rounds of the federated run")
    holdout: float | None = flag("--holdout", type=cli.finite_float(low=0.0, high=0.95), metavar="FRACTION",
                                 commands=(FL,),
                                 help="validation hold-out drawn from train before partitioning (Sec. 5.1: 0.15; "
                                      "default: the preset's)")
    lr_from: str = flag("--lr-from", choices=LR_SOURCES, default="preset",
                        help="where every method's learning rate (and the study's other searched values) comes from: "
                             "preset (its [hparams] and [methods.<name>] tables) or study (a reference study's "
                             "choice on validation where one covers the run, else the preset's); printed and "
                             "recorded per method")

    @property
    def execution_flags(self) -> dict[str, bool | str | None]:
        """The execution options given (``workloads.fl.execution.SETTINGS``; None: the preset's)."""
        return {k: getattr(self, k) for k in SETTINGS}

    def execution(self, preset) -> Execution:
        """Where and how the runs train: ``device``, and each option from its flag or the preset's
        ``[execution]`` table (``workloads.fl.execution.execution_of``), and every run option set
        beyond them (``run_options``), which the trainer reads by name (``Execution.run_option``)."""
        return replace(execution_of(self.device, self.execution_flags, preset.execution, rounds=preset.fl.rounds),
                       client_threads=self.client_threads, run_options=self.run_options())

    def run_options(self) -> tuple[tuple[str, Any], ...]:
        """(name, value) of every field of ``identity_fields`` set to another value than its default:
        a run option added as one field reaches the trainer (``Execution.run_options``) and every
        identity (``bench.fl``'s folder hash, the checkpoint's fingerprint, ``results.json``) by it;
        a field at its default is left out, so every run without it keeps its identity."""
        return tuple((f.name, _frozen(getattr(self, f.name))) for f in fields(self)
                     if f.name in identity_fields(type(self)) and getattr(self, f.name) != _field_default(f))

    def model_spec(self, model: str, input_shape: tuple[int, ...] | None = None) -> ModelSpec:
        """``model`` at ``input_shape`` (default: ``input_shape``, else 3x32x32) with ``classifier``."""
        return ModelSpec(model, input_shape or self.input_shape or DEFAULT_INPUT_SHAPE, self.classifier)


RESOLVED_FIELDS = ("models", "methods", "batch_size", "seed", "preset", "data_dir", "hw_path", "alpha",
                   "target_accuracy_pct", "system_path", "input_shape", "classifier", "classes", "compare_hw", "device",
                   *SETTINGS, "fleet_path", "deadline_s", "overcommit", "rounds", "holdout", "lr_from")
"""The fields that reach a run's identity through what they resolve to, as they did before identities
came from the fields (so their runs keep their ids): the preset's ``FLConfig`` (preset, seed, rounds,
hold-out, alpha, model), the methods and their hyper-parameters (``lr_from``), the hardware, the
system, the fleet and its round rule, the execution options (``workloads.fl.execution.SETTINGS``),
``bench.run``'s priced shapes (its summary records every field), and where the data is read
(``data_dir``: a location, the dataset is the preset's)."""


def identity_fields(cls: type = None) -> tuple[str, ...]:
    """The fields of ``cls`` (default ``RunSpec``) whose own value is part of a run's identity: every
    field but ``RESOLVED_FIELDS`` and those declared ``resource`` (``flag(resource=True)``: threads,
    workers, client threads), so a field added to ``RunSpec`` is one by default."""
    return tuple(f.name for f in fields(cls or RunSpec)
                 if f.name not in RESOLVED_FIELDS and not f.metadata.get("resource", False))


def is_resource(name: str, cls: type = None) -> bool:
    """Whether field ``name`` is declared a resource (``flag(resource=True)``)."""
    return next(f for f in fields(cls or RunSpec) if f.name == name).metadata.get("resource", False)


def _frozen(value: Any) -> Any:
    """A list (a flag of several values) as a tuple: an ``Execution`` stays hashable."""
    return tuple(value) if isinstance(value, list) else value


def _field_default(f) -> Any:
    return None if f.default is MISSING else f.default


COMMAND_DEFAULTS = {RUN: {"methods": ("fedavg", "spherefed", "ccvr", "ffc"), "lr_from": "study"}}
"""Where a command's default differs from the field's: ``bench.run`` prices and trains the paper's four
methods on the reference study's rates where one covers the run (its main job's printout, kept)."""
REQUIRED = {FL: ("preset",)}  # bench.fl names its preset


def spec_flags(command: str) -> list[tuple[str, Flag]]:
    """(field, flag) of every ``RunSpec`` field that ``command`` takes, in field order."""
    return [(f.name, f.metadata["flag"]) for f in fields(RunSpec)
            if "flag" in f.metadata and command in f.metadata["flag"].commands]


def _default(name: str, command: str | None) -> Any:
    if command in COMMAND_DEFAULTS and name in COMMAND_DEFAULTS[command]:
        return COMMAND_DEFAULTS[command][name]
    f = next(f for f in fields(RunSpec) if f.name == name)
    return None if f.default is MISSING else f.default


def _add(parser, name: str, spec_flag: Flag, command: str | None, default: Any) -> None:
    default = None if name in REQUIRED.get(command, ()) else default
    shown = (" ".join(default) or None) if isinstance(default, tuple) else default
    if shown is None:
        shown = spec_flag.unset
    help_text = spec_flag.help + (f" (default {shown})" if shown is not None and "default" not in spec_flag.help
                                  and spec_flag.settings.get("action") is None else "")
    required = name in REQUIRED.get(command, ())
    parser.add_argument(*spec_flag.names, dest=name, help=help_text, default=default, required=required,
                        **spec_flag.settings)


def add_flags(parser, command: str, names: Sequence[str] | None = None, *, several_models: bool = False,
              **defaults: Any) -> None:
    """``command``'s run flags on ``parser`` (``names``: only those fields', for a command that is
    not turned into a ``RunSpec``; ``defaults``: that command's own defaults). ``--model`` (one
    model) comes with ``models``, and ``--models`` too where the command takes several (``bench.run``,
    ``several_models``); ``models_of`` reads them. A default for no flag of these is a TypeError
    (it would be ignored)."""
    chosen = {f.name: f.metadata["flag"] for f in fields(RunSpec) if "flag" in f.metadata} if names else \
        dict(spec_flags(command))
    given = [name for name in chosen if not names or name in names]
    checks.unknown_keys(defaults, [*given, *(["model"] if "models" in given else [])], where="add_flags defaults",
                        error=TypeError)
    for name, spec_flag in chosen.items():
        if names and name not in names:
            continue
        if name == "models":
            parser.add_argument("--model", dest="model", default=defaults.get("model"), help=f"one model: {MODEL_HELP}")
            if command != RUN and not several_models:
                continue
        _add(parser, name, spec_flag, command, defaults.get(name, _default(name, command)))


def models_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The models of ``--model`` or ``--models`` (``add_flags``); ValueError when both are given."""
    several = getattr(args, "models", None)
    if getattr(args, "model", None) and several:
        raise ValueError(f"give either --model {args.model} or --models {' '.join(several)}, not both")
    return tuple(several) if several else ((args.model,) if getattr(args, "model", None) else ())


def from_args(args: argparse.Namespace, command: str) -> RunSpec:
    """The parsed command line (``add_flags``) as a ``RunSpec``; ValueError naming a bad flag."""
    values: dict[str, Any] = {}
    for name, spec_flag in spec_flags(command):
        value = getattr(args, name, None) if name != "models" else None
        values[name] = spec_flag.to_field(value) if spec_flag.to_field else value
    values["models"] = models_of(args)
    hws = tuple(values.pop("hw_path") or ())
    values["hw_path"] = hws[0] if command == RUN and hws else one_hw(hws, command)
    values["compare_hw"] = hws if len(hws) > 1 else ()
    return RunSpec(**values)


def one_hw(hws: Sequence[str] | None, command: str) -> str | None:
    """The one ``--hw`` file of a command that prices on one accelerator (None: not given)."""
    if hws and len(hws) > 1:
        raise ValueError(f"--hw {' '.join(hws)}: {command} prices its rounds on one accelerator; give one file "
                         "(python -m bench.run --hw A.toml B.toml prices several side by side)")
    return hws[0] if hws else None


def from_point(point: Mapping[str, Any], command: str, *, where: str) -> RunSpec:
    """A grid point (``point_argv``) as the ``RunSpec`` its command line is: parsed by ``command``'s
    own run flags, each key first on its own so that an error names the key. ``where`` names the
    point in errors."""
    parser = cli.Parser(prog=f"python -m {command}", add_help=False)
    add_flags(parser, command)
    actions = {n.removeprefix("--").replace("-", "_"): a for a in parser._actions
               for n in a.option_strings if not n.startswith("--no-")}
    checks.unknown_keys(point, actions, where=where)
    for key, value in point.items():
        _check_type(key, value, actions[key], where)
    point = {k: ",".join(map(str, v)) if actions[k].nargs is None and isinstance(v, list) else v
             for k, v in point.items()}
    required = {k: point[k] for k in REQUIRED.get(command, ()) if k in point}  # each key parsed with them
    for key, value in point.items():
        try:
            parser.parse_args(point_argv({**required, key: value}))
        except ValueError as err:
            raise ValueError(f"{where}: grid setting {key} = {value!r}: {str(err).split(' (python -m')[0]}") from None
    return from_args(parser.parse_args(point_argv(point)), command)


def _check_type(key: str, value: Any, action: argparse.Action, where: str) -> None:
    """A grid value has its flag's TOML type: a boolean for a switch, a number for a numeric flag,
    text otherwise (a list of them for a flag of several values, or of a shape's numbers)."""
    if isinstance(action, argparse.BooleanOptionalAction):
        wanted, ok = "true or false", isinstance(value, bool)
    else:
        numeric = action.type is not None
        items = value if isinstance(value, list) and (action.nargs is not None or not numeric) else [value]
        if numeric:
            wanted = "a number"
            ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items)
        else:
            wanted = "text (or a list of it)" if action.nargs else "text"
            ok = all(isinstance(v, str) or (key == "input_shape" and isinstance(v, int)) for v in items)
    if not ok:
        raise ValueError(f"{where}: grid setting {key} = {value!r} must be {wanted}")


def point_argv(point: Mapping[str, Any]) -> list[str]:
    """A grid point as the command line it stands for: each key ``k`` is the flag ``--k`` with
    ``_`` as ``-`` (``deadline_s`` is ``--deadline-s``), a list one value each, a boolean
    ``--k`` / ``--no-k``. ValueError for a value that is no flag's (a table, an empty list).""" 
    argv: list[str] = []
    for key, value in point.items():
        name = "--" + key.replace("_", "-")
        values = value if isinstance(value, list) else [value]
        if not values or any(isinstance(v, (dict, list)) for v in values):
            raise ValueError("give a value or a non-empty list of values")
        if isinstance(value, bool):
            argv.append(name if value else f"--no-{name[2:]}")
            continue
        argv += [name, *(_text(v) for v in values)]
    return argv


def _text(value: Any) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return str(value)

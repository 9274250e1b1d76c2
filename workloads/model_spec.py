"""Bring your own model: any ``nn.Module`` as an :class:`~workloads.models.FLNet` (docs/byom.md).

A model is named, wherever the CLIs take a model, by

* one of the paper's five (``mobilenetv2``, ..., :data:`workloads.models.MODELS`);
* ``package.module:factory``: ``factory`` (a function or class) of a module importable from the
  current directory or ``PYTHONPATH``, called with ``num_classes=C`` when its signature names
  ``num_classes``, else with no argument;
* ``torchvision:NAME`` or ``timm:NAME`` (the optional extra ``pip install -c constraints.txt -e
  '.[models]'``), built without weights (``weights=None`` / ``pretrained=False``): a trace needs none.

Every FL method and bench's calibration act on ``model.classifier`` and ``model.features(x)``, so
a user's module is wrapped as ``FLNet(body=module, feature_dim=l, num_classes=C)``:

1. the classifier is the module's last ``nn.Linear`` (module order), or the one named by
   ``classifier=`` (``--classifier DOTTED.NAME``);
2. one forward pass of a copy on the ``meta`` device (no arithmetic) checks that the classifier's
   output *is* the model's output, and that its input is ``[B, l]``; otherwise the classifier is
   not the last operation and the methods could not act on it (a clear error says so);
3. the classifier is replaced by ``nn.Identity()`` inside the module, which becomes FLNet's body;
   FLNet adds the method's head (``workloads.models.Head``: FeatureNorm for SphereFed) and its own
   ``Linear(l, C, bias=False)``.

The user's classifier is thus replaced, bias included, by the bias-free ``FC(l, C)`` of the
paper's models (Dong et al., "SphereFed: Hyperspherical Federated Learning", ECCV 2022, appendix
0.F.1): SphereFed's fixed orthonormal classifier must be bias-free, and FedAvg, FFC and CCVR are
priced on the same head for a like-for-like comparison. A model without a bias in its head is
priced exactly; one with a bias loses ``C`` additions per sample, which no GEMM counts.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import importlib.util
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from iokit.dotted import first_line, import_attribute, is_dotted
from workloads.models import MODELS, SUPPORTED_IMAGE_SIZES, FLNet, Head, build_model

DEFAULT_INPUT_SHAPE: tuple[int, int, int] = (3, 32, 32)
LIBRARIES: tuple[str, ...] = ("torchvision", "timm")
EXTRA_INSTALL = "pip install -c constraints.txt -e '.[models]'"
CHECK_BATCH = 2  # batch of the meta forward that checks the classifier (BatchNorm needs B > 1)


class ModelSpecError(ValueError):
    """A model named or shaped so that it cannot be built; the message is one line with the fix."""


@dataclass(frozen=True)
class ModelSpec:
    """What to build: a model name, one sample's input shape and (optionally) the classifier."""

    name: str  # "mobilenetv2", "package.module:factory", "torchvision:resnet50", "timm:..."
    input_shape: tuple[int, int, int] = DEFAULT_INPUT_SHAPE  # C, H, W of one sample
    classifier: str | None = None  # dotted name of the nn.Linear to use; None: the last one


def parse_input_shape(text: str) -> tuple[int, int, int]:
    """``"3,32,32"`` -> (3, 32, 32); ModelSpecError otherwise."""
    try:
        shape = tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise ModelSpecError(f"--input-shape {text!r}: give C,H,W as three positive integers, e.g. 3,32,32")
    return shape  # type: ignore[return-value]


def _import_library(library: str):
    """``torchvision`` or ``timm``, or a one-line error with the pip command."""
    if importlib.util.find_spec(library) is None:
        raise ModelSpecError(f"{library} models need the optional extra: {EXTRA_INSTALL}")
    _allow_torchvision_without_ops()
    return importlib.import_module(library)


def _allow_torchvision_without_ops() -> None:
    """Let torchvision import beside the CPU torch wheel when its C++ ops cannot load.

    PyPI's torchvision 0.28.0 wheel is linked against the CUDA build of torch 2.13.0
    (``libtorch_cuda.so``); beside the CPU wheel its ``_C`` extension does not load, and its
    import then stops at registering fake kernels for ``torchvision::nms`` / ``qnms``, ops that
    only ``_C`` defines ("operator torchvision::nms does not exist"). The models need none of
    torchvision's ops (they are detection ops), so when ``_C`` cannot load, the two schemas are
    defined here without kernels: calling them still fails, building and running models works.
    """
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    if _has_schema("torchvision::nms"):  # loaded already (by torchvision, or defined here before)
        return
    so = next(Path(spec.submodule_search_locations[0]).glob("_C*.so"), None)
    try:
        if so is not None:
            torch.ops.load_library(str(so))
            return
    except OSError:
        pass
    for op in ("nms", "qnms"):
        torch.library.define(f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


def _has_schema(qualname: str) -> bool:
    try:
        torch._C._get_schema(qualname, "")
    except RuntimeError:
        return False
    return True


def _library_factory(library: str, model: str) -> Callable[..., nn.Module]:
    lib = _import_library(library)
    if library == "torchvision":
        known = lib.models.list_models()
        build = lambda **kw: lib.models.get_model(model, weights=None, **kw)  # noqa: E731
    else:
        known = lib.list_models()
        build = lambda **kw: lib.create_model(model, pretrained=False, **kw)  # noqa: E731
    if model not in known:
        close = difflib.get_close_matches(model, known, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"see {library}'s list_models()"
        raise ModelSpecError(f"{library} has no model {model!r}; {hint}")
    return build


def load_factory(name: str) -> tuple[Callable[..., nn.Module], bool]:
    """(factory, takes_num_classes) for ``module:factory``; ModelSpecError with the fix otherwise."""
    module_name, _, attr = name.partition(":")
    if module_name in LIBRARIES and attr:
        return _library_factory(module_name, attr), True
    factory = import_attribute(name, role="model", kind="model factory", form="package.module:factory (e.g. mynets:small_cnn)",
                               wanted="a function of yours that returns an nn.Module (docs/byom.md)",
                               error=ModelSpecError)
    if isinstance(factory, nn.Module) or not callable(factory):
        raise ModelSpecError(f"{name!r} is a {type(factory).__name__}, not a factory; name a function or "
                             "class that returns a new nn.Module")
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    return factory, "num_classes" in params


def find_classifier(module: nn.Module, name: str | None, model_name: str) -> tuple[str, nn.Linear]:
    if name is not None:
        try:
            found = module.get_submodule(name)
        except AttributeError:
            raise ModelSpecError(f"model {model_name!r} has no submodule {name!r} (--classifier); its Linear "
                                 f"layers: {_linear_names(module) or 'none'}") from None
        if not isinstance(found, nn.Linear):
            raise ModelSpecError(f"--classifier {name!r} of model {model_name!r} is a {type(found).__name__}, "
                                 f"not an nn.Linear; its Linear layers: {_linear_names(module) or 'none'}")
        return name, found
    linears = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ModelSpecError(f"model {model_name!r} has no nn.Linear to act as classifier; end it with "
                             "nn.Linear(features, classes) (the FL methods act on that layer)")
    if linears[-1][0] == "":
        raise ModelSpecError(f"model {model_name!r} is a single nn.Linear; it needs layers before its classifier")
    return linears[-1]


def _linear_names(module: nn.Module) -> str:
    return ", ".join(n for n, m in module.named_modules() if isinstance(m, nn.Linear) and n)


def _check_classifier_is_output(module: nn.Module, classifier: str, input_shape, model_name: str) -> None:
    """Forward a copy on ``meta``: the classifier's output must be the model's output, its input [B, l]."""
    probe = copy.deepcopy(module).to("meta").eval()
    seen = {}
    hook = probe.get_submodule(classifier).register_forward_hook(
        lambda _m, args, out: seen.update(inp=args[0], out=out))
    try:
        out = probe(torch.empty(CHECK_BATCH, *input_shape, device="meta"))
    except (Exception, SystemExit) as exc:  # the model's own message tells the user what shape it wants
        shape = ",".join(map(str, input_shape))
        exc = _cpu_error(module, input_shape) or exc
        raise ModelSpecError(f"model {model_name!r} rejects input shape {shape} (--input-shape C,H,W): "
                             f"{type(exc).__name__}: {first_line(exc)}") from None
    finally:
        hook.remove()
    if "out" not in seen or out is not seen["out"]:
        raise ModelSpecError(f"the output of {classifier!r} is not the output of model {model_name!r}, so the FL "
                             "methods cannot act on it; name the last layer with --classifier DOTTED.NAME, "
                             "or end the model with its classifier")
    if seen["inp"].dim() != 2:
        raise ModelSpecError(f"classifier {classifier!r} of model {model_name!r} gets a "
                             f"{seen['inp'].dim()}-D input; flatten or pool the features to [batch, features] first")


def _cpu_error(module: nn.Module, input_shape) -> Exception | None:
    """The error a CPU forward raises (meta kernels word some checks tersely: "Invalid channel
    dimensions" where the CPU kernel names the expected and the given shapes); None if it runs."""
    try:
        with torch.no_grad():
            copy.deepcopy(module).eval()(torch.zeros(CHECK_BATCH, *input_shape))
    except (Exception, SystemExit) as exc:
        return exc
    return None


def wrap_module(module: nn.Module, *, num_classes: int, head: Head = Head(), input_shape=DEFAULT_INPUT_SHAPE,
                classifier: str | None = None, model_name: str = "model") -> FLNet:
    """``module`` (modified in place: its classifier becomes ``nn.Identity``) as FLNet's body."""
    if not isinstance(module, nn.Module):
        raise ModelSpecError(f"model {model_name!r} is a {type(module).__name__}, not an nn.Module")
    name, linear = find_classifier(module, classifier, model_name)
    _check_classifier_is_output(module, name, tuple(input_shape), model_name)
    module.set_submodule(name, nn.Identity())
    return FLNet(module, linear.in_features, num_classes, head)


def build(spec: ModelSpec, *, num_classes: int, head: Head = Head(), norm: str = "bn") -> FLNet:
    """The FLNet of ``spec`` with ``head`` (the method's, ``MethodConfig.head``): a paper model
    (``norm`` applies) or a wrapped external one."""
    if not is_dotted(spec.name):
        c, h, w = spec.input_shape
        if c != 3 or h != w or h not in SUPPORTED_IMAGE_SIZES:
            raise ModelSpecError(f"model {spec.name!r} takes 3xSxS inputs with S in {list(SUPPORTED_IMAGE_SIZES)}, "
                                 f"not {','.join(map(str, spec.input_shape))} (set by --input-shape, or by a preset's "
                                 "image_size)")
        if spec.name not in MODELS:
            raise ModelSpecError(f"unknown model {spec.name!r}; choose from {sorted(MODELS)} or name your own "
                                 "as package.module:factory")
        return build_model(spec.name, num_classes=num_classes, image_size=h, norm=norm, head=head)
    factory, takes_classes = load_factory(spec.name)
    try:
        module = factory(num_classes=num_classes) if takes_classes else factory()
    except (Exception, SystemExit) as exc:  # a factory that exits must not end the command silently
        raise ModelSpecError(f"building model {spec.name!r} failed: {type(exc).__name__}: {first_line(exc)}") from None
    if not isinstance(module, nn.Module):
        raise ModelSpecError(f"{spec.name!r} returned a {type(module).__name__}, not an nn.Module")
    return wrap_module(module, num_classes=num_classes, head=head, input_shape=spec.input_shape,
                       classifier=spec.classifier, model_name=spec.name)


def as_spec(model: str | ModelSpec, image_size: int = DEFAULT_INPUT_SHAPE[1]) -> ModelSpec:
    """A spec as is; a name as a spec of 3 x image_size x image_size inputs (the paper models' shape)."""
    return model if isinstance(model, ModelSpec) else ModelSpec(model, (3, image_size, image_size))


def example_batch(spec: ModelSpec, batch_size: int, *, device: str = "meta") -> torch.Tensor:
    """A zero batch ``[B, C, H, W]`` of the spec's input shape."""
    return torch.zeros(batch_size, *spec.input_shape, device=device)

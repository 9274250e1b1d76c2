"""SphereFed as a method modifier (issue 52): the models take a ``Head`` (``feature_norm``,
``fixed_head``), the modifier (``workloads.fl.methods.spherefed``) applies it through the method
hooks, and nothing outside the methods and the models names it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from fl_standins import TinyNet, blobs
from workloads.cost.step import method_step_trace
from workloads.fl.comm import closed_form_sizes
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.local import loss_function, per_sample_loss, prepare_model
from workloads.fl import loop
from workloads.fl.loop import RunPlan
from workloads.fl.methods import MODIFIERS, NO_MODIFIER, MethodConfig, parse_method
from workloads.fl.methods.base import trainable_keys
from workloads.fl.methods.etf import TEMPERATURE, simplex_etf
from workloads.fl.methods.spherefed import SphereFed, mse_onehot_loss, orthonormal_classifier
from workloads.fl.partition import dirichlet_partition
from workloads.models import Head, build_model

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("iokit", "accel_sim", "workloads", "bench")  # pyproject's packages: the suite's code
OWNERS = ("workloads/fl/methods/", "workloads/models.py", "workloads/model_spec.py")  # the methods and the models
WORD = "spherefed"
MOST_MODULES = 3


def _names(text: str | None) -> bool:
    return isinstance(text, str) and WORD in text.lower()


def _literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and _names(node.value)


def spherefed_uses(source: str) -> list[int]:
    """The lines where ``source`` uses SphereFed as code: an identifier (a name, a parameter, a
    function, class or import), an attribute, a keyword argument, or a string it compares, indexes
    or keys a dict with. Docstrings, comments and method names as plain string data
    (``"fedavg+spherefed+ffc"`` in a list of runs) are not uses."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        used = ((isinstance(node, ast.Name) and _names(node.id))
                or (isinstance(node, ast.Attribute) and _names(node.attr))
                or (isinstance(node, (ast.keyword, ast.arg)) and _names(node.arg))
                or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _names(node.name))
                or (isinstance(node, ast.alias) and (_names(node.name) or _names(node.asname)))
                or (isinstance(node, ast.ImportFrom) and _names(node.module))
                or (isinstance(node, ast.Compare) and any(map(_literal, [node.left, *node.comparators])))
                or (isinstance(node, ast.Subscript) and _literal(node.slice))
                or (isinstance(node, ast.Dict) and any(k is not None and _literal(k) for k in node.keys)))
        if used:
            lines.append(node.lineno)
    return sorted(lines)


def modules_naming_spherefed(root: Path = ROOT) -> dict[str, list[int]]:
    """Module path -> lines, for every module of ``PACKAGES`` outside ``OWNERS`` that uses SphereFed."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if not rel.startswith(OWNERS) and (lines := spherefed_uses(path.read_text())):
                found[rel] = lines
    return found


def test_spherefed_is_named_in_at_most_three_modules_outside_the_methods_and_models():
    found = modules_naming_spherefed()
    assert len(found) <= MOST_MODULES, (
        f"{len(found)} modules outside the methods and the models name spherefed as code (at most "
        f"{MOST_MODULES}): {found}; ask the method (MethodConfig.head / .mod / .modifier) instead")


@pytest.mark.parametrize("source", [
    "build(spec, spherefed=True)", "x = method.spherefed", "def f(spherefed): pass",
    "from workloads.fl.methods.spherefed import orthonormal_classifier", "if part == 'spherefed': pass",
    "ok = 'spherefed' in parts", "rows['spherefed']", "table = {'spherefed': 1}", "spherefed = 1",
])
def test_the_count_sees_every_kind_of_use(source):
    assert spherefed_uses(source) == [1]


@pytest.mark.parametrize("source", [
    '"""SphereFed (Dong et al., ECCV 2022) fixes the classifier."""',
    "# spherefed", "methods = ('fedavg', 'fedavg+spherefed+ffc')",
])
def test_the_count_leaves_docs_and_method_names_as_data_alone(source):
    assert spherefed_uses(source) == []


def test_the_count_fails_on_a_planted_flag(tmp_path):
    """Main before issue 52 named it in 17 modules by this rule; a tree with four planted uses fails."""
    for i in range(MOST_MODULES + 1):
        (tmp_path / "bench").mkdir(exist_ok=True)
        (tmp_path / "bench" / f"m{i}.py").write_text("model = build(spec, spherefed=method.spherefed)\n")
    assert len(modules_naming_spherefed(tmp_path)) == MOST_MODULES + 1


def test_a_method_name_keeps_its_meaning():
    m = parse_method("fedprox+spherefed+ffc")
    assert m == MethodConfig("fedprox", "spherefed", "ffc") and m.name == "fedprox+spherefed+ffc"
    assert parse_method("ffc") == MethodConfig("fedavg", "spherefed", "ffc")  # FFC after its trained_with
    assert parse_method("spherefed").training.name == "fedavg+spherefed"
    assert parse_method("fedavg").mod is NO_MODIFIER and parse_method("spherefed").mod is MODIFIERS["spherefed"]
    assert parse_method("fedavg").head == Head() and parse_method("spherefed").head == Head(True, True)


@pytest.mark.parametrize("text,match", [
    ("spherefed+spherefed", "at most one base algorithm, one calibration and one modifier"),
    ("fedbabu+spherefed", "fedbabu defines its own head; it does not compose with spherefed"),
])
def test_a_bad_composition_says_so(text, match):
    with pytest.raises(ValueError, match=match):
        parse_method(text)


def test_the_head_is_built_as_the_method_asks():
    sphere = build_model("convnet", num_classes=10, image_size=16, head=SphereFed.head)
    plain = build_model("convnet", num_classes=10, image_size=16)
    assert not sphere.classifier.weight.requires_grad and plain.classifier.weight.requires_grad
    assert type(sphere.feature_norm).__name__ == "FeatureNorm" and type(plain.feature_norm).__name__ == "Identity"
    z = sphere.features(torch.randn(3, 3, 16, 16))
    torch.testing.assert_close(z.norm(dim=1), torch.ones(3))


@pytest.mark.parametrize("field", ["feature_norm", "fixed_head"])
def test_a_head_option_is_a_bool(field):
    with pytest.raises(ValueError, match=f"{field} must be True or False, got 1"):
        Head(**{field: 1})


def test_the_modifier_acts_through_the_hooks():
    """prepare_model fixes W of Eq. 4 from the seed and freezes it; the loss is Eq. 5 (batch mean
    and per sample: mean over C of (o - onehot)^2, here o = [[1, 0], [0, 0]], y = [0, 1]:
    sample 0: ((1-1)^2 + 0^2) / 2 = 0; sample 1: (0^2 + (0-1)^2) / 2 = 0.5; mean 0.25)."""
    method = parse_method("fedprox+spherefed")
    model = prepare_model(TinyNet(head=method.head), method, seed=7)
    assert torch.equal(model.classifier.weight, orthonormal_classifier(4, 12, seed=7))
    assert "classifier.weight" not in trainable_keys(model)
    o, y = torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.tensor([0, 1])
    assert loss_function(method) is mse_onehot_loss and float(loss_function(method)(o, y)) == 0.25
    assert per_sample_loss(method)(o, y).tolist() == [0.0, 0.5]
    plain = parse_method("fedprox")
    assert loss_function(plain) is torch.nn.functional.cross_entropy
    torch.testing.assert_close(per_sample_loss(plain)(o, y), torch.nn.functional.cross_entropy(o, y, reduction="none"))


def test_the_modifier_refuses_a_model_without_its_head():
    with pytest.raises(ValueError, match="SphereFed needs a model built with its head"):
        prepare_model(TinyNet(), parse_method("spherefed"), seed=0)


# ---------------------------------------------------------------- a second modifier, one file: FedETF's fixed head

def test_the_simplex_etf_has_unit_rows_at_equal_angles():
    """C = 4 unit vectors, pairwise cosine -1/(C-1) = -1/3 (FedETF Sec. 3): M^T M = (4/3) I - (1/3) 1 1^T,
    and they sum to zero (the centering I - (1/C) 1 1^T)."""
    w = simplex_etf(4, 12, seed=3).double()
    torch.testing.assert_close(w @ w.T, (4 / 3) * torch.eye(4, dtype=torch.float64) - 1 / 3, atol=1e-6, rtol=0)
    torch.testing.assert_close(w.sum(0), torch.zeros(12, dtype=torch.float64), atol=1e-6, rtol=0)
    assert not torch.equal(w, simplex_etf(4, 12, seed=4).double())  # seeded, as SphereFed's W


@pytest.mark.parametrize("classes,features", [(1, 12), (13, 12)])
def test_the_simplex_etf_refuses_sizes_it_cannot_fit(classes, features):
    assert "2 <= classes <= features" in MODIFIERS["etf"].unfit(classes, features)
    with pytest.raises(ValueError, match="2 <= classes <= features"):
        simplex_etf(classes, features, seed=0)


def test_etf_composes_with_any_base_and_trains_its_body_only():
    """fedprox+etf: two rounds on the blobs; the classifier stays beta * M^T of the run's seed, is never
    sent (the closed form's sizes equal SphereFed's: TinyNet's layers [824, 624] B, no head bytes,
    1344 trainable B; docs in tests/test_fl_comm.py), and the loss is cross entropy."""
    method = parse_method("fedprox+etf")
    assert method.name == "fedprox+etf" and method.head == Head(True, True)
    assert loss_function(method) is torch.nn.functional.cross_entropy
    train = blobs(80)
    cfg = FLConfig(dataset="blobs", num_clients=2, rounds=2, seed=5)
    result = loop.train(RunPlan(method, model_fn=lambda: TinyNet(head=method.head), train=train, test=blobs(40, seed=1),
                                parts=dirichlet_partition(train.y.numpy(), 2, 1.0, min_size=5, seed=0), cfg=cfg,
                                hp=Hparams(lr=0.05, local_epochs=1, batch_size=16).with_knobs(method.knobs)))
    assert torch.equal(result.weights["classifier.weight"], TEMPERATURE * simplex_etf(4, 12, seed=5))
    assert result.weights["body.1.weight"].abs().sum() > 0
    sizes = closed_form_sizes(prepare_model(TinyNet(head=method.head), method, seed=0), method)
    assert (sizes.layer_bytes, sizes.head_bytes, sizes.trainable_bytes) == ((824, 624), 0, 1344)


def test_etf_drops_the_classifier_weight_gradient_as_spherefed_does():
    """The frozen head's saving is the fixed head's, not SphereFed's: a ConvNet step at batch 8
    (l = 256, C = 10) has FedAvg's GEMMs less the classifier's dW, m n k = 10 x 256 x 8."""
    def gemm_macs(name, role):
        trace = method_step_trace("convnet", name, batch_size=8, num_classes=10, image_size=16)
        return sum(op.work.m * op.work.n * op.work.k for op in trace.ops if op.work.kind == "gemm" and op.work.role == role)
    assert gemm_macs("fedavg", "dw") - gemm_macs("etf", "dw") == 10 * 256 * 8
    assert gemm_macs("etf", "dw") == gemm_macs("spherefed", "dw")
    assert gemm_macs("etf", "fwd") == gemm_macs("fedavg", "fwd")

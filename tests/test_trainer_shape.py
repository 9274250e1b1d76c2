"""The trainer's shape (issue 52): ``workloads/fl/loop.py`` small, no function of ``workloads/fl``
with more than 8 parameters, and one chooser of how a run's clients train, asked by the run and by
its forecast alike, so that the two cannot disagree."""

import ast
import inspect
from pathlib import Path

import pytest
import torch

from test_client_threads import dropout_net
from test_clients_together import PARTS, TEST, TRAIN, HP, conv_net
from workloads.fl import forecast as forecast_module
from workloads.fl import loop
from workloads.fl.execution import Execution
from workloads.fl.forecast import forecast
from workloads.fl.hparams import FLConfig
from workloads.fl.local import ClientContext, client_trainer, local_batches, shuffling_generator
from workloads.fl.loop import set_up
from workloads.fl.methods import parse_method
from workloads.fl.schedule import batch_starts
from workloads.fl.setup import RunPlan
from workloads.fl.ways import WAYS

FL = Path(__file__).resolve().parents[1] / "workloads" / "fl"
MOST_PARAMETERS = 8
LOOP_LINES = 450


def parameters(node: ast.FunctionDef) -> int:
    """A function's parameter count: positional, keyword-only, *args and **kwargs each count one;
    a method's self / cls does not."""
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None) - (names[:1] in (["self"], ["cls"]))


def parameter_counts() -> dict[str, int]:
    """Every function of workloads/fl (methods included) -> its parameter count."""
    return {f"{path.relative_to(FL.parents[1])}:{node.lineno} {node.name}": parameters(node)
            for path in sorted(FL.rglob("*.py")) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_counter_counts_parameters():
    # hand cases: f(a, b=1, *c, d, **e) has 5 (a, b, c, d, e); K.g(self, x) has 1; h() none
    tree = ast.parse("def f(a, b=1, *c, d, **e): pass\nclass K:\n    def g(self, x): pass\ndef h(): pass\n")
    assert [parameters(n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)] == [5, 0, 1]
    assert len(parameter_counts()) > 100  # it reads the package


def test_no_function_of_the_fl_package_takes_more_than_eight_parameters():
    over = {name: n for name, n in parameter_counts().items() if n > MOST_PARAMETERS}
    assert not over, f"functions with more than {MOST_PARAMETERS} parameters: {over} (group them in a frozen dataclass)"


def test_the_loop_module_is_small():
    assert len((FL / "loop.py").read_text().splitlines()) <= LOOP_LINES


CFG = FLConfig(dataset="blobs", num_clients=len(PARTS), rounds=1, seed=3)
CASES = {  # execution options, model -> the way both must choose
    "plain": ({}, conv_net, "one after another"),
    "together": ({"clients_together": True}, conv_net, "together"),
    "together, a format refuses it": ({"clients_together": True, "number_format": "bf16"}, conv_net, "one after another"),
    "threads": ({"client_threads": 2}, conv_net, "threads"),
    "threads, dropout refuses them": ({"client_threads": 2}, dropout_net, "one after another"),
    "recorded": ({"capture_step": True}, conv_net, "recorded"),
    "recorded, dropout refuses it": ({"capture_step": True}, dropout_net, "one after another"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_run_and_its_forecast_choose_the_same_way(case, monkeypatch, capsys):
    options, model, expected = CASES[case]
    method = parse_method("fedavg")
    parts = [torch.tensor(p).numpy() for p in PARTS]
    execution = Execution(**options)
    run_way = set_up(RunPlan(method, model_fn=lambda: model(), train=TRAIN, test=TEST, parts=parts,
                             cfg=CFG, hp=HP, execution=execution)).way
    chosen = []
    real = forecast_module.choose
    monkeypatch.setattr(forecast_module, "choose", lambda probe: chosen.append(real(probe)) or chosen[-1])
    ahead = forecast(method, model_fn=lambda: model(), train=TRAIN, parts=parts, cfg=CFG, hp=HP,
                     execution=execution)
    assert run_way == chosen[0].way.name == expected
    assert ahead.samples_per_s > 0
    fallbacks = [line for line in capsys.readouterr().err.splitlines() if line.startswith("--")]
    assert len(fallbacks) == ("refuses" in case)  # the run says once why not the way asked for; the forecast does not


def test_every_way_names_its_train_function_and_fallback_reason():
    assert set(WAYS) == {"together", "threads", "recorded", "one after another"}
    for name, way in WAYS.items():
        assert way.name == name and callable(way.train) and callable(way.fallback_reason) and callable(way.rate)


def test_a_client_trainer_takes_its_round_as_one_typed_object():
    # issue 52: client_trainer took the client's round as a ``**context`` catch-all checked by hand
    # against a list of names; now a misspelt field is Python's own TypeError, from ClientContext's
    # constructor or from client_trainer's signature, which has no catch-all
    kinds = {p.kind for p in inspect.signature(client_trainer).parameters.values()}
    assert not kinds & {inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL}
    with pytest.raises(TypeError, match="rounds"):
        ClientContext(rounds=2)
    model = conv_net()
    with pytest.raises(TypeError, match="round"):
        client_trainer(model, model.state_dict(), HP, parse_method("fedavg"), round=2)


def test_the_trainer_has_one_entry_which_takes_one_plan():
    # issue 52: ``run_method(method, **given)`` forwarded a catch-all into ``RunPlan``, a second
    # entry beside ``train(plan)``; now a caller builds the frozen plan and ``train`` takes it whole
    assert not hasattr(loop, "run_method") and "run_method" not in loop.__all__
    assert list(inspect.signature(loop.train).parameters) == ["plan"]
    fields = dict(model_fn=conv_net, train=TRAIN, test=TEST, parts=PARTS, cfg=CFG, hp=HP)
    assert RunPlan(parse_method("fedavg"), **fields, checkpoint="c.pt").checkpoint == "c.pt"
    with pytest.raises(TypeError, match="unexpected keyword argument 'chekpoint'"):  # Python's own, from the dataclass
        RunPlan(parse_method("fedavg"), **fields, chekpoint="c.pt")


def test_a_clients_batches_are_each_epochs_fresh_order_cut_at_the_batch_starts():
    # 5 samples in batches of 2: batch_starts(5, 2) = [0, 2] (the trailing single sample, at 4, is
    # skipped: BatchNorm cannot train on one); two epochs, each a new permutation drawn from the
    # client's CPU generator seeded 7, so 2 x 2 = 4 batches of 2 samples
    idx = torch.tensor([10, 11, 12, 13, 14])
    batches = [b.tolist() for b in local_batches(idx, shuffling_generator(7), batch_starts(5, 2), 2, epochs=2)]
    same_seed = torch.Generator().manual_seed(7)
    first, second = (idx[torch.randperm(5, generator=same_seed)].tolist() for _ in range(2))
    assert batches == [first[0:2], first[2:4], second[0:2], second[2:4]]
    assert first != second  # each epoch draws its own order

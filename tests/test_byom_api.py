"""bench.price, the Python API: docs/byom.md's example runs as written, and the API agrees with the CLI's
capture of the same step."""

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from bench import price
from workloads.model_spec import ModelSpecError

REPO = Path(__file__).resolve().parents[1]


def byom_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs/byom.md").read_text(), flags=re.S)
    found = [b for b in blocks if "from bench import price" in b]
    assert len(found) == 1, "docs/byom.md must hold one Python example using bench.price"
    return found[0]


def test_byom_doc_example_runs(monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # the example names configs/hw/... relative to the checkout
    exec(compile(byom_example(), "docs/byom.md", "exec"), {"__name__": "byom_example"})
    printed = capsys.readouterr().out
    assert "fedavg+spherefed" in printed and "classifier" in printed


def _net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 4))


def test_price_reports_one_step_and_leaves_the_model_alone():
    net = _net()
    before = [(n, p.clone()) for n, p in net.state_dict().items()]
    cost = price(net, torch.zeros(2, 3, 8, 8), torch.zeros(2, dtype=torch.long), method="fedavg+spherefed")
    # forward: conv 2.8.8.8.3.3.3 = 27,648 + FC 2.8.4 = 64; backward: conv dW 27,648 + FC dX 64 (fixed FC: no dW)
    assert cost.macs == 27_648 + 64 + 27_648 + 64
    assert cost.layers["macs"].sum() == cost.macs
    assert cost.layers["latency_s"].sum() == pytest.approx(cost.latency_s)
    assert cost.layers["energy_j"].sum() == pytest.approx(cost.energy_j)
    assert cost.total_cycles == cost.report.total_cycles and cost.peak_memory_bytes > 0
    assert isinstance(net[4], nn.Linear) and all(torch.equal(v, net.state_dict()[k]) for k, v in before)


@pytest.mark.parametrize("args, message", [
    (dict(model="not a model"), "not an nn.Module"),
    (dict(example_input=torch.zeros(3)), "batch tensor"),
    (dict(target=torch.zeros(5, dtype=torch.long)), "one class index per sample"),
    (dict(example_input=torch.zeros(2, 1, 8, 8)), "rejects input shape 1,8,8"),
])
def test_price_errors_say_what_to_fix(args, message):
    call = dict(model=_net(), example_input=torch.zeros(2, 3, 8, 8), target=None) | args
    with pytest.raises(ModelSpecError, match=re.escape(message)):
        price(call["model"], call["example_input"], call["target"])


@pytest.mark.parametrize("kwargs, message", [
    (dict(method=3), "method = 3: give a method name"),  # issue 33, item 10: was an AttributeError traceback
    (dict(seed=-1), "seed = -1 is out of range"),  # issue 33, item 11: was accepted
])
def test_price_refuses_a_bad_method_or_seed(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        price(_net(), torch.zeros(2, 3, 8, 8), **kwargs)

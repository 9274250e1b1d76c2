"""Bring your own FL method: a class of yours named ``package.module:Class`` runs, is priced, reported
and plotted like a built-in, from one file outside the repository (docs/methods.md)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch

import bench.fl.__main__ as fl_cli
from bench.lib.results import load_summary
from workloads.models import Head
from workloads.fl.hparams import Hparams
from workloads.fl import methods
from workloads.fl.methods import MethodError, parse_method
from workloads.fl.presets import load_preset

ROOT = Path(__file__).resolve().parents[1]
METHOD = "plusmethods:FedAvgPlus"
STATEFUL = "plusmethods:DriftMemory"  # a method with per-client state, written from docs/methods.md alone
SOURCE = textwrap.dedent('''
    """A FedAvg variant with a knob of its own and an upload extra of its own."""
    from pathlib import Path

    import torch

    from workloads.fl.knob import non_negative
    from workloads.fl.methods.base import FedAvg
    from workloads.fl.methods.fedprox import proximal_term


    class FedAvgPlus(FedAvg):
        knobs = (non_negative("plus_mu", 0.5, "test: the weight of a proximal term"),)
        upload_extras = {"plus_norm": 8, "plus_steps": 4}  # 12 bytes beside the sample count
        anchored = True  # the penalty reads w_t

        def penalty(self, model, ctx, hp):
            with open(Path(__file__).with_name("knob_seen.txt"), "a") as log:  # what training was given
                log.write(f"{hp.plus_mu}\\n")
            return proximal_term(model, ctx.global_params, hp.plus_mu)


    class DriftMemory(FedAvg):
        """Each client keeps its last local drift w_t - y and pulls against it: <mu d, w>."""
        knobs = (non_negative("drift_mu", 0.1, "test: the weight of the drift term"),)
        anchored = True  # after_training reads w_t

        def initial_client_state(self, model, hp):
            return {n: torch.zeros_like(p).detach() for n, p in model.named_parameters() if p.requires_grad}

        def penalty(self, model, ctx, hp):
            return hp.drift_mu * torch.stack([(ctx.state[n] * p).sum() for n, p in model.named_parameters()
                                              if p.requires_grad]).sum()

        def after_training(self, model, ctx, steps, hp):
            if next(iter(ctx.state.values())).device.type != "meta":  # when priced it runs on meta: no values
                held = sum(float(v.abs().sum()) for v in ctx.state.values()) > 0
                with open(Path(__file__).with_name("state_seen.txt"), "a") as log:
                    log.write(f"{ctx.round}:{held}\\n")
            return {n: ctx.global_params[n] - p.detach() for n, p in model.named_parameters() if n in ctx.state}, {}


    class NotAMethod:
        pass
''')
PRESET = textwrap.dedent(f'''
    [run]
    dataset = "digits"
    image_size = 16
    model = "convnet"
    num_clients = 3
    rounds = 2
    partition = "iid"
    max_train_samples = 150
    max_test_samples = 40
    methods = ["fedavg", "{METHOD}", "{STATEFUL}"]

    [hparams]
    lr = 0.05
    local_epochs = 1
    batch_size = 64

    [methods.ccvr]
    ccvr_virtual_per_class = 5

    [methods.ffc]
    ffc_ridge = 1e-3

    [methods."{METHOD}"]
    plus_mu = 0.25
''')


@pytest.fixture
def own(tmp_path, monkeypatch):
    """A folder outside the repository holding the method's module and a preset; the current directory."""
    (tmp_path / "plusmethods.py").write_text(SOURCE)
    (tmp_path / "preset.toml").write_text(PRESET)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # worker processes import it as Ray and Flower need: PYTHONPATH
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")
    monkeypatch.delitem(sys.modules, "plusmethods", raising=False)  # this test's file, not an earlier test's
    methods._own.cache_clear()  # a path names one class per process: forget the earlier test's
    yield tmp_path
    methods._own.cache_clear()
    sys.modules.pop("plusmethods", None)


def test_an_own_method_declares_its_knob_and_composes(own):
    method = parse_method(f"{METHOD}+spherefed+ffc")
    assert (method.algorithm, method.modifier, method.calibration) == (METHOD, "spherefed", "ffc")
    assert method.name == f"{METHOD}+spherefed+ffc"  # spelt as given, case kept
    hp = load_preset(str(own / "preset.toml")).hparams(parse_method(METHOD))
    assert (hp.plus_mu, hp.lr) == (0.25, 0.05)  # the preset's override over the knob's default 0.5
    assert hp.as_dict()["plus_mu"] == 0.25 and "plus_mu" not in Hparams().as_dict()
    with pytest.raises(ValueError, match="plus_mu must be >= 0"):
        hp.replace(plus_mu=-1.0)


@pytest.mark.parametrize("name, message", [
    ("plusmethods:Nothing", "module 'plusmethods' has no attribute 'Nothing'"),
    ("plusmethods:NotAMethod", "names class NotAMethod, which is not an FL method class; name a subclass of "
                               "workloads.fl.methods.base.FedAvg"),
    ("no_such_pkg.mod:Method", "cannot import 'no_such_pkg.mod' for method 'no_such_pkg.mod:Method'"),
    ("os:path", "standard library"),
    ("plusmethods:", "write package.module:Class"),
])
def test_a_bad_method_path_is_one_line_before_any_work(own, capsys, name, message):
    with pytest.raises(MethodError, match=message):
        parse_method(name)
    assert fl_cli.main(["--preset", "small", "--methods", name, "--out", str(own / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert message.split("'")[0] in err and len(err.splitlines()) == 1
    assert not (own / "out").exists()


@pytest.mark.slow
def test_an_own_method_runs_through_bench_fl(own):
    out = own / "fl"
    assert fl_cli.main(["--preset", "preset.toml", "--threads", "1", "--device", "cpu", "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    plus, base = doc["methods"][METHOD], doc["methods"]["fedavg"]
    assert plus["comm"]["total_bytes"] == plus["comm_closed_form"]["total_bytes"]  # the ledger is its closed form
    assert plus["comm"]["up_bytes"] == plus["comm_closed_form"]["up_bytes"]
    # the same model and clients as FedAvg; each of the 2 rounds x 3 clients uploads 12 bytes more
    assert plus["comm"]["up_bytes"] - base["comm"]["up_bytes"] == 2 * 3 * 12
    assert plus["comm"]["down_bytes"] == base["comm"]["down_bytes"]
    # the knob reached training: every local step of the 2 x 3 clients' epochs saw the preset's value
    assert set((own / "knob_seen.txt").read_text().split()) == {"0.25"}
    assert doc["hparams"][METHOD]["plus_mu"] == 0.25
    rounds = pd.read_csv(out / "rounds.csv").set_index(["method", "round"])
    assert (rounds.loc[METHOD, "round_bytes"] - rounds.loc["fedavg", "round_bytes"] == 3 * 12).all()
    # priced: its step runs the proximal term FedAvg's does not, so each round costs more energy
    assert (rounds.loc[METHOD, "round_energy_j"] > rounds.loc["fedavg", "round_energy_j"]).all()
    # the stateful one: every client of round 1 starts without state, of round 2 with what it kept
    assert sorted(set((own / "state_seen.txt").read_text().split())) == ["1:False", "2:True"]
    drift = doc["methods"][STATEFUL]
    assert drift["comm"]["total_bytes"] == drift["comm_closed_form"]["total_bytes"] == base["comm"]["total_bytes"]
    assert (rounds.loc[STATEFUL, "round_energy_j"] > rounds.loc["fedavg", "round_energy_j"]).all()


@pytest.mark.slow
def test_an_own_method_runs_through_a_grid_of_bench_runs(own):
    """bench.run as a grid's runner: trained, its step priced, its communication counted, plotted."""
    smoke = (ROOT / "configs" / "presets" / "smoke.toml").read_text()
    (own / "smoke.toml").write_text(smoke.replace("ccvr_virtual_per_class = 50", "ccvr_virtual_per_class = 5")
                                    + f'\n[methods."{METHOD}"]\nplus_mu = 0.125\n')
    (own / "grid.toml").write_text(textwrap.dedent(f'''
        runner = "bench.run"
        [fixed]
        model = "convnet"
        batch_size = 8
        preset = "smoke.toml"
        methods = ["fedavg", "{METHOD}", "{STATEFUL}"]
        workers = 1
        [axes]
        seed = [0]
    '''))
    done = subprocess.run([sys.executable, "-m", "bench.grid", "grid.toml", "--out", "grid"], cwd=own,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (run,) = (own / "grid" / "runs").iterdir()
    summary = load_summary(run)
    m = summary["models"]["convnet"]
    assert m["training"][METHOD]["step_energy_j"] > 0 and m["communication"][METHOD]["total_bytes"] > 0
    ledger = summary["ledger_check"]["convnet"][METHOD]
    assert ledger["ledger"]["total_bytes"] == ledger["closed_form"]["total_bytes"] > 0
    # the accuracy run trained with the preset's value; Fig. 5's paper-shape step is priced at the
    # knob's default, as every built-in's at Tab. 16's
    assert set((own / "knob_seen.txt").read_text().split()) == {"0.125", "0.5"}
    assert (run / "fig5.png").stat().st_size > 0 and (run / "tta.png").stat().st_size > 0
    drift = summary["ledger_check"]["convnet"][STATEFUL]
    assert drift["ledger"]["total_bytes"] == drift["closed_form"]["total_bytes"] > 0
    assert "1:False" in (own / "state_seen.txt").read_text().split()  # the smoke preset's one round: its hook ran
    point = json.loads((run / "point.json").read_text())
    assert point["metrics"][f"convnet.{METHOD}.accuracy_pct"] >= 0


def test_an_own_method_in_a_study_file_and_its_run_points(own):
    """A study names it and searches its knob; a run's point (the grid's unit) carries the knob and
    reads back to the same hyper-parameters; an exploration (bench.dse) file accepts it."""
    from bench.dse.spec import check_method
    from bench.lib.study.runner import make_point, parse_point
    from bench.lib.study.spec import StudyError
    from bench.lib.study.study_file import parse_study
    from tests.test_study import study_doc
    from workloads.fl.execution import Execution

    doc = study_doc(methods=["fedavg", METHOD], search={"fedavg": {"lr": [0.05, 0.1]},
                                                        METHOD: {"lr": [0.05], "plus_mu": [0.0, 0.25]}})
    study = parse_study(doc, "s.toml")
    trials = study.trials(METHOD)
    assert [t["plus_mu"] for t in trials] == [0.0, 0.25]
    hp = study.hparams(METHOD, trials[1])
    assert (hp.plus_mu, hp.lr) == (0.25, 0.05)
    point = make_point("convnet", METHOD, 0, study.fl("convnet", study.settings[0], 0), hp, Execution())
    assert point["method"] == METHOD and point["hparams"]["plus_mu"] == 0.25
    assert parse_point(json.loads(json.dumps(point))).hp == hp
    bad = study_doc(methods=["fedavg", METHOD], search={"fedavg": {"lr": [0.1]}, METHOD: {"lr": [0.1], "plus_mu": ["x"]}})
    with pytest.raises(StudyError, match="plus_mu = 'x' must be a number"):
        parse_study(bad, "s.toml")
    assert check_method(METHOD, "space.toml") == METHOD


@pytest.mark.slow  # 15 s at load 10: Flower, the data and the loop, first in a process
def test_the_flower_app_runs_an_own_stateful_method_as_the_loop_does(own, monkeypatch):
    """Under Flower (the example's ClientApp and strategy on an in-process grid, no Ray) the
    stateful method of yours keeps its state from round 1 to round 2 and ends with our loop's
    weights bit for bit (tests/test_flower_methods.py does the same for the built-in ones)."""
    pytest.importorskip("flwr", reason="the Flower example is an optional extra: pip install -e '.[flower]'")
    from flwr.supercore.task_identity import TaskIdentity

    from bench.lib.fl import pipeline
    from bench.lib.resolve import resolve
    from bench.lib.spec import RunSpec
    from tests.flower_grid import InProcessGrid
    from workloads.fl import loop
    from workloads.fl.loop import RunPlan
    from workloads.flower import app
    from workloads.flower.fleet import client_nodes

    for name in ("_run_id", "_node_id", "_task_id"):  # what Flower's server runtime sets
        monkeypatch.setattr(TaskIdentity, name, 1)
    app.check_methods(("fedavg", METHOD, STATEFUL, "fednova", "spherefed+ffc"))  # each through its own hooks
    with pytest.raises(ValueError, match="fleet"):
        app.check_methods(("heterofl",), fleet=True)
    run = app.FlowerRun(str(own / "preset.toml"), "convnet", (STATEFUL,), num_clients=3, rounds=2, seed=0)
    grid = InProcessGrid(app.client_app(run, None), {5: 0, 6: 1, 7: 2})
    resolved = resolve(RunSpec(preset=str(own / "preset.toml"), methods=(STATEFUL,), rounds=2))
    inputs = pipeline.load(resolved)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads stall on the shared 2-core machine
    try:
        weights = app.train_method(grid, run, STATEFUL, client_nodes(grid, 3)).arrays.to_torch_state_dict()
        assert sorted((own / "state_seen.txt").read_text().split()) == ["1:False"] * 3 + ["2:True"] * 3
        trained = loop.train(RunPlan(parse_method(STATEFUL), model_fn=lambda: inputs.build(Head()), train=inputs.train,
                                     test=inputs.test, parts=inputs.parts, cfg=inputs.fl, hp=resolved.hparams[STATEFUL]))
    finally:
        torch.set_num_threads(threads)
    assert weights.keys() == trained.weights.keys() and all(torch.equal(weights[k], v) for k, v in trained.weights.items())


@pytest.mark.slow
def test_a_stateful_own_method_runs_through_a_study(own):
    """bench.study: tuned and evaluated beside FedAvg, with the real runner (the smoke preset)."""
    import bench.study.__main__ as study_cli

    from tests.test_study_complete import STUDY  # the smoke preset, 2 rounds, 2 evaluation seeds

    methods = f'methods = ["fedavg", "{STATEFUL}"]'
    search = f'[search."{STATEFUL}"]\nlr = [0.05]\ndrift_mu = [0.0, 0.1]\n[tuning]'
    (own / "s.toml").write_text(STUDY.replace('methods = ["fedavg"]', methods).replace("[tuning]", search))
    assert study_cli.main(["s.toml", "--out", "out"]) == 0
    assert json.loads((own / "out" / "manifest.json").read_text())["state"] == "complete"
    assert "2:True" in (own / "state_seen.txt").read_text().split()  # its clients kept their state

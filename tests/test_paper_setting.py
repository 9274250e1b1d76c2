"""The paper's setting is defined once (bench.lib.paper.PAPER); the FL code's defaults (Tab. 16, the
method settings) and the paper preset must agree with it (SphereFed, Dong et al., ECCV 2022,
Sec. 5.1 and appendix Tab. 16)."""

from bench.lib.formulas import Table1Setup
from bench.lib.paper import PAPER
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl.methods import parse_method
from workloads.fl.presets import load_preset


def test_fl_defaults_are_the_papers_setting():
    cfg, hp = FLConfig(), Hparams(declared=parse_method("ccvr").knobs)
    assert (cfg.dataset, cfg.num_clients, cfg.rounds) == (PAPER.dataset, PAPER.num_clients, PAPER.rounds)
    assert (hp.local_epochs, hp.batch_size, hp.ccvr_virtual_per_class) == (
        PAPER.local_epochs, PAPER.batch_size, PAPER.ccvr_virtual_per_class)


def test_the_paper_preset_is_the_papers_setting():
    p = load_preset("paper")
    assert (p.fl.dataset, p.fl.num_clients, p.fl.rounds) == (PAPER.dataset, PAPER.num_clients, PAPER.rounds)
    assert (p.hp.local_epochs, p.hp.batch_size) == (PAPER.local_epochs, PAPER.batch_size)


def test_table1_is_priced_in_the_papers_setting():
    s = Table1Setup()
    assert (s.num_classes, s.num_clients, s.rounds, s.train_samples, s.local_epochs, s.batch_size, s.word_bytes,
            s.virtual_per_class) == (PAPER.num_classes, PAPER.num_clients, PAPER.rounds, PAPER.train_samples,
                                     PAPER.local_epochs, PAPER.batch_size, PAPER.word_bytes,
                                     PAPER.ccvr_virtual_per_class)


def test_steps_per_round_of_the_average_client():
    # E x ceil(|D| / K / B) = 10 x ceil(50,000 / 10 / 64) = 10 x ceil(78.125) = 790
    assert PAPER.steps_per_round() == 790
    assert PAPER.steps_per_round(batch_size=32) == 10 * 157  # ceil(156.25)

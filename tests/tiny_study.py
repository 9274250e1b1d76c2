"""The smallest study the study command's tests run: one model, two rounds on the ``smoke``
preset, two evaluation seeds, one tuning seed and a two-point learning-rate search. A test
varies it by replacing a line (``TINY_STUDY.replace(...)``), so each test file states only what
it changes."""

TINY_STUDY = """name = "s"
preset = "smoke"
models = ["convnet"]
methods = ["fedavg"]
base = "fedavg"
alphas = [0.5]
rounds = 2
seeds = [0, 1]
tuning_seeds = [0]
[search.fedavg]
lr = [0.05, 0.1]
[tuning]
last_rounds = 1
[convergence]
last_rounds = 1
[targets]
accuracy_pct = [50.0]
"""

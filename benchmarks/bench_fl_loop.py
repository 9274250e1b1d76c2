"""Overhead of the federated loop over a bare PyTorch loop doing the same local training.

    PYTHONPATH=. python benchmarks/bench_fl_loop.py [--rounds 3] [--repeats 3] [--threads 1]

Both sides run FedAvg on the offline digits dataset (ConvNet at 16x16, 5 clients, Dirichlet 0.5,
E = 2, B = 32, all clients every round, one evaluation at the end): the same model, data,
mini-batches and SGD settings. The bare loop is the minimal hand-written version (load the global
state, fresh SGD, train, weighted average of state_dicts); ``loop.train`` adds the method hooks,
the ledger, NaN checks and the history. They alternate ``--repeats`` times in one process; the
median samples/s of each is printed with their ratio. Target (issue 4): overhead <= 10 %.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F

from workloads.fl.data import load_dataset
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl import loop
from workloads.fl.loop import RunPlan, batch_starts, cosine_lr, derived_seed, evaluate
from workloads.fl.methods import parse_method
from workloads.fl.partition import dirichlet_partition
from workloads.models import build_model


def bare_fedavg(model_fn, train, test, parts, rounds: int, hp: Hparams, seed: int):
    """Plain FedAvg in PyTorch; returns (samples trained, accuracy, final state_dict)."""
    torch.manual_seed(seed)
    model = model_fn()
    client = copy.deepcopy(model)
    data = [(train.x[torch.as_tensor(p)], train.y[torch.as_tensor(p)]) for p in parts]
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    samples = 0
    for t in range(1, rounds + 1):
        lr = cosine_lr(hp.lr, hp.lr_min, t, rounds)
        states, counts = [], []
        for k, (x, y) in enumerate(data):
            client.load_state_dict(global_state)
            opt = torch.optim.SGD(client.parameters(), lr=lr, momentum=hp.momentum,
                                  weight_decay=hp.weight_decay, foreach=False)
            gen = torch.Generator().manual_seed(derived_seed(seed, t, k))
            starts = batch_starts(len(y), hp.batch_size)
            for _ in range(hp.local_epochs):
                order = torch.randperm(len(y), generator=gen)
                for s in starts:
                    idx = order[s:s + hp.batch_size]
                    opt.zero_grad(set_to_none=True)
                    F.cross_entropy(client(x[idx]), y[idx]).backward()
                    opt.step()
                    samples += len(idx)
            states.append({k2: v.clone() for k2, v in client.state_dict().items()})
            counts.append(len(y))
        total = sum(counts)
        global_state = {key: (sum(s[key].double() * (n / total) for s, n in zip(states, counts))
                              ).to(global_state[key].dtype) for key in global_state}
    model.load_state_dict(global_state)
    return samples, evaluate(model, test.x, test.y), global_state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    train, test = load_dataset("digits", image_size=16)
    parts = dirichlet_partition(train.y.numpy(), 5, 0.5, seed=0)
    hp = Hparams(lr=0.05, local_epochs=2, batch_size=32)
    cfg = FLConfig(dataset="digits", num_clients=5, rounds=args.rounds)
    model_fn = lambda: build_model("convnet", num_classes=10, image_size=16)
    method = parse_method("fedavg")
    ours, bare = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        r = loop.train(RunPlan(method, model_fn=model_fn, train=train, test=test, parts=parts, cfg=cfg, hp=hp))
        ours.append(r.samples_trained / (time.perf_counter() - start))
        start = time.perf_counter()
        samples, acc, _ = bare_fedavg(model_fn, train, test, parts, args.rounds, hp, cfg.seed)
        bare.append(samples / (time.perf_counter() - start))
        assert samples == r.samples_trained, (samples, r.samples_trained)
    o, b = statistics.median(ours), statistics.median(bare)
    print(f"federated loop: {o:,.0f} samples/s (accuracy {r.accuracy:.4f}); "
          f"bare PyTorch loop: {b:,.0f} samples/s (accuracy {acc:.4f})")
    print(f"ratio loop/bare = {o / b:.3f}  (overhead {100 * (b / o - 1):+.1f} % time; target <= 10 %)")


if __name__ == "__main__":
    main()

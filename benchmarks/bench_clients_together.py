"""A round's clients trained together against one after another, step for step, and where the
time goes (issue 44; ``workloads.fl.together``).

    PYTHONPATH=. python benchmarks/bench_clients_together.py [--model convnet] [--method fedavg]
                                                             [--clients 5] [--steps 4] [--repeats 4] [--profile]

``--clients`` clients of ``--model`` (16x16 inputs, 10 classes, the quick preset's shapes) each
train ``--steps`` full batches of 32 from the same start: ``sequential`` is each client's
``ClientTrainer.step`` in turn (what ``loop.train`` runs), ``together`` is ``train_together`` on
all of them (one batched step per local step). The two alternate ``--repeats`` times, each
keeping its best time (a shared machine disturbs single passes); the ratio of the best times is
printed. ``--profile`` adds one pass of each under ``torch.profiler``: the self CPU time of the
top operators, so a ratio below 1 shows which kernels the batching made slower. One torch thread.
"""

from __future__ import annotations

import argparse
import time

import torch

from workloads.fl.execution import DeviceData
from workloads.fl.hparams import Hparams
from workloads.fl.local import client_trainer, prepare_model
from workloads.fl.methods import parse_method
from workloads.fl.together import ClientRun, train_together
from workloads.models import build_model

BATCH = 32


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="convnet")
    ap.add_argument("--method", default="fedavg")
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    method = parse_method(args.method)
    torch.manual_seed(0)
    model = prepare_model(build_model(args.model, num_classes=10, image_size=16, head=method.head),
                          method, seed=0)
    n = args.clients * args.steps * BATCH
    data = DeviceData(torch.randn(n, 3, 16, 16), torch.randint(0, 10, (n,)))
    hp = Hparams(lr=0.05, batch_size=BATCH, local_epochs=1)
    start = {k: v.clone() for k, v in model.state_dict().items()}

    def client_samples(k: int) -> torch.Tensor:
        return torch.arange(args.steps * BATCH) + k * args.steps * BATCH

    def sequential() -> None:
        for k in range(args.clients):
            model.load_state_dict(start)
            trainer = client_trainer(model, start, hp, method)
            for s in range(args.steps):
                batch = client_samples(k)[s * BATCH:(s + 1) * BATCH]
                trainer.step(data.take(batch), data.y[batch])

    def together() -> None:
        model.load_state_dict(start)
        trainer = client_trainer(model, start, hp, method)
        runs = [ClientRun(start, trainer.ctx, client_samples(k), tuple(range(0, args.steps * BATCH, BATCH)),
                          torch.Generator().manual_seed(k), None, f"client {k}") for k in range(args.clients)]
        train_together(model, method, trainer.hp, runs, data)

    modes = {"sequential": sequential, "together": together}
    best = dict.fromkeys(modes, float("inf"))
    for run in modes.values():  # warm-up
        run()
    for _ in range(args.repeats):
        for name, run in modes.items():
            begin = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - begin)
    print(f"{args.model} {method.name}, {args.clients} clients x {args.steps} steps of batch {BATCH}, one thread, "
          f"best of {args.repeats}: sequential {best['sequential']:.3f} s, together {best['together']:.3f} s, "
          f"speed-up {best['sequential'] / best['together']:.2f} x")
    if args.profile:
        from torch.profiler import profile

        for name, run in modes.items():
            with profile() as prof:
                run()
            events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
            total_ms = sum(e.self_cpu_time_total for e in events) / 1e3
            print(f"{name}: self CPU {total_ms:.0f} ms; " + ", ".join(
                f"{e.key} {e.self_cpu_time_total / 1e3:.0f} ms" for e in events[:10]))


if __name__ == "__main__":
    main()

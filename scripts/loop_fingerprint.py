"""Print, per FL method, the accuracy, the per-round losses and a SHA-256 of the final weights of
a small deterministic run (the stand-ins of tests/fl_standins.py): run it on two commits and
``diff`` the outputs to show a change of the loop's mechanics left every result bit-identical.

    OMP_NUM_THREADS=1 PYTHONPATH=.:tests python scripts/loop_fingerprint.py > after.txt
    git stash; OMP_NUM_THREADS=1 PYTHONPATH=.:tests python scripts/loop_fingerprint.py > before.txt; git stash pop
    diff before.txt after.txt

It only gives the loop's plan (``RunPlan``) the fields every version of it has.
"""

import hashlib

from fl_standins import TinyNet, blobs
from workloads.fl.hparams import FLConfig, Hparams
from workloads.fl import loop
from workloads.fl.loop import RunPlan
from workloads.fl.methods import parse_method
from workloads.fl.partition import dirichlet_partition

METHODS = ["fedavg", "fedprox", "fednova", "fedopt", "fedavgm", "fedcos", "fedbabu", "doublehead",
           "spherefed+ffc", "fedavg+ccvr", "fedprox+spherefed+ccvr"]


def main() -> None:
    train, test = blobs(240), blobs(80, seed=1)
    parts = dirichlet_partition(train.y.numpy(), 4, 0.5, min_size=5, seed=0)
    cfg = FLConfig(dataset="blobs", num_clients=4, rounds=3, participation=0.75)
    hp = Hparams(lr=0.05, local_epochs=2, batch_size=16)
    for name in METHODS:
        m = parse_method(name)
        r = loop.train(RunPlan(m, model_fn=lambda: TinyNet(head=m.head), train=train, test=test, parts=parts,
                               cfg=cfg, hp=hp))
        h = hashlib.sha256()
        for key, value in r.weights.items():
            h.update(key.encode() + value.cpu().numpy().tobytes())
        print(name, r.accuracy, r.accuracy_before_calibration, h.hexdigest()[:16],
              [entry["mean_loss"] for entry in r.history])


if __name__ == "__main__":
    main()

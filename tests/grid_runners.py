"""Small runners for the grid-machinery tests: real (seeded) torch training, cheap enough for CI.

The grid's own behaviour (ids, skipping, locking, failure isolation, backends) does not depend on
what a run computes; the end-to-end grid over bench.run is tested separately."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bench.lib.grid.runners import grid_runner


@grid_runner("tests.train_tiny")
def train_tiny(config: dict, out_dir: Path) -> dict:
    import torch

    if config.get("fail"):
        raise RuntimeError(f"planned failure for seed {config['seed']}")
    time.sleep(float(config.get("sleep_s", 0)))
    log = config.get("log")
    if log:  # every execution appends its seed, so tests can count executions
        with open(log, "a") as f:
            f.write(f"{config['seed']}\n")
    g = torch.Generator().manual_seed(int(config["seed"]))
    x = torch.randn(256, 8, generator=g)
    y = (x @ torch.randn(8, 1, generator=g)).squeeze(1)
    w = torch.zeros(8, requires_grad=True)
    opt = torch.optim.SGD([w], lr=float(config.get("lr", 0.1)))
    for _ in range(50):
        opt.zero_grad()
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        opt.step()
    (out_dir / "weights.json").write_text(json.dumps(w.detach().tolist()))
    return {"loss": float(loss.detach()), "pid": os.getpid()}


def not_a_runner(config: dict, out_dir: Path) -> dict:
    """A function of the right shape that was never registered as a runner: grids refuse it."""
    return {}


@grid_runner("tests.parse_then_train")
def parse_then_train(config: dict, out_dir: Path) -> dict:
    """What a runner that parses its settings does, in small: the point's settings become argv for the suite's
    parser (``iokit.cli.Parser``), so a bad setting raises ``UsageError`` (the grid records it
    as the point's failure) instead of exiting; then ``train_tiny``."""
    from iokit import checks, cli

    parser = cli.Parser(prog="tests.grid_runners")
    parser.add_argument("--seed", type=cli.int_in(0, checks.SEED_MAX), required=True)
    parser.add_argument("--batch-size", type=cli.int_in(1, checks.BATCH_SIZE_MAX), required=True)
    args = parser.parse_args([f"--seed={config['seed']}", f"--batch-size={config['batch_size']}"])
    return train_tiny({"seed": args.seed}, out_dir)

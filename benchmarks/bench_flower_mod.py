"""What the Flower accelerator mod costs a client's train call (docs/flower.md).

    PYTHONPATH=. python benchmarks/bench_flower_mod.py [--repeats 8] [--clients 3] [--threads 1]

The example app's ClientApp (ConvNet at 16x16, SphereFed on FedAvg, the small preset's digits and
hyper-parameters) trains client 0 on one round-1 train message, called in-process (no Ray): first
once with ``AccelMod`` and an empty price cache (it captures and prices each new step shape),
then ``--repeats`` times each, without and with the mod in ABBA order (prices cached). Prints the first
call's time and the median of each side with their ratio. Needs the ``flower`` extra.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, Metadata, RecordDict

from workloads.flower import meter
from workloads.flower.app import FlowerRun, client_app, new_model
from workloads.flower.mod import AccelMod
from workloads.flower.strategy import MethodStrategy

HW = Path(__file__).resolve().parents[1] / "configs" / "hw" / "paper_default.toml"
METHOD = "fedavg+spherefed"


def train_message(run: FlowerRun) -> Message:
    method, hp = run.method(METHOD)
    content = MethodStrategy(method, hp, new_model(run, method), {0: 1}).train_content(1, 0, ConfigRecord({"method": METHOD}))
    metadata = Metadata(run_id=1, message_id="m1", src_node_id=0, dst_node_id=1, reply_to_message_id="",
                        group_id="1", created_at=time.time(), ttl=3600.0, message_type=MessageType.TRAIN)
    return Message(content, metadata=metadata)


def timed(app, msg: Message, ctx: Context) -> float:
    start = time.perf_counter()
    app(msg, ctx)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--clients", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    run = FlowerRun("small", "convnet", (METHOD,), args.clients, 2, 0)
    msg = train_message(run)
    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 0, "num-partitions": args.clients},
                  state=RecordDict(), run_config={})
    plain, priced = client_app(run, None), client_app(run, AccelMod(HW))
    meter._PRICES.clear()
    first = timed(priced, msg, ctx)
    times = {plain: [], priced: []}
    for i in range(args.repeats):  # ABBA order: neither side always runs second
        for app in ((plain, priced) if i % 2 == 0 else (priced, plain)):
            times[app].append(timed(app, msg, ctx))
    without, with_mod = statistics.median(times[plain]), statistics.median(times[priced])
    steps = priced(msg, ctx).content["metrics"]["accel_steps"]
    print(f"client 0: {steps} steps per train call ({METHOD}, convnet 16x16, {args.threads} thread(s))")
    print(f"first call with the mod (captures each step shape): {first:.2f} s")
    print(f"median of {args.repeats}: without the mod {without:.2f} s, with it {with_mod:.2f} s, "
          f"ratio {with_mod / without:.3f}")


if __name__ == "__main__":
    main()

"""How far the CPU's kernel choice moves a training run (docs/results.md, "Reproducibility across
machines").

``record`` trains client 0 of round 1 for ``--steps`` local steps (the model, batches, optimizer
and step the FL loop uses; quick preset, seed 0) and saves to ``--out``: every leaf module's output
in the first forward pass, the parameters after step 1 and after steps 2, 5, 20, 45 and 90, the
losses and the kernel environment. Kernel-selection variables act only when set before Python
starts, so a variant is an environment or an option:

    python scripts/kernel_drift.py record --out a.pt
    ATEN_CPU_CAPABILITY=default python scripts/kernel_drift.py record --out b.pt   # no vector kernels
    ONEDNN_MAX_CPU_ISA=AVX python scripts/kernel_drift.py record --out c.pt       # older oneDNN kernels
    python scripts/kernel_drift.py record --out d.pt --threads 2                    # or --no-channels-last,
                                                                                    # --no-mkldnn, --deterministic

``compare A B`` prints the first module whose output differs, and the parameters' difference after
step 1 (largest absolute, and relative: ||wA - wB|| / ||wA||) and after each later snapshot:

    python scripts/kernel_drift.py compare a.pt b.pt

A recording of MobileNetV2 (45 steps) takes ~30 s and ~210 MB.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SNAPSHOT_STEPS = (1, 2, 5, 20, 45, 90)


def record(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    if args.no_mkldnn:
        torch.backends.mkldnn.enabled = False
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    from bench.lib.fl import pipeline
    from bench.lib.resolve import resolve
    from bench.lib.spec import RunSpec
    from workloads.fl.execution import DeviceData, kernel_environment
    from workloads.fl.local import ClientContext, client_trainer, epoch_order, shuffling_generator
    from workloads.fl.evaluation import memory_format
    from workloads.fl.loop import batch_starts, build_on_device, derived_seed

    run = resolve(RunSpec(preset=args.preset, methods=(args.method,), models=(args.model,), device="cpu",
                          channels_last=args.channels_last))
    method, inputs = run.methods[0], pipeline.load(run)
    hp = run.hparams[method.name]
    model = build_on_device(method, functools.partial(inputs.build, method.head), inputs.fl.seed,
                            inputs.execution).train()
    trainer = client_trainer(model, {k: v.detach().clone() for k, v in model.state_dict().items()}, hp, method,
                             ClientContext(round=1, lr=hp.lr))
    train = DeviceData.from_dataset(inputs.train, "cpu")
    idx = torch.as_tensor(inputs.parts[0], dtype=torch.long)  # client 0, its round-1 order (train_client's)
    order = epoch_order(idx, shuffling_generator(derived_seed(inputs.fl.seed, 1, 0)))
    starts = batch_starts(len(idx), hp.batch_size)

    outputs: dict[str, torch.Tensor] = {}

    def keep(name):
        def hook(module, inputs_, out):
            if isinstance(out, torch.Tensor) and name not in outputs:
                outputs[name] = out.detach().clone().contiguous()
        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if n and not list(m.children())]
    snapshots, losses = {}, []
    for step in range(1, args.steps + 1):
        start = starts[(step - 1) % len(starts)]
        batch = order[start:start + hp.batch_size]
        x = memory_format(train.take(batch), inputs.execution.channels_last)
        losses.append(float(trainer.step(x, train.y[batch])))
        if step == 1:
            for h in handles:
                h.remove()
        if step in SNAPSHOT_STEPS:
            snapshots[step] = {n: p.detach().clone().contiguous() for n, p in model.named_parameters() if p.requires_grad}
    torch.save({"modules": outputs, "snapshots": snapshots, "losses": losses, "kernels": kernel_environment(),
                "options": vars(args)}, args.out)
    print(f"{args.out}: {inputs.fl.model} {method.name}, {args.steps} steps, loss {losses[0]:.9g} -> {losses[-1]:.9g}, "
          f"kernels {kernel_environment()}")


def max_abs_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def relative_difference(a: dict, b: dict) -> float:
    """||a - b|| / ||a|| over every tensor of ``a``, concatenated."""
    num = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in a)
    den = sum(float(a[k].double().pow(2).sum()) for k in a)
    return (num / den) ** 0.5


def compare(args: argparse.Namespace) -> None:
    a, b = (torch.load(p, weights_only=False) for p in (args.a, args.b))
    print(f"A {args.a}: {a['kernels']}\nB {args.b}: {b['kernels']}")
    first = next((n for n in a["modules"] if max_abs_difference(a["modules"][n], b["modules"][n]) != 0), None)
    print("first module output that differs (forward of step 1): "
          + (f"{first}, largest difference {max_abs_difference(a['modules'][first], b['modules'][first]):.2g}"
             if first else "none: every output bitwise equal"))
    common = sorted(set(a["snapshots"]) & set(b["snapshots"]))
    if 1 in common:
        w_a, w_b = a["snapshots"][1], b["snapshots"][1]
        print(f"parameters after step 1: largest |wA - wB| {max(max_abs_difference(w_a[k], w_b[k]) for k in w_a):.2g}, "
              f"relative {relative_difference(w_a, w_b):.2g}")
    print("relative parameter difference after k steps: "
          + ", ".join(f"{k}: {relative_difference(a['snapshots'][k], b['snapshots'][k]):.2g}" for k in common))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python scripts/kernel_drift.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    rec = sub.add_parser("record", help="train client 0's first local steps and save what they computed")
    rec.add_argument("--out", required=True, help="a .pt file to write")
    rec.add_argument("--preset", default="quick")
    rec.add_argument("--model", default="mobilenetv2")
    rec.add_argument("--method", default="fedavg")
    rec.add_argument("--steps", type=int, default=45, help="local steps (snapshots at 1, 2, 5, 20, 45, 90)")
    rec.add_argument("--threads", type=int, default=1)
    rec.add_argument("--no-channels-last", dest="channels_last", action="store_false", default=True)
    rec.add_argument("--no-mkldnn", action="store_true", help="torch.backends.mkldnn.enabled = False")
    rec.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms(True)")
    cmp_ = sub.add_parser("compare", help="where two recordings first differ, and by how much after k steps")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    args = parser.parse_args(argv)
    if args.what == "record" and Path(args.out).exists():
        parser.error(f"--out {args.out} exists: give a new file name (this script never replaces a file)")
    record(args) if args.what == "record" else compare(args)


if __name__ == "__main__":
    main()

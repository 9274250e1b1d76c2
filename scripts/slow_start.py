"""SphereFed's slow start, measured (docs/fl.md, "SphereFed's slow start").

SphereFed (Dong et al., "SphereFed: Hyperspherical Federated Learning", ECCV 2022) trains the body
under a frozen orthonormal classifier W (Eq. 4) on normalized features z~ = z / ||z|| (Sec. 4.2)
with the mean squared error to the one-hot label (Eq. 5). This script measures how large the
gradients that reach the body are, against FedAvg's trainable head and cross-entropy.

``init``: at initialization, on client 0's first mini-batches of round 1 (the model as the loop
builds it, train mode, no optimizer step), per variant: the loss, the per-sample gradient norms
with respect to the logits o and to the features z BEFORE FeatureNorm, ||z||, the norm of the
gradient over all body parameters, and |cos(dL/dz, z)| (FeatureNorm's Jacobian removes the radial
part). Then how far w_y . z~ can reach when z >= 0 (ReLU before the pooling): ||w_y^+||.

    python scripts/slow_start.py init --model mobilenetv2
    python scripts/slow_start.py init --model convnet

``curves``: FedAvg and SphereFed trained by the loop itself (``loop.train``), per round: the
learning rate, the mean training loss, the mean ||z|| and ||dL/dz|| per sample and the mean
||dL/dtheta_body|| per step over the round's local steps, and the test accuracy.

    python scripts/slow_start.py curves --model convnet --rounds 5 --lr fedavg=0.05 spherefed=0.25 spherefed=1.0

Both read the preset's data, partition and hyper-parameters (default ``quick``: the offline
digits), one torch thread, the NCHW layout. Output: tables on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.fl import pipeline  # noqa: E402
from bench.lib.resolve import resolve  # noqa: E402
from bench.lib.spec import RunSpec  # noqa: E402
from workloads.fl.execution import DeviceData  # noqa: E402
from workloads.fl.local import epoch_order, shuffling_generator  # noqa: E402
from workloads.fl import loop  # noqa: E402
from workloads.fl.loop import RunPlan, batch_starts, build_on_device, derived_seed  # noqa: E402
from workloads.fl.methods import parse_method  # noqa: E402
from workloads.fl.methods.spherefed import mse_onehot_loss, orthonormal_classifier  # noqa: E402

# variant -> (the method whose model is built: fedavg's has a trainable head and no FeatureNorm,
# spherefed's the frozen orthonormal W behind FeatureNorm; FeatureNorm kept; loss; logit scale tau)
VARIANTS = {
    "fedavg: trainable head, CE": ("fedavg", True, F.cross_entropy, 1.0),
    "spherefed: frozen W, FeatureNorm, MSE (Eq. 4-5)": ("spherefed", True, mse_onehot_loss, 1.0),
    "spherefed, loss x 10": ("spherefed", True, lambda o, y: 10 * mse_onehot_loss(o, y), 1.0),
    "frozen W, FeatureNorm, CE (tau 1)": ("spherefed", True, F.cross_entropy, 1.0),
    "frozen W, FeatureNorm, CE (tau 16)": ("spherefed", True, F.cross_entropy, 16.0),
    "frozen W, no FeatureNorm, MSE": ("spherefed", False, mse_onehot_loss, 1.0),
}


def body_gradient_norm(model: torch.nn.Module) -> float:
    """||dL/dtheta|| over every body parameter that received a gradient."""
    return math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.body.parameters() if p.grad is not None))


def setup(args: argparse.Namespace):
    run = resolve(RunSpec(preset=args.preset, methods=("fedavg", "spherefed"), models=(args.model,),
                          seed=args.seed, device="cpu", channels_last=False))
    return run, pipeline.load(run)


def variant_model(inputs, kind: str) -> torch.nn.Module:
    method_name, feature_norm, _, _ = VARIANTS[kind]
    method = parse_method(method_name)
    model = build_on_device(method, functools.partial(inputs.build, method.head), inputs.fl.seed,
                            inputs.execution)
    if not feature_norm:
        model.feature_norm = torch.nn.Identity()
    return model.train()


def gradient_scales(run, inputs, batches: int) -> dict[str, dict[str, float]]:
    """Per variant, means over client 0's first ``batches`` mini-batches of round 1 (in the order
    train_client draws them): loss, per-sample ||dL/do|| and ||dL/dz||, ||z||, |cos(dL/dz, z)| and
    ||dL/dtheta_body||."""
    train = DeviceData.from_dataset(inputs.train, "cpu")
    idx = torch.as_tensor(inputs.parts[0], dtype=torch.long)
    batch_size = run.hparams["fedavg"].batch_size
    order = epoch_order(idx, shuffling_generator(derived_seed(inputs.fl.seed, 1, 0)))
    starts = batch_starts(len(idx), batch_size)[:batches]
    table = {}
    for kind, (_, _, loss_fn, tau) in VARIANTS.items():
        model = variant_model(inputs, kind)
        sums = dict.fromkeys(("loss", "do", "dz", "z", "cos", "dtheta"), 0.0)
        for s in starts:
            batch = order[s:s + batch_size]
            x, y = train.take(batch), train.y[batch]
            model.zero_grad(set_to_none=True)
            z = model.body(x)
            z.retain_grad()
            o = tau * model.classifier(model.feature_norm(z))
            o.retain_grad()
            loss = loss_fn(o, y)
            loss.backward()
            n = len(y)  # the batch-mean loss gives each sample's gradient divided by n
            sums["loss"] += float(loss.detach())
            sums["do"] += float((o.grad * n).norm(dim=1).mean())
            sums["dz"] += float((z.grad * n).norm(dim=1).mean())
            sums["z"] += float(z.detach().norm(dim=1).mean())
            sums["cos"] += float(F.cosine_similarity(z.grad, z.detach(), dim=1).abs().mean())
            sums["dtheta"] += body_gradient_norm(model)
        table[kind] = {k: v / len(starts) for k, v in sums.items()}
    return table


def positive_reach(num_classes: int, feature_dim: int, seed: int) -> torch.Tensor:
    """||w_y^+|| per row of the orthonormal W: the largest w_y . z~ over unit z~ >= 0 (z~ = w_y^+ / ||w_y^+||)."""
    return orthonormal_classifier(num_classes, feature_dim, seed=seed).clamp_min(0).norm(dim=1)


def init_table(args: argparse.Namespace) -> None:
    run, inputs = setup(args)
    table = gradient_scales(run, inputs, args.batches)
    print(f"model {inputs.fl.model}, C = {inputs.train.num_classes}, {args.batches} batches of "
          f"{run.hparams['fedavg'].batch_size} (client 0, round 1, seed {inputs.fl.seed}); per-sample gradient "
          "norms, means over the batches")
    print(f"{'variant':50s} {'loss':>7s} {'|dL/do|':>8s} {'|dL/dz|':>8s} {'|z|':>6s} {'|dL/dθ|':>8s} {'cos(g,z)':>8s}")
    for kind, m in table.items():
        print(f"{kind:50s} {m['loss']:7.3f} {m['do']:8.3f} {m['dz']:8.4f} {m['z']:6.1f} {m['dtheta']:8.2f} "
              f"{m['cos']:8.1e}")
    base = table["fedavg: trainable head, CE"]["dtheta"]
    print("body gradient, FedAvg's / the variant's: "
          + "; ".join(f"{k}: {base / m['dtheta']:.1f}x" for k, m in table.items() if not k.startswith("fedavg")))
    model = variant_model(inputs, "fedavg: trainable head, CE")
    C, dim = model.classifier.weight.shape
    reach = positive_reach(C, dim, inputs.fl.seed)
    print(f"largest w_y . z~ for z~ >= 0 on the unit sphere (||w_y^+||): mean {float(reach.mean()):.2f}, "
          f"range {float(reach.min()):.2f}-{float(reach.max()):.2f} (the one-hot target is 1)")


class StepRecorder:
    """Per training step of the client model: mean ||z|| and ||dL/dz|| per sample (z: the body's
    output, before FeatureNorm) and ||dL/dtheta_body|| (read by a global optimizer-step hook, when
    the step's gradients are complete); ``close_round`` returns their means over the round.

    The loop deep-copies the model it is given into the client model: the recorder copies as
    itself, so the hooks of both models report here."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self.body_parameters: list[torch.nn.Parameter] = []

    def __deepcopy__(self, memo) -> "StepRecorder":
        return self

    def attach(self, model: torch.nn.Module) -> torch.nn.Module:
        model.body.register_forward_hook(self._forward)
        return model

    def _forward(self, module, inputs, z) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return  # evaluation, or calibration statistics
        self.body_parameters = [p for p in module.parameters() if p.requires_grad]
        n = len(z)
        self.steps.append({"z": float(z.detach().norm(dim=1).mean())})
        z.register_hook(lambda g: self.steps[-1].__setitem__("dz", float((g * n).norm(dim=1).mean())))

    def before_optimizer_step(self, optimizer, args, kwargs) -> None:
        if self.steps:
            self.steps[-1]["dtheta"] = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in self.body_parameters
                                                     if p.grad is not None))

    def close_round(self) -> dict:
        steps, self.steps = self.steps, []
        return {k: sum(s[k] for s in steps) / len(steps) for k in ("z", "dz", "dtheta")}


def parse_lrs(items: list[str]) -> list[tuple[str, float]]:
    runs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in ("fedavg", "spherefed"):
            raise SystemExit(f"--lr {item}: give METHOD=RATE with METHOD fedavg or spherefed, e.g. spherefed=1.0")
        try:
            runs.append((name, float(value)))
        except ValueError:
            raise SystemExit(f"--lr {item}: {value!r} is not a number; e.g. spherefed=1.0") from None
    return runs


def curves(args: argparse.Namespace) -> None:
    runs = parse_lrs(args.lr)
    run, inputs = setup(args)
    cfg = dataclasses.replace(run.fl, rounds=args.rounds)
    print(f"model {cfg.model}, {cfg.rounds} rounds, preset {args.preset}, seed {cfg.seed}; per round: means over "
          "the local steps of every client (z before FeatureNorm, per-sample gradient norms)")
    print(f"{'method':10s} {'lr':>6s} {'round':>5s} {'round lr':>8s} {'loss':>7s} {'|z|':>6s} {'|dL/dz|':>8s} "
          f"{'|dL/dθ|':>8s} {'test acc':>8s}")
    for name, lr in runs:
        method = parse_method(name)
        recorder = StepRecorder()
        per_round = []
        hook = register_optimizer_step_pre_hook(recorder.before_optimizer_step)
        result = loop.train(RunPlan(method, model_fn=lambda m=method: recorder.attach(inputs.build(m.head)),
                                    train=inputs.train, test=inputs.test, parts=inputs.parts, cfg=cfg,
                                    hp=run.hparams[method.name].replace(lr=lr), execution=inputs.execution,
                                    after_round=lambda t: per_round.append(recorder.close_round())))
        hook.remove()
        for entry, steps in zip(result.history, per_round):
            print(f"{name:10s} {lr:6g} {entry['round']:5d} {entry['lr']:8.4f} {entry['mean_loss']:7.4f} "
                  f"{steps['z']:6.2f} {steps['dz']:8.4f} {steps['dtheta']:8.3f} {100 * entry['accuracy']:7.1f}%")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python scripts/slow_start.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--model", default=None, help="a paper model (default: the preset's)")
    parser.add_argument("--seed", type=int, default=None, help="default: the preset's")
    sub = parser.add_subparsers(dest="what", required=True)
    at_init = sub.add_parser("init", help="gradient scales at initialization, per variant")
    at_init.add_argument("--batches", type=int, default=5)
    over_rounds = sub.add_parser("curves", help="per-round loss, feature and gradient norms, accuracy")
    over_rounds.add_argument("--rounds", type=int, default=5)
    over_rounds.add_argument("--lr", nargs="+", default=["fedavg=0.05", "spherefed=0.25"], metavar="METHOD=RATE")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    init_table(args) if args.what == "init" else curves(args)


if __name__ == "__main__":
    main()

"""What CCVR's re-training changes, measured (docs/methods.md, "CCVR's re-training learning rate").

CCVR (Luo et al., "No Fear of Heterogeneity: Classifier Calibration for Federated Learning with
Non-IID Data", NeurIPS 2021, Sec. 4) re-trains the classifier on virtual features drawn from the
pooled per-class Gaussians. This script trains FedAvg with the loop itself (``loop.train``), then
calibrates the final model as the loop does (every client's statistics from single-class batches,
the server's pooling, sampling and SGD, its generator seeded from (seed, R + 1)) once per
``--ccvr-lr``, and prints per rate: ||W1 - W0|| / ||W0||, the largest change of a test logit
against the smallest top-1 margin (the gap between the two largest logits) before calibration,
the virtual features' mean loss before and after the re-training (its own objective), how many
test predictions change, and the test and validation accuracy before and after. It also prints
how far the pooled statistics are from those of all clients' features concatenated.

    python scripts/ccvr_effect.py --preset quick --model convnet --rounds 3 --ccvr-lr 1e-5 1e-3 0.01 0.05

It reads the preset's data, partition, hyper-parameters (``fedavg+ccvr``'s) and execution options
(the CPU, one torch thread), so its FedAvg run is ``python -m bench.fl --preset P --model M
--methods fedavg+ccvr --threads 1``'s and its row at the preset's ``ccvr_lr`` that run's calibration.
Output: a table on stdout.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.fl import pipeline  # noqa: E402
from bench.lib.resolve import resolve  # noqa: E402
from bench.lib.spec import RunSpec  # noqa: E402
from workloads.fl.execution import DeviceData  # noqa: E402
from workloads.fl.local import per_sample_loss  # noqa: E402
from workloads.fl import loop  # noqa: E402
from workloads.fl.loop import RunPlan, build_on_device, derived_seed  # noqa: E402
from workloads.fl.methods import parse_method  # noqa: E402
from workloads.fl.methods.ccvr import pool_class_statistics, sample_virtual_features  # noqa: E402

METHOD = parse_method("fedavg+ccvr")


def top2_margins(logits: torch.Tensor) -> torch.Tensor:
    """Per row, the largest logit minus the second largest (0 on a tie)."""
    top = logits.topk(2, dim=1).values
    return top[:, 0] - top[:, 1]


def effect(w0: torch.Tensor, w1: torch.Tensor, z: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """What replacing classifier ``w0`` by ``w1`` does on features ``z`` with labels ``y``."""
    before, after = z @ w0.T, z @ w1.T
    p0, p1 = before.argmax(1), after.argmax(1)
    return {"dw_rel": float((w1 - w0).norm() / w0.norm()), "max_dlogit": float((after - before).abs().max()),
            "min_margin": float(top2_margins(before).min()), "changed": int((p0 != p1).sum()),
            "acc_before_pct": 100 * float((p0 == y).double().mean()), "acc_after_pct": 100 * float((p1 == y).double().mean())}


def virtual_loss(w: torch.Tensor, feats, labels, weights, loss_fn) -> float:
    """The re-training's objective: the weighted mean loss over the virtual features."""
    return float((loss_fn(feats @ w.T, labels) * weights).sum() / weights.sum())


def pooling_error(stats, z: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(largest |mu_c - mean of class c|, largest |Sigma_c - cov of class c| / largest |cov of class c|)
    of the pooled statistics against all clients' features concatenated, over the classes present."""
    _, mu, cov = pool_class_statistics(stats)
    mu_err = cov_err = 0.0
    for c in y.unique().tolist():
        zc = z[y == c]
        reference = torch.cov(zc.T)
        mu_err = max(mu_err, float((mu[c] - zc.mean(0)).abs().max()))
        cov_err = max(cov_err, float((cov[c] - reference).abs().max() / reference.abs().max()))
    return mu_err, cov_err


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--model", default="convnet")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--ccvr-lr", type=float, nargs="+", default=[1e-5, 0.05])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    run = resolve(RunSpec(preset=args.preset, methods=(METHOD.name,), models=(args.model,), seed=args.seed,
                          rounds=args.rounds, device="cpu"))
    inputs, hp, cfg = pipeline.load(run), run.hparams[METHOD.name], run.fl
    model_fn = functools.partial(inputs.build, METHOD.head)
    trained = loop.train(RunPlan(parse_method("fedavg"), model_fn=model_fn, train=inputs.train, test=inputs.test,
                                 parts=inputs.parts, cfg=cfg, hp=hp, execution=inputs.execution, val=inputs.val))
    model = build_on_device(METHOD, model_fn, cfg.seed, inputs.execution)
    model.load_state_dict(trained.weights)
    model.eval()
    train, test = DeviceData.from_dataset(inputs.train, "cpu"), DeviceData.from_dataset(inputs.test, "cpu")
    layout = torch.channels_last if inputs.execution.channels_last else torch.contiguous_format

    def take(data: DeviceData, idx: torch.Tensor) -> torch.Tensor:
        """Inputs in the layout the loop feeds the model."""
        x = data.take(idx)
        return x.contiguous(memory_format=layout) if x.dim() == 4 else x

    calib, loss_fn = METHOD.calib, per_sample_loss(METHOD)
    with torch.no_grad():
        stats = []
        for idx in inputs.parts:
            idx = torch.as_tensor(idx, dtype=torch.long)
            batches = calib.client_batches(take(train, idx), train.y[idx], hp.batch_size)
            stats.append(calib.client_statistics(model, batches, num_classes=model.classifier.out_features, hp=hp))
        everyone = torch.as_tensor(sorted(i for p in inputs.parts for i in p.tolist()), dtype=torch.long)
        z_train = model.features(take(train, everyone)).double()
        z_test = model.features(take(test, torch.arange(len(test)))).double()
        z_val = None
        if inputs.val is not None:
            val = DeviceData.from_dataset(inputs.val, "cpu")
            z_val = model.features(take(val, torch.arange(len(val)))).double()
    mu_err, cov_err = pooling_error(stats, z_train, train.y[everyone])
    print(f"{args.preset}, {args.model}, seed {cfg.seed}, {cfg.rounds} rounds of FedAvg; CCVR: {hp.ccvr_virtual_per_class} "
          f"virtual features per class, {hp.ccvr_epochs} epochs, batch {hp.ccvr_batch_size}, momentum {hp.momentum}")
    print(f"pooled vs concatenated features: largest |mu error| {mu_err:.1e}, largest relative covariance error {cov_err:.1e}")
    print("ccvr_lr   |dW|/|W|  max|dlogit|  min margin  virtual loss       changed  test % (before -> after)"
          + ("  val %" if z_val is not None else ""))
    w0 = model.classifier.weight.detach().clone()
    n, mu, cov = pool_class_statistics(stats)
    for lr in args.ccvr_lr:
        seeded = lambda: torch.Generator().manual_seed(derived_seed(cfg.seed, cfg.rounds + 1))
        feats, labels, weights = sample_virtual_features(n, mu, cov, per_class=hp.ccvr_virtual_per_class,
                                                         eps=hp.ccvr_cov_eps, generator=seeded())
        w1 = calib.server_calibrate(stats, classifier_weight=w0, loss_fn=loss_fn, hp=hp.replace(ccvr_lr=lr), generator=seeded())
        e = effect(w0.double(), w1.double(), z_test, test.y)
        line = (f"{lr:<9g} {100 * e['dw_rel']:7.3f} %  {e['max_dlogit']:10.4f}  {e['min_margin']:10.4f}  "
                f"{virtual_loss(w0, feats, labels, weights, loss_fn):.4f} -> {virtual_loss(w1, feats, labels, weights, loss_fn):.4f}"
                f"  {e['changed']:7d}  {e['acc_before_pct']:.2f} -> {e['acc_after_pct']:.2f}")
        if z_val is not None:
            v = effect(w0.double(), w1.double(), z_val, val.y)
            line += f"  {v['acc_before_pct']:.2f} -> {v['acc_after_pct']:.2f}"
        print(line)


if __name__ == "__main__":
    main()

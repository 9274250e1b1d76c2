"""CCVR, Classifier Calibration with Virtual Representations (Luo et al., "No Fear of Heterogeneity:
Classifier Calibration for Federated Learning with Non-IID Data", NeurIPS 2021; defaults from
SphereFed Tab. 16).

Client k sends, for every class c, the count N_ck, mean mu_ck and unbiased covariance
Sigma_ck = 1/(N_ck - 1) sum_j (z - mu_ck)(z - mu_ck)^T of its features (zero when N_ck <= 1),
all C classes densely as SphereFed's Tab. 1 counts them (mu in R^{l x C}, Sigma in R^{l x l x C}),
in float64. The server pools them exactly (Luo et al., Sec. 4; each client's mean weighs N_ck / N_c):

    N_c = sum_k N_ck,    mu_c = sum_k (N_ck / N_c) mu_ck
    Sigma_c = sum_k (N_ck - 1)/(N_c - 1) Sigma_ck + sum_k N_ck/(N_c - 1) mu_ck mu_ck^T
              - N_c/(N_c - 1) mu_c mu_c^T

samples M_c virtual features per class from N(mu_c, Sigma_c + eps I) (the pooled covariance may
be singular), and re-trains the classifier, initialized at the global one, on them with
SGD (Tab. 16: M_c = 500, fine-tuning lr 1e-5; epochs, batch size, momentum and weight decay are
our choices, see ``CCVR.knobs``), using the method's own loss. At 1e-5 our re-training leaves a
digits classifier within 0.2 % of where it started (the digits presets keep it, so their shipped
runs stay what they are); the MNIST-5k preset sets ``ccvr_lr`` to its FedAvg rate (docs/methods.md,
"CCVR's re-training learning rate"). Classes no client has get no virtual
features (their samples are drawn but weighted 0, so shapes stay data-independent for ``meta``).
The Tukey transform of SphereFed's Tab. 1 is not applied (CCVR itself does not use it).

``client_statistics`` needs batches that each hold a single class (``class_batches`` makes them):
then each batch's second moment is one GEMM z^T z of B*l^2 MACs, the real work, instead of C
masked GEMMs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import torch
from torch import nn

from workloads.fl.knob import non_negative, positive
from workloads.fl.methods.calibration import Calibration, ServerWork, Shapes, meta_tensor

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams


def class_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int):
    """Batches of (x, y) each holding one class, in class order, samples in their order within a
    class (for CCVR's client statistics). Indices stay on ``y``'s device."""
    order = torch.argsort(y, stable=True)
    start = 0
    for count in torch.bincount(y).tolist():  # one host sync per client, not one per batch
        for s in range(start, start + count, batch_size):
            part = order[s:min(s + batch_size, start + count)]
            yield x[part], y[part]
        start += count


def ccvr_client_statistics(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                           *, num_classes: int) -> dict[str, torch.Tensor]:
    """Per-class count, mean and unbiased covariance (float64) from single-class batches."""
    counts = sums = second = None
    with torch.no_grad():
        for x, y in batches:
            z = model.features(x).to(torch.float64)
            if counts is None:
                l = z.shape[1]
                counts = torch.zeros(num_classes, dtype=torch.float64, device=z.device)
                sums = torch.zeros(num_classes, l, dtype=torch.float64, device=z.device)
                second = torch.zeros(num_classes, l, l, dtype=torch.float64, device=z.device)
            # in place: each batch adds into its class's slices only (a copy of the [C, l, l]
            # accumulator per batch would dominate the client's cost on any hardware)
            counts.index_add_(0, y, torch.ones_like(y, dtype=torch.float64))
            sums.index_add_(0, y, z)
            second.index_add_(0, y[:1], (z.T @ z)[None])  # the batch holds class y[0] only
    if counts is None:
        raise ValueError("CCVR client statistics need at least one batch of local data")
    means = sums / counts.clamp(min=1)[:, None]  # classes without samples keep mean 0
    # scatter = second - N mu mu^T, then / (N - 1), all in place on the [C, l, l] accumulator
    covs = second.addcmul_((counts[:, None] * means)[:, :, None], means[:, None, :], value=-1)
    covs.div_((counts - 1).clamp(min=1)[:, None, None])
    covs.mul_((counts > 1).to(covs.dtype)[:, None, None])  # none from fewer than two samples
    return {"ccvr_counts": counts, "ccvr_means": means, "ccvr_covs": covs}


def pool_class_statistics(stats: Sequence[dict[str, torch.Tensor]]):
    """Exact pooling of per-client (N_ck, mu_ck, Sigma_ck) into (N_c, mu_c, Sigma_c), float64.

    Scatter_c = sum_k [(N_ck - 1) Sigma_ck + N_ck mu_ck mu_ck^T] - N_c mu_c mu_c^T, accumulated
    client by client in place: one [C, l, l] accumulator, never a [K, C, l, l] stack (800 MB for
    ConvNet's l = 1024 and 10 clients)."""
    if not stats:
        raise ValueError("CCVR pooling needs the statistics of at least one client")
    n = mu_sum = scatter = None
    for s in stats:
        n_k = s["ccvr_counts"].to(torch.float64)  # [C]
        mu_k = s["ccvr_means"].to(torch.float64)  # [C, l]
        cov_k = s["ccvr_covs"].to(torch.float64)  # [C, l, l]
        if n is None:
            n, mu_sum, scatter = torch.zeros_like(n_k), torch.zeros_like(mu_k), torch.zeros_like(cov_k)
        weighted_mu_k = n_k[:, None] * mu_k
        n.add_(n_k)
        mu_sum.add_(weighted_mu_k)
        scatter.addcmul_(cov_k, (n_k - 1).clamp(min=0)[:, None, None])
        scatter.addcmul_(weighted_mu_k[:, :, None], mu_k[:, None, :])  # outer products, broadcast
    mu = mu_sum / n.clamp(min=1)[:, None]  # classes no client has keep mean 0
    cov = scatter.addcmul_((n[:, None] * mu)[:, :, None], mu[:, None, :], value=-1)
    cov.div_((n - 1).clamp(min=1)[:, None, None])
    cov.mul_((n > 1).to(cov.dtype)[:, None, None])  # none from fewer than two samples
    return n, mu, cov


def sample_virtual_features(n, mu, cov, *, per_class: int, eps: float, generator=None):
    """M_c = ``per_class`` draws from N(mu_c, Sigma_c + eps I) for every class; returns
    (features [C*M, l] float32, labels [C*M], weights [C*M]: 1 for classes with N_c > 0, else 0)."""
    num_classes, l = mu.shape
    eye = torch.eye(l, dtype=cov.dtype, device=cov.device)
    chol = torch.linalg.cholesky(cov + eps * eye)  # [C, l, l]
    noise = torch.randn(num_classes, per_class, l, dtype=cov.dtype, device=cov.device,
                        generator=generator)
    feats = mu[:, None, :] + noise @ chol.transpose(1, 2)
    labels = torch.arange(num_classes, device=mu.device).repeat_interleave(per_class)
    weights = (n > 0).to(torch.float32).repeat_interleave(per_class)
    return feats.reshape(-1, l).to(torch.float32), labels, weights


def retrain_classifier(weight: torch.Tensor, feats, labels, sample_weights, *,
                       per_sample_loss: Callable, hp: Hparams, generator=None) -> torch.Tensor:
    """SGD on the classifier only, initialized at ``weight``, over the weighted virtual set."""
    w = weight.detach().clone().requires_grad_(True)
    opt = torch.optim.SGD([w], lr=hp.ccvr_lr, momentum=hp.momentum,
                          weight_decay=hp.weight_decay, foreach=False)
    total = feats.shape[0]
    for _ in range(hp.ccvr_epochs):
        order = torch.randperm(total, generator=generator, device=feats.device)
        for start in range(0, total, hp.ccvr_batch_size):
            idx = order[start:start + hp.ccvr_batch_size]
            opt.zero_grad(set_to_none=True)
            sw = sample_weights[idx]
            losses = per_sample_loss(feats[idx] @ w.T, labels[idx])
            loss = (losses * sw).sum() / sw.sum().clamp(min=1.0)
            loss.backward()
            opt.step()
    return w.detach()


class CCVR(Calibration):
    knobs = (
        positive("ccvr_virtual_per_class", 500, "M_c, Tab. 16 (CIFAR-100)"),
        non_negative("ccvr_lr", 1e-5, "CCVR fine-tuning learning rate, Tab. 16 (CIFAR-100); on the digits it "
                     "re-trains nothing (docs/methods.md); the MNIST-5k preset sets FedAvg's lr"),
        positive("ccvr_epochs", 10, "classifier re-training epochs over the virtual features: our choice"),
        positive("ccvr_batch_size", 64, "our choice (the local batch size of Tab. 16)"),
        non_negative("ccvr_cov_eps", 1e-5, "diagonal added to pooled covariances before sampling: our choice "
                     "(they may be singular)"),
    )
    trained_with = "fedavg"  # Fig. 5 (d): CCVR after FedAvg
    single_class_batches = True  # the statistics need batches that each hold one class (class_batches)

    def statistics(self, *, feature_dim: int, num_classes: int, hp: Hparams) -> Shapes:
        """Counts (C) + means (C x l) + covariances (C x l x l), float64, every class (SphereFed Tab. 1)."""
        l, c = feature_dim, num_classes
        return {"ccvr_counts": ((c,), torch.float64), "ccvr_means": ((c, l), torch.float64),
                "ccvr_covs": ((c, l, l), torch.float64)}

    def client_batches(self, x, y, batch_size: int):
        """Single-class batches: each batch's second moment is then one GEMM (see above)."""
        return class_batches(x, y, batch_size)

    def client_statistics(self, model, batches, *, num_classes, hp):
        return ccvr_client_statistics(model, batches, num_classes=num_classes)

    def server_calibrate(self, stats, *, classifier_weight, loss_fn, hp: Hparams, generator=None):
        n, mu, cov = pool_class_statistics(stats)
        feats, labels, weights = sample_virtual_features(
            n, mu, cov, per_class=hp.ccvr_virtual_per_class, eps=hp.ccvr_cov_eps, generator=generator)
        return retrain_classifier(classifier_weight, feats.to(classifier_weight.device), labels,
                                  weights, per_sample_loss=loss_fn, hp=hp, generator=generator)

    def server_work(self, *, feature_dim: int, num_classes: int, num_clients: int, hp: Hparams,
                    loss_fn: Callable) -> tuple[ServerWork, ...]:
        """Pool K clients' statistics and sample C M_c virtual features (one capture), then the
        re-training: ``ccvr_epochs`` epochs of ceil(C M_c / B) SGD steps, priced from captures of
        two and three steps (the first creates the momentum buffers) of one epoch over as many rows
        (E epochs priced as one epoch of E times the steps: the same elements, one shuffle)."""
        l, c = feature_dim, num_classes
        stats = [self.meta_statistics(feature_dim=l, num_classes=c, hp=hp) for _ in range(num_clients)]

        def pool_and_sample(stats):
            n, mu, cov = pool_class_statistics(stats)
            return sample_virtual_features(n, mu, cov, per_class=hp.ccvr_virtual_per_class, eps=hp.ccvr_cov_eps)

        one_epoch = hp.replace(ccvr_epochs=1)

        def retrain(steps: int):
            rows = steps * hp.ccvr_batch_size
            labels = torch.zeros(rows, dtype=torch.long, device="meta")
            return (retrain_classifier, (meta_tensor((c, l)), meta_tensor((rows, l)), labels, meta_tensor((rows,))),
                    {"per_sample_loss": loss_fn, "hp": one_epoch})

        steps = hp.ccvr_epochs * math.ceil(c * hp.ccvr_virtual_per_class / hp.ccvr_batch_size)
        return ServerWork(lambda k: (pool_and_sample, (stats,), {})), ServerWork(retrain, steps, steady=2)

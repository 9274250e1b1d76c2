"""Fast Federated Calibration, FFC (SphereFed Sec. 4.3, Eq. 6-10; appendix 0.C.1).

After federated training each client k computes, on its local data and with the final global
feature extractor,

    V^k = sum_i z_i^T z_i  (l x l),    U^k = sum_i z_i^T one_hot(y_i)  (l x C)      (Eq. 9)

accumulated in float64 (our choice: the normal equations square Z's condition number), and sends them once. The server solves

    W*^T = (sum_k V^k + lambda I)^{-1} (sum_k U^k)                                  (Eq. 10, 12)

in float64: the least-squares classifier on the pooled features, whatever the split (Eq. 7).
z is ``model.features(x)``: hyperspherical (normalized) features for a SphereFed model; for a
model trained without SphereFed, its raw features (appendix 0.C.3 applies FFC to CE-trained
features), so the calibrated classifier matches the model's own inference path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

import torch
from torch import nn

from workloads.fl.knob import Knob, non_negative
from workloads.fl.methods.calibration import Calibration, Shapes

if TYPE_CHECKING:
    from workloads.fl.hparams import Hparams


def ffc_client_statistics(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                          *, num_classes: int, hp: Hparams) -> dict[str, torch.Tensor]:
    """Eq. 9 over ``batches`` of (x, y): {"ffc_V": V^k, "ffc_U": U^k} in ``hp.ffc_stats_dtype``."""
    dtype = getattr(torch, hp.ffc_stats_dtype)
    v = u = None
    with torch.no_grad():
        for x, y in batches:
            z = model.features(x).to(dtype)
            y_hot = torch.zeros(len(y), num_classes, dtype=dtype, device=z.device).scatter_(1, y[:, None], 1.0)
            v = z.T @ z if v is None else v + z.T @ z
            u = z.T @ y_hot if u is None else u + z.T @ y_hot
    if v is None:
        raise ValueError("FFC client statistics need at least one batch of local data")
    return {"ffc_V": v, "ffc_U": u}


def ffc_solve(v_sum: torch.Tensor, u_sum: torch.Tensor, *, ridge: float) -> torch.Tensor:
    """Eq. 10 / 12: (V + lambda I)^{-1} U in float64, returned as classifier weight [C, l]."""
    v = v_sum.to(torch.float64)
    if ridge:
        v = v + ridge * torch.eye(v.shape[0], dtype=v.dtype, device=v.device)
    try:
        w = torch.linalg.solve(v, u_sum.to(torch.float64))
    except torch.linalg.LinAlgError as err:
        raise ValueError("FFC: sum of Z^T Z is singular (fewer independent features than the "
                         "feature dimension?); set the hyper-parameter ffc_ridge > 0 "
                         "(appendix 0.C.1)") from err
    return w.T


class FFC(Calibration):
    knobs = (
        non_negative("ffc_ridge", 0.0, "FFC L2 penalty lambda (appendix 0.C.1); the paper keeps 0 in main runs"),
        Knob("ffc_stats_dtype", "float64", "the dtype FFC statistics are accumulated and sent in: our choice "
             "(Z^T Z squares the condition number)", choices=("float32", "float64")),
    )
    trained_with = "spherefed"  # Fig. 5 (d): FFC after SphereFed
    single_class_batches = False  # the statistics run over a client's samples in batches of B

    def statistics(self, *, feature_dim: int, num_classes: int, hp: Hparams) -> Shapes:
        """V (l x l) + U (l x C) in ``hp.ffc_stats_dtype``: l (l + C) values (SphereFed Sec. 4.3)."""
        dtype = getattr(torch, hp.ffc_stats_dtype)
        return {"ffc_V": ((feature_dim, feature_dim), dtype), "ffc_U": ((feature_dim, num_classes), dtype)}

    def client_statistics(self, model, batches, *, num_classes, hp):
        return ffc_client_statistics(model, batches, num_classes=num_classes, hp=hp)

    def server_calibrate(self, stats: Sequence[dict[str, torch.Tensor]], *, classifier_weight,
                         loss_fn=None, hp: Hparams, generator=None) -> torch.Tensor:
        v_sum = torch.stack([s["ffc_V"].to(torch.float64) for s in stats]).sum(0)
        u_sum = torch.stack([s["ffc_U"].to(torch.float64) for s in stats]).sum(0)
        return ffc_solve(v_sum, u_sum, ridge=hp.ffc_ridge).to(classifier_weight.dtype)

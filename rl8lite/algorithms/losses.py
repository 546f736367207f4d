"""The PPO loss: a pure function of tensors and keyword-only hyperparameters."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


class PPOLosses(NamedTuple):
    """Loss components (0-d tensors, means over the batch) and monitors."""

    total: torch.Tensor
    policy: torch.Tensor
    vf: torch.Tensor
    entropy: torch.Tensor
    kl_div: torch.Tensor
    clip_fraction: torch.Tensor


def ppo_losses(
    *,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip_param: float,
    dual_clip_param: float | None = None,
    vf_clip_param: float | None = None,
    vf_coeff: float = 1.0,
    entropy_coeff: float | torch.Tensor = 0.0,
    vf_loss: str = "squared",
) -> PPOLosses:
    """Proximal Policy Optimization loss (Schulman et al. 2017, arXiv:1707.06347).

    All tensor arguments share one shape (``[B, 1]`` in the algorithm). With
    ``r = exp(logp - old_logp)`` and advantages ``A``:

        L_clip = -mean(min(r A, clip(r, 1 - eps, 1 + eps) A))

    Dual clip (Ye et al. 2020, arXiv:1912.09729), for ``A < 0`` only:

        L_dual = -mean(max(min(r A, clip(r, 1 - eps, 1 + eps) A), c A))

    Value loss (``vf_loss="squared"``), optionally clipped around the old values ``V_old``:

        L_vf = 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -c_v, c_v) - R)^2))

    or rl8's (``vf_loss="smooth_l1"``): the smooth-L1 (Huber, delta 1) loss of each
    sample, capped at ``c_v`` when given (its gradient is 0 beyond the cap):

        L_vf = mean(min(huber(V - R), c_v)),  huber(x) = x^2 / 2 if |x| < 1 else |x| - 1/2

    Entropy bonus ``L_ent = mean(H)``; total ``L = L_pi + vf_coeff L_vf - entropy_coeff L_ent``.

    Monitors: ``kl_div = mean((r - 1) - log r)`` (Schulman's low-variance
    estimator of KL(old || new)), ``clip_fraction = mean(|r - 1| > eps)``.
    """
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    surrogate = ratio * advantages
    clipped_surrogate = ratio.clamp(1.0 - clip_param, 1.0 + clip_param) * advantages
    objective = torch.min(surrogate, clipped_surrogate)
    if dual_clip_param is not None:
        dual = torch.max(objective, dual_clip_param * advantages)
        objective = torch.where(advantages < 0, dual, objective)
    policy_loss = -objective.mean()

    if vf_loss == "smooth_l1":
        huber = F.smooth_l1_loss(values, returns, reduction="none")
        vf = (huber if vf_clip_param is None else huber.clamp(max=vf_clip_param)).mean()
    else:
        vf_error = (values - returns).square()
        if vf_clip_param is not None:
            clipped_values = old_values + (values - old_values).clamp(-vf_clip_param, vf_clip_param)
            vf_error = torch.max(vf_error, (clipped_values - returns).square())
        vf = 0.5 * vf_error.mean()

    entropy_loss = entropy.mean()
    total = policy_loss + vf_coeff * vf - entropy_coeff * entropy_loss
    with torch.no_grad():
        kl_div = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_param).to(ratio.dtype).mean()
    return PPOLosses(total, policy_loss, vf, entropy_loss, kl_div, clip_fraction)

"""PPO's math as pure functions of tensors, and rl8's TensorDict forms of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import Tensor

from ..data import DataKeys

if TYPE_CHECKING:
    from ..distributions import Distribution

#: Elements of ``[copies, T]`` per slice of copies: temporaries stay small whatever ``N``.
SLICE_ELEMENTS = 2**16


def copy_slices(num_copies: int, num_steps: int, device: torch.device | str = "cpu",
                elements: int = SLICE_ELEMENTS) -> list[slice]:
    """Slices of copies of at most ``elements`` ``[copies, T]`` elements (one copy at least) on
    a CPU, where they stay in cache; one slice elsewhere (a GPU pays per kernel launch)."""
    if torch.device(device).type != "cpu":
        return [slice(0, num_copies)]
    per_slice = max(1, elements // max(1, num_steps))
    return [slice(i, min(i + per_slice, num_copies)) for i in range(0, num_copies, per_slice)]


def gae(rewards: Tensor, values: Tensor, *, gamma: float, gae_lambda: float,
        terminated: Tensor | None = None, truncated: Tensor | None = None,
        final_values: Tensor | None = None,
        out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438):
    ``(advantages, returns)``, each ``[N, T]``, in the promoted float dtype of the inputs,
    written into ``out`` if given.

    Index convention (here and in :attr:`rl8lite.Algorithm.buffer`): ``obs[t]`` is the
    observation acted on, ``rewards[t]``, ``terminated[t]`` and ``truncated[t]`` (``[N, T]``)
    come from the step that followed, ``values[t] = V(obs[t])`` and ``values[T]`` bootstraps
    (``values`` is ``[N, T + 1]``). ``final_values[t]`` (required with ``truncated``) is the
    value of the true last observation of an episode truncated at ``t``.

    With ``d_t = terminated_t or truncated_t`` and the next state's value
    ``v'_t = 0 if terminated_t, final_values_t if truncated_t, values_{t+1} otherwise``:

        delta_t = r_t + gamma * v'_t - V_t
        A_t     = delta_t + gamma * lambda * (1 - d_t) * A_{t+1},   A_T = 0

    Examples:
        >>> adv, ret = gae(torch.ones(1, 2), torch.zeros(1, 3), gamma=0.5, gae_lambda=1.0)
        >>> adv.tolist()
        [[1.5, 1.0]]
    """
    if truncated is not None and final_values is None:
        raise ValueError("final_values is required when truncated is given")
    num_envs, num_steps = rewards.shape
    dtype = torch.result_type(rewards, values)
    dtype = dtype if dtype.is_floating_point else torch.get_default_dtype()
    differentiable = any(x is not None and x.requires_grad for x in (rewards, values, final_values))
    if out is None and not differentiable:
        out = tuple(rewards.new_empty(num_envs, num_steps, dtype=dtype) for _ in range(2))
    parts = []
    for rows in copy_slices(num_envs, num_steps, rewards.device):
        slice_values = values[rows].to(dtype)
        next_values, continues = slice_values[:, 1:], torch.ones_like(rewards[rows], dtype=dtype)
        if truncated is not None:
            ends = truncated[rows]
            next_values = torch.where(ends, final_values[rows].to(dtype), next_values)
            continues = continues * (~ends).to(dtype)
        if terminated is not None:
            ends = terminated[rows]
            next_values = torch.where(ends, torch.zeros_like(next_values), next_values)
            continues = continues * (~ends).to(dtype)
        deltas = rewards[rows].to(dtype) + gamma * next_values - slice_values[:, :-1]
        # Time-major [T, n]: the backward recursion then reads rows, not strides.
        advantages = _recursion(deltas.t().contiguous(), (gamma * gae_lambda * continues).t()).t()
        if out is None:
            parts.append(advantages)
        else:
            out[0][rows] = advantages
            out[1][rows] = advantages + values[rows, :-1]
    if out is None:
        advantages = torch.cat(parts)
        return advantages, advantages + values[:, :-1]
    return out


def _recursion(deltas: Tensor, decay: Tensor) -> Tensor:
    """``A_t = delta_t + decay_t * A_{t+1}`` over time-major ``[T, n]`` (in place if no grad)."""
    if deltas.requires_grad:
        running, steps = torch.zeros_like(deltas[0]), []
        for t in range(deltas.shape[0] - 1, -1, -1):
            running = deltas[t] + decay[t] * running
            steps.append(running)
        return torch.stack(steps[::-1]) if steps else deltas
    rows, decay_rows = deltas.unbind(0), decay.unbind(0)
    for t in range(deltas.shape[0] - 2, -1, -1):
        rows[t].addcmul_(decay_rows[t], rows[t + 1])
    return deltas


def normalization(x: Tensor, eps: float = 1e-8) -> tuple[Tensor, Tensor]:
    """``(mean, std + eps)`` over every element (unbiased std)."""
    std, mean = torch.std_mean(x)
    return mean, std + eps


def normalize(x: Tensor, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / (std + eps)`` over every element."""
    mean, scale = normalization(x, eps)
    return (x - mean) / scale


class PPOLosses(NamedTuple):
    """Loss components (0-d tensors, means over the batch) and monitors."""

    total: Tensor
    policy: Tensor
    vf: Tensor
    entropy: Tensor
    kl_div: Tensor
    clip_fraction: Tensor


def ppo_loss(*, logp: Tensor, old_logp: Tensor, advantages: Tensor, values: Tensor,
             old_values: Tensor, returns: Tensor, entropy: Tensor, clip_param: float,
             dual_clip_param: float | None = None, vf_clip_param: float | None = None,
             vf_coeff: float = 1.0, entropy_coeff: float | Tensor = 0.0,
             vf_loss: str = "squared") -> PPOLosses:
    """Proximal Policy Optimization loss (Schulman et al. 2017, arXiv:1707.06347).

    Tensor arguments share one shape. With ``r = exp(logp - old_logp)`` and advantages ``A``:

        L_clip = -mean(min(r A, clip(r, 1 - eps, 1 + eps) A))

    Dual clip (Ye et al. 2020, arXiv:1912.09729), for ``A < 0`` only:
    ``-mean(max(min(r A, clip(r, 1 - eps, 1 + eps) A), c A))``.

    Value loss ``"squared"``, optionally clipped around the old values ``V_old``:

        L_vf = 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -c_v, c_v) - R)^2))

    or rl8's ``"smooth_l1"``: ``mean(min(huber(V - R), c_v))`` (the cap when ``c_v`` is given).
    Total ``L = L_clip + vf_coeff L_vf - entropy_coeff mean(H)``. Monitors:
    ``kl_div = mean((r - 1) - log r)`` (an estimator of KL(old || new)) and
    ``clip_fraction = mean(|r - 1| > eps)``.

    Examples:
        >>> zero, one = torch.zeros(2), torch.ones(2)
        >>> losses = ppo_loss(logp=zero, old_logp=zero, advantages=one, values=one, old_values=one,
        ...                   returns=one, entropy=zero, clip_param=0.2)
        >>> losses.policy.item(), losses.kl_div.item()
        (-1.0, 0.0)
    """
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    clipped_ratio = ratio.clamp(1.0 - clip_param, 1.0 + clip_param)
    objective = torch.min(ratio * advantages, clipped_ratio * advantages)
    if dual_clip_param is not None:
        dual = torch.max(objective, dual_clip_param * advantages)
        objective = torch.where(advantages < 0, dual, objective)
    policy_loss = -objective.mean()
    if vf_loss == "smooth_l1":
        huber = F.smooth_l1_loss(values, returns, reduction="none")
        vf = (huber if vf_clip_param is None else huber.clamp(max=vf_clip_param)).mean()
    else:
        error = (values - returns).square()
        if vf_clip_param is not None:
            clipped = old_values + (values - old_values).clamp(-vf_clip_param, vf_clip_param)
            error = torch.max(error, (clipped - returns).square())
        vf = 0.5 * error.mean()
    entropy_loss = entropy.mean()
    total = policy_loss + vf_coeff * vf - entropy_coeff * entropy_loss
    with torch.no_grad():
        kl_div = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_param).to(ratio.dtype).mean()
    return PPOLosses(total, policy_loss, vf, entropy_loss, kl_div, clip_fraction)


def generalized_advantage_estimate(
    batch: TensorDict, /, *, gae_lambda: float = 0.95, gamma: float = 0.95, inplace: bool = False,
    normalize_advantages: bool = True, return_returns: bool = True, reward_scale: float = 1.0,
) -> TensorDict:
    """rl8's GAE (:func:`gae`) of ``"rewards"`` and ``"values"`` ``[B, T + 1, ...]`` (no
    episode ends; rewards at ``T`` unread, divided by ``reward_scale + 1e-8``): a TensorDict
    of ``"advantages"`` (0 at ``T``, normalized over ``0..T-1`` after the returns are taken
    if asked) and ``"returns"``, written into ``batch`` with ``inplace``.

    Examples:
        >>> batch = TensorDict({"rewards": torch.ones(1, 3, 1), "values": torch.zeros(1, 3, 1)},
        ...                    batch_size=[1, 3])
        >>> out = generalized_advantage_estimate(batch, gamma=0.5, gae_lambda=1.0,
        ...                                      normalize_advantages=False)
        >>> out["advantages"].flatten()
        tensor([1.5000, 1.0000, 0.0000])
    """

    def per_row(t: Tensor) -> Tensor:  # [B, T, ...] -> rows [B * ..., T]
        return t.movedim(1, -1).reshape(-1, t.shape[1])

    rewards, values = batch[DataKeys.REWARDS][:, :-1], batch[DataKeys.VALUES]
    advantages, _ = gae(per_row(rewards / (reward_scale + 1e-8)), per_row(values), gamma=gamma,
                        gae_lambda=gae_lambda)
    advantages = advantages.reshape(*values[:, :-1].movedim(1, -1).shape).movedim(-1, 1)
    advantages = torch.cat([advantages.to(values.dtype), torch.zeros_like(values[:, -1:])], dim=1)
    out = batch if inplace else TensorDict({}, batch_size=batch.batch_size, device=batch.device)
    if return_returns:
        out[DataKeys.RETURNS] = advantages + values
    if normalize_advantages:
        advantages[:, :-1] = normalize(advantages[:, :-1])
    out[DataKeys.ADVANTAGES] = advantages
    return out


def ppo_losses(
    buffer_batch: TensorDict, sample_batch: TensorDict, sample_distribution: Distribution, /, *,
    clip_param: float = 0.2, dual_clip_param: float | None = 5.0, entropy_coeff: float = 0.0,
    vf_clip_param: float = 1.0, vf_coeff: float = 1.0,
) -> TensorDict:
    """rl8's PPO loss: :func:`ppo_loss` (``vf_loss="smooth_l1"``; ``dual_clip_param`` 0: off) of
    the rollout's ``"actions"``, ``"logp"``, ``"advantages"``, ``"returns"`` and the policy's
    ``"values"`` and distribution now: 0-d ``"policy"`` (the surrogate objective, rl8's sign),
    ``"vf"``, ``"entropy"`` (0 at ``entropy_coeff`` 0) and ``"total"``.

    Examples:
        >>> from rl8lite.distributions import Categorical
        >>> from rl8lite.specs import Categorical as CategoricalSpec
        >>> dist = Categorical(torch.zeros(2, 2), CategoricalSpec(2, shape=[1]))
        >>> ones, action = torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.long)
        >>> rollout = TensorDict({"actions": action, "logp": dist.logp(action),
        ...                       "advantages": ones, "returns": ones}, batch_size=[2])
        >>> losses = ppo_losses(rollout, TensorDict({"values": ones}, batch_size=[2]), dist)
        >>> losses["policy"], losses["total"]
        (tensor(1.), tensor(-1.))
    """
    values = sample_batch[DataKeys.VALUES]
    logp = sample_distribution.logp(buffer_batch[DataKeys.ACTIONS])
    zero = torch.zeros((), device=logp.device)
    entropy = sample_distribution.entropy() if entropy_coeff != 0 else zero
    out = ppo_loss(logp=logp, old_logp=buffer_batch[DataKeys.LOGP],
                   advantages=buffer_batch[DataKeys.ADVANTAGES], values=values, old_values=values,
                   returns=buffer_batch[DataKeys.RETURNS], entropy=entropy, clip_param=clip_param,
                   dual_clip_param=dual_clip_param or None, vf_clip_param=vf_clip_param,
                   vf_coeff=vf_coeff, entropy_coeff=entropy_coeff, vf_loss="smooth_l1")
    losses = {"entropy": out.entropy, "policy": -out.policy, "vf": out.vf, "total": out.total}
    return TensorDict(losses, batch_size=[], device=logp.device)

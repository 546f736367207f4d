"""rl8's GAE and PPO loss over TensorDicts, as thin adapters over rl8lite's pure functions.

rl8 code calls ``rl8.nn.functional.generalized_advantage_estimate(batch, ...)`` and
``ppo_losses(buffer_batch, sample_batch, distribution, ...)``; here they unpack the
TensorDicts and call :func:`rl8lite.algorithms.advantages.generalized_advantage_estimate`
and :func:`rl8lite.algorithms.losses.ppo_losses` (with rl8's smooth-L1 value loss), the
math rl8lite trains with. Those modules are imported when the functions are called, so
that importing :mod:`rl8lite.nn` (as models do) never imports the algorithm package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from tensordict import TensorDict

from ..data import DataKeys

if TYPE_CHECKING:
    from ..distributions import Distribution


def generalized_advantage_estimate(
    batch: TensorDict,
    /,
    *,
    gae_lambda: float = 0.95,
    gamma: float = 0.95,
    inplace: bool = False,
    normalize_advantages: bool = True,
    return_returns: bool = True,
    reward_scale: float = 1.0,
) -> TensorDict:
    """GAE (Schulman et al. 2016) of a rollout TensorDict, rl8's way (no episode ends).

    Args:
        batch: TensorDict ``[B, T + 1]`` with ``"rewards"`` and ``"values"``
            (``[B, T + 1, ...]``; the rewards at ``T`` are not read, the values at ``T``
            bootstrap).
        gae_lambda: Bias/variance trade-off in ``[0, 1]``.
        gamma: Discount factor.
        inplace: Write the results into ``batch`` (and return it) instead of a new TensorDict.
        normalize_advantages: Shift and scale the advantages of steps ``0 .. T - 1`` to
            mean 0 and std 1 (``(A - mean) / (std + 1e-8)``), after the returns are taken.
        return_returns: Also give ``"returns"`` (advantages + values).
        reward_scale: Rewards are divided by ``reward_scale + 1e-8`` first. ``batch``'s
            rewards are left as they are (rl8 overwrote them).

    Returns:
        TensorDict ``[B, T + 1]`` with ``"advantages"`` (0 at step ``T``) and, if asked,
        ``"returns"``, shaped as ``"values"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"rewards": torch.ones(1, 3, 1), "values": torch.zeros(1, 3, 1)}, batch_size=[1, 3])
        >>> out = generalized_advantage_estimate(batch, gamma=0.5, gae_lambda=1.0, normalize_advantages=False)
        >>> out["advantages"].flatten()
        tensor([1.5000, 1.0000, 0.0000])
    """
    from ..algorithms.advantages import generalized_advantage_estimate as gae
    from ..algorithms.advantages import normalization

    def per_row(t: torch.Tensor) -> torch.Tensor:
        """``[B, T, ...]`` as the ``[N, T]`` rows rl8lite's GAE takes: feature dims become rows."""
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
        mean, scale = normalization(advantages[:, :-1])
        advantages[:, :-1] = (advantages[:, :-1] - mean) / scale
    out[DataKeys.ADVANTAGES] = advantages
    return out


def ppo_losses(
    buffer_batch: TensorDict,
    sample_batch: TensorDict,
    sample_distribution: Distribution,
    /,
    *,
    clip_param: float = 0.2,
    dual_clip_param: float | None = 5.0,
    entropy_coeff: float = 0.0,
    vf_clip_param: float = 1.0,
    vf_coeff: float = 1.0,
) -> TensorDict:
    """rl8's PPO loss of one batch: dual-clipped surrogate, capped smooth-L1 value loss, entropy bonus.

    The equations are :func:`rl8lite.algorithms.losses.ppo_losses`' with ``vf_loss="smooth_l1"``.

    Args:
        buffer_batch: TensorDict ``[B]`` from the rollout: ``"actions"``, ``"logp"``
            (their log-probabilities then), ``"advantages"`` and ``"returns"``.
        sample_batch: TensorDict ``[B]`` from the policy now: ``"values"``.
        sample_distribution: The policy's action distribution now (``logp``, ``entropy``).
        clip_param: Surrogate clip ``eps``: the ratio counts within ``[1 - eps, 1 + eps]``.
        dual_clip_param: Dual clip ``c`` for negative advantages (Ye et al. 2020);
            ``None`` or 0 turns it off.
        entropy_coeff: Weight of the entropy bonus; at 0 the entropy is not computed.
        vf_clip_param: Cap on each sample's value loss.
        vf_coeff: Weight of the value loss.

    Returns:
        TensorDict ``[]`` of 0-d tensors: ``"policy"`` (the clipped surrogate objective,
        to maximise: rl8's sign), ``"vf"``, ``"entropy"`` (0 when ``entropy_coeff`` is 0)
        and ``"total"`` ``= vf_coeff * vf - policy - entropy_coeff * entropy``, to minimise.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl8lite.distributions import Categorical
        >>> from rl8lite.specs import Categorical as CategoricalSpec
        >>> dist = Categorical(torch.zeros(2, 2), CategoricalSpec(2, shape=[1]))
        >>> rollout = TensorDict({"actions": torch.zeros(2, 1, dtype=torch.long), "logp": dist.logp(torch.zeros(2, 1)),
        ...                       "advantages": torch.ones(2, 1), "returns": torch.ones(2, 1)}, batch_size=[2])
        >>> losses = ppo_losses(rollout, TensorDict({"values": torch.ones(2, 1)}, batch_size=[2]), dist)
        >>> losses["policy"], losses["total"]
        (tensor(1.), tensor(-1.))
    """
    from ..algorithms.losses import ppo_losses as losses

    values = sample_batch[DataKeys.VALUES]
    logp = sample_distribution.logp(buffer_batch[DataKeys.ACTIONS])
    entropy = sample_distribution.entropy() if entropy_coeff != 0 else torch.zeros((), device=logp.device)
    out = losses(
        logp=logp, old_logp=buffer_batch[DataKeys.LOGP], advantages=buffer_batch[DataKeys.ADVANTAGES],
        values=values, old_values=values, returns=buffer_batch[DataKeys.RETURNS], entropy=entropy,
        clip_param=clip_param, dual_clip_param=dual_clip_param or None, vf_clip_param=vf_clip_param,
        vf_coeff=vf_coeff, entropy_coeff=entropy_coeff, vf_loss="smooth_l1",
    )
    return TensorDict({"entropy": out.entropy, "policy": -out.policy, "vf": out.vf, "total": out.total},
                      batch_size=[])

"""A collect's statistics, and the per-copy sums they carry from one collect to the next."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys
from ..runtime.distributed import Ranks
from .advantages import discounted_return_trace, episode_statistics
from .data_parallel import WholeBatch, pool_collect_stats
from .reductions import extrema


class CollectStatistics:
    """``returns/*``, ``rewards/*``, ``episodes/*`` and the reward scale of each collect.

    Carries, per copy, the running discounted return (reward normalisation) and the
    return and length of the ongoing episode, so that statistics of episodes that
    span several collects are exact. :meth:`restart` zeroes them at env resets. With
    several ranks the statistics are those of every rank's copies.

    Args:
        num_envs: Env copies (of this rank).
        gamma: Discount of the running returns whose std scales rewards.
        normalize_rewards: Whether to compute the reward scale.
        device: Device of the carries.
        ranks: The training processes (default: this one alone).
    """

    def __init__(
        self, num_envs: int, *, gamma: float, normalize_rewards: bool, device: torch.device, ranks: Ranks | None = None
    ) -> None:
        self.gamma = gamma
        self.normalize_rewards = normalize_rewards
        self.ranks = ranks or Ranks()
        self.whole_batch = WholeBatch(self.ranks)
        self.discounted_return = torch.zeros(num_envs, device=device)
        self.episode_return = torch.zeros(num_envs, device=device)
        self.episode_length = torch.zeros(num_envs, dtype=torch.long, device=device)

    def restart(self) -> None:
        self.discounted_return.zero_()
        self.episode_return.zero_()
        self.episode_length.zero_()

    def of_collect(self, buffer: TensorDict, *, episodic: bool) -> dict[str, float]:
        """Statistics of the collect in ``buffer`` (one host read); updates the carries.

        With reward normalisation, ``coefficients/reward_scale`` is the std of the running
        discounted returns, whose trace is written into the buffer's
        ``reversed_discounted_returns`` entry.
        """
        horizon = buffer.batch_size[1] - 1
        rewards = buffer[DataKeys.REWARDS][:, :horizon, 0]
        ends = (
            buffer[DataKeys.TERMINATED][:, :horizon, 0] | buffer[DataKeys.TRUNCATED][:, :horizon, 0]
            if episodic else None
        )
        returns = rewards.sum(1)
        returns_std, returns_mean = torch.std_mean(returns, correction=0)
        rewards_std, rewards_mean = torch.std_mean(rewards, correction=0)
        rewards_min, rewards_max = extrema(rewards)
        values: dict[str, torch.Tensor] = {
            "returns/min": returns.min(),
            "returns/max": returns.max(),
            "returns/mean": returns_mean,
            "returns/std": returns_std,
            "rewards/min": rewards_min,
            "rewards/max": rewards_max,
            "rewards/mean": rewards_mean,
            "rewards/std": rewards_std,
        }
        if self.normalize_rewards:
            trace = discounted_return_trace(
                rewards, self.discounted_return, gamma=self.gamma, episode_ends=ends,
                out=buffer[DataKeys.REVERSED_DISCOUNTED_RETURNS][:, 1:, 0],
            )
            self.discounted_return = trace[:, -1] * (1.0 if ends is None else (~ends[:, -1]).float())
            values["coefficients/reward_scale"] = self.whole_batch.population_std(trace)
        if ends is not None:
            episodes = episode_statistics(rewards, ends, self.episode_return, self.episode_length)
            self.episode_return = episodes["carry_return"]
            self.episode_length = episodes["carry_length"]
            count = episodes["count"].double()
            values["episodes/count"] = count
            values["episodes/return_mean"] = episodes["return_sum"] / count
            values["episodes/return_min"] = episodes["return_min"]
            values["episodes/return_max"] = episodes["return_max"]
            values["episodes/length_mean"] = episodes["length_sum"].double() / count
            if self.ranks.distributed:
                values["episodes/return_sum"] = episodes["return_sum"]
                values["episodes/length_sum"] = episodes["length_sum"].double()
        if self.ranks.distributed:
            values = pool_collect_stats(values, self.ranks)
            if ends is not None:
                count = values["episodes/count"]
                values["episodes/return_mean"] = values.pop("episodes/return_sum") / count
                values["episodes/length_mean"] = values.pop("episodes/length_sum") / count
        numbers = torch.stack([v.double() for v in values.values()]).tolist()
        stats = dict(zip(values, numbers))
        if ends is not None and stats["episodes/count"] == 0:
            for key in ("return_mean", "return_min", "return_max", "length_mean"):
                stats[f"episodes/{key}"] = float("nan")
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {
            "discounted_return": self.discounted_return.cpu().clone(),
            "episode_return": self.episode_return.cpu().clone(),
            "episode_length": self.episode_length.cpu().clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        device = self.discounted_return.device
        self.discounted_return = state["discounted_return"].to(device)
        self.episode_return = state["episode_return"].to(device)
        self.episode_length = state["episode_length"].to(device)

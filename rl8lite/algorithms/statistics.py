"""A collect's statistics, and what they carry from one collect to the next."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys
from ..nn.ppo import copy_slices
from .buffer import episode_ends
from .data_parallel import WholeBatch, pool_collect_stats, union_std

_WINDOW_STATS = ("episodes/return_mean", "episodes/return_min", "episodes/return_max",
                 "episodes/length_mean")
#: Completed episodes whose mean is ``episodes/return_mean`` (SB3's and rsl_rl's window).
EPISODE_WINDOW = 100
#: What :class:`CollectStatistics` carries between collects (its checkpoint keys).
_CARRIED = ("discounted_return", "episode_return", "episode_length", "recent_episodes")


def extrema(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(min, max)`` as 0-d tensors (NaN propagates), without a contiguous copy."""
    if x.ndim < 2 or x.is_contiguous():
        return torch.aminmax(x)
    inner = tuple(range(1, x.ndim))
    return x.amin(inner).min(), x.amax(inner).max()


def discounted_return_trace(rewards: torch.Tensor, initial: torch.Tensor, *, gamma: float,
                            episode_ends: torch.Tensor | None = None,
                            out: torch.Tensor | None = None) -> torch.Tensor:
    """Running discounted sums ``G_{t+1} = gamma * G_t * (1 - d_{t-1}) + r_t`` ``[N, T]`` from
    ``initial`` ``[N]``, restarting after episode ends: the "reversed discounted returns" whose std
    scales rewards (Engstrom et al. 2020, arXiv:2005.12729, as in rl8)."""
    num_envs, num_steps = rewards.shape
    if num_envs * num_steps * num_steps <= 2**16:  # one batched product beats a T-step loop here
        trace = _trace_by_matrix(rewards, initial, gamma, episode_ends)
        return trace if out is None else out.copy_(trace)
    out = torch.empty_like(rewards) if out is None else out
    running = initial.to(rewards.dtype, copy=True)
    for t in range(num_steps):
        running.mul_(gamma).add_(rewards[:, t])
        out[:, t] = running
        if episode_ends is not None:
            running.masked_fill_(episode_ends[:, t], 0.0)
    return out


def _trace_by_matrix(rewards: torch.Tensor, initial: torch.Tensor, gamma: float,
                     episode_ends: torch.Tensor | None) -> torch.Tensor:
    """With ``s_t`` the number of episode ends strictly before ``t``:
    ``G_t = sum_{k <= t, s_k = s_t} gamma^(t - k) r_k + [s_t = 0] gamma^(t + 1) G_init``."""
    num_steps = rewards.shape[1]
    steps = torch.arange(num_steps, device=rewards.device)
    lag = steps[:, None] - steps[None, :]
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    decay = torch.where(lag >= 0, gamma ** lag.clamp(min=0).to(rewards.dtype), zero)
    if episode_ends is None:
        weights = decay.expand(rewards.shape[0], num_steps, num_steps)
        first_segment = torch.ones_like(rewards, dtype=torch.bool)
    else:
        ends = episode_ends.to(torch.int64)
        segment = ends.cumsum(1) - ends
        weights = decay * (segment[:, :, None] == segment[:, None, :])
        first_segment = segment == 0
    carried = initial[:, None] * gamma ** (steps + 1).to(rewards.dtype) * first_segment
    return torch.einsum("ntk,nk->nt", weights, rewards) + carried


def episode_returns(rewards: torch.Tensor, episode_ends: torch.Tensor, carry_return: torch.Tensor,
                    carry_length: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(return, length)`` ``[N, T]`` (float64) of each step's episode, as of that step."""
    parts = [_episode_rows(rewards[r], episode_ends[r], carry_return[r], carry_length[r])
             for r in copy_slices(*rewards.shape, rewards.device)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _episode_rows(rewards: torch.Tensor, ends: torch.Tensor, carry_return: torch.Tensor,
                  carry_length: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    num_envs, num_steps = rewards.shape
    cumulative = rewards.to(torch.float64).cumsum(1)
    steps = torch.arange(num_steps, device=rewards.device).expand(num_envs, num_steps)
    last_end = torch.where(ends, steps, torch.full_like(steps, -1)).cummax(dim=1).values
    # the last episode end strictly before t (-1: the episode carried into the collect)
    previous = torch.cat([torch.full_like(last_end[:, :1], -1), last_end[:, :-1]], dim=1)
    started_here = previous >= 0
    returns = torch.where(started_here, cumulative - cumulative.gather(1, previous.clamp(min=0)),
                          cumulative + carry_return.to(torch.float64)[:, None])
    lengths = torch.where(started_here, steps - previous, steps + 1 + carry_length[:, None])
    return returns, lengths.to(torch.float64)


class CollectStatistics:
    """``returns/*``, ``rewards/*``, ``episodes/*`` and the reward scale of each collect; the
    ``episodes/`` means cover the last ``window`` completed episodes (``None``: all)."""

    def __init__(self, num_envs: int, *, gamma: float, normalize_rewards: bool,
                 device: torch.device, whole: WholeBatch | None = None,
                 window: int | None = EPISODE_WINDOW) -> None:
        self.gamma, self.normalize_rewards, self.window = gamma, normalize_rewards, window
        self.whole = whole or WholeBatch()
        self.discounted_return = torch.zeros(num_envs, device=device)
        self.episode_return = torch.zeros(num_envs, device=device)
        self.episode_length = torch.zeros(num_envs, dtype=torch.long, device=device)
        #: The returns and lengths of the last ``window`` completed episodes, oldest first.
        self.recent_episodes = torch.zeros(0, 2, dtype=torch.float64, device=device)

    def restart(self) -> None:
        """An env reset: every copy starts a new episode."""
        self.discounted_return.zero_()
        self.episode_return.zero_()
        self.episode_length.zero_()

    def of_collect(self, buffer: TensorDict, *, episodic: bool) -> dict[str, float]:
        """Statistics of the collect in ``buffer``, updating the carries."""
        horizon = buffer.batch_size[1] - 1
        rewards = buffer[DataKeys.REWARDS][:, :horizon, 0]
        ends = episode_ends(buffer) if episodic else None
        values: dict[str, torch.Tensor] = {}
        for name, x in (("returns", rewards.sum(1)), ("rewards", rewards)):
            low, high = extrema(x)
            std, mean = torch.std_mean(x, correction=0)
            values.update({f"{name}/min": low, f"{name}/max": high, f"{name}/mean": mean,
                           f"{name}/std": std})
        if self.normalize_rewards:
            trace = discounted_return_trace(
                rewards, self.discounted_return, gamma=self.gamma, episode_ends=ends,
                out=buffer[DataKeys.REVERSED_DISCOUNTED_RETURNS][:, 1:, 0])
            running = 1.0 if ends is None else (~ends[:, -1]).float()
            self.discounted_return = trace[:, -1] * running
            values["coefficients/reward_scale"] = self.whole.population_std(trace)
        if ends is not None:
            episode_return, episode_length = episode_returns(
                rewards, ends, self.episode_return, self.episode_length)
            running = ~ends[:, -1]
            self.episode_return = (episode_return[:, -1] * running).to(rewards.dtype)
            self.episode_length = episode_length[:, -1].long() * running
            values["episodes/count"] = ends.sum().double()
        if self.whole.ranks.distributed:
            values = pool_collect_stats(values, self.whole.ranks)
        stats = dict(zip(values, torch.stack([v.double() for v in values.values()]).tolist()))
        if ends is not None:
            stats.update(self._episode_window(ends, episode_return, episode_length))
        return stats

    def _episode_window(self, ends: torch.Tensor, returns: torch.Tensor,
                        lengths: torch.Tensor) -> dict[str, float]:
        order = ends.t()  # episodes in the order they ended (time, then copy)
        new = torch.stack([returns.t()[order], lengths.t()[order]], dim=-1)
        recent = torch.cat([self.recent_episodes, new])
        recent = self.recent_episodes = recent if self.window is None else recent[-self.window:]
        count = torch.tensor(float(len(recent)), dtype=torch.float64, device=recent.device)
        sums = self.whole.sums_tensor(torch.stack([count, recent[:, 0].sum(), recent[:, 1].sum()]))
        low, high = self.whole.extremes(recent[:, 0])
        count, return_sum, length_sum = sums.tolist()
        if not count:
            return dict.fromkeys(_WINDOW_STATS, float("nan"))
        return dict(zip(_WINDOW_STATS, (return_sum / count, low, high, length_sum / count)))

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).cpu().clone() for name in _CARRIED}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = {"recent_episodes": torch.zeros(0, 2, dtype=torch.float64), **state}
        for name in _CARRIED:
            setattr(self, name, state[name].to(self.discounted_return.device))


def merge_collects(collects: list[dict[str, float]]) -> dict[str, float]:
    """The stats of several equally long collects as one."""
    merged = dict(collects[-1])
    for key in collects[0]:
        if key.startswith("episodes/") and key != "episodes/count":
            continue
        values = [c[key] for c in collects]
        if key.endswith(("/count", "/steps", "/resets", "_ms")):
            merged[key] = float(sum(values))
        elif key.endswith("/min"):
            merged[key] = min(values)
        elif key.endswith("/max"):
            merged[key] = max(values)
        elif key.endswith("/std") and (mean_key := key.replace("/std", "/mean")) in collects[0]:
            means = torch.tensor([c[mean_key] for c in collects], dtype=torch.float64)
            second = (torch.tensor(values, dtype=torch.float64).square() + means.square()).mean()
            merged[key] = float(union_std(means.mean(), second))
        else:
            merged[key] = sum(values) / len(values)
    return merged

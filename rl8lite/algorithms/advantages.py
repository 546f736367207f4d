"""Advantage estimation and reward scaling: pure functions of tensors.

Index convention (used by every function here and by :attr:`Algorithm.buffer`):
for a copy and time ``t`` in ``0..T-1``, ``obs[t]`` is the observation the
policy acted on, ``rewards[t]``, ``terminated[t]`` and ``truncated[t]`` come
from the step that followed, and ``values[t] = V(obs[t])``; ``values[T]`` is
the value of the observation after the last step (the bootstrap).
``final_values[t]`` is the value of the true last observation of an episode
that was truncated at ``t`` (its stand-in when the env gave no ``final_obs``).
"""

from __future__ import annotations

import torch


def generalized_advantage_estimate(
    rewards: torch.Tensor,
    values: torch.Tensor,
    *,
    gamma: float,
    gae_lambda: float,
    terminated: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    final_values: torch.Tensor | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438).

    Args:
        rewards: ``[N, T]`` rewards (already scaled if rewards are normalised).
        values: ``[N, T + 1]`` value estimates, the last column bootstrapping.
        gamma: Discount factor in ``(0, 1]``.
        gae_lambda: GAE's bias/variance trade-off in ``[0, 1]``.
        terminated: ``[N, T]`` bool; the episode ended in a terminal state.
        truncated: ``[N, T]`` bool; the episode was cut short (bootstrapped).
        final_values: ``[N, T]`` values of the last state of truncated episodes;
            required where ``truncated`` is set.
        out: Optional ``[N, T]`` tensors (views allowed, not overlapping the
            inputs) to write ``(advantages, returns)`` into instead of allocating them.

    Returns:
        ``(advantages, returns)``, each ``[N, T]``, with ``returns = advantages + values[:, :T]``.

    With ``d_t = terminated_t or truncated_t``, the next-state value is

        v'_t = 0 if terminated_t, final_values_t if truncated_t, values_{t+1} otherwise,

    and

        delta_t = r_t + gamma * v'_t - V_t
        A_t     = delta_t + gamma * lambda * (1 - d_t) * A_{t+1},   A_T = 0.

    The result has the promoted floating dtype of ``rewards`` and ``values``.
    Temporaries stay a few hundred KiB whatever ``N``: the recursion runs a slice
    of copies at a time.
    """
    if truncated is not None and final_values is None:
        raise ValueError("final_values is required when truncated is given")
    num_envs, num_steps = rewards.shape
    dtype = torch.result_type(rewards, values)
    dtype = dtype if dtype.is_floating_point else torch.get_default_dtype()
    differentiable = rewards.requires_grad or values.requires_grad or (
        final_values is not None and final_values.requires_grad
    )
    if out is None and not differentiable:
        out = (
            torch.empty(num_envs, num_steps, dtype=dtype, device=rewards.device),
            torch.empty(num_envs, num_steps, dtype=dtype, device=rewards.device),
        )
    parts = []
    for rows in copy_slices(num_envs, num_steps):
        deltas, continues = _deltas_and_continues(
            rewards[rows].to(dtype), values[rows].to(dtype), gamma,
            None if terminated is None else terminated[rows],
            None if truncated is None else truncated[rows],
            None if final_values is None else final_values[rows].to(dtype),
        )
        # Time-major [T, n]: the backward recursion then reads rows, not strides.
        advantages_tm = _advantage_recursion(deltas.t().contiguous(), (gamma * gae_lambda * continues).t())
        if out is None:  # differentiable inputs: keep the graph, concatenate at the end
            parts.append(advantages_tm.t())
            continue
        out[0][rows] = advantages_tm.t()
        out[1][rows] = advantages_tm.t() + values[rows, :-1]
    if out is None:
        advantages = torch.cat(parts)
        return advantages, advantages + values[:, :-1]
    return out


def _advantage_recursion(deltas_tm: torch.Tensor, decay_tm: torch.Tensor) -> torch.Tensor:
    """``A_t = delta_t + decay_t * A_{t+1}`` (``A_{T-1} = delta_{T-1}``) over time-major ``[T, n]``;
    overwrites ``deltas_tm`` unless it needs autograd."""
    num_steps = deltas_tm.shape[0]
    if deltas_tm.requires_grad:  # out of place: autograd records each step
        running = torch.zeros_like(deltas_tm[0])
        steps = []
        for t in range(num_steps - 1, -1, -1):
            running = deltas_tm[t] + decay_tm[t] * running
            steps.append(running)
        return torch.stack(steps[::-1]) if steps else deltas_tm
    # In place, one fused op per step.
    advantage_rows, decay_rows = deltas_tm.unbind(0), decay_tm.unbind(0)
    for t in range(num_steps - 2, -1, -1):
        advantage_rows[t].addcmul_(decay_rows[t], advantage_rows[t + 1])
    return deltas_tm


def _deltas_and_continues(
    rewards: torch.Tensor,
    values: torch.Tensor,
    gamma: float,
    terminated: torch.Tensor | None,
    truncated: torch.Tensor | None,
    final_values: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``delta_t`` and ``1 - d_t`` (see :func:`generalized_advantage_estimate`), ``[n, T]`` each."""
    next_values = values[:, 1:]
    continues = torch.ones_like(rewards)
    if truncated is not None:
        assert final_values is not None
        next_values = torch.where(truncated, final_values, next_values)
        continues = continues * (~truncated).to(rewards.dtype)
    if terminated is not None:
        next_values = torch.where(terminated, torch.zeros_like(next_values), next_values)
        continues = continues * (~terminated).to(rewards.dtype)
    return rewards + gamma * next_values - values[:, :-1], continues


#: Elements of ``[copies, T]`` per slice in the per-copy computations here.
_SLICE_ELEMENTS = 2**16


def copy_slices(num_copies: int, num_steps: int) -> list[slice]:
    """Slices of copies with at most ``_SLICE_ELEMENTS`` ``[copies, T]`` elements each (at least one copy)."""
    per_slice = max(1, _SLICE_ELEMENTS // max(1, num_steps))
    return [slice(start, min(start + per_slice, num_copies)) for start in range(0, num_copies, per_slice)]


def normalization(x: torch.Tensor, eps: float = 1e-8) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, std + eps)`` over every element: :func:`normalize`'s shift and scale."""
    std, mean = torch.std_mean(x)
    return mean, std + eps


def normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over every element."""
    mean, scale = normalization(x, eps)
    return (x - mean) / scale


def discounted_return_trace(
    rewards: torch.Tensor,
    initial: torch.Tensor,
    *,
    gamma: float,
    episode_ends: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Running discounted sums ``G_{t+1} = gamma * G_t * (1 - d_{t-1}) + r_t`` per copy.

    These are the "reversed discounted returns" whose standard deviation scales
    rewards in reward normalisation (Engstrom et al. 2020, arXiv:2005.12729, as
    in rl8). A sum restarts after an episode end.

    Args:
        rewards: ``[N, T]`` raw rewards.
        initial: ``[N]`` running sum carried from the previous collect (0 after a reset).
        gamma: Discount factor.
        episode_ends: ``[N, T]`` bool, ``terminated | truncated``.
        out: Optional ``[N, T]`` tensor (a view is fine) to write the sums into.

    Returns:
        ``[N, T]`` running sums after each step (the last column is the next carry).
    """
    num_envs, num_steps = rewards.shape
    if num_envs * num_steps * num_steps <= _MAX_TRACE_MATRIX:
        trace = _discounted_trace_by_matrix(rewards, initial, gamma, episode_ends)
        if out is None:
            return trace
        out.copy_(trace)
        return out
    out = torch.empty_like(rewards) if out is None else out
    # In place on one carried sum (no new [N] tensor per step).
    running = initial.to(rewards.dtype, copy=True)
    for t in range(num_steps):
        running.mul_(gamma).add_(rewards[:, t])
        out[:, t] = running
        if episode_ends is not None:
            running.masked_fill_(episode_ends[:, t], 0.0)
    return out


# Largest N * T * T for which the trace is one batched product instead of a T-step loop.
_MAX_TRACE_MATRIX = 2**16  # measured: faster below ~64k elements, slower above


def _discounted_trace_by_matrix(
    rewards: torch.Tensor, initial: torch.Tensor, gamma: float, episode_ends: torch.Tensor | None
) -> torch.Tensor:
    """The same sums in a few vectorised ops.

    With ``s_t`` the number of episode ends strictly before ``t`` (a segment id),

        G_t = sum_{k <= t, s_k = s_t} gamma^(t - k) r_k + [s_t = 0] gamma^(t + 1) G_init.
    """
    num_steps = rewards.shape[1]
    steps = torch.arange(num_steps, device=rewards.device)
    lag = steps[:, None] - steps[None, :]
    decay = torch.where(lag >= 0, gamma ** lag.clamp(min=0).to(rewards.dtype), torch.zeros((), dtype=rewards.dtype, device=rewards.device))
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


def episode_statistics(
    rewards: torch.Tensor,
    episode_ends: torch.Tensor,
    carry_return: torch.Tensor,
    carry_length: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Returns and lengths of the episodes that ended during a collect, vectorised over time.

    Args:
        rewards: ``[N, T]`` raw rewards.
        episode_ends: ``[N, T]`` bool, ``terminated | truncated``.
        carry_return: ``[N]`` return accumulated before this collect by each copy's
            ongoing episode.
        carry_length: ``[N]`` steps taken before this collect by that episode.

    Returns:
        A dict of tensors: ``count`` (episodes ended), ``return_sum``,
        ``return_min``, ``return_max``, ``length_sum`` (0-d), and
        ``carry_return``/``carry_length`` (``[N]``) for the next collect.
    """
    slices = copy_slices(*rewards.shape)
    if len(slices) == 1:
        return _episode_statistics_rows(rewards, episode_ends, carry_return, carry_length)
    # Each slice's results go straight into preallocated outputs: small tensors kept until
    # the end would sit in the heap holes a slice's temporaries leave (glibc), so that the
    # next slice's temporaries no longer fit there and the heap grows.
    totals = torch.empty(len(slices), len(_SUMMED) + 2, dtype=torch.float64, device=rewards.device)
    next_return, next_length = torch.empty_like(carry_return), torch.empty_like(carry_length)
    for i, rows in enumerate(slices):
        part = _episode_statistics_rows(rewards[rows], episode_ends[rows], carry_return[rows], carry_length[rows])
        torch.stack([part[key].double() for key in (*_SUMMED, "return_min", "return_max")], out=totals[i])
        next_return[rows] = part["carry_return"]
        next_length[rows] = part["carry_length"]
        del part
    sums = totals[:, : len(_SUMMED)].sum(0)
    return {
        "count": sums[0].to(torch.int64),
        "return_sum": sums[1],
        "return_min": totals[:, -2].min(),
        "return_max": totals[:, -1].max(),
        "length_sum": sums[2].to(torch.int64),
        "carry_return": next_return,
        "carry_length": next_length,
    }


#: ``episode_statistics``' totals summed over slices of copies (float64 holds the counts exactly).
_SUMMED = ("count", "return_sum", "length_sum")


def _episode_statistics_rows(
    rewards: torch.Tensor,
    episode_ends: torch.Tensor,
    carry_return: torch.Tensor,
    carry_length: torch.Tensor,
) -> dict[str, torch.Tensor]:
    num_envs, num_steps = rewards.shape
    cumulative = rewards.to(torch.float64).cumsum(1)
    steps = torch.arange(num_steps, device=rewards.device).expand(num_envs, num_steps)
    end_index = torch.where(episode_ends, steps, torch.full_like(steps, -1))
    last_end = end_index.cummax(dim=1).values
    # Index of the last episode end strictly before t (-1: the carried episode).
    previous_end = torch.cat([torch.full_like(last_end[:, :1], -1), last_end[:, :-1]], dim=1)
    started_here = previous_end >= 0
    base = cumulative.gather(1, previous_end.clamp(min=0))
    episode_return = torch.where(
        started_here, cumulative - base, cumulative + carry_return.to(torch.float64)[:, None]
    )
    episode_length = torch.where(
        started_here, steps - previous_end, steps + 1 + carry_length[:, None]
    )
    still_running = ~episode_ends[:, -1]
    inf = torch.tensor(float("inf"), dtype=torch.float64, device=rewards.device)
    # Masked reductions (no boolean indexing: that would sync with the device).
    return {
        "count": episode_ends.sum(),
        "return_sum": torch.where(episode_ends, episode_return, 0.0).sum(),
        "return_min": torch.where(episode_ends, episode_return, inf).min(),
        "return_max": torch.where(episode_ends, episode_return, -inf).max(),
        "length_sum": torch.where(episode_ends, episode_length, 0).sum(),
        "carry_return": (episode_return[:, -1] * still_running).to(rewards.dtype),
        "carry_length": episode_length[:, -1] * still_running,
    }

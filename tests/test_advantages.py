"""GAE, reward scaling and episode statistics against independently computed numbers."""

from __future__ import annotations

import pytest
import torch

from rl8lite.algorithms.statistics import discounted_return_trace, episode_returns
from rl8lite.nn.ppo import SLICE_ELEMENTS, normalize
from rl8lite.nn.ppo import gae as generalized_advantage_estimate


def reference_gae(rewards, values, terminated, truncated, final_values, gamma, lam):
    """A plain per-copy loop over Python floats, written from the textbook definition."""
    n, t_max = len(rewards), len(rewards[0])
    adv = [[0.0] * t_max for _ in range(n)]
    for i in range(n):
        running = 0.0
        for t in reversed(range(t_max)):
            if terminated[i][t]:
                next_value, carry = 0.0, 0.0
            elif truncated[i][t]:
                next_value, carry = final_values[i][t], 0.0
            else:
                next_value, carry = values[i][t + 1], running
            delta = rewards[i][t] + gamma * next_value - values[i][t]
            running = delta + gamma * lam * carry
            adv[i][t] = running
    return adv


def test_gae_three_steps_by_hand() -> None:
    # gamma = 0.5, lambda = 0.5, no episode ends:
    # deltas: d2 = 1 + .5*4 - 3 = 0, d1 = 1 + .5*3 - 2 = 0.5, d0 = 1 + .5*2 - 1 = 1
    # A2 = 0, A1 = 0.5 + .25*0 = 0.5, A0 = 1 + .25*0.5 = 1.125
    rewards = torch.tensor([[1.0, 1.0, 1.0]])
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    adv, ret = generalized_advantage_estimate(rewards, values, gamma=0.5, gae_lambda=0.5)
    torch.testing.assert_close(adv, torch.tensor([[1.125, 0.5, 0.0]]))
    torch.testing.assert_close(ret, torch.tensor([[2.125, 2.5, 3.0]]))


def test_terminated_cuts_the_bootstrap_by_hand() -> None:
    # Termination at t=1: d1 = 1 + 0 - 2 = -1 and A1 does not carry A2;
    # A2 = d2 = 1 + .5*4 - 3 = 0; A0 = (1 + .5*2 - 1) + .25*(-1) = 0.75
    rewards = torch.tensor([[1.0, 1.0, 1.0]])
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    terminated = torch.tensor([[False, True, False]])
    truncated = torch.zeros_like(terminated)
    adv, _ = generalized_advantage_estimate(
        rewards, values, gamma=0.5, gae_lambda=0.5,
        terminated=terminated, truncated=truncated, final_values=torch.zeros(1, 3),
    )
    torch.testing.assert_close(adv, torch.tensor([[0.75, -1.0, 0.0]]))


def test_truncated_bootstraps_from_the_final_value_by_hand() -> None:
    # Truncation at t=1 with V(final_obs) = 10: d1 = 1 + .5*10 - 2 = 4, no carry;
    # A0 = 1 + .25*4 = 2
    rewards = torch.tensor([[1.0, 1.0, 1.0]])
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    truncated = torch.tensor([[False, True, False]])
    terminated = torch.zeros_like(truncated)
    final_values = torch.tensor([[0.0, 10.0, 0.0]])
    adv, _ = generalized_advantage_estimate(
        rewards, values, gamma=0.5, gae_lambda=0.5,
        terminated=terminated, truncated=truncated, final_values=final_values,
    )
    torch.testing.assert_close(adv, torch.tensor([[2.0, 4.0, 0.0]]))


@pytest.mark.parametrize(("n", "seed"), [(7, 0), (7, 1), (SLICE_ELEMENTS // 13 + 3, 2)])  # one slice; two
def test_gae_matches_a_reference_loop_on_random_episodes(n: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    t = 13
    rewards = torch.randn(n, t, generator=g)
    values = torch.randn(n, t + 1, generator=g)
    terminated = torch.rand(n, t, generator=g) < 0.15
    truncated = (torch.rand(n, t, generator=g) < 0.15) & ~terminated
    final_values = torch.randn(n, t, generator=g)
    adv, ret = generalized_advantage_estimate(
        rewards, values, gamma=0.97, gae_lambda=0.9,
        terminated=terminated, truncated=truncated, final_values=final_values,
    )
    expected = reference_gae(
        rewards.tolist(), values.tolist(), terminated.tolist(), truncated.tolist(),
        final_values.tolist(), 0.97, 0.9,
    )
    torch.testing.assert_close(adv, torch.tensor(expected), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, adv + values[:, :-1])


def test_gae_and_trace_write_into_given_views() -> None:
    g = torch.Generator().manual_seed(4)
    rewards, values = torch.randn(3, 5, generator=g), torch.randn(3, 6, generator=g)
    ends = torch.rand(3, 5, generator=g) < 0.3
    storage = torch.zeros(3, 6, 2)  # non-contiguous [3, 5] views, as the buffer's columns
    out = (storage[:, :5, 0], storage[:, 1:, 1])
    adv, ret = generalized_advantage_estimate(
        rewards, values, gamma=0.9, gae_lambda=0.8, terminated=ends, out=out
    )
    assert adv.data_ptr() == out[0].data_ptr() and ret.data_ptr() == out[1].data_ptr()
    expected = generalized_advantage_estimate(rewards, values, gamma=0.9, gae_lambda=0.8, terminated=ends)
    torch.testing.assert_close(storage[:, :5, 0], expected[0])
    torch.testing.assert_close(storage[:, 1:, 1], expected[1])
    trace_view = torch.zeros(3, 6)[:, 1:]
    trace = discounted_return_trace(rewards, torch.ones(3), gamma=0.9, episode_ends=ends, out=trace_view)
    assert trace.data_ptr() == trace_view.data_ptr()
    torch.testing.assert_close(trace, discounted_return_trace(rewards, torch.ones(3), gamma=0.9, episode_ends=ends))


def test_gae_is_pure() -> None:
    rewards, values = torch.ones(2, 3), torch.ones(2, 4)
    before = (rewards.clone(), values.clone())
    generalized_advantage_estimate(rewards, values, gamma=0.9, gae_lambda=0.9)
    assert torch.equal(rewards, before[0]) and torch.equal(values, before[1])


def test_normalize() -> None:
    out = normalize(torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(out, torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6, rtol=0)


def test_discounted_return_trace_restarts_after_episode_end() -> None:
    rewards = torch.tensor([[1.0, 2.0, 3.0]])
    ends = torch.tensor([[False, True, False]])
    trace = discounted_return_trace(rewards, torch.tensor([10.0]), gamma=0.5, episode_ends=ends)
    # G1 = .5*10 + 1 = 6, G2 = .5*6 + 2 = 5, then restart: G3 = 0 + 3 = 3
    torch.testing.assert_close(trace, torch.tensor([[6.0, 5.0, 3.0]]))


def reference_episodes(rewards, ends, carry_ret, carry_len):
    returns, lengths = [], []
    new_ret, new_len = [], []
    for i in range(len(rewards)):
        r, length = carry_ret[i], carry_len[i]
        for t in range(len(rewards[i])):
            r += rewards[i][t]
            length += 1
            if ends[i][t]:
                returns.append(r)
                lengths.append(length)
                r, length = 0.0, 0
        new_ret.append(r)
        new_len.append(length)
    return returns, lengths, new_ret, new_len


@pytest.mark.parametrize(("n", "seed"), [(6, 0), (6, 1), (SLICE_ELEMENTS // 20 + 5, 2)])  # one slice; two
def test_episode_returns_match_a_reference_loop(n: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    t = 20
    rewards = torch.randn(n, t, generator=g)
    ends = torch.rand(n, t, generator=g) < 0.2
    carry_ret = torch.randn(n, generator=g)
    carry_len = torch.randint(0, 50, (n,), generator=g)
    returns, lengths = episode_returns(rewards, ends, carry_ret, carry_len)
    want_returns, want_lengths, new_ret, new_len = reference_episodes(
        rewards.tolist(), ends.tolist(), carry_ret.tolist(), carry_len.tolist()
    )
    # the episodes that ended, in the order they ended in each copy, and each copy's carry
    assert returns[ends].tolist() == pytest.approx(want_returns, abs=1e-4)
    assert lengths[ends].tolist() == want_lengths
    running = ~ends[:, -1]
    torch.testing.assert_close((returns[:, -1] * running).float(), torch.tensor(new_ret), atol=1e-4, rtol=0)
    assert (lengths[:, -1] * running).long().tolist() == new_len


@pytest.mark.parametrize("with_ends", [False, True])
def test_the_trace_of_a_large_batch_is_that_of_its_rows(with_ends: bool) -> None:
    # small batches take one batched product, large ones a loop over time: the same sums
    g = torch.Generator().manual_seed(3)
    rewards = torch.randn(400, 17, generator=g, dtype=torch.float64)
    initial = torch.randn(400, generator=g, dtype=torch.float64)
    ends = (torch.rand(400, 17, generator=g) < 0.2) if with_ends else None
    whole = discounted_return_trace(rewards, initial, gamma=0.9, episode_ends=ends)
    rows = [discounted_return_trace(rewards[i : i + 5], initial[i : i + 5], gamma=0.9,
                                    episode_ends=None if ends is None else ends[i : i + 5]) for i in range(0, 400, 5)]
    torch.testing.assert_close(whole, torch.cat(rows))


def test_gae_promotes_to_a_floating_dtype() -> None:
    values = torch.tensor([[0.5, 0.25, 0.1, 0.3]])
    adv, ret = generalized_advantage_estimate(torch.tensor([[1, 0, 1]]), values, gamma=0.9, gae_lambda=0.95)
    expected = generalized_advantage_estimate(torch.tensor([[1.0, 0.0, 1.0]]), values, gamma=0.9, gae_lambda=0.95)
    assert adv.dtype == ret.dtype == torch.float32
    torch.testing.assert_close((adv, ret), expected)
    half = generalized_advantage_estimate(torch.ones(2, 3, dtype=torch.bfloat16), torch.ones(2, 4), gamma=0.9, gae_lambda=0.9)
    assert half[0].dtype == torch.float32


def test_gae_differentiates_through_values() -> None:
    g = torch.Generator().manual_seed(0)
    n, t = 3, 6
    rewards = torch.randn(n, t, generator=g)
    values = torch.randn(n, t + 1, generator=g, requires_grad=True)
    terminated = torch.rand(n, t, generator=g) < 0.2
    adv, _ = generalized_advantage_estimate(
        rewards, values, gamma=0.9, gae_lambda=0.8, terminated=terminated
    )
    expected = reference_gae(
        rewards.tolist(), values.tolist(), terminated.tolist(), [[False] * t] * n,
        [[0.0] * t] * n, 0.9, 0.8,
    )
    torch.testing.assert_close(adv.detach(), torch.tensor(expected), rtol=1e-5, atol=1e-5)
    adv.sum().backward()
    assert values.grad is not None and torch.isfinite(values.grad).all()
    # dA_{T-1}/dV_{T-1} = -1 for a copy that did not terminate at the last step.
    for copy in range(n):
        if not terminated[copy, -1]:
            assert values.grad[copy, t - 1] <= 0

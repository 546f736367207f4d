"""Each part of an Algorithm on its own: the rollout, the collect statistics, the update."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from rl8lite.algorithms.buffer import (
    UPDATE_KEYS,
    UpdateBatch,
    allocate_buffer,
    flat_rows,
    take_rows,
)
from rl8lite.algorithms.carries import Feedforward
from rl8lite.algorithms.config import AlgorithmConfig
from rl8lite.algorithms.rollout import Rollout
from rl8lite.algorithms.statistics import CollectStatistics
from rl8lite.algorithms.update import PPOUpdate
from rl8lite.data import DataKeys
from rl8lite.distributions import Categorical as CategoricalDistribution
from rl8lite.nn.ppo import ppo_loss as ppo_losses
from rl8lite.policies import Policy
from rl8lite.specs import Categorical, Unbounded

from .helpers import EpisodicCounter


def small_buffer(num_envs: int, horizon: int, *, normalize_rewards: bool = False):
    return allocate_buffer(
        Unbounded(1), Categorical(2, shape=[1]), num_envs=num_envs, horizon=horizon,
        device=torch.device("cpu"), normalize_rewards=normalize_rewards,
    )


class ScriptedRecurrence:
    """A stand-in for the policy: action 1 at every step, logp -t, value 10 * t."""

    unit_length = 1
    values_after_rollout = False

    def __init__(self) -> None:
        self.restarts = 0
        self.ended: list[tuple[int, list[bool]]] = []

    def restart(self) -> None:
        self.restarts += 1

    def resume(self) -> None:
        pass

    def act(self, obs: torch.Tensor, t: int, deterministic: bool) -> tuple[torch.Tensor, ...]:
        n = obs.shape[0]
        return torch.ones(n, 1, dtype=torch.long), torch.full((n, 1), -float(t)), torch.full((n, 1), 10.0 * t)

    def end_step(self, t: int, terminated: torch.Tensor, truncated: torch.Tensor, final_obs: Any) -> None:
        self.ended.append((t, (terminated | truncated)[:, 0].tolist()))

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.full((obs.shape[0], 1), -1.0)


def test_the_rollout_writes_each_step_into_the_buffer_by_the_index_convention() -> None:
    env = EpisodicCounter(3)
    buffer = small_buffer(3, 4)
    recurrence = ScriptedRecurrence()
    rollout = Rollout(env, buffer, recurrence)
    with torch.inference_mode():
        obs = rollout.first_observation(reset=True, env_config=None)
        last = rollout.run(obs, deterministic=False)
        rollout.fill_values(last)
    assert recurrence.restarts == 1 and rollout.episodic
    # obs[t] is what the policy acted on; obs[T] the observation after the last step
    assert buffer[DataKeys.OBS][0, :, 0].tolist() == [0, 1, 2, 0, 1]  # copy 0's episodes last 3 steps
    assert buffer[DataKeys.ACTIONS][:, :4, 0].eq(1).all()
    assert buffer[DataKeys.LOGP][0, :4, 0].tolist() == [0, -1, -2, -3]
    assert buffer[DataKeys.VALUES][0, :, 0].tolist() == [0, 10, 20, 30, -1]  # bootstrap from values()
    assert buffer[DataKeys.TERMINATED][:, :4, 0].tolist() == [
        [False, False, True, False], [False, False, False, True], [False, False, False, False]
    ]
    # no final_obs: a truncated copy would bootstrap from the pre-step value
    assert buffer[DataKeys.FINAL_VALUES][0, :4, 0].tolist() == [0, 10, 20, 30]
    assert recurrence.ended[2] == (2, [True, False, False])
    # the next collect continues from where this one ended, without a reset
    with torch.inference_mode():
        obs = rollout.first_observation(reset=False, env_config=None)
    assert obs[:, 0].tolist() == [1, 0, 4] and recurrence.restarts == 1


def test_collect_statistics_carry_episodes_across_collects() -> None:
    buffer = small_buffer(2, 3, normalize_rewards=True)
    stats = CollectStatistics(2, gamma=0.5, normalize_rewards=True, device=torch.device("cpu"))
    buffer[DataKeys.REWARDS][:, :3, 0] = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    buffer[DataKeys.TERMINATED][0, 1, 0] = True  # copy 0's episode ends after step 1
    first = stats.of_collect(buffer, episodic=True)
    assert first["returns/mean"] == pytest.approx((6 + 15) / 2)
    assert first["episodes/count"] == 1 and first["episodes/return_mean"] == 3.0
    assert first["episodes/length_mean"] == 2.0
    assert stats.episode_return.tolist() == [3.0, 15.0] and stats.episode_length.tolist() == [1, 3]
    # running discounted returns G_{t+1} = 0.5 G_t + r_t, restarted after an episode end
    trace = buffer[DataKeys.REVERSED_DISCOUNTED_RETURNS][:, 1:, 0]
    assert trace.tolist() == [[1.0, 2.5, 3.0], [4.0, 7.0, 9.5]]
    assert first["coefficients/reward_scale"] == pytest.approx(torch.tensor(trace.tolist()).std(correction=0).item())
    # copy 1's episode, 3 steps old, ends at the next collect's first step
    buffer[DataKeys.TERMINATED].zero_()
    buffer[DataKeys.TERMINATED][1, 0, 0] = True
    second = stats.of_collect(buffer, episodic=True)
    # the mean of the completed episodes so far: 3 (2 steps), then 15 + 4 (4 steps)
    assert second["episodes/count"] == 1 and second["episodes/return_mean"] == (3.0 + 19.0) / 2
    assert second["episodes/length_mean"] == 3.0 and second["episodes/return_max"] == 19.0
    stats.restart()
    assert stats.episode_return.tolist() == [0.0, 0.0] and stats.discounted_return.tolist() == [0.0, 0.0]


class Linear1(torch.nn.Module):
    """Features and values linear in a scalar observation (two actions)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Linear(1, 2)
        self.value = torch.nn.Linear(1, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features(obs), self.value(obs)


def filled_batch(policy, horizon: int, num_envs: int) -> tuple[Any, UpdateBatch]:
    torch.manual_seed(0)
    buffer = small_buffer(num_envs, horizon)
    buffer[DataKeys.OBS] = torch.randn(num_envs, horizon + 1, 1)
    buffer[DataKeys.ACTIONS] = torch.randint(0, 2, (num_envs, horizon + 1, 1))
    buffer[DataKeys.LOGP] = -torch.rand(num_envs, horizon + 1, 1)
    buffer[DataKeys.VALUES] = torch.randn(num_envs, horizon + 1, 1)
    buffer[DataKeys.ADVANTAGES] = torch.randn(num_envs, horizon + 1, 1)
    buffer[DataKeys.RETURNS] = torch.randn(num_envs, horizon + 1, 1)
    recurrence = Feedforward(policy, horizon, None)
    return recurrence, recurrence.update_batch(buffer, None)


@pytest.mark.parametrize("chunk", [None, 3])
def test_one_update_step_is_sgd_on_the_ppo_loss_of_every_sample(chunk: int | None) -> None:
    policy = Policy(Unbounded(1), Categorical(2, shape=[1]), model=Linear1(), distribution_cls=CategoricalDistribution)
    recurrence, batch = filled_batch(policy, horizon=4, num_envs=3)
    expected = {k: v.detach().clone() for k, v in policy.named_parameters()}
    # the reference: one SGD step on the loss of all 12 samples, computed here by hand
    samples = batch.gather(torch.arange(12))
    logp, entropy, values = policy.evaluate(samples[DataKeys.OBS], samples[DataKeys.ACTIONS])
    inputs = {"logp": logp, "old_logp": samples[DataKeys.LOGP], "advantages": samples[DataKeys.ADVANTAGES],
              "values": values, "old_values": samples[DataKeys.VALUES], "returns": samples[DataKeys.RETURNS],
              "entropy": entropy}
    losses = ppo_losses(**inputs, clip_param=0.2, vf_coeff=0.5)
    # the update reports its losses summed in float64
    reported = ppo_losses(**{k: v.detach().double() for k, v in inputs.items()}, clip_param=0.2, vf_coeff=0.5)
    grads = torch.autograd.grad(losses.total, list(policy.parameters()))
    for (name, value), grad in zip(expected.items(), grads):
        expected[name] = value - 0.1 * grad
    config = AlgorithmConfig(num_envs=3, horizon=4, num_sgd_iters=1, max_grad_norm=None,
                             optimizer_cls=torch.optim.SGD, optimizer_config={"lr": 0.1})
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    update = PPOUpdate(optimizer, list(policy.parameters()), recurrence.evaluate, unit_length=1,
                       hparams=config, device=torch.device("cpu"), chunk_samples=chunk)
    result = update.run(batch, entropy_coeff=0.0)
    assert result.passes == 1
    assert result.means["total"] == pytest.approx(reported.total.item(), rel=1e-12)
    for name, value in policy.named_parameters():
        torch.testing.assert_close(value, expected[name], rtol=1e-6, atol=1e-7, msg=name)


def test_update_rows_skip_the_bootstrap_column() -> None:
    buffer = small_buffer(2, 3)
    buffer[DataKeys.OBS] = torch.arange(8.0).reshape(2, 4, 1)
    rows = flat_rows(buffer[DataKeys.OBS])
    batch = UpdateBatch(rows={k: flat_rows(buffer[k]) for k in UPDATE_KEYS}, units={},
                        unit_rows=lambda u: u + u // 3)
    assert rows[batch.unit_rows(torch.arange(6)), 0].tolist() == [0, 1, 2, 4, 5, 6]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "permuted"])
def test_minibatch_rows_are_the_indexed_rows_in_any_memory_layout(layout: str) -> None:
    frames = torch.randint(0, 256, (12, 3, 5, 7), dtype=torch.uint8)
    frames = {"contiguous": frames, "channels_last": frames.contiguous(memory_format=torch.channels_last),
              "permuted": frames.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)[:, 1:]}[layout]
    for rows in (torch.tensor([5, 0, 11, 5]), torch.tensor([[3, 4], [9, 10]])):  # steps, sequences
        taken = take_rows(frames, rows)
        assert torch.equal(taken, frames[rows]) and taken.shape == (*rows.shape, *frames.shape[1:])


def test_episode_means_cover_the_last_completed_episodes_and_never_go_blank_again() -> None:
    buffer = small_buffer(2, 3)
    stats = CollectStatistics(2, gamma=0.5, normalize_rewards=False, device=torch.device("cpu"), window=3)
    buffer[DataKeys.REWARDS][:, :3, 0] = 1.0
    first = stats.of_collect(buffer, episodic=True)  # no episode has ended yet
    assert first["episodes/count"] == 0 and math.isnan(first["episodes/return_mean"])
    buffer[DataKeys.TERMINATED][0, 1, 0] = True  # copy 0: 5 steps (3 carried), return 5
    second = stats.of_collect(buffer, episodic=True)
    assert second["episodes/return_mean"] == 5.0 and second["episodes/length_mean"] == 5.0
    buffer[DataKeys.TERMINATED].zero_()
    third = stats.of_collect(buffer, episodic=True)  # none ended: the last ones still stand
    assert third["episodes/count"] == 0 and third["episodes/return_mean"] == 5.0
    buffer[DataKeys.TERMINATED][:, :3, 0] = True  # six one-step episodes (copy 1's first is 10 steps)
    fourth = stats.of_collect(buffer, episodic=True)
    assert fourth["episodes/count"] == 6
    assert fourth["episodes/return_mean"] == 1.0 and fourth["episodes/return_max"] == 1.0  # the last 3

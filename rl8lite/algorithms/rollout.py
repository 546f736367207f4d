"""The rollout: ``horizon`` policy samples and env steps, written into the shared buffer.

Each time step writes plain tensors into slices of the preallocated buffer; no
TensorDict is built and nothing is read back to the host inside the time loop.
Structure is checked on the first step, finiteness once per collect.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys
from ..env import Env
from .buffer import final_obs_entry
from .checks import assert_finite, check_actions, check_batch, check_step_output
from .recurrence import Recurrence

Observation = torch.Tensor | TensorDict


class Rollout:
    """Steps ``env`` with the policy (through ``recurrence``) into ``buffer``.

    Args:
        env: The batched env.
        buffer: The shared ``[num_envs, horizon + 1]`` buffer.
        recurrence: What the policy carries between steps (:mod:`~rl8lite.algorithms.recurrence`).
    """

    def __init__(self, env: Env, buffer: TensorDict, recurrence: Recurrence) -> None:
        self.env = env
        self.buffer = buffer
        self.recurrence = recurrence
        self.num_envs, self.horizon = buffer.batch_size[0], buffer.batch_size[1] - 1
        self.env_name = type(env).__name__
        #: Whether the last collect's env reported episode ends (``None`` before any).
        self.episodic: bool | None = None
        self._final_obs: Observation | None = None
        self._values_after = False
        self._checked_actions = False

    def first_observation(self, *, reset: bool, env_config: dict[str, Any] | None) -> Observation:
        """A reset's observations (restarting the recurrence), or where the last collect ended."""
        obs_buf = self.buffer[DataKeys.OBS]
        if reset:
            obs = self.env.reset(config=env_config)
            check_batch(obs, self.env.observation_spec, self.num_envs, f"{self.env_name}.reset output")
            obs_buf[:, 0] = obs
            self.recurrence.restart()
            return obs
        self.recurrence.resume()
        obs_buf[:, 0] = obs_buf[:, self.horizon]
        return obs_buf[:, 0].clone()

    def run(self, obs: Observation, *, deterministic: bool) -> Observation:
        """Step ``horizon`` times from ``obs``; return the observation after the last step."""
        n, horizon, env, recurrence = self.num_envs, self.horizon, self.env, self.recurrence
        buf = self.buffer
        obs_buf, actions_buf = buf[DataKeys.OBS], buf[DataKeys.ACTIONS]
        logp_buf, values_buf = buf[DataKeys.LOGP], buf[DataKeys.VALUES]
        rewards_buf = buf[DataKeys.REWARDS]
        terminated_buf, truncated_buf = buf[DataKeys.TERMINATED], buf[DataKeys.TRUNCATED]
        # A separable model's values come from one batched pass after the rollout.
        values_after = self._values_after = recurrence.values_after_rollout
        final_obs_buf: Observation | None = None
        t = 0
        try:
            for t in range(horizon):
                if values_after:
                    actions, logp = recurrence.sample(obs, t, deterministic)
                else:
                    actions, logp, values = recurrence.act(obs, t, deterministic)
                if not self._checked_actions:
                    check_actions(actions, env.action_spec, n)
                    self._checked_actions = True
                out = env.step(actions)
                if t == 0:
                    check_step_output(out, env.observation_spec, n, self.env_name)
                    episodic = DataKeys.TERMINATED in out.keys()
                    if episodic and DataKeys.FINAL_OBS in out.keys():
                        final_obs_buf = final_obs_entry(buf, env.observation_spec)
                obs = out[DataKeys.OBS]
                actions_buf[:, t] = actions
                logp_buf[:, t] = logp
                if not values_after:
                    values_buf[:, t] = values
                rewards_buf[:, t] = out[DataKeys.REWARDS]
                obs_buf[:, t + 1] = obs
                if episodic:
                    terminated, truncated = out[DataKeys.TERMINATED], out[DataKeys.TRUNCATED]
                    terminated_buf[:, t] = terminated
                    truncated_buf[:, t] = truncated
                    final_obs = None
                    if final_obs_buf is not None:
                        final_obs = out[DataKeys.FINAL_OBS]
                        final_obs_buf[:, t] = final_obs
                    recurrence.end_step(t, terminated, truncated, final_obs)
        except Exception:
            # A NaN/Inf from the env often breaks the policy one step later
            # (e.g. sampling): name the env output, not the symptom.
            assert_finite(
                {DataKeys.OBS: obs_buf[:, : t + 1], DataKeys.REWARDS: rewards_buf[:, :t, 0]},
                env_name=self.env_name,
            )
            raise
        if not episodic:
            terminated_buf.zero_()
            truncated_buf.zero_()
        self.episodic, self._final_obs = episodic, final_obs_buf
        return obs

    def check_finite(self) -> None:
        """NaN/Inf in the collect's observations or rewards is an error naming copies and steps."""
        rewards = self.buffer[DataKeys.REWARDS][:, : self.horizon, 0]
        assert_finite({DataKeys.OBS: self.buffer[DataKeys.OBS], DataKeys.REWARDS: rewards}, env_name=self.env_name)

    def fill_values(self, last_obs: Observation) -> None:
        """The values the advantages need: every observation's (or the bootstrap one's, when
        the rollout wrote the others), and those of truncated episodes' final observations:
        V(final_obs), or the pre-step observation's value when the env gives none."""
        buf, horizon = self.buffer, self.horizon
        if self._values_after:
            self.recurrence.fill_values(buf[DataKeys.OBS], buf[DataKeys.VALUES])
        else:
            buf[DataKeys.VALUES][:, horizon] = self.recurrence.values(last_obs)
        if not self.episodic:
            return
        final_values = buf[DataKeys.FINAL_VALUES]
        final_values[:, :horizon] = buf[DataKeys.VALUES][:, :horizon]
        if self._final_obs is None:
            return
        truncated = buf[DataKeys.TRUNCATED][:, :horizon, 0]
        copies, steps = truncated.nonzero(as_tuple=True)
        if copies.numel():
            final_values[copies, steps] = self.recurrence.final_obs_values(
                self._final_obs[copies, steps], copies, steps
            )

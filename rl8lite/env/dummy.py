"""rl8's two dummy environments: a position on a line, moved by the action."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from ..specs import Categorical, Unbounded
from .base import Env, apply_env_config


class _DummyEnv(Env):
    """A position on a line; the reward is minus the distance from the origin."""

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        config: dict[str, Any] | None = None,
        device: Device = "cpu",
    ) -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.observation_spec = Unbounded(1, device=self.device)
        self.bounds = float(self.config.get("bounds", 100.0))
        self.state = torch.zeros(num_envs, 1, device=self.device)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        params = apply_env_config(type(self).__name__, {"bounds": self.bounds}, config)
        self.bounds = float(params["bounds"])
        self.state = torch.empty(self.num_envs, 1, device=self.device).uniform_(
            -self.bounds, self.bounds
        )
        return self.state.clone()

    def _transition(self, delta: torch.Tensor) -> TensorDict:
        self.state = self.state + delta
        return TensorDict(
            {DataKeys.OBS: self.state, DataKeys.REWARDS: -self.state.abs()},
            batch_size=[self.num_envs],
            device=self.device,
        )


class ContinuousDummyEnv(_DummyEnv):
    """Dummy env whose action moves the state by any real amount (rl8's)."""

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        config: dict[str, Any] | None = None,
        device: Device = "cpu",
    ) -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.action_spec = Unbounded(1, device=self.device)

    def step(self, action: torch.Tensor) -> TensorDict:
        return self._transition(action)


class DiscreteDummyEnv(_DummyEnv):
    """Dummy env whose action moves the state one unit left (0) or right (1) (rl8's)."""

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        config: dict[str, Any] | None = None,
        device: Device = "cpu",
    ) -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.action_spec = Categorical(2, shape=[1], device=self.device)

    def step(self, action: torch.Tensor) -> TensorDict:
        return self._transition(2 * action - 1)

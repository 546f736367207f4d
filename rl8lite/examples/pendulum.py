"""Batched Pendulum with Gymnasium ``Pendulum-v1``'s dynamics, rewards and episode rules."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from ..env import Env, apply_env_config
from ..specs import Bounded, Unbounded
from ._render import Canvas

DEFAULTS: dict[str, Any] = {
    "dt": 0.05,  # seconds between state updates
    "g": 10.0,
    "l": 1.0,
    "m": 1.0,
    "max_speed": 8.0,
    "max_torque": 2.0,
    "max_episode_steps": 200,
}


class Pendulum(Env):
    """Swing a pendulum up and hold it: ``N`` copies, each resetting itself when truncated.

    Observation ``[cos(theta), sin(theta), theta_dot]`` (``theta = 0`` is upright);
    action the torque, clipped to ``±max_torque``; reward
    ``-(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 torque^2)``. Episodes
    never terminate and are truncated after 200 steps. The state is kept in
    float64 (as Gymnasium's is) and observed as float32. Parameters (rl8's names,
    see ``DEFAULTS``) are set with ``config=`` or ``reset(config={...})``; the
    action spec's bounds follow the constructor's ``max_torque``.

    Examples:
        >>> import torch
        >>> from rl8lite.examples import Pendulum
        >>> env = Pendulum(4)
        >>> env.reset(config={"g": 9.81}).shape
        torch.Size([4, 3])
        >>> out = env.step(env.action_spec.rand([4]))
        >>> out["rewards"].shape, bool(out["truncated"].any())
        (torch.Size([4, 1]), False)
    """

    max_episode_steps: ClassVar[int] = DEFAULTS["max_episode_steps"]

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
        self.params = apply_env_config(type(self).__name__, DEFAULTS, self.config)
        torque = float(self.params["max_torque"])
        self.observation_spec = Unbounded(3, device=self.device)
        self.action_spec = Bounded(-torque, torque, shape=[1], device=self.device)
        self._high = torch.tensor([math.pi, 1.0], dtype=torch.float64, device=self.device)
        self.state = self._initial_states()
        self.elapsed = torch.zeros(num_envs, 1, dtype=torch.long, device=self.device)

    def _initial_states(self) -> torch.Tensor:
        unit = torch.rand(self.num_envs, 2, dtype=torch.float64, device=self.device)
        return (2 * unit - 1) * self._high

    @staticmethod
    def _observe(state: torch.Tensor) -> torch.Tensor:
        theta, theta_dot = state.unbind(-1)
        return torch.stack((theta.cos(), theta.sin(), theta_dot), dim=-1).float()

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.params = apply_env_config(type(self).__name__, {**DEFAULTS, **self.config}, config)
        self.state = self._initial_states()
        self.elapsed = torch.zeros(self.num_envs, 1, dtype=torch.long, device=self.device)
        return self._observe(self.state)

    def step(self, action: torch.Tensor) -> TensorDict:
        p = self.params
        g, l, m, dt = p["g"], p["l"], p["m"], p["dt"]
        theta, theta_dot = self.state.unbind(-1)
        u = action.reshape(-1).to(torch.float64).clamp(-p["max_torque"], p["max_torque"])
        # angle_normalize(theta) = ((theta + pi) mod 2 pi) - pi
        normalized = torch.remainder(theta + math.pi, 2 * math.pi) - math.pi
        costs = normalized.square() + 0.1 * theta_dot.square() + 0.001 * u.square()
        # theta_dot' = theta_dot + (3 g / (2 l) sin(theta) + 3 / (m l^2) u) dt
        new_theta_dot = theta_dot + (3 * g / (2 * l) * theta.sin() + 3.0 / (m * l**2) * u) * dt
        new_theta_dot = new_theta_dot.clamp(-p["max_speed"], p["max_speed"])
        state = torch.stack((theta + new_theta_dot * dt, new_theta_dot), dim=-1)
        self.elapsed = self.elapsed + 1
        terminated = torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device)
        truncated = self.elapsed >= p["max_episode_steps"]
        self.state = torch.where(truncated, self._initial_states(), state)
        self.elapsed = self.elapsed.masked_fill(truncated, 0)
        return TensorDict(
            {
                DataKeys.OBS: self._observe(self.state),
                DataKeys.FINAL_OBS: self._observe(state),
                DataKeys.REWARDS: -costs.float()[:, None],
                DataKeys.TERMINATED: terminated,
                DataKeys.TRUNCATED: truncated,
            },
            batch_size=[self.num_envs],
            device=self.device,
        )

    def render(self) -> np.ndarray:
        """An RGB ``uint8`` frame ``[500, 500, 3]`` of copy 0: the pivot and the rod."""
        theta = float(self.state[0, 0])
        canvas = Canvas(500, 500)
        scale = 500 / (2 * 2.2)
        rod = scale * min(float(self.params["l"]), 2.0)
        tip = (250 + rod * -math.sin(theta), 250 + rod * math.cos(theta))
        canvas.line((250, 250), tip, 0.2 * scale, (204, 77, 77))
        canvas.circle((250, 250), 0.05 * scale, (0, 0, 0))
        return canvas.image

"""Batched Pendulum with Gymnasium ``Pendulum-v1``'s dynamics, rewards and episode rules."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from ..specs import Bounded, Spec, Unbounded
from ._classic import Canvas, ClassicControl

DEFAULTS: dict[str, Any] = {
    "dt": 0.05,  # seconds between state updates
    "g": 10.0, "l": 1.0, "m": 1.0, "max_speed": 8.0, "max_torque": 2.0, "max_episode_steps": 200,
}


class Pendulum(ClassicControl):
    """Swing a pendulum up and hold it: ``N`` copies, each resetting itself when truncated.

    Observation ``[cos(theta), sin(theta), theta_dot]`` (``theta = 0`` is upright); action the
    torque, clipped to ``±max_torque`` (the action spec's bounds: the constructor's); reward
    ``-(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 torque^2)``; truncated after 200
    steps, never terminated. Parameters: ``DEFAULTS`` (rl8's names).

    Examples:
        >>> from rl8lite.examples import Pendulum
        >>> Pendulum(4).reset(config={"g": 9.81}).shape
        torch.Size([4, 3])
    """

    defaults: ClassVar[dict[str, Any]] = DEFAULTS
    max_episode_steps: ClassVar[int] = DEFAULTS["max_episode_steps"]

    def _specs(self) -> tuple[Spec, Spec]:
        torque = float(self.params["max_torque"])
        action_spec = Bounded(-torque, torque, shape=[1], device=self.device)
        return Unbounded(3, device=self.device), action_spec

    def _initial_states(self) -> torch.Tensor:
        state = 2 * torch.rand(self.num_envs, 2, dtype=torch.float64, device=self.device) - 1
        state[:, 0] *= math.pi
        return state

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        theta, theta_dot = state.unbind(-1)
        return torch.stack((theta.cos(), theta.sin(), theta_dot), dim=-1).float()

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
        terminated = torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device)
        state = (theta + new_theta_dot * dt, new_theta_dot)
        return self._transition(state, -costs[:, None], terminated)

    def render(self) -> np.ndarray:
        """An RGB ``uint8`` frame ``[500, 500, 3]`` of copy 0: the pivot and the rod."""
        theta, canvas = float(self.state[0, 0]), Canvas(500, 500)
        scale = 500 / (2 * 2.2)
        rod = scale * min(float(self.params["l"]), 2.0)
        tip = (250 + rod * -math.sin(theta), 250 + rod * math.cos(theta))
        canvas.line((250, 250), tip, 0.2 * scale, (204, 77, 77))
        canvas.circle((250, 250), 0.05 * scale, (0, 0, 0))
        return canvas.image

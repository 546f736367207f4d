"""Batched MountainCar with the dynamics, rewards and episode rules of Gymnasium's
``MountainCar-v0`` and ``MountainCarContinuous-v0``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from ..specs import Bounded, Categorical, Spec, Unbounded
from ._classic import Canvas, ClassicControl

#: ``MountainCar``'s parameters (rl8's names; Gymnasium calls ``force_mag`` ``force``).
DEFAULTS: dict[str, Any] = {
    "min_position": -1.2, "max_position": 0.6, "max_speed": 0.07, "goal_position": 0.5,
    "goal_velocity": 0.0, "force_mag": 0.001, "gravity": 0.0025, "max_episode_steps": 200,
}

#: ``MountainCarContinuous``'s parameters (Gymnasium's names).
CONTINUOUS_DEFAULTS: dict[str, Any] = {
    "min_position": -1.2, "max_position": 0.6, "max_speed": 0.07, "goal_position": 0.45,
    "goal_velocity": 0.0, "power": 0.0015, "gravity": 0.0025, "max_episode_steps": 999,
}


class _MountainCar(ClassicControl):
    """A car in a valley between ``min_position`` and ``max_position``; subclasses push it."""

    def _initial_states(self) -> torch.Tensor:
        position = torch.empty(self.num_envs, dtype=torch.float64, device=self.device)
        position.uniform_(-0.6, -0.4)
        return torch.stack((position, torch.zeros_like(position)), dim=-1)

    def _move(self, push: torch.Tensor) -> tuple[Sequence[torch.Tensor], torch.Tensor]:
        """The next state under the engine's velocity change ``push``, and the goal flags."""
        p = self.params
        position, velocity = self.state.unbind(-1)
        # v' = clip(v + push - gravity cos(3 x)), x' = clip(x + v'), v' = 0 at the left wall
        velocity = velocity + (push + torch.cos(3 * position) * -p["gravity"])
        velocity = velocity.clamp(-p["max_speed"], p["max_speed"])
        position = (position + velocity).clamp(p["min_position"], p["max_position"])
        velocity = velocity.masked_fill((position == p["min_position"]) & (velocity < 0), 0.0)
        at_goal = (position >= p["goal_position"]) & (velocity >= p["goal_velocity"])
        return (position, velocity), at_goal[:, None]

    def render(self) -> np.ndarray:
        """An RGB ``uint8`` frame ``[400, 600, 3]`` of copy 0: the hills, the flag and the car."""
        p, position, canvas = self.params, float(self.state[0, 0]), Canvas(600, 400)
        low, scale = p["min_position"], 600 / (p["max_position"] - p["min_position"])

        def to_pixels(x: float) -> tuple[float, float]:
            return (x - low) * scale, (np.sin(3 * x) * 0.45 + 0.55) * scale

        hills = np.sin(3 * (canvas.x / scale + low)) * 0.45 + 0.55
        canvas.image[canvas.y <= hills * scale] = (120, 170, 90)
        flag_x, flag_y = to_pixels(p["goal_position"])
        canvas.line((flag_x, flag_y), (flag_x, flag_y + 50), 2, (0, 0, 0))
        flag = [(flag_x, flag_y + 50), (flag_x, flag_y + 40), (flag_x + 25, flag_y + 45)]
        canvas.polygon(flag, (204, 204, 0))
        car_x, car_y = to_pixels(position)
        angle = math.cos(3 * position)
        along, up = (math.cos(angle), math.sin(angle)), (-math.sin(angle), math.cos(angle))

        def on_car(a: float, b: float) -> tuple[float, float]:
            return car_x + a * along[0] + b * up[0], car_y + a * along[1] + b * up[1]

        canvas.polygon([on_car(-20, 10), on_car(20, 10), on_car(20, 30), on_car(-20, 30)], (0,) * 3)
        for a in (-12.0, 12.0):
            canvas.circle(on_car(a, 10), 5, (128, 128, 128))
        return canvas.image


class MountainCar(_MountainCar):
    """Drive an underpowered car up a hill: ``N`` copies, each resetting itself when done.

    Observation ``[position, velocity]``; action 0 pushes left, 1 not at all, 2 right; reward -1
    per step. An episode terminates on reaching ``goal_position`` (0.5) and is truncated after
    200 steps. Parameters: ``DEFAULTS`` (rl8's names).

    Examples:
        >>> from rl8lite.examples import MountainCar
        >>> MountainCar(4).reset(config={"force_mag": 0.002}).shape
        torch.Size([4, 2])
    """

    defaults: ClassVar[dict[str, Any]] = DEFAULTS
    max_episode_steps: ClassVar[int] = DEFAULTS["max_episode_steps"]

    def _specs(self) -> tuple[Spec, Spec]:
        return Unbounded(2, device=self.device), Categorical(3, shape=[1], device=self.device)

    def step(self, action: torch.Tensor) -> TensorDict:
        push = (action.reshape(-1) - 1).to(torch.float64) * self.params["force_mag"]
        state, terminated = self._move(push)
        rewards = torch.full((self.num_envs, 1), -1.0, device=self.device)
        return self._transition(state, rewards, terminated)


class MountainCarContinuous(_MountainCar):
    """MountainCar with a continuous engine: ``N`` copies, each resetting itself when done.

    Observation ``[position, velocity]``; action the force in ``[-1, 1]`` (clipped), which
    changes the velocity by ``force * power``; reward ``-0.1 action^2`` per step plus 100 on
    reaching ``goal_position`` (0.45), which terminates the episode; truncated after 999 steps.
    Parameters: ``CONTINUOUS_DEFAULTS`` (Gymnasium's names).

    Examples:
        >>> from rl8lite.examples import MountainCarContinuous
        >>> MountainCarContinuous(4).reset(config={"power": 0.002}).shape
        torch.Size([4, 2])
    """

    defaults: ClassVar[dict[str, Any]] = CONTINUOUS_DEFAULTS
    max_episode_steps: ClassVar[int] = CONTINUOUS_DEFAULTS["max_episode_steps"]

    def _specs(self) -> tuple[Spec, Spec]:
        return Unbounded(2, device=self.device), Bounded(-1.0, 1.0, shape=[1], device=self.device)

    def step(self, action: torch.Tensor) -> TensorDict:
        action = action.reshape(-1).to(torch.float64)
        state, at_goal = self._move(action.clamp(-1.0, 1.0) * self.params["power"])
        # r = 100 [goal reached] - 0.1 a^2, with the unclipped action a
        rewards = 100.0 * at_goal - 0.1 * action.square()[:, None]
        return self._transition(state, rewards, at_goal)

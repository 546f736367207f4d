"""What the example envs share: a self-resetting float64 state, and a canvas for their frames."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from ..env import Env, apply_env_config
from ..specs import Spec

Color = tuple[int, int, int]
Point = tuple[float, float]


class ClassicControl(Env):
    """``N`` copies of a Gymnasium classic-control env, each resetting itself when its episode
    ends; the state is float64 (as Gymnasium's), updated in place, and observed as float32."""

    #: The env's parameters, overridden by ``config=`` and ``reset(config={...})``.
    defaults: ClassVar[dict[str, Any]]

    def __init__(self, num_envs: int, /, horizon: int | None = None, *,
                 config: dict[str, Any] | None = None, device: Device = "cpu") -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.params = apply_env_config(type(self).__name__, self.defaults, self.config)
        self.observation_spec, self.action_spec = self._specs()
        # Normal tensors even when built under inference mode: the step updates them in place.
        with torch.inference_mode(False):
            self.state = self._initial_states()
            self.elapsed = torch.zeros(num_envs, 1, dtype=torch.long, device=self.device)

    @abstractmethod
    def _specs(self) -> tuple[Spec, Spec]: ...

    @abstractmethod
    def _initial_states(self) -> torch.Tensor: ...

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.float()

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        defaults = {**self.defaults, **self.config}
        self.params = apply_env_config(type(self).__name__, defaults, config)
        # In place: a captured step (``capturable``) keeps reading these tensors.
        self.state.copy_(self._initial_states())
        self.elapsed.zero_()
        return self._observe(self.state)

    def _transition(self, state: Sequence[torch.Tensor], rewards: torch.Tensor,
                    terminated: torch.Tensor) -> TensorDict:
        """Store the next ``state`` (its columns), restart the copies whose episode ended."""
        torch.stack(tuple(state), dim=-1, out=self.state)
        final_obs = self._observe(self.state)
        self.elapsed += 1
        truncated = (self.elapsed >= self.params["max_episode_steps"]) & ~terminated
        done = terminated | truncated
        torch.where(done, self._initial_states(), self.state, out=self.state)
        self.elapsed.masked_fill_(done, 0)
        return TensorDict({
            DataKeys.OBS: self._observe(self.state), DataKeys.FINAL_OBS: final_obs,
            DataKeys.REWARDS: rewards.float(), DataKeys.TERMINATED: terminated,
            DataKeys.TRUNCATED: truncated,
        }, batch_size=[self.num_envs], device=self.device)


class Canvas:
    """A white RGB ``uint8`` image, drawn on in pixel coordinates with ``y`` pointing up."""

    def __init__(self, width: int, height: int) -> None:
        self.image = np.full((height, width, 3), 255, dtype=np.uint8)
        rows, cols = np.mgrid[0:height, 0:width]
        self.x, self.y = cols + 0.5, height - rows - 0.5  # pixel centres

    def polygon(self, points: Sequence[Point], color: Color) -> None:
        """Fill a convex polygon given by its corners in order."""
        corners = np.asarray(points, dtype=np.float64)
        ends = np.roll(corners, -1, axis=0)
        # side of each pixel p relative to edge a -> b: (b - a) x (p - a)
        sides = np.stack([
            (bx - ax) * (self.y - ay) - (by - ay) * (self.x - ax)
            for (ax, ay), (bx, by) in zip(corners, ends)
        ])
        self.image[(sides >= 0).all(0) | (sides <= 0).all(0)] = color

    def circle(self, center: Point, radius: float, color: Color) -> None:
        cx, cy = center
        self.image[(self.x - cx) ** 2 + (self.y - cy) ** 2 <= radius**2] = color

    def line(self, start: Point, end: Point, width: float, color: Color) -> None:
        """A segment ``width`` pixels thick with round ends."""
        (ax, ay), (bx, by) = start, end
        dx, dy = bx - ax, by - ay
        # t = clip((p - a) . (b - a) / |b - a|^2, 0, 1), the nearest point a + t (b - a)
        t = np.clip(((self.x - ax) * dx + (self.y - ay) * dy) / max(dx * dx + dy * dy, 1e-12), 0, 1)
        distance2 = (self.x - ax - t * dx) ** 2 + (self.y - ay - t * dy) ** 2
        self.image[distance2 <= (width / 2) ** 2] = color

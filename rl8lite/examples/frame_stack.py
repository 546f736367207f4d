"""An env that stacks its own last ``frames`` observations: what a model's view requirement
(:class:`~rl8lite.views.ViewRequirement` with ``shift = frames - 1``) gives it instead.

Both give the model the same inputs: the last ``frames`` observations of the episode,
zeros in front of its first. The stacking env stores every stack in the buffer
(``frames`` times the observations); a view requirement stores each observation once
and builds the windows from the buffer (``benchmarks/views.py`` compares the two).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys
from ..env import Env
from ..specs import Unbounded


def frame_stacked(env_cls: type[Env], frames: int) -> type[Env]:
    """A subclass of ``env_cls`` whose observations are its last ``frames`` observations.

    Args:
        env_cls: An env with a vector observation spec (``Unbounded([D])``).
        frames: Observations per stack (``>= 1``).

    Returns:
        An env class with observations ``[frames, D]``: the oldest first, the current one
        last, zeros before the episode's first observation; ``final_obs`` likewise.

    Examples:
        >>> from rl8lite.examples import CartPole
        >>> env = frame_stacked(CartPole, 3)(2)
        >>> obs = env.reset()
        >>> obs.shape, obs[:, :2].abs().sum().item()  # two steps of padding before the first
        (torch.Size([2, 3, 4]), 0.0)
    """
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise ValueError(f"frames must be an int >= 1, received {frames!r}")

    class FrameStacked(env_cls):  # type: ignore[valid-type, misc]
        def __init__(self, num_envs: int, /, horizon: int | None = None, **kwargs: Any) -> None:
            super().__init__(num_envs, horizon, **kwargs)
            inner = self.observation_spec
            self.observation_spec = Unbounded([frames, *inner.shape], device=self.device, dtype=inner.dtype)
            self.frames = inner.zero([num_envs, frames])

        def _first(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.cat([obs.new_zeros(obs.shape[0], frames - 1, *obs.shape[1:]), obs.unsqueeze(1)], dim=1)

        def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
            self.frames = self._first(super().reset(config=config))
            return self.frames

        def step(self, action: torch.Tensor) -> TensorDict:
            out = super().step(action)
            obs = out[DataKeys.OBS]
            frames_so_far = self.frames
            stacked = torch.cat([frames_so_far[:, 1:], obs.unsqueeze(1)], dim=1)
            if DataKeys.TERMINATED in out.keys():
                done = (out[DataKeys.TERMINATED] | out[DataKeys.TRUNCATED]).reshape(-1, 1, *[1] * (obs.dim() - 1))
                stacked = torch.where(done, self._first(obs), stacked)
                if DataKeys.FINAL_OBS in out.keys():
                    final = out[DataKeys.FINAL_OBS].unsqueeze(1)
                    out[DataKeys.FINAL_OBS] = torch.cat([frames_so_far[:, 1:], final], dim=1)
            self.frames = stacked
            out[DataKeys.OBS] = stacked
            return out

    FrameStacked.__name__ = FrameStacked.__qualname__ = f"{env_cls.__name__}Stacked{frames}"
    return FrameStacked

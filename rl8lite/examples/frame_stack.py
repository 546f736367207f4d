"""An env that stacks its own last observations: what a model's
:class:`~rl8lite.views.ViewRequirement` (``shift = frames - 1``) gives it without the copies."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys
from ..env import Env
from ..specs import Unbounded


def frame_stacked(env_cls: type[Env], frames: int) -> type[Env]:
    """A subclass of ``env_cls`` (observations ``[D]``) observing its last ``frames`` observations
    ``[frames, D]``, oldest first, zeros before the episode's first (``final_obs`` likewise).

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
            shape = [frames, *inner.shape]
            self.observation_spec = Unbounded(shape, device=self.device, dtype=inner.dtype)
            self.frames = inner.zero([num_envs, frames])

        def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
            obs = super().reset(config=config).unsqueeze(1)
            padding = obs.new_zeros(obs.shape[0], frames - 1, *obs.shape[2:])
            self.frames = torch.cat([padding, obs], dim=1)
            return self.frames

        def step(self, action: torch.Tensor) -> TensorDict:
            out = super().step(action)
            obs, last = out[DataKeys.OBS], self.frames[:, 1:]
            stacked = torch.cat([last, obs.unsqueeze(1)], dim=1)
            if DataKeys.TERMINATED in out:
                done = out[DataKeys.TERMINATED] | out[DataKeys.TRUNCATED]
                done = done.reshape(-1, 1, *[1] * (obs.dim() - 1))
                stacked[:, :-1].masked_fill_(done, 0)  # a new episode: zeros before its first
                if DataKeys.FINAL_OBS in out:
                    final = out[DataKeys.FINAL_OBS].unsqueeze(1)
                    out[DataKeys.FINAL_OBS] = torch.cat([last, final], dim=1)
            self.frames = out[DataKeys.OBS] = stacked
            return out

    FrameStacked.__name__ = FrameStacked.__qualname__ = f"{env_cls.__name__}Stacked{frames}"
    return FrameStacked

"""One episode of the current policy on a separate single-copy env, rendered step by step.

Used for rollout videos: it never touches the training env or buffer, and draws its
random numbers without moving the training's random streams.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..data import DataKeys
from ..env import Env
from ..runtime.checkpoint_files import capture_rng, restore_rng
from .policy import Policy


def render_episode(
    make_env: Callable[[], Env],
    policy: Policy,
    *,
    max_steps: int,
    deterministic: bool = True,
    env_config: dict[str, Any] | None = None,
) -> tuple[list[np.ndarray], float]:
    """Build a one-copy env with ``make_env``, reset it with ``env_config`` and step it with
    ``policy`` until its episode ends or ``max_steps``; return the frame ``env.render()``
    gives before each step and the episode's return. Every global random stream is as it
    was afterwards.

    Raises:
        NotImplementedError: ``env`` has no ``render()``.
    """
    frames: list[np.ndarray] = []
    total = 0.0
    rng = capture_rng()
    env = None
    try:
        env = make_env()
        with torch.inference_mode():
            obs = env.reset(config=env_config)
            states = policy.init_states(1) if policy.recurrent else None
            for _ in range(max_steps):
                frames.append(env.render())
                if states is not None:
                    actions, _, _, states = policy.act_recurrent(obs, states, deterministic=deterministic)
                else:
                    actions = policy.sample_actions(obs, deterministic=deterministic)[0]
                out = env.step(actions)
                obs = out[DataKeys.OBS]
                total += float(out[DataKeys.REWARDS][0, 0])
                ended = [out[key][0, 0] for key in (DataKeys.TERMINATED, DataKeys.TRUNCATED) if key in out.keys()]
                if ended and bool(torch.stack(ended).any()):
                    break
    finally:
        restore_rng(rng)
        if env is not None and hasattr(env, "close"):
            env.close()
    return frames, total

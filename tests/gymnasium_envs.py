"""Small Gymnasium envs for the adapter's tests: dict observations, rendering, and failures."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

DICT_WALK_ID = "rl8lite-tests/DictWalk-v0"


class DictWalk(gymnasium.Env):
    """A point walking on a plane toward a random goal, observed as a nested dict of every
    space kind the adapter maps; random resets, terminations and (registered) truncations."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None, step_size: float = 0.3) -> None:
        self.render_mode = render_mode
        self.step_size = step_size
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-1.0, 1.0, (2,), np.float64),
                "goal": spaces.Discrete(4, start=1),
                "bits": spaces.MultiBinary(3),
                "grid": spaces.MultiDiscrete([3, 5], start=[-1, 2]),
                "extra": spaces.Tuple(
                    (spaces.Discrete(2), spaces.Box(-np.inf, np.inf, (1,), np.float32))
                ),
            }
        )
        self.action_space = spaces.Discrete(3, start=-1)

    def _obs(self) -> dict[str, Any]:
        return {
            "position": self.position.copy(),
            "goal": self.goal,
            "bits": np.array([*(self.position > 0), self.goal % 2], dtype=np.int8),
            "grid": np.array([int(np.sign(self.position[0])), 2 + self.goal], dtype=np.int64),
            "extra": (self.goal % 2, np.array([self.position.sum()], dtype=np.float32)),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.seed_used = seed
        self.position = self.np_random.uniform(-0.5, 0.5, 2)
        self.goal = int(self.np_random.integers(1, 5))
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        noise = self.np_random.normal(0.0, 0.1, 2)
        self.position = np.clip(self.position + self.step_size * int(action) + noise, -1.0, 1.0)
        terminated = bool(abs(self.position[0]) >= 1.0)
        return (
            self._obs(),
            float(-np.abs(self.position).sum() + 0.1 * self.goal),
            terminated,
            False,
            {},
        )

    def render(self) -> np.ndarray:
        frame = np.zeros((8, 12, 3), dtype=np.uint8)
        frame[..., 0] = int(127 * (self.position[0] + 1))  # red encodes x: tells copies apart
        return frame


gymnasium.register(DICT_WALK_ID, entry_point=DictWalk, max_episode_steps=12)


class Exploding(gymnasium.Env):
    """CartPole-sized env whose copies reset with a seed in ``bad_seeds`` fail at step ``at``:
    they raise ``ValueError`` (``how="raise"``), end their own process (``how="exit"``) or
    return an observation of the wrong shape (``how="misshape"``)."""

    def __init__(self, bad_seeds: tuple[int, ...] = (), at: int = 3, how: str = "raise") -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.bad_seeds, self.at, self.how = tuple(bad_seeds), at, how
        self.bad, self.t = False, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        if seed is not None:
            self.bad = seed in self.bad_seeds
        self.t = 0
        return np.zeros(4, dtype=np.float32), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        if self.bad and self.t >= self.at:
            if self.how == "exit":
                os._exit(3)
            if self.how == "misshape":
                return np.zeros(5, dtype=np.float32), 1.0, False, False, {}
            explode(self.t)
        return np.zeros(4, dtype=np.float32), 1.0, False, False, {}


def explode(t: int) -> None:
    raise ValueError(f"boom at step {t}")


def make_exploding(**kwargs: Any) -> Exploding:
    """A module-level factory (checkpoints can name it)."""
    return Exploding(**kwargs)


class Sized(gymnasium.Env):
    """Observations of ``size`` zeros; two actions; never ends."""

    def __init__(self, size: int) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (size,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}


# Two factories whose dotted paths are the same ("tests.gymnasium_envs.<lambda>"), and bound
# methods of two makers (both "tests.gymnasium_envs.Maker.make"): different envs all the same.
narrow_env = lambda **kwargs: Sized(2)
wide_env = lambda **kwargs: Sized(7)


class Maker:
    def __init__(self, size: int) -> None:
        self.size = size

    def make(self, **kwargs: Any) -> Sized:
        return Sized(self.size)


def make_unbuildable_in_workers(**kwargs: Any) -> Sized:
    """Builds in the main process; in any worker process fails as a missing device would."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        raise OSError("cannot open /dev/simulator0")
    return Sized(3)


class BadFrames(Sized):
    """Renders float64 frames, which no video holds."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(3)
        self.render_mode = render_mode

    def render(self) -> Any:
        return np.zeros((8, 8, 3))


def make_normalized(**kwargs: Any) -> gymnasium.Env:
    """A factory wrapping ``gymnasium.make``: its TimeLimit lies under another wrapper."""
    return gymnasium.wrappers.NormalizeObservation(gymnasium.make("CartPole-v1", **kwargs))


def breakout_preprocessed(**kwargs: Any) -> gymnasium.Env:
    """ALE's Breakout as DQN preprocessed it (Gymnasium's ``AtariPreprocessing``: 84 x 84 gray
    frames, 4 frames per step, noop starts), one frame per observation."""
    import ale_py

    gymnasium.register_envs(ale_py)
    env = gymnasium.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0, **kwargs)
    return gymnasium.wrappers.AtariPreprocessing(env, frame_skip=4, terminal_on_life_loss=False)

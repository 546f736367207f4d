"""envpool's C++ vector envs (Atari, MuJoCo, ...) as rl8lite envs (the ``envpool`` extra)."""

from __future__ import annotations

import json
import os
import weakref
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from .base import ReferencedEnv, apply_env_config, is_plain

#: envpool's options the env sets itself.
_OWN_OPTIONS = {"num_envs", "batch_size", "seed", "env_type", "max_num_players", "base_path",
                "gym_reset_return_info", "env_seed"}
_CLASSES: dict[str, type[EnvpoolEnv]] = {}


class EnvpoolEnv(ReferencedEnv):
    """Base of the classes :func:`envpool_env` returns: one synchronous envpool of ``num_envs``
    copies (copy ``i`` seeded ``seed + rank * num_envs + i``). A finished copy is stepped once more
    at once, which is envpool's reset of it, so ``"obs"`` starts its next episode in the same step
    and ``"final_obs"`` holds its last observation (an Atari life lost with ``episodic_life``
    continues the game, as in envpool). ``reset(config=...)`` takes envpool's options (its
    :attr:`default_config`) and rebuilds the pool where they change.
    """

    task_id: ClassVar[str]
    options: ClassVar[dict[str, Any]] = {}

    def __init__(self, num_envs: int, /, horizon: int | None = None, *,
                 config: dict[str, Any] | None = None, device: Device = "cpu") -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        import envpool

        from .gymnasium_spaces import action_mapping, observation_mapping

        self.default_config = {**_task_options(envpool, self.task_id), **self.options}
        self._seed, self._applied = self.first_seed(self.seed), None
        self._pool: Any = None
        self._build(apply_env_config(type(self).__name__, self.default_config, self.config))
        space = self._pool.observation_space
        self.observation_spec, self._convert = observation_mapping(space, self.device)
        self.action_spec, self._env_actions = action_mapping(self._pool.action_space, self.device)
        self.max_episode_steps = self._applied.get("max_episode_steps")
        self._no_op = self._env_actions(self.action_spec.zero([num_envs]))
        self._out_device = torch.empty(0, device=self.device).device  # "cuda" as "cuda:0"

    def _build(self, options: dict[str, Any]) -> None:
        """A new pool with ``options`` (closing the current one) unless they are the current."""
        if options == self._applied:
            return
        import envpool

        if self._pool is not None:
            self._close()
        self._pool = envpool.make(self.task_id, env_type="gymnasium", num_envs=self.num_envs,
                                  batch_size=self.num_envs, seed=self._seed, **options)
        self._close, self._applied = weakref.finalize(self, self._pool.close), options

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor | TensorDict:
        name, merged = type(self).__name__, {**self.config, **(config or {})}
        self._build(apply_env_config(name, self.default_config, merged))
        obs, _ = self._pool.reset()
        return self._convert(obs, self.num_envs)

    def step(self, action: torch.Tensor) -> TensorDict:
        obs, rewards, terminated, truncated, _ = self._pool.step(self._env_actions(action))
        final_obs = obs
        if (done := np.flatnonzero(terminated | truncated).astype(np.int32)).size:
            first, *_, info = self._pool.step(self._no_op[: done.size], env_id=done)
            obs = obs.copy()
            obs[info["env_id"]] = first
        column = lambda a: torch.from_numpy(a.reshape(self.num_envs, 1)).to(self.device)
        return TensorDict._new_unsafe({
            DataKeys.OBS: self._convert(obs, self.num_envs),
            DataKeys.REWARDS: column(rewards.astype(np.float32)),
            DataKeys.TERMINATED: column(terminated), DataKeys.TRUNCATED: column(truncated),
            DataKeys.FINAL_OBS: self._convert(final_obs, self.num_envs),
        }, batch_size=torch.Size([self.num_envs]), device=self._out_device)

    def render(self) -> np.ndarray:
        """Copy 0's RGB frame ``[H, W, 3]`` (envpool's ``render_mode="rgb_array"``, the default)."""
        return self._pool.render(env_ids=0)[0]

    def close(self) -> None:
        """Close the pool (also on garbage collection)."""
        self._close()

    def state_dict(self) -> dict[str, Any]:
        return {"config": dict(self._applied or {})}  # the copies' states are not saved


def _task_options(envpool: Any, task_id: str) -> dict[str, Any]:
    """The options of ``task_id`` a user may set, with envpool's defaults."""
    config = envpool.make_spec(task_id).config._asdict()
    return {"render_mode": "rgb_array", **{key: value for key, value in config.items()
                                          if key not in _OWN_OPTIONS and is_plain(value)}}


def envpool_env(task_id: str, *, seed: int | None = None, **options: Any) -> type[EnvpoolEnv]:
    """An :class:`EnvpoolEnv` class stepping envpool's ``task_id`` (``"Breakout-v5"``,
    ``"Hopper-v5"``, ...) with envpool's ``options`` (``episodic_life=True``,
    ``reward_clip=True``, ``num_threads=1``, ...), named after it; equal calls return one class.
    ``seed``: copy 0's seed (default: from torch's RNG). An unknown task or option is an error
    naming it.

    Example (needs the envpool extra; tests/test_atari.py runs it)::

        Breakout = envpool_env("Breakout-v5", num_threads=1)
        Breakout.__name__, Breakout(2).observation_spec.shape  # 'Breakout-v5', [4, 84, 84]
    """
    backend = os.environ.get("MPLBACKEND")  # envpool's import sets "Agg" for the process's children
    try:
        import envpool
    except ImportError as e:
        raise ImportError("envpool_env needs envpool: pip install rl8lite[envpool]") from e
    finally:
        if backend is None:
            os.environ.pop("MPLBACKEND", None)
    if task_id not in envpool.list_all_envs():
        raise ValueError(f"envpool has no task {task_id!r}; its tasks: envpool.list_all_envs()")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be an int >= 0 or None, received {seed!r}")
    if own := sorted(_OWN_OPTIONS & set(options)):
        raise TypeError(f"envpool_env sets {own} itself (num_envs: the algorithm's)")
    options, valid = {"render_mode": "rgb_array", **options}, _task_options(envpool, task_id)
    if unknown := sorted(set(options) - set(valid)):
        raise TypeError(f"envpool's {task_id} has no option(s) {unknown}; valid: {sorted(valid)}")
    reference = {"envpool": task_id, **({"seed": seed} if seed is not None else {}), **options}
    key = json.dumps(reference, sort_keys=True, default=repr)
    if key not in _CLASSES:
        _CLASSES[key] = type(task_id, (EnvpoolEnv,), {
            "__module__": __name__, "__qualname__": task_id,
            "__doc__": f"{task_id} (envpool): see EnvpoolEnv.", "task_id": task_id,
            "options": options, "seed": seed, "label": repr(reference),
            "reference": reference if is_plain(reference) else None})
    return _CLASSES[key]

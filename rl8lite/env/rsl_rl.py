"""rsl_rl's ``VecEnv`` (Isaac Lab, mjlab, Genesis's locomotion examples) as an rl8lite env."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys
from ..specs import Composite, Unbounded
from .base import Env, EnvOutputError, apply_env_config


def resolve_obs_groups(groups: list[str], obs_groups: dict[str, list[str]] | None,
                       ) -> dict[str, list[str]]:
    """rsl_rl's rule: an unnamed set (``"actor"``, ``"critic"``) reads the group of its name, else
    ``"policy"``; a ``ValueError`` naming a group the env does not have."""
    resolved = {}
    for role in ("actor", "critic"):
        chosen = (obs_groups or {}).get(role) or [role if role in groups else "policy"]
        if isinstance(chosen, str) or any(group not in groups for group in chosen):
            raise ValueError(f"obs_groups[{role!r}]={chosen!r}: the VecEnv's observation groups"
                             f" are {groups}")
        resolved[role] = list(chosen)
    return resolved


class RslRlEnv(Env):
    """``vec_env``, an rsl_rl ``VecEnv`` instance, as an rl8lite env instance (``rsl_rl_env``).

    The observation is the TensorDict of the groups the actor or the critic reads:
    :attr:`obs_groups`, rsl_rl's ``{"actor": [...], "critic": [...]}`` (a set not given reads the
    group of its name, else ``"policy"``, as in rsl_rl), which the default model follows, so its
    critic may read privileged groups the actor does not. ``dones`` with ``extras["time_outs"]``
    are ``truncated``, the others ``terminated``; a step without ``time_outs`` is an error unless
    ``finite_horizon=True`` (every end terminal: mjlab's finite-horizon tasks). The VecEnv resets
    its finished copies itself and reports no final observation, so a truncated episode bootstraps
    from the value of its observation before the step (as rsl_rl does). ``reset()`` calls the
    VecEnv's own ``reset()`` where it has one (else its copies go on) and takes no config;
    ``init_at_random_ep_len`` randomises the episode lengths at the first reset, as rsl_rl's
    ``learn(init_at_random_ep_len=True)``.
    """

    restores_state = False

    def __init__(self, vec_env: Any, *, obs_groups: dict[str, list[str]] | None = None,
                 finite_horizon: bool = False, init_at_random_ep_len: bool = False) -> None:
        first, name = vec_env.get_observations(), type(vec_env).__name__
        if not isinstance(first, TensorDict):
            raise TypeError(f"{name}.get_observations() must return a TensorDict of observation"
                            f" groups (rsl_rl >= 3), received {type(first).__name__}")
        super().__init__(int(vec_env.num_envs), device=vec_env.device)
        self.vec_env, self.finite_horizon = vec_env, finite_horizon
        self.obs_groups = resolve_obs_groups(list(first.keys()), obs_groups)
        self.keys = list(dict.fromkeys(self.obs_groups["actor"] + self.obs_groups["critic"]))
        self.observation_spec = Composite({key: Unbounded(first[key].shape[1:],
                                                          dtype=first[key].dtype)
                                           for key in self.keys}, device=self.device)
        self.action_spec = Unbounded(int(vec_env.num_actions), device=self.device)
        self.max_episode_steps = int(torch.as_tensor(vec_env.max_episode_length).max())
        self._random_start, self._started = init_at_random_ep_len, False

    def _observation(self, groups: TensorDict) -> TensorDict:
        return TensorDict({key: groups[key] for key in self.keys}, batch_size=[self.num_envs],
                          device=self.device)

    def reset(self, *, config: dict[str, Any] | None = None) -> TensorDict:
        apply_env_config(type(self.vec_env).__name__, {}, config)
        env = self.vec_env
        if self._started and callable(getattr(env, "reset", None)):
            env.reset()
        if self._random_start and not self._started:  # rsl_rl's learn(init_at_random_ep_len=True)
            env.episode_length_buf = torch.randint_like(env.episode_length_buf,
                                                        high=self.max_episode_steps)
        self._started = True
        return self._observation(env.get_observations())

    def step(self, action: torch.Tensor) -> TensorDict:
        groups, rewards, dones, extras = self.vec_env.step(action)
        n, name = self.num_envs, type(self.vec_env).__name__
        dones = dones.reshape(n, 1).bool()
        time_outs = extras.get("time_outs")
        if time_outs is None and not self.finite_horizon:
            raise EnvOutputError(f"{name}.step's extras lack 'time_outs', so a time limit would"
                                 " read as a termination; return them, or pass"
                                 " rsl_rl_env(..., finite_horizon=True) where every episode end"
                                 " is terminal")
        truncated = dones & (time_outs.reshape(n, 1).bool() if time_outs is not None else False)
        return TensorDict({
            DataKeys.OBS: self._observation(groups),
            DataKeys.REWARDS: rewards.reshape(n, 1).float(),
            DataKeys.TERMINATED: dones & ~truncated, DataKeys.TRUNCATED: truncated,
        }, batch_size=[n], device=self.device)


#: ``rsl_rl_env(vec_env, *, obs_groups=None, finite_horizon=False, init_at_random_ep_len=False)``.
rsl_rl_env = RslRlEnv

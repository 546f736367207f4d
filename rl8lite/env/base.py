"""The batched environment protocol, its errors, and rl8's two dummy envs."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from ..specs import Categorical, Spec, Unbounded


class EnvConfigError(KeyError):
    """An env config names a parameter the env does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


class EnvOutputError(ValueError):
    """An env returned data of the wrong structure (missing key, shape, dtype)."""


class SubEnvError(RuntimeError):
    """A Gymnasium env copy raised or its worker died (the message names it); the env closes."""


class Env(ABC):
    """A batched, torch-native environment: ``num_envs`` independent copies as tensors.

    Subclasses set :attr:`observation_spec` and :attr:`action_spec` in ``__init__`` and
    implement :meth:`reset` and :meth:`step`; an env that never returns ``"terminated"`` or
    ``"truncated"`` is infinite-horizon (as in rl8), an episodic one resets its finished copies
    itself. ``horizon``: the algorithm's steps per collect; ``config``: the env parameters.

    Examples:
        >>> env = DiscreteDummyEnv(4)
        >>> env.reset().shape
        torch.Size([4, 1])
        >>> out = env.step(env.action_spec.rand([4]))
        >>> sorted(out.keys())
        ['obs', 'rewards']
    """

    #: Optional caps on ``horizon`` and ``num_envs``, checked at construction.
    max_horizon: ClassVar[int | None] = None
    max_num_envs: ClassVar[int | None] = None
    #: Longest episode before the env truncates it itself (``None``: unknown or unlimited).
    max_episode_steps: int | None = None
    #: Whether :meth:`load_state_dict` restores every copy exactly (else the env is reset).
    restores_state: ClassVar[bool] = True
    #: Whether a CUDA graph can capture :meth:`step`: state tensors updated in place (also by
    #: :meth:`reset` and :meth:`load_state_dict`), no host reads, outputs of fixed shapes.
    capturable: ClassVar[bool] = False

    #: The observation groups (top-level keys of a dict observation) the default model's actor
    #: and critic read, ``{"actor": [...], "critic": [...]}``; ``None``: both read every entry.
    obs_groups: dict[str, list[str]] | None = None

    observation_spec: Spec
    action_spec: Spec

    def __init__(self, num_envs: int, /, horizon: int | None = None, *,
                 config: dict[str, Any] | None = None, device: Device = "cpu") -> None:
        name = type(self).__name__
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"{name}: num_envs must be an int >= 1, received {num_envs!r}")
        for key, value, cap in [("num_envs", num_envs, self.max_num_envs),
                                ("horizon", horizon, self.max_horizon)]:
            if value is not None and cap is not None and value > cap:
                raise ValueError(f"{name}: {key}={value} exceeds {name}.max_{key}={cap}")
        self.num_envs, self.horizon = num_envs, horizon
        self.config, self.device = dict(config or {}), torch.device(device)

    @abstractmethod
    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor | TensorDict:
        """Reset every copy under ``config`` (env parameters; ``None``: those it was built with)
        and return their first observations, ``[num_envs, *observation_spec.shape]``."""

    @abstractmethod
    def step(self, action: torch.Tensor | TensorDict) -> TensorDict:
        """Apply ``action`` to every copy; return ``"obs"`` and ``"rewards"`` (``[N, 1]``), and
        optionally ``"terminated"``, ``"truncated"`` (``[N, 1]`` bool) and ``"final_obs"`` (the
        last observation of each finished copy, whose ``"obs"`` starts its next episode)."""

    def render(self) -> Any:
        """An RGB ``uint8`` frame ``[H, W, 3]`` of copy 0 (optional)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement render()")

    def close(self) -> None:
        """Release what the env holds outside Python (worker processes, windows); idempotent."""

    def state_dict(self) -> dict[str, Any]:
        """The env's tensor and plain-valued attributes, for checkpoints."""
        return {
            key: value.clone() if isinstance(value, torch.Tensor) else value
            for key, value in vars(self).items()
            if key not in _NOT_STATE and is_plain(value, (torch.Tensor,))
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (a tensor in place where shape and dtype match)."""
        for key, value in state.items():
            current = getattr(self, key, None)
            if not isinstance(value, torch.Tensor):
                setattr(self, key, value)
            elif (isinstance(current, torch.Tensor) and not current.is_inference()
                  and (current.shape, current.dtype) == (value.shape, value.dtype)):
                current.copy_(value)
            else:
                setattr(self, key, value.to(self.device, copy=True))


class ReferencedEnv(Env):
    """Base of env classes a factory makes (:func:`~rl8lite.env.gymnasium_env`,
    :func:`~rl8lite.env.envpool_env`): configs and checkpoints name them by their options."""

    restores_state: ClassVar[bool] = False
    #: The options as plain data (``None``: a factory no dotted path names), and as one string.
    reference: ClassVar[dict[str, Any] | None] = None
    label: ClassVar[str] = ""
    seed: ClassVar[int | None] = None

    def first_seed(self, base: int | None) -> int:
        """Copy 0's seed: ``base`` (``None``: drawn from torch's RNG) plus ``rank * num_envs``
        (``rank``: ``RANK`` under ``torchrun``)."""
        if base is None:
            base = int(torch.randint(0, 2**31 - 1, ()).item())
        return base + int(os.environ.get("RANK", "0")) * self.num_envs


_NOT_STATE = {"observation_spec", "action_spec", "device", "num_envs", "horizon", "obs_groups"}


def is_plain(value: Any, leaves: tuple[type, ...] = ()) -> bool:
    """Whether ``value`` is numbers, strings, None (or ``leaves``) in lists and str-keyed dicts."""
    if isinstance(value, (int, float, str, type(None), *leaves)):
        return True
    if isinstance(value, (list, tuple)):
        return all(is_plain(v, leaves) for v in value)
    return isinstance(value, dict) and all(isinstance(k, str) and is_plain(v, leaves)
                                           for k, v in value.items())


def apply_env_config(env_name: str, defaults: dict[str, Any], config: dict[str, Any] | None
                     ) -> dict[str, Any]:
    """``config`` merged over ``defaults``; a key ``defaults`` lacks is an :class:`EnvConfigError`.

    Examples:
        >>> apply_env_config("Walk", {"speed": 1.0, "size": 2}, {"speed": 3.0})
        {'speed': 3.0, 'size': 2}
    """
    if unknown := sorted(set(config or {}) - set(defaults)):
        raise EnvConfigError(f"{env_name} has no config parameter(s) {unknown};"
                             f" valid: {sorted(defaults)}")
    return {**defaults, **(config or {})}


class _DummyEnv(Env):
    """A position on a line, moved by the action; the reward is minus its distance from 0."""

    _discrete: ClassVar[bool]

    def __init__(self, num_envs: int, /, horizon: int | None = None, *,
                 config: dict[str, Any] | None = None, device: Device = "cpu") -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.observation_spec = Unbounded(1, device=self.device)
        self.action_spec = (Categorical(2, shape=[1], device=self.device) if self._discrete
                            else Unbounded(1, device=self.device))
        self.bounds = float(self.config.get("bounds", 100.0))
        self.state = torch.zeros(num_envs, 1, device=self.device)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        params = apply_env_config(type(self).__name__, {"bounds": self.bounds}, config)
        self.bounds = float(params["bounds"])
        self.state = torch.empty(self.num_envs, 1, device=self.device)
        self.state.uniform_(-self.bounds, self.bounds)
        return self.state.clone()

    def step(self, action: torch.Tensor) -> TensorDict:
        self.state = self.state + (2 * action - 1 if self._discrete else action)
        return TensorDict({DataKeys.OBS: self.state, DataKeys.REWARDS: -self.state.abs()},
                          batch_size=[self.num_envs], device=self.device)


class ContinuousDummyEnv(_DummyEnv):
    """Dummy env whose action moves the state by any real amount (rl8's)."""

    _discrete = False


class DiscreteDummyEnv(_DummyEnv):
    """Dummy env whose action moves the state one unit left (0) or right (1) (rl8's)."""

    _discrete = True

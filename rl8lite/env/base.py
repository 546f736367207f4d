"""The batched environment protocol.

An :class:`Env` simulates ``num_envs`` independent copies as tensors. ``step``
returns a :class:`~tensordict.TensorDict` with ``"obs"`` and ``"rewards"``
(``[N, 1]``) and, for episodic envs, ``"terminated"`` and ``"truncated"``
(``[N, 1]`` bool). An episodic env resets finished copies itself and returns
their new first observation in ``"obs"``; it may also return ``"final_obs"``,
the last observation before that reset, so that a truncated copy bootstraps
from the value of its true final state. Without ``"final_obs"`` the value of
the pre-step observation stands in (as rsl_rl does). An env that never returns
``"terminated"``/``"truncated"`` is infinite-horizon, exactly as in rl8.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from ..data import Device
from ..specs import Spec


class EnvConfigError(KeyError):
    """An env config names a parameter the env does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


class Env(ABC):
    """Protocol of the batched, torch-native environments rl8lite trains on.

    Subclasses set :attr:`observation_spec` and :attr:`action_spec` in
    ``__init__`` and implement :meth:`reset` and :meth:`step`.

    Args:
        num_envs: Number of independent copies simulated by this instance.
        horizon: Steps the algorithm takes per collect (``None``: unknown).
        config: Initial environment parameters (see :meth:`reset`).
        device: Device the env's tensors live on.

    Examples:
        >>> from rl8lite.env import DiscreteDummyEnv
        >>> env = DiscreteDummyEnv(4)
        >>> env.reset().shape
        torch.Size([4, 1])
        >>> out = env.step(env.action_spec.rand([4]))
        >>> sorted(out.keys())
        ['obs', 'rewards']
    """

    #: Optional cap on ``horizon`` (checked at construction).
    max_horizon: ClassVar[int | None] = None
    #: Optional cap on ``num_envs`` (checked at construction).
    max_num_envs: ClassVar[int | None] = None
    #: Longest episode the env runs before truncating it itself (episodic envs).
    #: Used to pick ``horizons_per_env_reset`` when it is left unset.
    max_episode_steps: ClassVar[int | None] = None
    #: Whether :meth:`load_state_dict` restores every copy exactly. An env whose copies
    #: live outside its attributes (e.g. Gymnasium envs) sets it to ``False``, and an
    #: algorithm loading its state resets it at the next collect.
    restores_state: ClassVar[bool] = True
    #: Whether :meth:`step` can be captured in a CUDA graph and replayed: it reads and writes its
    #: state in place (the same tensors, across :meth:`reset` and :meth:`load_state_dict` too), reads
    #: nothing back to the host, and returns tensors of fixed shapes. The collect then replays its
    #: whole time loop on a GPU (``AlgorithmConfig.cuda_graphs``); else only the policy's step.
    capturable: ClassVar[bool] = False

    observation_spec: Spec
    action_spec: Spec
    config: dict[str, Any]
    num_envs: int
    horizon: int | None
    device: torch.device

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        config: dict[str, Any] | None = None,
        device: Device = "cpu",
    ) -> None:
        name = type(self).__name__
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"{name}: num_envs must be an int >= 1, received {num_envs!r}")
        if self.max_num_envs is not None and num_envs > self.max_num_envs:
            raise ValueError(
                f"{name}: num_envs={num_envs} exceeds {name}.max_num_envs={self.max_num_envs}"
            )
        if horizon is not None and self.max_horizon is not None and horizon > self.max_horizon:
            raise ValueError(
                f"{name}: horizon={horizon} exceeds {name}.max_horizon={self.max_horizon}"
            )
        self.num_envs = num_envs
        self.horizon = horizon
        self.config = dict(config or {})
        self.device = torch.device(device)

    @abstractmethod
    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor | TensorDict:
        """Reset every copy, applying ``config`` (a dict of env parameters).

        ``config=None`` should bring back the env's own parameters (those it was built
        with), as the example envs do: training resets with ``None`` after an
        evaluation under another config (:meth:`rl8lite.Trainer.eval`).

        Returns:
            The first observation of every copy, matching :attr:`observation_spec`
            with a leading ``[num_envs]`` batch dimension.
        """

    @abstractmethod
    def step(self, action: torch.Tensor | TensorDict) -> TensorDict:
        """Apply ``action`` to every copy and return the transition.

        Returns:
            A TensorDict with ``"obs"`` and ``"rewards"`` (``[N, 1]``), and
            optionally ``"terminated"``, ``"truncated"`` (``[N, 1]`` bool) and
            ``"final_obs"``.
        """

    def render(self) -> Any:
        """An RGB ``uint8`` frame ``[H, W, 3]`` of copy 0 (optional)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement render()")

    def close(self) -> None:
        """Release what the env holds outside Python objects (worker processes, windows).

        A no-op here. :meth:`rl8lite.Algorithm.close` calls it (so do
        :meth:`rl8lite.Trainer.close` and leaving a trainer's ``with`` block); an env
        that needs it should also release its resources when garbage-collected or at
        interpreter exit, for envs nobody closed. Calling it twice is harmless.
        """

    def state_dict(self) -> dict[str, Any]:
        """The env's state for checkpoints: its tensor attributes and plain-valued ones.

        Covers envs whose state lives in tensors and numbers (as batched
        simulators' does); override together with :meth:`load_state_dict` otherwise.
        """
        return {
            key: value.clone() if isinstance(value, torch.Tensor) else value
            for key, value in vars(self).items()
            if key not in _NOT_STATE and _is_plain(value)
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned: a tensor into the attribute's own tensor when
        they match (shape, dtype), else a copy on the env's device; other values as they are."""
        for key, value in state.items():
            current = getattr(self, key, None)
            if isinstance(value, torch.Tensor) and isinstance(current, torch.Tensor) and not current.is_inference() and (
                    current.shape == value.shape and current.dtype == value.dtype):
                current.copy_(value)
            else:
                setattr(self, key, value.to(self.device, copy=True) if isinstance(value, torch.Tensor) else value)


_NOT_STATE = {"observation_spec", "action_spec", "device", "num_envs", "horizon"}


def _is_plain(value: Any) -> bool:
    """Tensors, numbers, strings, None, and lists/tuples/str-keyed dicts of them."""
    if isinstance(value, (torch.Tensor, int, float, str, bool, type(None))):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def apply_env_config(
    env_name: str, defaults: dict[str, Any], config: dict[str, Any] | None
) -> dict[str, Any]:
    """Merge ``config`` over ``defaults``; a key not in ``defaults`` is an error naming it."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise EnvConfigError(
            f"{env_name} has no config parameter(s) {unknown}; valid: {sorted(defaults)}"
        )
    return {**defaults, **config}

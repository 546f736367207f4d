"""Ordinary Gymnasium environments as rl8lite envs, over Gymnasium's own vector envs.

:func:`gymnasium_env` returns an :class:`~rl8lite.Env` subclass whose instances
step ``num_envs`` copies of a Gymnasium env with ``SyncVectorEnv`` (in this
process) or ``AsyncVectorEnv`` (one worker process per copy), in Gymnasium's
same-step autoreset mode: a finished copy's reset observation comes in ``"obs"``
and its last observation in ``"final_obs"``, so truncated episodes bootstrap from
their true final state. Gymnasium is an optional extra (``pip install
rl8lite[gymnasium]``), imported only when :func:`gymnasium_env` is called.
"""

from __future__ import annotations

import functools
import json
import os
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from ..runtime.imports import dotted_path, import_dotted_path
from .base import Env, apply_env_config

#: Classes made by :func:`gymnasium_env`, by their reference (or, for a factory no dotted path
#: names, by the factory object and the options), so equal calls give one class.
_CLASSES: dict[Any, type[GymnasiumEnv]] = {}
_MODES = ("sync", "async")


class SubEnvError(RuntimeError):
    """A copy of a Gymnasium env raised, or its worker process died.

    The message names the copy (its index in the vector env), the exception's type and
    message, and its traceback (from the worker process for async envs). The env is
    closed after it: no worker process remains.
    """


def _require_gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as e:
        raise ImportError(
            "rl8lite.env.gymnasium_env needs Gymnasium: pip install rl8lite[gymnasium]"
        ) from e
    return gymnasium


def _rank() -> int:
    """This process's global rank under ``torchrun`` (``RANK``), else 0."""
    return int(os.environ.get("RANK", "0"))


def _draw_seed() -> int:
    """A base seed from torch's global RNG (so ``Algorithm(..., seed=s)`` fixes it)."""
    return int(torch.randint(0, 2**31 - 1, ()).item())


class GymnasiumEnv(Env):
    """Base of the classes :func:`gymnasium_env` returns: ``num_envs`` copies of a Gymnasium env.

    Seeding: the first reset seeds copy ``i`` with ``base + rank * num_envs + i``,
    where ``base`` is the ``seed`` option or, without it, a number drawn once from
    torch's global RNG when the env is built, and ``rank`` is the process's global
    rank under ``torchrun`` (``RANK``; 0 otherwise), so ranks never share seeds. Later
    resets do not reseed: each copy continues its own random stream, as a Gymnasium
    env reset by hand does.

    ``reset(config={...})`` sets attributes of every copy's unwrapped env (physical
    parameters such as Acrobot's ``LINK_MASS_1``); they stay set across auto-resets
    until a reset with another config, and ``config=None`` puts back the values the
    env was built with (``config=`` of the constructor over the env's own). A key the
    unwrapped env has no such attribute for is an :class:`~rl8lite.env.EnvConfigError`
    listing the valid ones. Quantities an env derives from its parameters in
    ``__init__`` (CartPole's ``total_mass``) are not recomputed: set them too, or pass
    the parameters as ``gymnasium.make`` keywords of another :func:`gymnasium_env` class.

    :meth:`render` returns copy 0's RGB frame; :meth:`close` ends the worker processes
    (it runs by itself when the env is garbage-collected or at interpreter exit). Its
    copies' states live in Gymnasium objects, so :meth:`state_dict` holds none of them
    (:attr:`restores_state` is ``False``): an algorithm restored from a checkpoint
    resets the env at its next collect, under a new base seed drawn from torch's RNG.
    """

    restores_state: ClassVar[bool] = False
    #: What :func:`gymnasium_env` was called with, as plain data (``None`` when it cannot be:
    #: a factory without a dotted path, or options that are not numbers, strings, lists, dicts).
    reference: ClassVar[dict[str, Any] | None] = None
    #: The env id (``gymnasium.make``'s) or the factory making one copy.
    source: ClassVar[str | Callable[..., Any]]
    vectorization_mode: ClassVar[str] = "sync"
    seed: ClassVar[int | None] = None
    make_kwargs: ClassVar[dict[str, Any]] = {}
    vector_kwargs: ClassVar[dict[str, Any]] = {}
    #: Extra keywords for copy 0 (``render_mode="rgb_array"`` where the env offers it).
    render_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        config: dict[str, Any] | None = None,
        device: Device = "cpu",
    ) -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        from . import _gymnasium_spaces as spaces
        from . import _gymnasium_vector as vector

        base = self.seed if self.seed is not None else _draw_seed()
        self._next_seed: int | None = base + _rank() * num_envs
        env_fns = [
            functools.partial(
                vector.make_copy,
                self.source,
                self.make_kwargs,
                i,
                self.render_kwargs if i == 0 else {},
            )
            for i in range(num_envs)
        ]
        self._vector = vector.make_vector_env(
            env_fns, self.vectorization_mode, dict(self.vector_kwargs)
        )
        self._close = weakref.finalize(self, vector.shutdown, self._vector)
        self._failure: BaseException | None = None
        try:
            self._observation_space = self._vector.single_observation_space
            self.observation_spec, self._convert = spaces.observation_mapping(
                self._observation_space, self.device
            )
            self.action_spec, self._env_actions = spaces.action_mapping(
                self._vector.single_action_space, self.device
            )
            #: The unwrapped env's parameters as it was made: the keys ``config`` may set.
            self.default_config: dict[str, Any] = self._run(
                self._vector.call, "rl8lite_parameters"
            )[0]
            apply_env_config(type(self).__name__, self.default_config, self.config)
        except BaseException:
            self.close()
            raise
        self._applied: dict[str, Any] = {}

    # ------------------------------------------------------------------ protocol
    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor | TensorDict:
        target = {**self.config, **(config or {})}
        apply_env_config(
            type(self).__name__, self.default_config, target
        )  # unknown keys: before any change
        restore = [name for name in self._applied if name not in target]
        if target or restore:
            self._run(self._vector.call, "rl8lite_configure", target, restore)
        self._applied = target
        seed, self._next_seed = self._next_seed, None
        obs, _ = self._run(self._vector.reset, seed=seed)
        return self._convert(obs, self.num_envs)

    def step(self, action: torch.Tensor) -> TensorDict:
        n, device = self.num_envs, self.device
        batch, rewards, terminated, truncated, infos = self._run(
            self._vector.step, self._env_actions(action)
        )
        obs = final_obs = self._convert(batch, n)
        if "final_obs" in infos:  # copies that finished: their last observation, from the same step
            final_obs = self._final_obs(batch, obs, infos)
        # Gymnasium's vector envs return new reward and flag arrays each step: no copy needed
        # but the reward's cast (numpy's astype: half the time of torch's to on 32 copies).
        return TensorDict(
            {
                DataKeys.OBS: obs,
                DataKeys.REWARDS: self._on_device(rewards.astype(np.float32)).view(n, 1),
                DataKeys.TERMINATED: self._on_device(terminated).view(n, 1),
                DataKeys.TRUNCATED: self._on_device(truncated).view(n, 1),
                DataKeys.FINAL_OBS: final_obs,
            },
            batch_size=[n],
            device=device,
        )

    def _on_device(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def _final_obs(self, batch: Any, obs: torch.Tensor | TensorDict, infos: dict[str, Any]) -> Any:
        """``obs`` with the rows of the copies that finished replaced by their final observations."""
        done = np.flatnonzero(infos["_final_obs"])
        if isinstance(batch, np.ndarray):  # rows written over a copy of the array, one conversion:
            final = batch.copy()  # 24 vs 53 us (medians) converting the rows apart, CartPole x 32
            for i in done:
                final[i] = infos["final_obs"][i]
            return self._convert(final, self.num_envs)
        from gymnasium.vector.utils import concatenate, create_empty_array

        space, rows = self._observation_space, list(infos["final_obs"][done])
        final_obs = obs.clone()
        final_obs[torch.from_numpy(done).to(self.device)] = self._convert(
            concatenate(space, rows, create_empty_array(space, len(rows))), len(rows)
        )
        return final_obs

    def render(self) -> np.ndarray:
        """Copy 0's RGB frame, ``uint8`` ``[H, W, 3]`` (only copy 0 renders).

        Raises:
            NotImplementedError: Copy 0 was made without ``render_mode="rgb_array"``, or the
                env's renderer is not installed (e.g. pygame for classic control); rollout
                videos are then skipped with a warning.
        """
        name = type(self).__name__
        if self._vector.render_mode != "rgb_array":
            raise NotImplementedError(
                f"{name}: copy 0 was made with render_mode={self._vector.render_mode!r}; render() needs"
                " 'rgb_array' (pass render_mode='rgb_array' to gymnasium_env, which gives it to copy 0 only)"
            )
        frame = self._run(self._vector.call, "rl8lite_render")[0]
        if isinstance(frame, str):  # the renderer's dependency is missing
            raise NotImplementedError(f"{name}: copy 0 cannot render: {frame}")
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
            raise ValueError(
                f"{name}: copy 0 rendered a {frame.dtype} array {list(frame.shape)}, not [H, W, 3] uint8"
            )
        return frame

    @property
    def vector_env(self) -> Any:
        """Gymnasium's vector env under this env, to inspect (``get_attr``); stepping or
        resetting it directly leaves this env's view of its copies behind."""
        return self._vector

    def close(self) -> None:
        """Close every copy and end the worker processes (idempotent)."""
        self._close()

    def state_dict(self) -> dict[str, Any]:
        """The config in force; the copies' states live in Gymnasium objects and are not saved."""
        return {"config": dict(self._applied)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Prepare the reset that follows a restore: a new base seed from torch's RNG."""
        del state  # the next reset applies its own config
        self._next_seed = _draw_seed() + _rank() * self.num_envs

    def _run(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a vector env method; after a sub-env failure the env is closed for good."""
        if self._failure is not None or self._vector.closed:
            reason = f" after sub-env failure: {self._failure}" if self._failure else ""
            raise RuntimeError(f"{type(self).__name__} is closed{reason}")
        try:
            return method(*args, **kwargs)
        except SubEnvError as e:
            self._failure = e
            self.close()
            raise
        except ValueError as e:  # a sync copy's observation that does not fit the batch
            from ._gymnasium_vector import misfit_observations

            misfits = misfit_observations(self._vector)
            if misfits is None:
                raise
            self._failure = SubEnvError(misfits)
            self.close()
            raise self._failure from e


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return isinstance(value, dict) and all(
        isinstance(k, str) and _is_plain(v) for k, v in value.items()
    )


def gymnasium_env(
    env_id_or_factory: str | Callable[..., Any],
    *,
    vectorization_mode: str = "sync",
    seed: int | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    **make_kwargs: Any,
) -> type[GymnasiumEnv]:
    """An :class:`~rl8lite.Env` subclass stepping copies of a Gymnasium env (see :class:`GymnasiumEnv`).

    Args:
        env_id_or_factory: A registered env id, as ``gymnasium.make`` takes it
            (``"Acrobot-v1"``, ``"module:Env-v0"``), or a callable returning one copy (a
            ``gymnasium.Env``, wrappers included), called with ``make_kwargs``.
        vectorization_mode: ``"sync"``: Gymnasium's ``SyncVectorEnv``, every copy in this
            process, one after the other; ``"async"``: its ``AsyncVectorEnv``, one worker
            process per copy (worth it when a copy's step costs much more than passing
            its data between processes, and there are cores to run them).
        seed: Base seed of the first reset (default: drawn from torch's global RNG).
        vector_kwargs: More keywords for the vector env (e.g. ``context="spawn"``,
            ``shared_memory``, ``max_concurrency`` for ``AsyncVectorEnv``).
        **make_kwargs: Keywords of ``gymnasium.make`` (``max_episode_steps``, env
            parameters) or of the factory (where ``max_episode_steps`` adds a
            ``TimeLimit``). ``render_mode`` goes to copy 0 only; without it, copy 0 gets
            ``"rgb_array"`` when the env offers it (factories: when they take ``render_mode``).

    Returns:
        The env class. Equal calls return the same class; its name is the env id (or
        the factory's name). Configs and checkpoints name it by :attr:`~GymnasiumEnv.reference`
        (``{"gymnasium": "Acrobot-v1", "vectorization_mode": "async", ...}``; a factory
        as ``"gymnasium_factory": "package.module:function"``).

    Raises:
        ImportError: Gymnasium is not installed.
        ValueError: An env id Gymnasium does not know, an unknown ``vectorization_mode``
            or a negative ``seed``.
        TypeError: ``env_id_or_factory`` is neither a string nor callable, or a keyword the
            env (or the factory, or ``gymnasium.make``) or the vector env does not take.

    Examples:
        >>> from rl8lite import Algorithm
        >>> from rl8lite.env import gymnasium_env
        >>> CartPole = gymnasium_env("CartPole-v1")
        >>> CartPole.__name__, CartPole.max_episode_steps
        ('CartPole-v1', 500)
        >>> algo = Algorithm(CartPole, num_envs=4, horizon=8, seed=0)
        >>> algo.collect()["env/steps"]
        32.0
        >>> algo.close()
    """
    _require_gymnasium()
    if vectorization_mode not in _MODES:
        raise ValueError(
            f"vectorization_mode must be 'sync' or 'async', received {vectorization_mode!r}"
        )
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be an int >= 0 or None, received {seed!r}")
    if not isinstance(env_id_or_factory, str) and not callable(env_id_or_factory):
        raise TypeError(
            f"env_id_or_factory must be an env id or a callable, received {env_id_or_factory!r}"
        )
    vector_kwargs = dict(vector_kwargs or {})
    reference = _reference(env_id_or_factory, vectorization_mode, seed, vector_kwargs, make_kwargs)
    if reference is not None:
        key: Any = json.dumps(reference, sort_keys=True)
    else:  # the factory object itself (no path names it) and the options as written
        key = (env_id_or_factory, vectorization_mode, seed, repr(sorted(vector_kwargs.items())),
               repr(sorted(make_kwargs.items())))
        try:
            hash(key)
        except TypeError:  # an unhashable callable: a new class each call
            key = None
    if key is not None and key in _CLASSES:
        return _CLASSES[key]
    from ._gymnasium_options import check_vector_kwargs, describe_source

    name, max_episode_steps, renders = describe_source(env_id_or_factory, make_kwargs)
    check_vector_kwargs(vectorization_mode, vector_kwargs)
    render_kwargs = (
        {"render_mode": make_kwargs.pop("render_mode")}
        if "render_mode" in make_kwargs
        else ({"render_mode": "rgb_array"} if renders else {})
    )
    cls = type(
        name,
        (GymnasiumEnv,),
        {
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": f"{name} (Gymnasium), {vectorization_mode} vector env: see rl8lite.env.GymnasiumEnv.",
            "reference": reference,
            "source": staticmethod(env_id_or_factory)
            if callable(env_id_or_factory)
            else env_id_or_factory,
            "vectorization_mode": vectorization_mode,
            "seed": seed,
            "make_kwargs": make_kwargs,
            "vector_kwargs": vector_kwargs,
            "render_kwargs": render_kwargs,
            "max_episode_steps": max_episode_steps,
        },
    )
    if key is not None:
        _CLASSES[key] = cls
    return cls


def _reference(
    source: str | Callable[..., Any],
    mode: str,
    seed: int | None,
    vector_kwargs: dict[str, Any],
    make_kwargs: dict[str, Any],
) -> dict[str, Any] | None:
    if isinstance(source, str):
        reference: dict[str, Any] = {"gymnasium": source}
    else:
        # Only a path that imports back to this very object names it: two module-level
        # lambdas share "module.<lambda>", bound methods of two instances "module.Cls.make".
        try:
            path = dotted_path(source)
            if import_dotted_path(path) is not source:
                return None
        except (ImportError, AttributeError):
            return None
        reference = {"gymnasium_factory": path}
    reference["vectorization_mode"] = mode
    if seed is not None:
        reference["seed"] = seed
    if vector_kwargs:
        reference["vector_kwargs"] = vector_kwargs
    reference.update(make_kwargs)
    return reference if _is_plain(reference) else None

"""Gymnasium envs as rl8lite envs, over Gymnasium's own vector envs (the optional ``gymnasium``
extra, imported on first use), and how configs and checkpoints name env classes."""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from ..runtime.imports import dotted_path, import_dotted_path, qualified_name
from .base import EnvConfigError, ReferencedEnv, SubEnvError, apply_env_config, is_plain

_CLASSES: dict[Any, type[GymnasiumEnv]] = {}


class GymnasiumEnv(ReferencedEnv):
    """Base of the classes :func:`gymnasium_env` returns: ``num_envs`` copies of a Gymnasium env,
    autoresetting in the same step. The first reset seeds copy ``i`` with
    ``seed + rank * num_envs + i`` (``rank``: ``RANK`` under ``torchrun``); later ones do not.

    ``reset(config={...})`` sets, on every copy's unwrapped env, public plain-data attributes
    (:attr:`default_config`) or paths in place (``"model.body_mass[1]"``); ``None`` restores the
    constructor's ``config``. What the env derived from them in ``__init__`` is not recomputed.
    """

    source: ClassVar[str | Callable[..., Any]]
    vectorization_mode: ClassVar[str] = "sync"
    make_kwargs: ClassVar[dict[str, Any]] = {}
    vector_kwargs: ClassVar[dict[str, Any]] = {}
    render_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(self, num_envs: int, /, horizon: int | None = None, *,
                 config: dict[str, Any] | None = None, device: Device = "cpu") -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        from .gymnasium_copies import make_copy, make_vector_env
        from .gymnasium_spaces import action_mapping, observation_mapping

        self._next_seed: int | None = self.first_seed(self.seed)
        self._on_cpu = self.device.type == "cpu"
        self._out_device = torch.empty(0, device=self.device).device  # "cuda" as "cuda:0"
        kwargs = [{**self.make_kwargs, **self.render_kwargs}] + [self.make_kwargs] * (num_envs - 1)
        env_fns = [functools.partial(make_copy, self.source, kw, i) for i, kw in enumerate(kwargs)]
        #: Gymnasium's vector env under this env, to inspect (not to step or reset).
        self.vector_env = make_vector_env(env_fns, self.vectorization_mode, self.vector_kwargs)
        self._close = weakref.finalize(self, self.vector_env.close)
        self._failure: BaseException | None = None
        self._applied: dict[str, Any] = {}
        try:
            space = self._observation_space = self.vector_env.single_observation_space
            self.observation_spec, self._convert = observation_mapping(space, self.device)
            space = self.vector_env.single_action_space
            self.action_spec, self._env_actions = action_mapping(space, self.device)
            self.default_config, time_limit = self._run("call", "rl8lite_describe")[0]
            self.max_episode_steps = self.max_episode_steps or time_limit
            self._check_config(self.config)
        except BaseException:
            self.close()
            raise

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor | TensorDict:
        target = {**self.config, **(config or {})}
        self._check_config(target)
        restore = [key for key in self._applied if key not in target]
        if target or restore:
            self._run("call", "rl8lite_configure", target, restore)
        self._applied = target
        seed, self._next_seed = self._next_seed, None
        obs, _ = self._run("reset", seed=seed)
        return self._convert(obs, self.num_envs)

    def _check_config(self, config: dict[str, Any]) -> None:
        """An unknown key or path is an :class:`EnvConfigError`, a misshapen value a ValueError."""
        name = type(self).__name__
        plain = {key: value for key, value in config.items() if key.isidentifier()}
        apply_env_config(name, self.default_config, plain)
        paths = {key: value for key, value in config.items() if not key.isidentifier()}
        if not paths:
            return
        unknown, misfits = self._run("call", "rl8lite_check_paths", paths)[0]
        if unknown:
            why = "; ".join(unknown.values())
            raise EnvConfigError(f"{name} has no config path(s) {sorted(unknown)}: {why}")
        if misfits:
            why = "; ".join(f"{path!r} {reason}" for path, reason in misfits.items())
            raise ValueError(f"{name}: config {why}")

    def step(self, action: torch.Tensor) -> TensorDict:
        n, actions = self.num_envs, self._env_actions(action)
        batch, rewards, terminated, truncated, infos = self._run("step", actions)
        obs = final_obs = self._convert(batch, n)
        if "final_obs" in infos:
            final_obs = self._final_obs(batch, obs, infos)
        # unchecked: every entry is made here, [num_envs, ...] on the device (a third of the cost)
        return TensorDict._new_unsafe({
            DataKeys.OBS: obs,
            DataKeys.REWARDS: self._column(rewards.astype(np.float32)),
            DataKeys.TERMINATED: self._column(terminated),
            DataKeys.TRUNCATED: self._column(truncated),
            DataKeys.FINAL_OBS: final_obs,
        }, batch_size=torch.Size([n]), device=self._out_device)

    def _column(self, array: np.ndarray) -> torch.Tensor:
        """A vector env's fresh per-copy array as ``[num_envs, 1]`` (shared on a CPU)."""
        column = torch.from_numpy(array.reshape(self.num_envs, 1))  # numpy's reshape is cheaper
        return column if self._on_cpu else column.to(self.device)

    def _final_obs(self, batch: Any, obs: torch.Tensor | TensorDict, infos: dict[str, Any]) -> Any:
        """``obs`` with the finished copies' rows replaced by their last observations."""
        done = np.flatnonzero(infos["_final_obs"])
        if isinstance(batch, np.ndarray):  # patched, then converted once
            final = batch.copy()
            for i in done:
                final[i] = infos["final_obs"][i]
            return self._convert(final, self.num_envs)
        from gymnasium.vector.utils import concatenate, create_empty_array

        space, final_obs = self._observation_space, obs.clone()
        rows = concatenate(space, infos["final_obs"][done], create_empty_array(space, len(done)))
        final_obs[torch.from_numpy(done).to(self.device)] = self._convert(rows, len(done))
        return final_obs

    def render(self) -> np.ndarray:
        """Copy 0's RGB frame ``[H, W, 3]``; ``NotImplementedError`` without ``rgb_array``."""
        name, mode = type(self).__name__, self.vector_env.render_mode
        if mode != "rgb_array":
            raise NotImplementedError(f"{name}: copy 0 was made with render_mode={mode!r};"
                                      " render() needs 'rgb_array' (pass render_mode='rgb_array'"
                                      " to gymnasium_env, which gives it to copy 0 only)")
        frame = self._run("call", "rl8lite_render")[0]
        if isinstance(frame, str):  # the renderer's dependency is missing
            raise NotImplementedError(f"{name}: copy 0 cannot render: {frame}")
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
            got = f"{frame.dtype} {list(frame.shape)}"
            raise ValueError(f"{name}: copy 0 rendered a {got} array, not [H, W, 3] uint8")
        return frame

    def close(self) -> None:
        """Close every copy and end the worker processes (also on garbage collection)."""
        self._close()

    def state_dict(self) -> dict[str, Any]:
        return {"config": dict(self._applied)}  # the copies' states are not saved

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Seed the reset that follows a restore from torch's RNG (it applies its own config)."""
        self._next_seed = self.first_seed(None)

    def _run(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a vector env method; a sub-env failure closes the env for good."""
        if self._failure is not None or self.vector_env.closed:
            reason = f" after sub-env failure: {self._failure}" if self._failure else ""
            raise RuntimeError(f"{type(self).__name__} is closed{reason}")
        try:
            return getattr(self.vector_env, method)(*args, **kwargs)
        except SubEnvError as e:
            self._failure = e
            self.close()
            raise
        except ValueError as e:  # a sync copy's observation that does not fit the batch?
            from .gymnasium_copies import misfit_observations

            if (misfits := misfit_observations(self.vector_env)) is None:
                raise
            self._failure = SubEnvError(misfits)
            self.close()
            raise self._failure from e


def gymnasium_env(env_id_or_factory: str | Callable[..., Any], *, vectorization_mode: str = "sync",
                  seed: int | None = None, vector_kwargs: dict[str, Any] | None = None,
                  **make_kwargs: Any) -> type[GymnasiumEnv]:
    """A :class:`GymnasiumEnv` class stepping copies of ``env_id_or_factory`` (an env id for
    ``gymnasium.make``, or a callable returning a ``gymnasium.Env``) made with ``make_kwargs``
    (a factory's ``max_episode_steps`` adds a ``TimeLimit``), named after it; equal calls
    return one class.

    ``vectorization_mode``: ``"sync"`` (in this process) or ``"async"`` (a worker per copy);
    ``seed``: the first reset's base seed (default: from torch's RNG); ``vector_kwargs``: for
    the vector env. ``render_mode`` goes to copy 0 only (default ``"rgb_array"`` where offered).
    A keyword nothing takes is a ``TypeError``, an unknown env id a ``ValueError``.

    Examples:
        >>> from rl8lite import Algorithm
        >>> CartPole = gymnasium_env("CartPole-v1")
        >>> CartPole.__name__, CartPole.max_episode_steps
        ('CartPole-v1', 500)
        >>> algo = Algorithm(CartPole, num_envs=4, horizon=8, seed=0)
        >>> algo.collect()["env/steps"]
        32.0
        >>> algo.close()
    """
    try:
        import gymnasium  # noqa: F401
    except ImportError as e:
        raise ImportError("gymnasium_env needs Gymnasium: pip install rl8lite[gymnasium]") from e
    source, mode = env_id_or_factory, vectorization_mode
    if mode not in ("sync", "async"):
        raise ValueError(f"vectorization_mode must be 'sync' or 'async', received {mode!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be an int >= 0 or None, received {seed!r}")
    if not isinstance(source, str) and not callable(source):
        raise TypeError(f"env_id_or_factory must be an env id or a callable, received {source!r}")
    vector_kwargs = dict(vector_kwargs or {})
    if isinstance(source, str):
        options: dict[str, Any] = {"gymnasium": source}
        nameable = True
    else:
        # Only a path that imports back to this very object names it: two module-level
        # lambdas share "module.<lambda>", bound methods of two instances "module.Cls.make".
        module = getattr(source, "__module__", None) or type(source).__module__
        qualname = getattr(source, "__qualname__", None) or type(source).__qualname__
        options = {"gymnasium_factory": f"{module}.{qualname}"}
        try:
            nameable = import_dotted_path(dotted_path(source)) is source
        except (ImportError, AttributeError):
            nameable = False
    options["vectorization_mode"] = mode
    if seed is not None:
        options["seed"] = seed
    if vector_kwargs:
        options["vector_kwargs"] = vector_kwargs
    options.update(make_kwargs)
    reference = options if nameable and is_plain(options) else None
    # one class per reference, or per factory object and options where no path names it
    key: Any = (json.dumps(reference, sort_keys=True) if reference is not None
                else (source, repr(sorted(options.items()))))
    try:
        hash(key)
    except TypeError:  # an unhashable callable: a new class each call
        key = None
    if key is not None and key in _CLASSES:
        return _CLASSES[key]
    from .gymnasium_copies import check_vector_kwargs, describe_source

    name, max_episode_steps, renders = describe_source(source, make_kwargs)
    check_vector_kwargs(mode, vector_kwargs)
    render_kwargs = {"render_mode": "rgb_array"} if renders else {}
    if "render_mode" in make_kwargs:  # for copy 0 only
        render_kwargs = {"render_mode": make_kwargs.pop("render_mode")}
    cls = type(name, (GymnasiumEnv,), {
        "__module__": __name__, "__qualname__": name,
        "__doc__": f"{name} (Gymnasium), {mode} vector env: see GymnasiumEnv.",
        "reference": reference, "label": repr(options), "max_episode_steps": max_episode_steps,
        "source": staticmethod(source) if callable(source) else source,
        "vectorization_mode": mode, "seed": seed, "make_kwargs": make_kwargs,
        "vector_kwargs": vector_kwargs, "render_kwargs": render_kwargs,
    })
    if key is not None:
        _CLASSES[key] = cls
    return cls


def env_reference(env_cls: type) -> str | dict[str, Any]:
    """The name :func:`import_env_class` imports ``env_cls`` back from (else an ``ImportError``).

    Examples:
        >>> from rl8lite.env import DiscreteDummyEnv
        >>> env_reference(DiscreteDummyEnv)
        'rl8lite.env.base.DiscreteDummyEnv'
        >>> env_reference(gymnasium_env("CartPole-v1", vectorization_mode="async"))
        {'gymnasium': 'CartPole-v1', 'vectorization_mode': 'async'}
    """
    if isinstance(env_cls, type) and issubclass(env_cls, ReferencedEnv):
        if env_cls.reference is None:
            raise ImportError(f"the env class {env_cls.__name__} cannot be named in a"
                              " config or checkpoint: make it from an env id or a module-level"
                              " factory, with plain-data keywords (numbers, strings, lists, dicts)")
        return dict(env_cls.reference)
    return dotted_path(env_cls)


def env_label(env_cls: type) -> str:
    """``env_cls``'s reference as one string, for experiment tracking (never raises).

    Examples:
        >>> env_label(gymnasium_env("CartPole-v1"))
        "{'gymnasium': 'CartPole-v1', 'vectorization_mode': 'sync'}"
    """
    if isinstance(env_cls, type) and issubclass(env_cls, ReferencedEnv):
        return env_cls.label
    return qualified_name(env_cls)


def import_env_class(reference: str | Mapping[str, Any], *, what: str = "env_cls") -> Any:
    """The env class ``reference`` names: a dotted path, ``"gymnasium:<env id>"``, or
    :func:`gymnasium_env`'s options with an env id under ``"gymnasium"`` or a factory's path
    under ``"gymnasium_factory"``, or :func:`~rl8lite.env.envpool_env`'s with a task id under
    ``"envpool"`` (else a ``TypeError``); an ``ImportError`` where none imports.

    Examples:
        >>> import_env_class("rl8lite.env.DiscreteDummyEnv").__name__
        'DiscreteDummyEnv'
        >>> CartPole = import_env_class("gymnasium:CartPole-v1")
        >>> import_env_class({"gymnasium": "CartPole-v1"}) is CartPole
        True
    """
    if isinstance(reference, str) and reference.startswith("gymnasium:"):
        return gymnasium_env(reference.removeprefix("gymnasium:"))
    if not isinstance(reference, Mapping):
        return import_dotted_path(reference, what=what)
    options = dict(reference)
    kinds = [k for k in ("gymnasium", "gymnasium_factory", "envpool") if k in options]
    if len(kinds) != 1:
        raise TypeError("an env mapping needs exactly one of 'gymnasium' (an env id),"
                        " 'gymnasium_factory' (a factory's dotted path) and 'envpool' (a task id),"
                        f" received keys {sorted(options)}")
    if kinds == ["envpool"]:
        from .envpool import envpool_env

        return envpool_env(options.pop("envpool"), **options)
    source = options.pop(kinds[0])
    if kinds[0] == "gymnasium_factory":
        source = import_dotted_path(source, what="gymnasium_factory")
    return gymnasium_env(source, **options)

"""One copy of a Gymnasium env: how it is made, and the wrapper that names it in its exceptions,
sets and restores its config, and renders for copy 0 only."""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import re
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np

from .base import SubEnvError

_GYMNASIUM_ENV_ATTRIBUTES = frozenset(dir(gymnasium.Env))
_CLASS_ATTRIBUTE = object()  # the original of a config key that was a class attribute
_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*|\[[^\]]+\])*")
_STEP = re.compile(r"\.?([A-Za-z_]\w*)|\[([^\]]+)\]")


def describe_failure(index: int, call: str, error: BaseException) -> str:
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__)).rstrip()
    return (f"sub-env {index} raised {type(error).__name__} in {call}: {error}\n"
            f"--- traceback of sub-env {index} ---\n{trace}")


def _is_parameter(value: Any) -> bool:
    if isinstance(value, (bool, int, float, str, np.number, np.bool_)):
        return True
    return isinstance(value, (list, tuple)) and all(_is_parameter(v) for v in value)


def _plain(value: Any) -> Any:
    if isinstance(value, (np.number, np.bool_)):
        return value.item()
    return type(value)(map(_plain, value)) if isinstance(value, (list, tuple)) else value


def _steps(path: str) -> list[tuple[bool, Any]]:
    """``"model.body_mass[1]"`` as ``[(False, "model"), (False, "body_mass"), (True, 1)]``."""
    if not _PATH.fullmatch(path):
        raise ValueError("not a path such as 'model.opt.gravity' or 'model.body_mass[1]'")
    return [(False, n) if n else (True, ast.literal_eval(i)) for n, i in _STEP.findall(path)]


def _get(obj: Any, step: tuple[bool, Any]) -> Any:
    is_index, key = step
    return obj[key] if is_index else getattr(obj, key)


def _shape(value: Any) -> tuple[int, ...] | None:
    try:
        return np.shape(value)
    except ValueError:  # a ragged list
        return None


class CopyWrapper(gymnasium.Wrapper):
    """Copy ``index`` of a vector env (see the module docstring)."""

    def __init__(self, env: gymnasium.Env, index: int) -> None:
        super().__init__(env)
        self.index = index
        self._originals: dict[str, Any] = {}  # each config key's value before a config set it

    def step(self, action: Any) -> Any:
        try:
            return self.env.step(action)
        except Exception as e:
            raise SubEnvError(describe_failure(self.index, "step()", e)) from e

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        try:
            return self.env.reset(seed=seed, options=options)
        except Exception as e:
            raise SubEnvError(describe_failure(self.index, "reset()", e)) from e

    def rl8lite_describe(self) -> tuple[dict[str, Any], int | None]:
        """The unwrapped env's public attributes holding numbers, strings or lists of them, and
        the smallest ``TimeLimit`` among the wrappers."""
        env, found = self.unwrapped, {}
        for name in dir(env):
            if name.startswith("_") or name in _GYMNASIUM_ENV_ATTRIBUTES:
                continue
            raw = inspect.getattr_static(env, name, None)
            if not isinstance(raw, (property, classmethod, staticmethod)) and _is_parameter(raw):
                found[name] = _plain(getattr(env, name))
        limits, wrapper = [], self.env
        while isinstance(wrapper, gymnasium.Wrapper):
            if isinstance(wrapper, gymnasium.wrappers.TimeLimit):
                limits.append(wrapper._max_episode_steps)
            wrapper = wrapper.env
        return found, min(limits, default=None)

    def _resolve(self, steps: list[tuple[bool, Any]]) -> Any:
        return functools.reduce(_get, steps, self.unwrapped)

    def rl8lite_check_paths(self, paths: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        """Why each unknown path is unknown and why each value misfits its path; records the
        original value at each path that fits."""
        unknown, mismatched = {}, {}
        for path, value in paths.items():
            try:
                current = self._resolve(_steps(path))
            except (AttributeError, LookupError, TypeError, ValueError, SyntaxError) as e:
                unknown[path] = f"{path!r}: {type(e).__name__}: {e}"
                continue
            if _shape(current) != _shape(value):
                mismatched[path] = f"has shape {_shape(current)}, received {_shape(value)}"
            elif path not in self._originals:
                self._originals[path] = copy.deepcopy(current)
        return unknown, mismatched

    def rl8lite_configure(self, changes: dict[str, Any], restore: Sequence[str]) -> None:
        """Put back the original value of each key in ``restore`` (a class attribute shows
        again), then set ``changes`` on the unwrapped env (a path is written in place)."""
        env = self.unwrapped
        try:
            for key in restore:
                original = self._originals.pop(key)
                if not key.isidentifier():
                    self._write(key, original)
                elif original is _CLASS_ATTRIBUTE:
                    delattr(env, key)
                else:
                    setattr(env, key, original)
            for key, value in changes.items():
                if not key.isidentifier():
                    if key not in self._originals:
                        self._originals[key] = copy.deepcopy(self._resolve(_steps(key)))
                    self._write(key, value)
                    continue
                self._originals.setdefault(key, vars(env).get(key, _CLASS_ATTRIBUTE))
                setattr(env, key, value)
        except Exception as e:
            raise SubEnvError(describe_failure(self.index, "the config", e)) from e

    def _write(self, path: str, value: Any) -> None:
        """Arrays are written in place (MuJoCo's are views of the simulator's model); a
        class-level list, dict or array is first copied onto the env, never changed for all."""
        env, steps = self.unwrapped, _steps(path)
        root = steps[0][1]
        if root not in vars(env) and isinstance(
            inspect.getattr_static(env, root, None), (list, dict, np.ndarray)
        ):
            setattr(env, root, copy.deepcopy(getattr(env, root)))
        parent = self._resolve(steps[:-1])
        (is_index, key), current = steps[-1], _get(parent, steps[-1])
        if isinstance(current, np.ndarray):
            current[...] = value
        elif is_index:
            parent[key] = value
        else:
            setattr(parent, key, value)

    def rl8lite_render(self) -> Any:
        """Copy 0's frame (``None`` from the others), or why it has none as a string."""
        if self.index != 0:
            return None
        try:
            return self.env.render()
        except gymnasium.error.DependencyNotInstalled as e:
            return str(e)
        except Exception as e:
            raise SubEnvError(describe_failure(self.index, "render()", e)) from e


def make_copy(source: str | Callable[..., Any], kwargs: dict[str, Any], index: int) -> CopyWrapper:
    """Copy ``index``: ``gymnasium.make(source, **kwargs)``, or ``source(**kwargs)`` (with a
    ``TimeLimit`` for a ``max_episode_steps`` keyword), in a :class:`CopyWrapper`."""
    kwargs = dict(kwargs)
    try:
        if isinstance(source, str):
            env = gymnasium.make(source, **kwargs)
        else:
            time_limit = kwargs.pop("max_episode_steps", None)
            env = source(**kwargs)
            if not isinstance(env, gymnasium.Env):
                raise TypeError(f"the factory returned {type(env).__name__}, not a gymnasium.Env")
            if time_limit is not None:
                env = gymnasium.wrappers.TimeLimit(env, time_limit)
    except Exception as e:
        raise SubEnvError(describe_failure(index, "its construction", e)) from e
    return CopyWrapper(env, index)


def describe_source(
    source: str | Callable[..., Any], make_kwargs: dict[str, Any]
) -> tuple[str, int | None, bool]:
    """The class name, the longest episode (where known without a copy) and whether copy 0
    can render ``rgb_array``, of an env id or a factory; a ``ValueError`` for an unknown env id,
    a ``TypeError`` for a keyword in ``make_kwargs`` that it does not take."""
    steps = make_kwargs.get("max_episode_steps")
    if callable(source):
        name = getattr(source, "__name__", type(source).__name__)
        creator, also, owner = source, {"max_episode_steps"}, f"the factory {name}"
        try:
            takes_render_mode = "render_mode" in inspect.signature(source).parameters
        except (TypeError, ValueError):
            takes_render_mode = False
        fallback_modes: tuple[str, ...] = ("rgb_array",)  # unless its metadata says otherwise
    else:
        module, _, name = source.rpartition(":")
        if module:
            importlib.import_module(module)  # as gymnasium.make does for "module:Env-v0"
        try:
            spec = gymnasium.spec(name)
        except gymnasium.error.Error as e:  # NameNotFound, VersionNotFound, ...
            raise ValueError(f"no Gymnasium env {source!r}: {e}") from e
        creator = spec.entry_point
        if isinstance(creator, str):
            creator = gymnasium.envs.registration.load_env_creator(creator)
        owner = f"{source} (gymnasium.make and {getattr(creator, '__name__', creator)!s})"
        also = {"max_episode_steps", "disable_env_checker"}
        takes_render_mode, fallback_modes = True, ()
        if steps is None:  # gymnasium.make: None (or no keyword) keeps the registered limit
            steps = spec.max_episode_steps
    _check_make_kwargs(make_kwargs, creator, also, owner)
    metadata = getattr(creator, "metadata", None)
    modes = metadata.get("render_modes", ()) if isinstance(metadata, dict) else fallback_modes
    steps = steps if steps is None or steps > 0 else None  # -1: no limit
    return name, steps, takes_render_mode and "rgb_array" in modes


def _check_make_kwargs(
    make_kwargs: dict[str, Any], creator: Callable[..., Any], also: set[str], owner: str
) -> None:
    """A keyword ``creator`` does not take (beyond ``also`` and ``render_mode``) is an error now
    rather than a failure of every copy later."""
    try:
        parameters = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted = {p.name for p in parameters if p.kind is not p.POSITIONAL_ONLY} - {"self"}
    unknown = sorted(set(make_kwargs) - accepted - also - {"render_mode"})
    if unknown:
        raise TypeError(
            f"{owner} takes no keyword {', '.join(map(repr, unknown))};"
            f" it takes {sorted(accepted | also)}"
        )


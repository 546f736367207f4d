"""What :func:`~rl8lite.env.gymnasium_env` is called with: the env's name, episode limit and
rendering, read from its registration or factory, and its keywords checked up front (a
keyword no copy can take is an error naming it, not a failure of every copy later)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import gymnasium
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv


def describe_source(
    source: str | Callable[..., Any], make_kwargs: dict[str, Any]
) -> tuple[str, int | None, bool]:
    """The class name, the longest episode and whether copy 0 can render ``rgb_array``, of an
    env id (as ``gymnasium.make`` takes it) or a factory.

    Raises:
        ValueError: Gymnasium has no env ``source``.
        TypeError: A keyword of ``make_kwargs`` the env's creator (with ``gymnasium.make``'s
            own) or the factory does not take.
    """
    if isinstance(source, str):
        module, _, env_id = source.rpartition(":")
        if module:
            importlib.import_module(module)  # as gymnasium.make does for "module:Env-v0"
        try:
            spec = gymnasium.spec(env_id)
        except gymnasium.error.Error as e:  # NameNotFound, VersionNotFound, ...
            raise ValueError(f"no Gymnasium env {source!r}: {e}") from e
        creator = spec.entry_point
        if isinstance(creator, str):
            creator = gymnasium.envs.registration.load_env_creator(creator)
        _check_make_kwargs(
            make_kwargs, creator, {"max_episode_steps", "disable_env_checker"},
            f"{source} (gymnasium.make and {getattr(creator, '__name__', creator)!s})",
        )
        steps = make_kwargs.get("max_episode_steps")
        if steps is None:  # gymnasium.make: None (or no keyword) keeps the registered limit
            steps = spec.max_episode_steps
        name = env_id
    else:
        creator, steps = source, make_kwargs.get("max_episode_steps")
        name = getattr(source, "__name__", type(source).__name__)
        _check_make_kwargs(make_kwargs, source, {"max_episode_steps"}, f"the factory {name}")
        try:
            if "render_mode" not in inspect.signature(source).parameters:
                return name, steps, False
        except (TypeError, ValueError):
            return name, steps, False
    metadata = getattr(creator, "metadata", None)
    if isinstance(metadata, dict):
        modes = metadata.get("render_modes", ())
    else:  # a factory taking render_mode is trusted to offer rgb_array; an env id's creator is not
        modes = ("rgb_array",) if callable(source) else ()
    steps = steps if steps is None or steps > 0 else None  # gymnasium.make: -1 means no limit
    return name, steps, "rgb_array" in modes


#: Vector env keywords rl8lite sets itself.
_SET_BY_ADAPTER = frozenset({"env_fns", "copy", "autoreset_mode"})


def _keywords(fn: Callable[..., Any]) -> set[str] | None:
    """The keyword names ``fn`` takes, or ``None`` when it takes any (``**kwargs``) or has no
    signature to read."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY} - {"self"}


def _check_make_kwargs(
    make_kwargs: dict[str, Any], creator: Callable[..., Any], also: set[str], owner: str
) -> None:
    """A keyword ``creator`` does not take (beyond ``also`` and ``render_mode``, which only
    copy 0 gets) is an error now, naming it, rather than a failure of every copy later."""
    accepted = _keywords(creator)
    if accepted is None:
        return
    accepted |= also
    unknown = sorted(set(make_kwargs) - accepted - {"render_mode"})
    if unknown:
        raise TypeError(f"{owner} takes no keyword {', '.join(map(repr, unknown))}; it takes {sorted(accepted)}")


def check_vector_kwargs(mode: str, vector_kwargs: dict[str, Any]) -> None:
    """Unknown vector env keywords are errors now, naming them.

    Raises:
        TypeError: A keyword the vector env does not take, or one rl8lite sets itself.
    """
    vector_cls = SyncVectorEnv if mode == "sync" else AsyncVectorEnv
    reserved = sorted(set(vector_kwargs) & _SET_BY_ADAPTER)
    if reserved:
        raise TypeError(f"vector_kwargs {reserved}: rl8lite sets these itself")
    taken = _keywords(vector_cls.__init__)
    unknown = sorted(set(vector_kwargs) - taken) if taken is not None else []
    if unknown:
        valid = sorted(taken - _SET_BY_ADAPTER)
        raise TypeError(f"vector_kwargs {unknown} are not options of {vector_cls.__name__}; it takes {valid}")

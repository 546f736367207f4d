"""The copies behind :class:`~rl8lite.env.GymnasiumEnv`, and the vector envs that run them."""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import importlib
import inspect
import re
import signal
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.async_vector_env import AsyncState, _async_worker
from gymnasium.vector.utils import concatenate, create_empty_array

from .base import SubEnvError

_GYMNASIUM_ENV_ATTRIBUTES = frozenset(dir(gymnasium.Env))
_CLASS_ATTRIBUTE = object()  # the original of a config key that was a class attribute
_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*|\[[^\]]+\])*")
_STEP = re.compile(r"\.?([A-Za-z_]\w*)|\[([^\]]+)\]")
_SET_BY_ADAPTER = frozenset({"env_fns", "copy", "autoreset_mode"})


def _describe_failure(index: int, call: str, error: BaseException) -> str:
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
    """Copy ``index`` of a vector env: its exceptions name it, and it sets, restores and
    describes its config and renders (copy 0 only) through ``call("rl8lite_...")``."""

    def __init__(self, env: gymnasium.Env, index: int) -> None:
        super().__init__(env)
        self.index = index
        self._originals: dict[str, Any] = {}  # each config key's value before a config set it

    def step(self, action: Any) -> Any:
        try:
            obs, reward, terminated, truncated, _ = self.env.step(action)
        except Exception as e:
            raise SubEnvError(_describe_failure(self.index, "step()", e)) from e
        # rl8lite reads no info; an empty one spares the vector env merging it (7% of a step)
        return obs, reward, terminated, truncated, {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        try:
            return self.env.reset(seed=seed, options=options)
        except Exception as e:
            raise SubEnvError(_describe_failure(self.index, "reset()", e)) from e

    def rl8lite_describe(self) -> tuple[dict[str, Any], int | None]:
        """The unwrapped env's public numbers, strings and lists of them; the least TimeLimit."""
        env = self.unwrapped
        values = {name: inspect.getattr_static(env, name, None) for name in dir(env)
                  if not name.startswith("_") and name not in _GYMNASIUM_ENV_ATTRIBUTES}
        found = {name: _plain(value) for name, value in values.items() if _is_parameter(value)}
        limits, wrapper = [], self.env
        while isinstance(wrapper, gymnasium.Wrapper):
            if isinstance(wrapper, gymnasium.wrappers.TimeLimit):
                limits.append(wrapper._max_episode_steps)
            wrapper = wrapper.env
        return found, min(limits, default=None)

    def _resolve(self, steps: list[tuple[bool, Any]]) -> Any:
        return functools.reduce(_get, steps, self.unwrapped)

    def rl8lite_check_paths(self, paths: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        """Why each unknown path is unknown and why each value misfits its path."""
        unknown, mismatched = {}, {}
        for path, value in paths.items():
            try:
                current = self._resolve(_steps(path))
            except (AttributeError, LookupError, TypeError, ValueError, SyntaxError) as e:
                unknown[path] = f"{path!r}: {type(e).__name__}: {e}"
                continue
            if _shape(current) != _shape(value):
                mismatched[path] = f"has shape {_shape(current)}, received {_shape(value)}"
        return unknown, mismatched

    def rl8lite_configure(self, changes: dict[str, Any], restore: Sequence[str]) -> None:
        """Put back the original value of each key in ``restore`` (a class attribute shows
        again), then set ``changes`` on the unwrapped env (a path is written in place)."""
        env = self.unwrapped
        try:
            for key in restore:
                original = self._originals.pop(key)
                if original is _CLASS_ATTRIBUTE:
                    delattr(env, key)
                else:
                    self._write(key, original)
            for key, value in changes.items():
                if key.isidentifier():
                    self._originals.setdefault(key, vars(env).get(key, _CLASS_ATTRIBUTE))
                elif key not in self._originals:
                    self._originals[key] = copy.deepcopy(self._resolve(_steps(key)))
                self._write(key, value)
        except Exception as e:
            raise SubEnvError(_describe_failure(self.index, "the config", e)) from e

    def _write(self, path: str, value: Any) -> None:
        """A key is set; an array at a path is written in place (MuJoCo's are views of the
        simulator's model), a class-level list, dict or array first copied onto the env."""
        env, steps = self.unwrapped, _steps(path)
        root = steps[0][1]
        shared = inspect.getattr_static(env, root, None)
        if root not in vars(env) and isinstance(shared, (list, dict, np.ndarray)):
            setattr(env, root, copy.deepcopy(shared))
        parent = self._resolve(steps[:-1])
        (is_index, key), current = steps[-1], _get(parent, steps[-1])
        if isinstance(current, np.ndarray) and not path.isidentifier():
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
            raise SubEnvError(_describe_failure(self.index, "render()", e)) from e


def make_copy(source: str | Callable[..., Any], kwargs: dict[str, Any], index: int) -> CopyWrapper:
    """Copy ``index``, wrapped; a factory's ``max_episode_steps`` keyword adds a TimeLimit."""
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
        raise SubEnvError(_describe_failure(index, "its construction", e)) from e
    return CopyWrapper(env, index)


def _keywords(fn: Callable[..., Any]) -> set[str] | None:
    """The keywords ``fn`` takes, or ``None`` where it takes any (or has no signature)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind is not p.POSITIONAL_ONLY} - {"self"}


def describe_source(source: str | Callable[..., Any], make_kwargs: dict[str, Any]
                    ) -> tuple[str, int | None, bool]:
    """The class name, the longest episode (where known without a copy) and whether copy 0 can
    render ``rgb_array``; a ``ValueError`` for an unknown env id, a ``TypeError`` for a keyword."""
    steps = make_kwargs.get("max_episode_steps")
    if callable(source):
        name = getattr(source, "__name__", type(source).__name__)
        creator, also, owner = source, {"max_episode_steps"}, f"the factory {name}"
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
        also, fallback_modes = {"max_episode_steps", "disable_env_checker"}, ()
        if steps is None:  # gymnasium.make: None (or no keyword) keeps the registered limit
            steps = spec.max_episode_steps
    accepted = _keywords(creator)
    unknown = sorted(set(make_kwargs) - (accepted or set()) - also - {"render_mode"})
    if accepted is not None and unknown:  # an error now, not a failure of every copy later
        raise TypeError(f"{owner} takes no keyword {', '.join(map(repr, unknown))};"
                        f" it takes {sorted(accepted | also)}")
    metadata = getattr(creator, "metadata", None)
    modes = metadata.get("render_modes", ()) if isinstance(metadata, dict) else fallback_modes
    takes_render_mode = isinstance(source, str) or "render_mode" in (accepted or ())
    steps = steps if steps is None or steps > 0 else None  # -1: no limit
    return name, steps, takes_render_mode and "rgb_array" in modes


def check_vector_kwargs(mode: str, vector_kwargs: dict[str, Any]) -> None:
    """A keyword the vector env does not take, or one rl8lite sets, is a ``TypeError`` naming it."""
    vector_cls = SyncVectorEnv if mode == "sync" else AsyncVectorEnv
    if reserved := sorted(set(vector_kwargs) & _SET_BY_ADAPTER):
        raise TypeError(f"vector_kwargs {reserved}: rl8lite sets these itself")
    taken = _keywords(vector_cls.__init__) or set(vector_kwargs)
    if unknown := sorted(set(vector_kwargs) - taken):
        raise TypeError(f"vector_kwargs {unknown} are not options of {vector_cls.__name__};"
                        f" it takes {sorted(taken - _SET_BY_ADAPTER)}")


def make_vector_env(env_fns: Sequence[Callable[[], gymnasium.Env]], mode: str,
                    vector_kwargs: dict[str, Any]) -> VectorEnv:
    """A vector env over ``env_fns``, autoresetting in the same step, returning its own arrays."""
    kwargs = {"copy": False, "autoreset_mode": AutoresetMode.SAME_STEP, **vector_kwargs}
    if mode == "sync":
        return SyncVectorEnv(env_fns, **kwargs)
    return ReportingAsyncVectorEnv(env_fns, **{"worker": _reporting_worker, **kwargs})


def misfit_observations(vector_env: VectorEnv) -> str | None:
    """Which copies of a ``SyncVectorEnv`` returned an observation its space cannot batch
    (Gymnasium's ``ValueError`` names none), or ``None``."""
    observations = getattr(vector_env, "_env_obs", None)  # SyncVectorEnv's latest, per copy
    if not isinstance(vector_env, SyncVectorEnv) or observations is None:
        return None
    space, misfits = vector_env.single_observation_space, []
    for index, observation in enumerate(observations):
        try:
            concatenate(space, [observation], create_empty_array(space, 1))
        except (ValueError, TypeError, KeyError, IndexError) as e:
            got, shape = type(observation).__name__, getattr(observation, "shape", None)
            got += "" if shape is None else f" of shape {tuple(shape)}"
            misfits.append(f"sub-env {index} returned a {got}, which does not fit {space}: {e}")
    return "\n".join(misfits) or None


def _reporting_worker(index: int, env_fn: Callable[[], Any], pipe: Any, parent_pipe: Any,
                      shared_memory: Any, error_queue: Any, *rest: Any) -> None:
    """Gymnasium's async worker, leaving the process group's signals to the parent and
    reporting a copy that fails to build (outside Gymnasium's error handling)."""
    for name in ("SIGINT", "SIGTERM", "SIGUSR1"):  # sent to the process group: the parent's
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    try:
        env = env_fn()
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        if not isinstance(e, SubEnvError):
            e = SubEnvError(_describe_failure(index, "its construction", e))
        error_queue.put((index, SubEnvError, e, ""))
        parent_pipe.close()
        with contextlib.suppress(EOFError, OSError):  # a failed reply sends the parent to the queue
            pipe.recv()
            pipe.send((None, False))
        return
    _async_worker(index, lambda: env, pipe, parent_pipe, shared_memory, error_queue, *rest)


def _death(code: int) -> str:
    if code >= 0:
        return f"exited with status {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


class ReportingAsyncVectorEnv(AsyncVectorEnv):
    """Gymnasium's ``AsyncVectorEnv``, raising a sub-env's exception (a bare warning there) and a
    dead worker (an ``EOFError``) as a :class:`SubEnvError` naming the copy, then ending all."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            with self._reporting_dead_workers():
                super().__init__(*args, **kwargs)
        except BaseException:
            self.terminate()
            raise

    def reset(self, **kwargs: Any) -> Any:
        with self._reporting_dead_workers():
            return super().reset(**kwargs)

    def step(self, actions: Any) -> Any:
        with self._reporting_dead_workers():
            return super().step(actions)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        with self._reporting_dead_workers():
            return super().call(name, *args, **kwargs)

    def _raise_if_errors(self, successes: Iterable[bool]) -> None:
        if not (failures := list(successes).count(False)):
            return
        messages = []
        for _ in range(failures):
            index, error_type, error, trace = self.error_queue.get()
            messages.append(str(error) if isinstance(error, SubEnvError) else
                            f"sub-env {index}'s worker raised {error_type.__name__}: {error}\n"
                            f"--- traceback of sub-env {index} ---\n{trace.rstrip()}")
        self.terminate()
        raise SubEnvError("\n\n".join(messages))

    @contextlib.contextmanager
    def _reporting_dead_workers(self) -> Iterator[None]:
        try:
            yield
        except (EOFError, ConnectionError) as e:
            processes = getattr(self, "processes", [])
            deadline = time.monotonic() + 5.0  # for a dying worker to end
            while (processes and all(p.exitcode is None for p in processes)
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            details = "; ".join(f"sub-env {i}'s worker (pid {p.pid}) {_death(p.exitcode)}"
                                for i, p in enumerate(processes) if p.exitcode is not None)
            self.terminate()
            raise SubEnvError(f"{details or 'a worker process closed its pipe'} ({type(e).__name__}"
                              " on its pipe); every worker has been stopped") from e

    def close(self, **kwargs: Any) -> None:
        """Close the copies and end the workers, or :meth:`terminate` them where they cannot
        close (after a failure, during a pending call, or with ``terminate=True``)."""
        if self.closed:
            return
        if (not kwargs.get("terminate") and self._state is AsyncState.DEFAULT
                and all(pipe is not None and not pipe.closed for pipe in self.parent_pipes)
                and all(p.is_alive() for p in self.processes)):
            with contextlib.suppress(EOFError, OSError):
                return super().close(**kwargs)
        self.terminate()

    def terminate(self) -> None:
        """End every worker now (SIGKILL: workers ignore SIGTERM) and close the pipes."""
        for process in getattr(self, "processes", []):
            if process.is_alive():  # else already reaped
                process.kill()
                process.join()
        for pipe in getattr(self, "parent_pipes", []):
            if pipe is not None:
                pipe.close()
        self.closed = True

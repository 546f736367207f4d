"""Gymnasium's vector envs under :class:`~rl8lite.env.GymnasiumEnv`: one wrapper per copy,
failures named by copy.

:class:`CopyWrapper` names its copy in any exception (a :class:`SubEnvError` with the original
type, message and traceback), sets and restores config values, and renders copy 0 only.
:class:`ReportingAsyncVectorEnv` raises a sub-env's exception as that :class:`SubEnvError`
(Gymnasium raises a bare copy and logs the traceback through ``warnings``, which ``-W error``
turns into another exception) and reports a dead worker by copy and signal, not as a bare
``EOFError``; after either, every worker is ended.
"""

from __future__ import annotations

import ast
import copy
import inspect
import re
import signal
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.async_vector_env import AsyncState, _async_worker
from gymnasium.vector.utils import concatenate, create_empty_array

from .base import SubEnvError

_GYMNASIUM_ENV_ATTRIBUTES = frozenset(dir(gymnasium.Env))
_CLASS_ATTRIBUTE = object()  # marks a parameter that was a class attribute before it was set
_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*|\[[^\]]+\])*")
_STEP = re.compile(r"\.?([A-Za-z_]\w*)|\[([^\]]+)\]")


def _describe_failure(index: int, call: str, error: BaseException) -> str:
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return f"sub-env {index} raised {type(error).__name__} in {call}: {error}\n--- traceback of sub-env {index} ---\n{trace.rstrip()}"


def _is_parameter(value: Any) -> bool:
    if isinstance(value, (bool, int, float, str, np.number, np.bool_)):
        return True
    return isinstance(value, (list, tuple)) and all(_is_parameter(v) for v in value)


def _plain(value: Any) -> Any:
    if isinstance(value, (np.number, np.bool_)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _steps(path: str) -> list[tuple[bool, Any]]:
    """``"model.body_mass[1]"`` as ``[(False, "model"), (False, "body_mass"), (True, 1)]``
    (``True``: an index).

    Raises:
        ValueError: ``path`` is not attribute names joined by dots, with ``[index]`` suffixes.
    """
    if not _PATH.fullmatch(path):
        raise ValueError("not a path such as 'model.opt.gravity' or 'model.body_mass[1]'")
    steps = []
    for name, index in _STEP.findall(path):
        steps.append((False, name) if name else (True, ast.literal_eval(index)))
    return steps


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
        #: The value each config key had before the config first set it.
        self._originals: dict[str, Any] = {}

    def step(self, action: Any) -> Any:
        try:
            return self.env.step(action)
        except Exception as e:
            raise SubEnvError(_describe_failure(self.index, "step()", e)) from e

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        try:
            return self.env.reset(seed=seed, options=options)
        except Exception as e:
            raise SubEnvError(_describe_failure(self.index, "reset()", e)) from e

    def rl8lite_describe(self) -> tuple[dict[str, Any], int | None]:
        """The unwrapped env's public attributes holding numbers, strings or lists of them, and
        the smallest ``TimeLimit`` among the wrappers (``None`` without one)."""
        env, found = self.unwrapped, {}
        for name in dir(env):
            if name.startswith("_") or name in _GYMNASIUM_ENV_ATTRIBUTES:
                continue
            try:
                raw = inspect.getattr_static(env, name)
            except AttributeError:
                continue
            if not isinstance(raw, (property, classmethod, staticmethod)) and _is_parameter(raw):
                found[name] = _plain(getattr(env, name))
        limits, wrapper = [], self.env
        while isinstance(wrapper, gymnasium.Wrapper):
            if isinstance(wrapper, gymnasium.wrappers.TimeLimit):
                limits.append(wrapper._max_episode_steps)
            wrapper = wrapper.env
        return found, min(limits, default=None)

    def rl8lite_check_paths(self, paths: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        """Why a path of ``paths`` is unknown, and why its value does not fit, by path; records
        the current value of each path that fits (before any copy changes it)."""
        unknown, mismatched = {}, {}
        for path, value in paths.items():
            try:
                current = self._resolve(_steps(path))
            except (AttributeError, LookupError, TypeError, ValueError, SyntaxError) as e:
                unknown[path] = f"{path!r}: {type(e).__name__}: {e}"
                continue
            shape, received = _shape(current), _shape(value)
            if shape != received:
                mismatched[path] = f"has shape {shape}, received {received}"
            elif path not in self._originals:
                self._originals[path] = copy.deepcopy(current)
        return unknown, mismatched

    def rl8lite_configure(self, changes: dict[str, Any], restore: Sequence[str]) -> None:
        """Set ``changes`` on the unwrapped env; put back the original value of each of ``restore``."""
        env = self.unwrapped
        try:
            for key in restore:
                original = self._originals.pop(key)
                if not key.isidentifier():
                    self._write(key, original)
                elif original is _CLASS_ATTRIBUTE:
                    delattr(env, key)  # the class attribute shows again, exactly as it was
                else:
                    setattr(env, key, original)
            for key, value in changes.items():
                if key not in self._originals:
                    self._originals[key] = (
                        vars(env).get(key, _CLASS_ATTRIBUTE) if key.isidentifier()
                        else copy.deepcopy(self._resolve(_steps(key)))
                    )
                if key.isidentifier():
                    setattr(env, key, value)
                else:
                    self._write(key, value)
        except Exception as e:
            raise SubEnvError(_describe_failure(self.index, "the config", e)) from e

    def _resolve(self, steps: list[tuple[bool, Any]]) -> Any:
        obj = self.unwrapped
        for step in steps:
            obj = _get(obj, step)
        return obj

    def _write(self, path: str, value: Any) -> None:
        """Set the value at ``path``: arrays in place (MuJoCo's model arrays are views into
        the simulator), a class-level list, dict or array on a copy of its own."""
        env, steps = self.unwrapped, _steps(path)
        root = steps[0][1]
        if root not in vars(env) and isinstance(inspect.getattr_static(env, root, None), (list, dict, np.ndarray)):
            setattr(env, root, copy.deepcopy(getattr(env, root)))  # never the class's own
        parent = self._resolve(steps[:-1])
        (is_index, key), current = steps[-1], _get(parent, steps[-1])
        if isinstance(current, np.ndarray):
            current[...] = value
        elif is_index:
            parent[key] = value
        else:
            setattr(parent, key, value)

    def rl8lite_render(self) -> Any:
        """Copy 0's frame (``None`` from the other copies, which never render), or why it has
        none, as a string, when the env's renderer is not installed (e.g. pygame)."""
        if self.index != 0:
            return None
        try:
            return self.env.render()
        except gymnasium.error.DependencyNotInstalled as e:
            return str(e)
        except Exception as e:
            raise SubEnvError(_describe_failure(self.index, "render()", e)) from e


def make_copy(
    source: str | Callable[..., Any], make_kwargs: dict[str, Any], index: int, render_kwargs: dict[str, Any]
) -> CopyWrapper:
    """Copy ``index``: ``gymnasium.make(source, **kwargs)``, or ``source(**kwargs)`` (with a
    ``TimeLimit`` for a ``max_episode_steps`` keyword), in a :class:`CopyWrapper`."""
    kwargs = {**make_kwargs, **render_kwargs}
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


#: Signals a terminal or a scheduler sends to the whole process group, which the parent handles
#: (the Trainer stops or checkpoints between steps) and then ends the workers itself.
_PARENT_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, name)
)


def _reporting_worker(
    index: int, env_fn: Callable[[], Any], pipe: Any, parent_pipe: Any, shared_memory: Any,
    error_queue: Any, *rest: Any
) -> None:
    """Gymnasium's async worker, leaving the process group's signals to the parent, and
    reporting a copy that fails to build through the error queue (Gymnasium builds it before
    its error handling, so the worker would die with the exception only on its stderr)."""
    for signum in _PARENT_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    try:
        env = env_fn()
    except BaseException as e:
        if not isinstance(e, SubEnvError):
            e = SubEnvError(_describe_failure(index, "its construction", e))
        error_queue.put((index, SubEnvError, e, ""))
        parent_pipe.close()
        try:  # answer the parent's first request with a failure: it then reads the queue
            pipe.recv()
            pipe.send((None, False))
        except (EOFError, OSError):
            pass
        return
    _async_worker(index, lambda: env, pipe, parent_pipe, shared_memory, error_queue, *rest)


def misfit_observations(vector_env: VectorEnv) -> str | None:
    """Which copies of a ``SyncVectorEnv`` returned an observation its space's batch cannot
    hold (the ``ValueError`` Gymnasium raises then names none), or ``None`` if none did."""
    observations = getattr(vector_env, "_env_obs", None)  # SyncVectorEnv's latest, per copy
    if not isinstance(vector_env, SyncVectorEnv) or observations is None:
        return None
    space, misfits = vector_env.single_observation_space, []
    for index, observation in enumerate(observations):
        try:
            concatenate(space, [observation], create_empty_array(space, 1))
        except (ValueError, TypeError, KeyError, IndexError) as e:
            shape = getattr(observation, "shape", None)
            got = f"a {type(observation).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")
            misfits.append(f"sub-env {index} returned {got}, which does not fit {space}: {e}")
    return "\n".join(misfits) or None


def _death(process: Any) -> str:
    code = process.exitcode
    if code is None:
        return "closed its pipe"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class ReportingAsyncVectorEnv(AsyncVectorEnv):
    """Gymnasium's ``AsyncVectorEnv``, reporting failures by sub-env (see the module docstring)."""

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
        successes = list(successes)
        if all(successes):
            return
        messages = []
        for _ in range(len(successes) - sum(successes)):
            index, error_type, error, trace = self.error_queue.get()
            if isinstance(error, SubEnvError):
                messages.append(str(error))
            else:
                messages.append(
                    f"sub-env {index}'s worker raised {error_type.__name__}: {error}\n"
                    f"--- traceback of sub-env {index} ---\n{trace.rstrip()}"
                )
        self.terminate()
        raise SubEnvError("\n\n".join(messages))

    @contextmanager
    def _reporting_dead_workers(self) -> Iterator[None]:
        try:
            yield
        except (EOFError, ConnectionError) as e:
            processes = getattr(self, "processes", [])
            deadline = time.monotonic() + 5.0
            dead = [i for i, p in enumerate(processes) if p.exitcode is not None]
            while not dead and processes and time.monotonic() < deadline:  # a dying worker
                time.sleep(0.01)
                dead = [i for i, p in enumerate(processes) if p.exitcode is not None]
            details = "; ".join(
                f"sub-env {i}'s worker (pid {processes[i].pid}) {_death(processes[i])}"
                for i in dead
            )
            self.terminate()
            raise SubEnvError(
                f"{details or 'a worker process closed its pipe'} ({type(e).__name__} on its pipe);"
                " every worker has been stopped"
            ) from e

    def terminate(self) -> None:
        """End every worker process now (SIGKILL: workers ignore SIGTERM, which is the
        parent's to handle) and close the pipes."""
        processes = getattr(self, "processes", [])
        for process in processes:
            if process.is_alive():
                process.kill()
        for process in processes:
            process.join()
        for pipe in getattr(self, "parent_pipes", []):
            if pipe is not None:
                pipe.close()
        self.closed = True

    def shutdown(self) -> None:
        """Close the workers' envs and end the workers; :meth:`terminate` them if they cannot."""
        if self.closed:
            return
        pipes_open = all(pipe is not None and not pipe.closed for pipe in self.parent_pipes)
        if (
            self._state is AsyncState.DEFAULT
            and pipes_open
            and all(p.is_alive() for p in self.processes)
        ):
            try:
                self.close()
                return
            except (EOFError, OSError):
                pass
        self.terminate()


def shutdown(vector_env: VectorEnv) -> None:
    """Close ``vector_env`` (idempotent); for async envs, no worker process remains after it."""
    if isinstance(vector_env, ReportingAsyncVectorEnv):
        vector_env.shutdown()
    elif not vector_env.closed:
        vector_env.close()


def make_vector_env(
    env_fns: Sequence[Callable[[], gymnasium.Env]], mode: str, vector_kwargs: dict[str, Any]
) -> VectorEnv:
    """Gymnasium's ``SyncVectorEnv`` (``mode="sync"``) or ``AsyncVectorEnv`` (``"async"``) over
    ``env_fns``, in the same-step autoreset mode, returning its own arrays (no copies)."""
    if mode == "sync":
        return SyncVectorEnv(env_fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP, **vector_kwargs)
    vector_kwargs.setdefault("worker", _reporting_worker)
    return ReportingAsyncVectorEnv(env_fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP, **vector_kwargs)

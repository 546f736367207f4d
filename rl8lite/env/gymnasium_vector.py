"""Gymnasium's vector envs under :class:`~rl8lite.env.GymnasiumEnv`, failures named by copy."""

from __future__ import annotations

import inspect
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import gymnasium
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.async_vector_env import AsyncState, _async_worker
from gymnasium.vector.utils import concatenate, create_empty_array

from .base import SubEnvError
from .gymnasium_copy import describe_failure

_SET_BY_ADAPTER = frozenset({"env_fns", "copy", "autoreset_mode"})


def check_vector_kwargs(mode: str, vector_kwargs: dict[str, Any]) -> None:
    """A keyword the vector env does not take, or one rl8lite sets, is a ``TypeError`` naming it."""
    vector_cls = SyncVectorEnv if mode == "sync" else AsyncVectorEnv
    reserved = sorted(set(vector_kwargs) & _SET_BY_ADAPTER)
    if reserved:
        raise TypeError(f"vector_kwargs {reserved}: rl8lite sets these itself")
    taken = set(inspect.signature(vector_cls.__init__).parameters) - {"self"}
    unknown = sorted(set(vector_kwargs) - taken)
    if unknown:
        raise TypeError(
            f"vector_kwargs {unknown} are not options of {vector_cls.__name__};"
            f" it takes {sorted(taken - _SET_BY_ADAPTER)}"
        )


def make_vector_env(
    env_fns: Sequence[Callable[[], gymnasium.Env]], mode: str, vector_kwargs: dict[str, Any]
) -> VectorEnv:
    """A ``SyncVectorEnv`` or :class:`ReportingAsyncVectorEnv` over ``env_fns``, autoresetting
    in the same step and returning its own arrays (no copies)."""
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
            shape = getattr(observation, "shape", None)
            got = f"a {type(observation).__name__}"
            got += f" of shape {tuple(shape)}" if shape is not None else ""
            misfits.append(f"sub-env {index} returned {got}, which does not fit {space}: {e}")
    return "\n".join(misfits) or None


def _reporting_worker(
    index: int, env_fn: Callable[[], Any], pipe: Any, parent_pipe: Any, shared_memory: Any,
    error_queue: Any, *rest: Any,
) -> None:
    """Gymnasium's async worker, leaving the process group's signals to the parent and
    reporting a copy that fails to build (outside Gymnasium's error handling)."""
    for name in ("SIGINT", "SIGTERM", "SIGUSR1"):  # sent to the process group: the parent's
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    try:
        env = env_fn()
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        if not isinstance(e, SubEnvError):
            e = SubEnvError(describe_failure(index, "its construction", e))
        error_queue.put((index, SubEnvError, e, ""))
        parent_pipe.close()
        try:  # answer the parent's first request with a failure: it then reads the queue
            pipe.recv()
            pipe.send((None, False))
        except (EOFError, OSError):
            pass
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
    """Gymnasium's ``AsyncVectorEnv``, raising a sub-env's exception (a bare warning there) and
    a dead worker (an ``EOFError``) as a :class:`~rl8lite.env.SubEnvError` naming the copy,
    after which every worker is ended."""

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
            messages.append(str(error) if isinstance(error, SubEnvError) else (
                f"sub-env {index}'s worker raised {error_type.__name__}: {error}\n"
                f"--- traceback of sub-env {index} ---\n{trace.rstrip()}"
            ))
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
                f"sub-env {i}'s worker (pid {processes[i].pid}) {_death(processes[i].exitcode)}"
                for i in dead
            )
            self.terminate()
            raise SubEnvError(
                f"{details or 'a worker process closed its pipe'} ({type(e).__name__} on its pipe);"
                " every worker has been stopped"
            ) from e

    def close(self, **kwargs: Any) -> None:
        """Close the copies and end the workers, or :meth:`terminate` them where they cannot
        close (after a failure, during a pending call, or with ``terminate=True``)."""
        if self.closed:
            return
        if (
            not kwargs.get("terminate")
            and self._state is AsyncState.DEFAULT
            and all(pipe is not None and not pipe.closed for pipe in self.parent_pipes)
            and all(p.is_alive() for p in self.processes)
        ):
            try:
                return super().close(**kwargs)
            except (EOFError, OSError):
                pass
        self.terminate()

    def terminate(self) -> None:
        """End every worker now (SIGKILL: workers ignore SIGTERM) and close the pipes."""
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

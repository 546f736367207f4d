"""``Trainer``: counters, rl8's eval/run checks, stop conditions, and experiment tracking.

The trainer knows nothing of PPO (it calls ``collect``/``step`` on its algorithm)
and talks to MLflow only through a :class:`~rl8lite.tracking.Tracker`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from .algorithm import Algorithm
from .conditions import Condition
from .export import DeterministicActor, example_observation
from .specs import Composite
from .tracking import MlflowTracker, Tracker, mlflow_version

_PROGRESS_KEYS = (
    "episodes/return_mean",
    "returns/mean",
    "losses/total",
    "monitors/kl_div",
    "throughput/env_steps_per_s",
)


def reduce_eval_stats(collects: list[dict[str, float]]) -> dict[str, float]:
    """Merge the stats of several collects: sums for counts, extremes for min/max,
    episode means weighted by episode counts, plain means otherwise."""
    merged: dict[str, float] = {}
    episodes = [c.get("episodes/count", 0.0) for c in collects]
    total_episodes = sum(episodes)
    for key in collects[0]:
        values = [c[key] for c in collects]
        if key in ("env/steps", "env/resets", "episodes/count", "profiling/collect_ms"):
            merged[key] = float(sum(values))
        elif key.endswith("/min"):
            merged[key] = float(min(values))
        elif key.endswith("/max"):
            merged[key] = float(max(values))
        elif key in ("episodes/return_min",):
            merged[key] = float(min(v for v in values if v == v)) if total_episodes else float("nan")
        elif key in ("episodes/return_max",):
            merged[key] = float(max(v for v in values if v == v)) if total_episodes else float("nan")
        elif key.startswith("episodes/"):
            weighted = sum(v * w for v, w in zip(values, episodes) if w)
            merged[key] = weighted / total_episodes if total_episodes else float("nan")
        else:
            merged[key] = float(sum(values) / len(values))
    return merged


class Trainer:
    """Trains an :class:`~rl8lite.Algorithm` and logs everything to MLflow.

    Each trainer owns one MLflow run (or logs into the run the user opened with
    ``mlflow.start_run``). Params are logged at construction, metrics at every
    step with ``step = env steps``. Use it as a context manager, or call
    :meth:`close`, to end the run; :meth:`run` ends it too when it returns or fails.

    Args:
        algorithm: The algorithm to train.
        experiment_name: MLflow experiment (default: the env class name).
        run_name: MLflow run name.
        tags: MLflow run tags.
        progress: Print a one-line progress report per step of :meth:`run`
            (at most one line a second, and always the last).
        save_policy: Save the policy as an MLflow model (``policy``) whenever
            :meth:`run` finishes normally (see :meth:`log_policy`).
        tracker: A custom tracker instead of MLflow (anything with the
            :class:`~rl8lite.tracking.Tracker` methods).

    Examples:
        >>> from rl8lite import Algorithm, Trainer
        >>> from rl8lite.conditions import HitsUpperBound
        >>> from rl8lite.env import DiscreteDummyEnv
        >>> with Trainer(Algorithm(DiscreteDummyEnv, num_envs=8, horizon=4)) as trainer:  # doctest: +SKIP
        ...     trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 3)])
    """

    def __init__(
        self,
        algorithm: Algorithm,
        /,
        *,
        experiment_name: str | None = None,
        run_name: str | None = None,
        tags: dict[str, Any] | None = None,
        progress: bool = True,
        save_policy: bool = True,
        tracker: Tracker | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.state: dict[str, int] = {
            "algorithm/collects": 0,
            "algorithm/steps": 0,
            "env/steps": 0,
        }
        self.progress = progress
        self.save_policy = save_policy
        self.tracker: Tracker = tracker or MlflowTracker(
            experiment_name or type(algorithm.env).__name__, run_name=run_name, tags=tags
        )
        self.tracker.log_params({**algorithm.params, "versions/mlflow": mlflow_version()})
        self._last_progress = 0.0

    # ------------------------------------------------------------------ training
    def step(self, *, env_config: dict[str, Any] | None = None) -> dict[str, float]:
        """One collect and one policy update; returns (and logs) the train stats."""
        start = time.perf_counter()
        memory_stats = self.algorithm.memory_stats()
        collect_stats = self.algorithm.collect(env_config=env_config)
        step_stats = self.algorithm.step()
        self.state["algorithm/collects"] += 1
        self.state["algorithm/steps"] += 1
        self.state["env/steps"] += int(collect_stats["env/steps"])
        elapsed = time.perf_counter() - start
        train_stats = {
            **memory_stats,
            **collect_stats,
            **step_stats,
            "throughput/env_steps_per_s": collect_stats["env/steps"] / elapsed,
            **{k: float(v) for k, v in self.state.items()},
        }
        self.tracker.log_metrics(train_stats, step=self.state["env/steps"])
        return train_stats

    def eval(
        self,
        *,
        env_config: dict[str, Any] | None = None,
        deterministic: bool = True,
        name: str | None = None,
    ) -> dict[str, float]:
        """Evaluate the policy over ``max(1, horizons_per_env_reset)`` collects.

        Training and evaluation share one buffer, so with ``k > 0`` this may only
        be called when ``collects % k == 0`` (right before the env would reset).
        Metrics are logged under ``eval/`` (``eval/<name>/`` when ``name`` is given,
        so evaluations under several env configs form separate series).

        Raises:
            RuntimeError: Called between env resets (``collects % k != 0``).
            ValueError: ``env_config`` given when ``k < 0`` after the first
                collect (the env is never reset again, so it would be ignored).
        """
        k = self.algorithm.horizons_per_env_reset
        collects = self.state["algorithm/collects"]
        if env_config and k < 0 and collects:
            raise ValueError(
                "eval got an env_config, but horizons_per_env_reset < 0 means the env is"
                " reset only once, at the first collect, so the config would never be"
                " applied. Set horizons_per_env_reset > 0 to evaluate under other configs."
            )
        if k > 0 and collects % k:
            raise RuntimeError(
                f"eval can only be called every horizons_per_env_reset={k} collects"
                f" (now {collects} collects): training and evaluation share one buffer,"
                " and evaluating mid-way would cut the training rollout short."
            )
        results = []
        for _ in range(max(1, k)):
            results.append(self.algorithm.collect(env_config=env_config, deterministic=deterministic))
            self.state["algorithm/collects"] += 1
        self.algorithm.state.buffered = False  # evaluation data is never trained on
        prefix = f"eval/{name}/" if name else "eval/"
        eval_stats = {f"{prefix}{k}": v for k, v in reduce_eval_stats(results).items()}
        self.tracker.log_metrics(eval_stats, step=self.state["env/steps"])
        return eval_stats

    def run(
        self,
        *,
        env_config: dict[str, Any] | None = None,
        eval_env_config: dict[str, Any] | None = None,
        steps_per_eval: int | None = None,
        stop_conditions: Iterable[Condition] | None = None,
    ) -> dict[str, float]:
        """Train until a stop condition holds (forever without one); return the last train stats.

        Every stop condition sees the latest train stats after each step. With
        ``steps_per_eval``, :meth:`eval` runs every that many steps under
        ``eval_env_config`` (default: ``env_config``). The MLflow run is ended
        on the way out: FINISHED on return, KILLED on KeyboardInterrupt, FAILED
        (with the error as the ``rl8lite.error`` tag) on any other exception.

        Raises:
            ValueError: ``steps_per_eval`` is not a multiple of
                ``horizons_per_env_reset`` (when ``> 0``), or ``eval_env_config``
                is given while ``horizons_per_env_reset < 0``.
        """
        k = self.algorithm.horizons_per_env_reset
        if steps_per_eval is not None and (isinstance(steps_per_eval, bool) or not isinstance(steps_per_eval, int) or steps_per_eval < 1):
            raise ValueError(f"steps_per_eval must be an int >= 1 or None, received {steps_per_eval!r}")
        if eval_env_config and k < 0:
            raise ValueError(
                "eval_env_config was given, but horizons_per_env_reset < 0 means the env is"
                " reset only once, so evaluations could never apply it. Set"
                " horizons_per_env_reset > 0 or drop eval_env_config."
            )
        if steps_per_eval and k > 0 and steps_per_eval % k:
            raise ValueError(
                f"steps_per_eval={steps_per_eval} must be a multiple of"
                f" horizons_per_env_reset={k}: evaluation shares the training buffer and"
                " can only start where the env is reset."
            )
        conditions = list(stop_conditions or [])
        eval_env_config = eval_env_config or env_config
        try:
            while True:
                train_stats = self.step(env_config=env_config)
                self._report(train_stats)
                if any([condition(train_stats) for condition in conditions]):
                    break
                if steps_per_eval and self.state["algorithm/steps"] % steps_per_eval == 0:
                    self.eval(env_config=eval_env_config)
        except KeyboardInterrupt:
            self.tracker.end("KILLED", message="KeyboardInterrupt")
            raise
        except BaseException as e:
            self.tracker.end("FAILED", message=f"{type(e).__name__}: {e}")
            raise
        self._report(train_stats, final=True)
        if self.save_policy and not isinstance(self.algorithm.env.observation_spec, Composite):
            self.log_policy()
        self.tracker.end("FINISHED")
        return train_stats

    def log_policy(self, name: str = "policy") -> str:
        """Save the deterministic policy to the run as an MLflow model; return its URI.

        Examples:
            >>> uri = trainer.log_policy()  # doctest: +SKIP
            >>> mlflow.pyfunc.load_model(uri).predict(obs_batch)  # doctest: +SKIP
        """
        spec = self.algorithm.env.observation_spec
        return self.tracker.log_model(DeterministicActor(self.algorithm.policy), example_observation(spec), name)

    # ------------------------------------------------------------------ lifecycle
    def close(self, status: str = "FINISHED") -> None:
        """Flush metrics and end the MLflow run (a user-opened run stays open)."""
        self.tracker.end(status)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            self.tracker.end("FINISHED")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.tracker.end("KILLED", message="KeyboardInterrupt")
        else:
            self.tracker.end("FAILED", message=f"{exc_type.__name__}: {exc}")

    def _report(self, stats: dict[str, float], *, final: bool = False, out: TextIO | None = None) -> None:
        if not self.progress:
            return
        now = time.monotonic()
        if not final and now - self._last_progress < 1.0:
            return
        self._last_progress = now
        parts = [f"step {self.state['algorithm/steps']}", f"env steps {self.state['env/steps']:,}"]
        parts += [f"{key} {stats[key]:.4g}" for key in _PROGRESS_KEYS if key in stats and stats[key] == stats[key]]
        print(" | ".join(parts), file=out or sys.stdout, flush=True)

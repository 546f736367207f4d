"""``Trainer``: counters, rl8's eval/run checks, stop conditions, and experiment tracking.

The trainer knows nothing of PPO (it calls ``collect``/``step`` on its algorithm)
and talks to MLflow only through a :class:`~rl8lite.tracking.Tracker`.
"""

from __future__ import annotations

import signal
import sys
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn, TextIO

from ..algorithms import Algorithm
from ..conditions import Condition
from ..runtime.checkpoint_files import CheckpointError, read_checkpoint, restore_rng
from ..runtime.signals import SignalRequests
from ..tracking import MlflowTracker, Tracker, mlflow_version
from ..tracking.export import ExportError
from . import checkpoints
from .checks import check_eval_allowed, check_positive_int, check_run_arguments, reduce_eval_stats

_PROGRESS_KEYS = (
    "episodes/return_mean",
    "returns/mean",
    "losses/total",
    "monitors/kl_div",
    "throughput/env_steps_per_s",
)


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
        self._model_rebuild_checked = False
        self.tracker: Tracker = tracker or MlflowTracker(
            experiment_name or type(algorithm.env).__name__, run_name=run_name, tags=tags
        )
        if not getattr(self.tracker, "resumed", False):
            self.tracker.log_params({**algorithm.params, "versions/mlflow": mlflow_version()})
        self._last_progress = 0.0
        self._last_progress_step = -1

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
                Before it, the eval resets the env under ``env_config`` and the
                first training collect resets it again under its own config.
        """
        k = self.algorithm.horizons_per_env_reset
        check_eval_allowed(self.algorithm, self.state["algorithm/collects"], env_config)
        results = []
        for _ in range(max(1, k)):
            results.append(self.algorithm.collect(env_config=env_config, deterministic=deterministic))
            self.state["algorithm/collects"] += 1
        self.algorithm.state.buffered = False  # evaluation data is never trained on
        if env_config and k < 0:
            # Only before the first collect (checked above): training must not go on under the
            # eval's config, as its env is never reset again.
            self.algorithm.request_env_reset()
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
        checkpoint_every: int | None = None,
        keep_checkpoints: int = 3,
    ) -> dict[str, float]:
        """Train until a stop condition holds (forever without one); return the last train stats.

        With ``checkpoint_every``, a checkpoint is written every that many steps
        (the last ``keep_checkpoints`` are kept on disk; the latest is also the
        run's ``checkpoints/latest.pt`` artifact). SIGINT and SIGTERM stop
        training after the current step with a checkpoint, and end the run
        KILLED (SIGINT then raises KeyboardInterrupt, SIGTERM SystemExit(143));
        SIGUSR1 writes a checkpoint and training goes on. A signal that arrives
        after training finished (while the policy is exported) waits for the
        export and the run's end: the run is FINISHED, SIGUSR1 still writes its
        checkpoint, and SIGINT/SIGTERM then raise as above without one.

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
        check_run_arguments(
            self.algorithm,
            steps_per_eval=steps_per_eval,
            eval_env_config=eval_env_config,
            checkpoint_every=checkpoint_every,
            keep_checkpoints=keep_checkpoints,
        )
        conditions = list(stop_conditions or [])
        eval_env_config = eval_env_config or env_config
        late_stop: int | None = None
        try:
            with SignalRequests() as requests:
                while True:
                    train_stats = self.step(env_config=env_config)
                    self._report(train_stats)
                    steps = self.state["algorithm/steps"]
                    stop = any([condition(train_stats) for condition in conditions])
                    if not stop and not requests.stop and steps_per_eval and steps % steps_per_eval == 0:
                        self.eval(env_config=eval_env_config)
                    # After the eval: a resumed run then continues exactly where this one was.
                    if requests.checkpoint or requests.stop or (checkpoint_every and steps % checkpoint_every == 0):
                        requests.checkpoint = False
                        self.save_checkpoint(keep=keep_checkpoints)
                    if requests.stop is not None:
                        self.tracker.end("KILLED", message=signal.Signals(requests.stop).name)
                        _exit_for(requests.stop)
                    if stop:
                        break
                # Still under the handlers: a signal while the policy is exported or the
                # metrics are flushed waits for them (it would kill the process and lose both).
                self._report(train_stats, final=True)
                if self.save_policy:
                    self._save_policy_or_warn()
                if requests.checkpoint:
                    self.save_checkpoint(keep=keep_checkpoints)
                self.tracker.end("FINISHED")
                late_stop = requests.stop  # training had finished: the run is complete
        except (KeyboardInterrupt, SystemExit):
            self.tracker.end("KILLED", message="KeyboardInterrupt")
            raise
        except BaseException as e:
            self.tracker.end("FAILED", message=f"{type(e).__name__}: {e}")
            raise
        if late_stop is not None:  # after the handlers above: the run stays FINISHED
            _exit_for(late_stop)
        return train_stats

    def _save_policy_or_warn(self) -> None:
        # Training succeeded: failing to save the model (e.g. torch.export cannot trace
        # a custom model) must not fail the run, nor lose the weights.
        try:
            self.log_policy()
        except Exception as e:
            reason = str(e) if isinstance(e, ExportError) else f"{type(e).__name__}: {e}"
            try:
                kept = f"; the weights are in the checkpoint {self.save_checkpoint()}"
            except Exception as checkpoint_error:
                kept = f"; writing a checkpoint failed too ({type(checkpoint_error).__name__}: {checkpoint_error})"
            warnings.warn(f"the policy was not saved as an MLflow model: {reason}{kept}", RuntimeWarning, stacklevel=3)

    def log_policy(self, name: str = "policy") -> str:
        """Save the policy to the run as an MLflow model; return its URI.

        ``mlflow.pyfunc.load_model(uri).predict(obs)`` returns deterministic
        actions for a numpy batch of observations (a dict of arrays for dict
        observations); pass ``params={"deterministic": False}`` to sample.
        Recurrent policies take and return ``"recurrent_state"`` (see
        ``rl8lite/_pyfunc_policy.py``). Loading needs no rl8lite.

        Examples:
            >>> uri = trainer.log_policy()  # doctest: +SKIP
            >>> mlflow.pyfunc.load_model(uri).predict(obs_batch)  # doctest: +SKIP
        """
        return self.tracker.log_policy(self.algorithm.policy, self.algorithm.env.observation_spec, name)

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path: str | Path | None = None, *, keep: int | None = None) -> Path:
        """Write everything needed to continue exactly; return the file's path.

        The file is written atomically (a crash leaves the previous one intact)
        and logged to the run as ``checkpoints/latest.pt``. Without ``path`` it
        goes to ``<store folder>/checkpoints/<run id>/checkpoint-<env steps>.pt``.

        The newest save is authoritative: once the file is complete, the run
        folder's ``latest`` file is pointed at it (atomically, whether the
        file is in that folder or at ``path``), and :meth:`from_checkpoint`
        given the run id resumes from the checkpoint it names. So after resuming
        from an earlier checkpoint, the first save replaces the abandoned
        branch's later checkpoints as the run's latest, even though they have
        more env steps.

        Args:
            path: Where to write (default: the run's checkpoint folder).
            keep: Keep only the newest ``keep`` (an int >= 1) ``checkpoint-*.pt``
                files of this trainer's history in the run's folder (default:
                all): files with at most this save's env steps. Files with more,
                left by a branch that a resume from an earlier checkpoint
                abandoned, are left alone (never resumed from the run id, and
                overwritten only by a save at the same env steps). Applies only
                to saves into that folder.

        Raises:
            ValueError: ``keep`` is neither None nor an int >= 1, or there is no
                ``path`` and the tracker has no checkpoint folder (checked before
                anything is written or removed).
            CheckpointError: A config value cannot be checkpointed (nothing is written).
        """
        check_positive_int("keep", keep, optional=True)
        self._warn_if_model_cannot_be_rebuilt()
        return checkpoints.write_trainer_checkpoint(self, path, keep)

    def _warn_if_model_cannot_be_rebuilt(self) -> None:
        # A model passed as an instance is checkpointed as its class and config; the
        # checkpoint is still written (its weights are in it), but say so once.
        model, algorithm = self.algorithm.hparams.model, self.algorithm
        if model is None or self._model_rebuild_checked:
            return
        self._model_rebuild_checked = True
        problem = checkpoints.rebuild_problem(model, algorithm.env.observation_spec, algorithm.env.action_spec)
        if problem is not None:
            warnings.warn(
                f"checkpoints of this run cannot be resumed with from_checkpoint: they keep the model"
                f" instance as its class and config, and {problem}. Pass every constructor argument"
                " on to Model.__init__(**config), or use model_cls= and model_config=.",
                RuntimeWarning,
                stacklevel=3,
            )

    @classmethod
    def from_checkpoint(
        cls,
        path_or_run_id: str | Path,
        /,
        *,
        tracking_uri: str | None = None,
        device: str | None = None,
        progress: bool = True,
        save_policy: bool = True,
        tracker: Tracker | None = None,
    ) -> Trainer:
        """Rebuild a trainer from a checkpoint file (or a run id's latest checkpoint) and
        reopen its MLflow run: the step axis continues, params are not logged again.
        Pass ``tracker`` to log elsewhere instead (needed for a checkpoint written with
        a custom tracker, which has no MLflow run to reopen).

        A run id's latest checkpoint is the one written last (see
        :meth:`save_checkpoint`): the one the ``latest`` file of the run's
        checkpoint folder names. For a folder written before that file existed,
        it is the ``checkpoint-*.pt`` file with the most env steps; when it
        names a file that is gone, or there is no local checkpoint, it is the
        run's ``checkpoints/latest.pt`` artifact.

        Classes (env, model, distribution, optimizer) are imported by dotted path.
        ``device`` overrides the saved one (e.g. resume a CUDA run on a CPU).

        Raises:
            CheckpointError: The file is missing, corrupt, truncated or not a checkpoint, or
                it names no MLflow run and no ``tracker`` is given.
        """
        path = Path(path_or_run_id)
        if not path.is_file() and not str(path_or_run_id).endswith(".pt"):
            path = checkpoints.latest_checkpoint_of_run(str(path_or_run_id), tracking_uri)
        payload = read_checkpoint(path)
        run = payload["run"]
        if tracker is None and run["run_id"] is None:
            raise CheckpointError(
                f"checkpoint {str(path)!r} was written with a custom tracker and names no MLflow run"
                " to reopen: pass tracker= to from_checkpoint"
            )
        algorithm = checkpoints.algorithm_from_payload(payload, path, device)
        if tracker is None:
            tracker = MlflowTracker("", run_id=run["run_id"], tracking_uri=tracking_uri or run["tracking_uri"])
        trainer = cls(algorithm, progress=progress, save_policy=save_policy, tracker=tracker)
        trainer.state = {k: int(v) for k, v in payload["trainer"]["state"].items()}
        restore_rng(payload["rng"])  # last: building the algorithm drew random numbers
        return trainer

    # ------------------------------------------------------------------ lifecycle
    def close(self, status: str = "FINISHED") -> None:
        """Flush metrics, end the MLflow run (a user-opened run stays open) and close the env."""
        try:
            self.tracker.end(status)
        finally:
            self.algorithm.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc_type is None:
                self.tracker.end("FINISHED")
            elif issubclass(exc_type, KeyboardInterrupt):
                self.tracker.end("KILLED", message="KeyboardInterrupt")
            else:
                self.tracker.end("FAILED", message=f"{exc_type.__name__}: {exc}")
        finally:
            self.algorithm.close()

    def _report(self, stats: dict[str, float], *, final: bool = False, out: TextIO | None = None) -> None:
        if not self.progress:
            return
        # At most a line a second; the final report prints the last step unless it just did.
        now, step = time.monotonic(), self.state["algorithm/steps"]
        if (now - self._last_progress < 1.0 and not final) or step == self._last_progress_step:
            return
        self._last_progress, self._last_progress_step = now, step
        parts = [f"step {self.state['algorithm/steps']}", f"env steps {self.state['env/steps']:,}"]
        parts += [f"{key} {stats[key]:.4g}" for key in _PROGRESS_KEYS if key in stats and stats[key] == stats[key]]
        print(" | ".join(parts), file=out or sys.stdout, flush=True)


#: rl8's name for a trainer of a :class:`~rl8lite.RecurrentAlgorithm`: the same trainer.
RecurrentTrainer = Trainer


def _exit_for(signum: int) -> NoReturn:
    """Leave as a stop signal asks: ``KeyboardInterrupt`` for SIGINT, else exit ``128 + signum``."""
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)

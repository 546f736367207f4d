"""``Trainer``: counters, rl8's eval/run checks, stop conditions, and experiment tracking.

The trainer knows nothing of PPO (it calls ``collect``/``step`` on its algorithm)
and talks to MLflow only through a :class:`~rl8lite.tracking.Tracker`.
"""

from __future__ import annotations

import inspect
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..algorithms import Algorithm
from ..conditions import Condition
from ..runtime.distributed import DistributedError, Ranks, shares_failures
from ..runtime.signals import SignalRequests
from .. import tracking
from . import checkpoints
from .checks import check_eval_allowed, check_positive_int, check_run_arguments, reduce_eval_stats
from .progress import ProgressReport
from .artifacts import VideoSchedule, record_video, save_policy_or_warn
from .decisions import agree, end_run, exit_for, exit_status

class Trainer:
    """Trains an :class:`~rl8lite.Algorithm` and logs everything to MLflow.

    Each trainer owns one MLflow run (or logs into the run the user opened with
    ``mlflow.start_run``). Params are logged at construction, metrics at every
    step with ``step = env steps``. Use it as a context manager, or call
    :meth:`close`, to end the run; :meth:`run` ends it too when it returns or fails.

    In multi-process training (``torchrun``), every rank runs the same trainer: rank 0
    alone talks to MLflow (one run, stats over every rank) and prints; decisions (stop
    conditions, signals on any rank) are agreed so every rank acts at the same step;
    each rank writes its own checkpoint file.

    Args:
        algorithm: The algorithm to train.
        experiment_name: MLflow experiment. Default: the one set with ``mlflow.set_experiment``
            (or ``MLFLOW_EXPERIMENT_NAME``/``MLFLOW_EXPERIMENT_ID``), else the env class name.
        run_name: MLflow run name.
        tags: MLflow run tags.
        progress: Print a one-line progress report per step of :meth:`run`
            (at most one line a second, and always the last).
        save_policy: Save the policy as an MLflow model (``policy``) whenever
            :meth:`run` finishes normally (see :meth:`log_policy`).
        tracker: A custom tracker instead of MLflow (anything with the
            :class:`~rl8lite.tracking.Tracker` methods).
        registered_model_name: Also register the policy :meth:`run` logs as a new version
            of this registered model.
        log_system_metrics: Log MLflow's system metrics (CPU, memory, disk, network, GPU
            where present) to the run; needs ``psutil`` (``rl8lite[system-metrics]``).

    While the trainer is open its run is MLflow's active run, so ``mlflow.active_run()``
    and your own ``mlflow.log_*`` calls find it; closing the trainer ends it.

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
        tracker: tracking.Tracker | None = None,
        registered_model_name: str | None = None,
        log_system_metrics: bool = False,
    ) -> None:
        self.algorithm = algorithm
        self.registered_model_name = registered_model_name
        self.state: dict[str, int] = {
            "algorithm/collects": 0,
            "algorithm/steps": 0,
            "env/steps": 0,
        }
        ranks = algorithm.ranks
        self.progress = ProgressReport(enabled=progress and ranks.is_main)
        self.save_policy = save_policy
        self._model_rebuild_checked = False
        self.tracker: tracking.Tracker
        with ranks.sharing_failures():  # e.g. an unreachable store on rank 0: every rank stops
            if ranks.is_main:
                self.tracker = tracker or tracking.MlflowTracker(
                    experiment_name, default_experiment=type(algorithm.env).__name__, run_name=run_name,
                    tags=tags, log_system_metrics=log_system_metrics,
                )
        if ranks.distributed:  # the other ranks log nothing, and checkpoint into rank 0's folder
            folder = ranks.broadcast_object(
                str(getattr(self.tracker, "checkpoint_dir", None) or "") if ranks.is_main else None
            )
            if ranks.is_main:
                ranks.on_peer_failure.append(lambda message: self.tracker.end("FAILED", message=message))
            else:
                self.tracker = tracking.NullTracker(folder or None)
        if not getattr(self.tracker, "resumed", False):
            self.tracker.log_params({**algorithm.params, "versions/mlflow": tracking.mlflow_version()})

    @property
    def ranks(self) -> Ranks:
        """The training processes (see :class:`~rl8lite.runtime.distributed.Ranks`)."""
        return self.algorithm.ranks

    # ------------------------------------------------------------------ training
    @shares_failures
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

    @shares_failures
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
        steps_per_video: int | None = None,
    ) -> dict[str, float]:
        """Train until a stop condition holds (forever without one); return the last train stats.

        With ``steps_per_video``, :meth:`record_video` records every that many steps and once
        at the end (an env without ``render()``, or whose frames are not RGB images, is a
        warning, once, and training goes on).

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
        check_positive_int("steps_per_video", steps_per_video, optional=True)
        videos = VideoSchedule(self, steps_per_video)
        conditions = list(stop_conditions or [])
        eval_env_config = eval_env_config or env_config
        ranks = self.algorithm.ranks
        stop_signal: int | None = None
        try:
            with SignalRequests() as requests, ranks.sharing_failures():
                while True:
                    train_stats = self.step(env_config=env_config)
                    self.progress.report(train_stats, self.state)
                    steps = self.state["algorithm/steps"]
                    # One decision for every rank: a condition or a signal on any rank counts.
                    stop, stop_signal, checkpoint = agree(self.algorithm.ranks, 
                        any([condition(train_stats) for condition in conditions]), requests
                    )
                    if not stop and stop_signal is None and steps_per_eval and steps % steps_per_eval == 0:
                        self.eval(env_config=eval_env_config)
                    # After the eval: a resumed run then continues exactly where this one was.
                    if checkpoint or stop_signal is not None or (checkpoint_every and steps % checkpoint_every == 0):
                        self.save_checkpoint(keep=keep_checkpoints)
                    if stop_signal is not None:
                        self.tracker.end("KILLED", message=signal.Signals(stop_signal).name)
                        break
                    if stop:
                        break
                    videos.after_step()
                if stop_signal is None:
                    # Still under the handlers: a signal while the policy is exported or the
                    # metrics are flushed waits for them (it would kill the process and lose both).
                    self.progress.report(train_stats, self.state, final=True)
                    videos.after_step(final=True)
                    if self.save_policy:
                        save_policy_or_warn(self)
                    _, late_stop, checkpoint = agree(self.algorithm.ranks, False, requests)
                    if checkpoint:
                        self.save_checkpoint(keep=keep_checkpoints)
                    self.tracker.end("FINISHED")
                    stop_signal = late_stop  # training had finished: the run stays complete
        except (KeyboardInterrupt, SystemExit):
            end_run(self, "KILLED", "KeyboardInterrupt")
            raise
        except BaseException as e:
            message = f"{type(e).__name__}: {e}" if not isinstance(e, DistributedError) else str(e)
            killed = isinstance(e, DistributedError) and ": KeyboardInterrupt" in message
            end_run(self, "KILLED" if killed else "FAILED", message)
            raise
        if stop_signal is not None:  # after the handlers above; the run is KILLED (or FINISHED)
            exit_for(stop_signal)
        return train_stats

    def log_policy(self, name: str = "policy", *, registered_model_name: str | None = None) -> str:
        """Log the policy to the run as an MLflow model; return its URI, ``runs:/<run id>/<name>``.

        It is an MLflow LoggedModel of the run (the run's Models tab), with the metrics at
        the current env step and later evaluations linked to it, loadable by that URI or
        ``models:/<model id>`` (``trainer.tracker.model_id``) and servable with ``mlflow models
        serve``; ``registered_model_name`` (default: the trainer's) registers a new version.
        ``mlflow.pyfunc.load_model(uri).predict(obs)`` returns deterministic actions for a
        numpy batch of observations (a dict of arrays for dict observations);
        ``params={"deterministic": False}`` samples. Recurrent policies take and return
        ``"recurrent_state"`` (``rl8lite/tracking/_pyfunc_policy.py``). Loading needs no rl8lite.

        Examples:
            >>> uri = trainer.log_policy()  # doctest: +SKIP
            >>> mlflow.pyfunc.load_model(uri).predict(obs_batch)  # doctest: +SKIP
        """
        policy, spec = self.algorithm.policy, self.algorithm.env.observation_spec
        if "step" not in inspect.signature(self.tracker.log_policy).parameters:  # a plain Tracker
            return self.tracker.log_policy(policy, spec, name)
        return self.tracker.log_policy(
            policy, spec, name, step=self.state["env/steps"],
            registered_model_name=registered_model_name or self.registered_model_name,
        )

    def record_video(
        self,
        *,
        env_config: dict[str, Any] | None = None,
        name: str | None = None,
        max_steps: int = 1000,
        deterministic: bool = True,
    ) -> str | None:
        """Roll the current policy out on a separate one-copy env and log a video of it.

        The env (``env_cls(1, horizon)``, reset with ``env_config``) is stepped until its
        episode ends or ``max_steps``, and its ``render()`` frame of each step is encoded as an
        H.264 MP4 (with the ``video`` extra; an animated GIF otherwise), downscaled to at most
        640 pixels wide, and logged to the run as ``videos/<name or "rollout">/step_<env
        steps>.<ext>``, with its first frame as an image under the same key (the UI's
        image slider steps through training) and the episode's return and length as
        metrics. The training env, buffer and random streams are untouched. Under
        ``torchrun`` rank 0 records; the others return ``None``.

        Returns:
            The video's artifact path in the run.

        Raises:
            NotImplementedError: The env has no ``render()``.
            ValueError: ``render()`` returns something other than an RGB ``uint8`` array, or
                ``max_steps`` is not a positive int.
        """
        return record_video(self, env_config=env_config, name=name, max_steps=max_steps,
                            deterministic=deterministic)

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
        if not self._model_rebuild_checked:  # once: a model instance is kept as class + config
            self._model_rebuild_checked = True
            checkpoints.warn_if_model_cannot_be_rebuilt(self.algorithm)
        return checkpoints.write_trainer_checkpoint(self, path, keep)

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
        tracker: tracking.Tracker | None = None,
    ) -> Trainer:
        """Rebuild a trainer from a checkpoint and reopen its MLflow run: the step axis
        continues, params are not logged again.

        ``path_or_run_id`` is a checkpoint file, a run's checkpoint folder
        (``mlruns/checkpoints/<run id>/``), the ``latest`` record in that folder, or a run
        id; a folder or run id means its latest checkpoint: the one written last (the
        ``latest`` record names it; else the ``checkpoint-*.pt`` file with the most env
        steps; else the run's ``checkpoints/latest.pt`` artifact). Pass ``tracker`` to log
        elsewhere (needed for a checkpoint written with a custom tracker).

        Classes (env, model, distribution, optimizer) are imported by dotted path.
        ``device`` overrides the saved one (e.g. resume a CUDA run on a CPU). Under
        ``torchrun``, every rank calls this with the same path or run id and resumes from
        its own file; the world size must be the one that wrote the checkpoint.

        Raises:
            CheckpointError: The file is missing, corrupt, truncated or not a checkpoint, it
                names no MLflow run and no ``tracker`` is given, or it was written by
                another number of processes.
        """
        return checkpoints.resume(
            cls, path_or_run_id, tracking_uri=tracking_uri, device=device, tracker=tracker,
            progress=progress, save_policy=save_policy,
        )

    # ------------------------------------------------------------------ lifecycle
    def close(self, status: str = "FINISHED", *, message: str | None = None) -> None:
        """Flush metrics, end the MLflow run (a user-opened run stays open) and close the env."""
        try:
            self.tracker.end(status, message=message)
        finally:
            self.algorithm.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        status, message = exit_status(exc_type, exc)
        self.close(status, message=message)


#: rl8's name for a trainer of a :class:`~rl8lite.RecurrentAlgorithm`: the same trainer.
RecurrentTrainer = Trainer

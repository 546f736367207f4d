"""``Trainer``: counters, evaluation, stop conditions, checkpoints, videos and tracking."""

from __future__ import annotations

import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from typing_extensions import Self

from .. import tracking
from ..algorithms import Algorithm
from ..algorithms.config import check_int
from ..algorithms.windowed import windows_seen
from ..conditions import Condition
from ..data import DataKeys
from ..env import Env
from ..runtime import checkpoint_files as files
from ..runtime.distributed import DistributedError, Ranks, shares_failures
from ..runtime.imports import package_version
from ..runtime.signals import SignalRequests
from ..tracking.export import ExportError, export_onnx, log_onnx_model
from . import checkpoints
from .videos import Filming, log_video

#: What the progress line shows (the episodes' return, else the horizon's), before the env steps.
PROGRESS_KEYS = ("episodes/return_mean", "returns/mean", "episodes/length_mean", "losses/total",
                 "monitors/kl_div", "throughput/env_steps_per_s")
Config = dict[str, Any] | None


class Trainer:
    """Trains an :class:`~rl8lite.Algorithm` and logs everything to MLflow.

    Each trainer owns one MLflow run (or logs into the user's), ended by :meth:`close`, the
    context manager or the end of :meth:`run`; under ``torchrun`` rank 0 alone logs and prints.

    Args:
        experiment_name: MLflow experiment (default: the active one, else the env class's name).
        progress: Print a progress line per step of :meth:`run` (at most one a second).
        save_policy: Log the policy as an MLflow model when :meth:`run` finishes normally.
        tracker: Another :class:`~rl8lite.tracking.Tracker` than MLflow's (the default).
        registered_model_name: Also register the policy :meth:`run` logs under this name.
        log_system_metrics: Log MLflow's system metrics (needs ``psutil``).
    """

    def __init__(self, algorithm: Algorithm, /, *, experiment_name: str | None = None,
                 run_name: str | None = None, tags: dict[str, Any] | None = None,
                 progress: bool = True, save_policy: bool = True,
                 tracker: tracking.Tracker | None = None, registered_model_name: str | None = None,
                 log_system_metrics: bool = False) -> None:
        self.algorithm, self.registered_model_name = algorithm, registered_model_name
        self.state: dict[str, int] = {"algorithm/collects": 0, "algorithm/steps": 0, "env/steps": 0}
        ranks = algorithm.ranks
        self.progress, self.save_policy = progress and ranks.is_main, save_policy
        self._model_checked = self._videos_failed = False
        self._last_report, self._filming = (0.0, -1), None
        self.tracker: tracking.Tracker
        with ranks.sharing_failures():  # e.g. an unreachable store on rank 0: every rank stops
            if ranks.is_main:
                self.tracker = tracker or tracking.MlflowTracker(
                    experiment_name, default_experiment=type(algorithm.env).__name__,
                    run_name=run_name, tags=tags, log_system_metrics=log_system_metrics)
        if ranks.distributed:  # the other ranks log nothing, and checkpoint into rank 0's folder
            folder = ranks.broadcast_object(str(self.tracker.checkpoint_dir or "")
                                            if ranks.is_main else None)
            if ranks.is_main:
                end = self.tracker.end
                ranks.on_peer_failure.append(lambda message: end("FAILED", message=message))
            else:
                self.tracker = tracking.NullTracker(folder or None)
        #: Whether the run has checkpoints in its folder (resumed, or saved): it ends with one.
        self._has_checkpoints = bool(self.tracker.resumed)
        if not self.tracker.resumed:
            self.tracker.log_params({**algorithm.params,
                                     "versions/mlflow": package_version("mlflow")})

    @property
    def ranks(self) -> Ranks:
        """The training processes (:class:`~rl8lite.runtime.distributed.Ranks`)."""
        return self.algorithm.ranks

    @shares_failures
    def step(self, *, env_config: Config = None) -> dict[str, float]:
        """One collect and one policy update; returns (and logs) the train stats."""
        start = time.perf_counter()
        memory = self.algorithm.memory_stats()
        collect = self.algorithm.collect(env_config=env_config)
        update = self.algorithm.step()
        self.state["algorithm/collects"] += 1
        self.state["algorithm/steps"] += 1
        self.state["env/steps"] += int(collect["env/steps"])
        rate = collect["env/steps"] / (time.perf_counter() - start)
        stats = {**memory, **collect, **update, "throughput/env_steps_per_s": rate,
                 **{k: float(v) for k, v in self.state.items()}}
        self.tracker.log_metrics(stats, step=self.state["env/steps"])
        self._log_finished_video()
        return stats

    @shares_failures
    def eval(self, *, env_config: Config = None, deterministic: bool = True,
             name: str | None = None) -> dict[str, float]:
        """Evaluate under ``env_config``; log and return the stats under ``eval/[<name>/]``. With
        ``horizons_per_env_reset = k > 0``: ``k`` collects, only after a multiple of ``k``."""
        k, collects = self.algorithm.horizons_per_env_reset, self.state["algorithm/collects"]
        if k > 0 and collects % k:
            raise RuntimeError(f"Trainer.eval runs after a multiple of horizons_per_env_reset={k}"
                               f" collects, as in rl8; this trainer has made {collects}")
        stats = self.algorithm.evaluate(env_config=env_config, deterministic=deterministic,
                                        collects=k if k > 0 else None)
        hp = self.algorithm.hparams
        copies = hp.num_envs * self.ranks.world_size
        self.state["algorithm/collects"] += round(stats["env/steps"] / (copies * hp.horizon))
        stats = {f"eval/{name}/{k}" if name else f"eval/{k}": v for k, v in stats.items()}
        self.tracker.log_metrics(stats, step=self.state["env/steps"])
        return stats

    def run(self, *, env_config: Config = None, eval_env_config: Config = None,
            steps_per_eval: int | None = None, stop_conditions: Iterable[Condition] | None = None,
            checkpoint_every: int | None = None, keep_checkpoints: int = 3,
            steps_per_video: int | None = None) -> dict[str, float]:
        """Train until a stop condition holds (forever without one); return the last train stats.

        Every ``steps_per_eval`` steps :meth:`eval` runs under ``eval_env_config`` (default
        ``env_config``); every ``checkpoint_every`` a checkpoint is written (the newest
        ``keep_checkpoints`` kept), and one at the end if the run has any (so a resume never
        rewinds); every ``steps_per_video`` the next episode is filmed, and one at the end.
        SIGINT and SIGTERM stop with a checkpoint (then KeyboardInterrupt, SystemExit(143));
        SIGUSR1 writes one. The run ends FINISHED, KILLED (interrupt, signal) or FAILED.
        """
        intervals = {"steps_per_eval": steps_per_eval, "checkpoint_every": checkpoint_every,
                     "steps_per_video": steps_per_video}
        for name, value in intervals.items():
            check_int(name, value, minimum=1, optional=True, error=ValueError)
        check_int("keep_checkpoints", keep_checkpoints, minimum=1, error=ValueError)
        k = self.algorithm.horizons_per_env_reset
        if steps_per_eval and k > 0 and steps_per_eval % k:
            raise ValueError(f"steps_per_eval={steps_per_eval} must be a multiple of"
                             f" horizons_per_env_reset={k}: an evaluation runs between env resets")
        conditions, eval_env_config = list(stop_conditions or []), eval_env_config or env_config
        first_step, stop_signal = self.state["algorithm/steps"], None
        try:
            with SignalRequests() as requests, self.ranks.sharing_failures():
                while True:
                    stats = self.step(env_config=env_config)
                    self._report(stats)
                    steps = self.state["algorithm/steps"]
                    met = any([c(stats) for c in conditions])  # noqa: C419 - call every condition
                    stop, stop_signal, checkpoint = self._agree(met, requests)
                    if not stop and stop_signal is None and _due(steps, steps_per_eval):
                        self.eval(env_config=eval_env_config)
                    # after the eval: a resumed run continues exactly where this one was
                    if checkpoint or stop_signal is not None or _due(steps, checkpoint_every):
                        self.save_checkpoint(keep=keep_checkpoints)
                    if stop_signal is not None:
                        self.tracker.end("KILLED", message=signal.Signals(stop_signal).name)
                    if stop or stop_signal is not None:
                        break
                    if _due(steps, steps_per_video):
                        self._film_next_episode()
                if stop_signal is None:
                    # still under the handlers: a signal while the policy is exported waits for it
                    self._report(stats, final=True)
                    ran = self.state["algorithm/steps"] - first_step
                    stop_signal = self._finish_run(intervals, keep_checkpoints, ran, requests)
        except (KeyboardInterrupt, SystemExit):
            self._end_run("KILLED", "KeyboardInterrupt")
            raise
        except BaseException as e:
            distributed = isinstance(e, DistributedError)
            message = str(e) if distributed else f"{type(e).__name__}: {e}"
            killed = distributed and ": KeyboardInterrupt" in message
            self._end_run("KILLED" if killed else "FAILED", message)
            raise
        if stop_signal == signal.SIGINT:
            raise KeyboardInterrupt
        if stop_signal is not None:  # another stop signal: exit 128 + signum
            raise SystemExit(128 + stop_signal)
        return stats

    def _finish_run(self, intervals: dict[str, int | None], keep: int, ran: int,
                    requests: SignalRequests) -> int | None:
        """Film, export, checkpoint; warn of intervals over ``ran``; return a late stop signal."""
        self._filming = self.algorithm.rollout.observer = None
        if intervals["steps_per_video"]:
            self._video_or_warn(lambda: self.record_video(name="training"))
        if self.save_policy:
            self._save_policy_or_warn()
        requests.checkpoint = requests.checkpoint or self._has_checkpoints  # rank 0's, for all
        _, late_stop, checkpoint = self._agree(False, requests)
        if checkpoint or intervals["checkpoint_every"]:
            self.save_checkpoint(keep=keep)
        self.tracker.end("FINISHED")
        long = [f"{name}={value}" for name, value in intervals.items() if value and value > ran]
        if long and self.ranks.is_main:
            warnings.warn(f"{', '.join(long)} counts training steps, and this run took {ran}: they"
                          " never came round (a video and a checkpoint are still taken at the end)",
                          RuntimeWarning, stacklevel=3)
        return late_stop

    def _agree(self, stop: bool, requests: SignalRequests) -> tuple[bool, int | None, bool]:
        """Agreed ``(stop, stop signal, checkpoint)``; clears the checkpoint request."""
        agreed, signum, save = self.ranks.agree([stop, requests.stop or 0, requests.checkpoint])
        requests.checkpoint = False
        return bool(agreed), int(signum) or None, bool(save)

    def _report(self, stats: dict[str, float], *, final: bool = False) -> None:
        now, step = time.monotonic(), self.state["algorithm/steps"]
        last, last_step = self._last_report
        if not self.progress or (now - last < 1.0 and not final) or step == last_step:
            return
        self._last_report = (now, step)
        episodic = "episodes/count" in stats
        keys = [k for k in PROGRESS_KEYS if k in stats and not (k == "returns/mean" and episodic)]
        shown = [f"{k} {stats[k]:.4g}" for k in keys if stats[k] == stats[k]]  # not NaN
        print(" | ".join([f"step {step}", *shown, f"env steps {self.state['env/steps']:,}"]),
              flush=True)

    def log_policy(self, name: str = "policy", *, registered_model_name: str | None = None,
                   onnx: bool = False) -> str:
        """Log the policy as an MLflow model of the run (registered as ``registered_model_name``)
        and, with ``onnx``, as an ONNX model ``<name>-onnx``; return ``runs:/<run id>/<name>``."""
        register = registered_model_name or self.registered_model_name
        policy, spec = self.algorithm.policy, self.algorithm.env.observation_spec
        uri = self.tracker.log_policy(policy, spec, name, step=self.state["env/steps"],
                                      registered_model_name=register)
        if onnx:
            log_onnx_model(self.tracker.run_id, policy, spec, name=f"{name}-onnx",
                           step=self.state["env/steps"])
        return uri

    def export_onnx(self, path: str | Path) -> Path:
        """Write the policy as an ONNX model (:func:`rl8lite.tracking.export.export_onnx`)."""
        return export_onnx(self.algorithm.policy, self.algorithm.env.observation_spec, path)

    def _save_policy_or_warn(self) -> None:
        """Log the policy, or warn and keep its weights in a checkpoint (the run does not fail)."""
        reason = None
        if self.ranks.is_main:
            try:
                self.log_policy()
            except Exception as e:  # noqa: BLE001 - any export failure: warn, keep the weights
                reason = str(e) if isinstance(e, ExportError) else f"{type(e).__name__}: {e}"
        if not self.ranks.agree([reason is not None])[0]:
            return
        try:
            kept = f"; the weights are in the checkpoint {self.save_checkpoint()}"
        except Exception as error:  # noqa: BLE001
            kept = f"; writing a checkpoint failed too ({type(error).__name__}: {error})"
        if reason is not None:
            warnings.warn(f"the policy was not saved as an MLflow model: {reason}{kept}",
                          RuntimeWarning, stacklevel=4)

    def record_video(self, *, env_config: Config = None, name: str | None = None,
                     max_steps: int = 1000, deterministic: bool = True,
                     env: Env | None = None) -> str | None:
        """Film one episode of the policy on copy 0 of ``env`` (default: the training env, restored
        after), up to ``max_steps``; log it as ``videos/<name or "rollout">/step_<env steps>`` and
        return that path (rank 0; others ``None``). A ``NotImplementedError`` without ``render()``
        or for a windowed model, a ``ValueError`` for frames that are no RGB ``uint8`` arrays."""
        check_int("max_steps", max_steps, minimum=1, error=ValueError)
        algorithm, policy, training_env = self.algorithm, self.algorithm.policy, env is None
        if not self.ranks.is_main:
            return None
        if windowed := windows_seen(policy.model, algorithm.env.observation_spec):
            raise NotImplementedError(f"{windowed}: record_video feeds it one observation per"
                                      " step; run(steps_per_video=...) films it during training")
        env = algorithm.env if env is None else env
        # restored after: the random streams, and the training env (else a reset is requested)
        saved = env.state_dict() if training_env and env.restores_state else None
        filming, rng = Filming(env, max_steps), files.capture_rng()
        try:
            with torch.inference_mode():
                obs = env.reset(config=env_config)
                filming.take_frame()
                states = policy.init_states(env.num_envs) if policy.recurrent else None
                while not filming.done:
                    if states is not None:
                        actions, _, _, states = policy.act_recurrent(
                            obs, states, deterministic=deterministic)
                    else:
                        actions = policy.sample_actions(obs, deterministic=deterministic)[0]
                    filming(out := env.step(actions))
                    obs = out[DataKeys.OBS]
        finally:
            files.restore_rng(rng)
            if saved is not None:
                env.load_state_dict(saved)
            elif training_env:
                algorithm.request_env_reset()
        return log_video(self.tracker, filming, name=name or "rollout",
                         env_steps=self.state["env/steps"])

    def _film_next_episode(self) -> None:
        if self._filming is None and self.ranks.is_main and not self._videos_failed:
            self._filming = Filming(self.algorithm.env, 1000, from_next_episode=True)
            self.algorithm.rollout.observer = self._filming

    def _log_finished_video(self) -> None:
        if (filming := self._filming) is None or not filming.done:
            return
        self._filming = self.algorithm.rollout.observer = None
        self._video_or_warn(lambda: log_video(self.tracker, filming, name="training",
                                              env_steps=self.state["env/steps"]))

    def _video_or_warn(self, film: Callable[[], Any]) -> None:
        """Film, or warn (once) that there will be no videos; training goes on."""
        if self._videos_failed:
            return
        try:
            film()
        except (NotImplementedError, ValueError) as e:  # no render(), or frames it cannot encode
            self._videos_failed = True
            warnings.warn(f"no rollout videos: {e}", RuntimeWarning, stacklevel=4)

    def save_checkpoint(self, path: str | Path | None = None, *, keep: int | None = None) -> Path:
        """Write everything needed to continue exactly, atomically (default: into the run's
        checkpoint folder, keeping the newest ``keep`` files); return the file's path."""
        check_int("keep", keep, minimum=1, optional=True, error=ValueError)
        if not self._model_checked:  # a model instance is kept as its class and config
            self._model_checked = True
            checkpoints.warn_if_model_cannot_be_rebuilt(self.algorithm)
        written = checkpoints.write(self.algorithm, self.state, self.tracker, path, keep)
        self._has_checkpoints = self._has_checkpoints or path is None
        return written

    @classmethod
    def from_checkpoint(cls, path_or_run_id: str | Path, /, *, tracking_uri: str | None = None,
                        device: str | None = None, progress: bool = True, save_policy: bool = True,
                        tracker: tracking.Tracker | None = None, env: Env | None = None) -> Trainer:
        """Rebuild a trainer from a checkpoint file, a run's checkpoint folder or ``latest``
        record, or a run id, and reopen its MLflow run. ``device`` overrides the saved one;
        ``env`` resumes onto an env instance. A ``CheckpointError`` if it cannot resume here."""
        data, own = checkpoints.read_for_resume(path_or_run_id, tracking_uri,
                                                custom_tracker=tracker is not None)
        algorithm = checkpoints.algorithm_from_payload(data, own, device, env)
        if tracker is None and algorithm.ranks.is_main:
            run = data["run"]
            tracker = tracking.MlflowTracker("", run_id=run["run_id"],
                                             tracking_uri=tracking_uri or run["tracking_uri"])
        trainer = cls(algorithm, tracker=tracker, progress=progress, save_policy=save_policy)
        trainer.state = {k: int(v) for k, v in data["trainer"]["state"].items()}
        files.restore_rng(data["rng"])  # last: building the algorithm drew random numbers
        return trainer

    def close(self, status: str = "FINISHED", *, message: str | None = None) -> None:
        """Flush metrics, end the MLflow run (a user-opened run stays open), close the env."""
        try:
            self.tracker.end(status, message=message)
        finally:
            self.algorithm.close()

    def _end_run(self, status: str, message: str) -> None:
        """End the run; under torchrun a SIGTERM waits until the run has its status."""
        main = threading.current_thread() is threading.main_thread()
        with SignalRequests() if self.ranks.distributed and main else nullcontext():
            self.tracker.end(status, message=message)  # a signal meanwhile is only recorded

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        elif issubclass(exc_type, KeyboardInterrupt):
            self.close("KILLED", message="KeyboardInterrupt")
        else:
            self.close("FAILED", message=f"{exc_type.__name__}: {exc}")


def _due(steps: int, every: int | None) -> bool:
    return bool(every) and steps % every == 0


#: rl8's name for a trainer of a :class:`~rl8lite.RecurrentAlgorithm`: the same trainer.
RecurrentTrainer = Trainer

"""The MLflow tracker: one run per trainer, params, buffered metrics, artifacts, the policy.

Metrics are buffered in memory; a background thread writes them in batches
every ``flush_interval_s`` seconds (a SQLite batch of ~700 metrics costs
~75 ms, which the training thread no longer pays), and ``flush``, ``end`` and
interpreter exit write what is left synchronously. Nothing depends on MLflow's
own async queue, which drops everything not flushed when a process exits
without ending its run.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, RunStatus
from mlflow.exceptions import MlflowException

Policy = Any  # the policy (rl8lite.policies.Policy)
from ..specs import Spec
from .active_run import activate, deactivate, is_trainer_run
from .active_run import experiment_name as resolve_experiment_name
from .policy_model import log_policy_model
from .retries import retried_quietly, warn_retry_once
from .tracker import TrackingError
from .store import (
    artifact_location,
    checkpoint_dir,
    default_tracking_uri,
    open_client,
    runs_view_url,
    ui_command,
)

_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000


def _param_value(value: Any) -> str:
    if isinstance(value, (dict, list, tuple)):
        text = json.dumps(value, default=str, sort_keys=True)
    else:
        text = str(value)
    return text[:_MAX_PARAM_LENGTH]


_OPEN_TRACKERS: weakref.WeakSet[MlflowTracker] = weakref.WeakSet()
_UNCAUGHT: list[BaseException] = []
_previous_excepthook = sys.excepthook


def _note_uncaught(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    """Remember an exception that ends the program, so its open runs end FAILED, not FINISHED."""
    _UNCAUGHT.append(exc)
    _previous_excepthook(exc_type, exc, tb)


sys.excepthook = _note_uncaught


@atexit.register
def _end_open_runs() -> None:
    status, message = "FINISHED", None
    if _UNCAUGHT:
        exc = _UNCAUGHT[-1]
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        message = f"{type(exc).__name__}: {exc}"
    for tracker in list(_OPEN_TRACKERS):
        try:
            if tracker.ended:
                tracker.flush()  # an earlier end() could not write everything
            else:
                tracker.end(status, message=message)
        except Exception:  # noqa: BLE001 - interpreter exit: nothing left to report to
            pass


class MlflowTracker:
    """Logs one training run to MLflow through an explicit client and run id.

    Uses the run the user opened with ``mlflow.start_run`` when there is one
    (and never ends it); otherwise creates and owns a run of its own, so that
    several trainers in one process each land in their own comparable run. An
    owned run is MLflow's active run until :meth:`end` (so ``mlflow.active_run()`` and
    the user's ``mlflow.log_*`` calls find it), and MLflow's tracking URI is set to
    this store when the user set none.

    Args:
        experiment_name: Experiment to log into (created when missing); ``None``: the one
            the user set (``mlflow.set_experiment``, ``MLFLOW_EXPERIMENT_NAME``/``_ID``),
            else ``default_experiment``.
        default_experiment: The experiment when none is named or set.
        run_name: Optional name of the run.
        tags: Optional tags of the run.
        tracking_uri: Store to use (default: the store of the active MLflow run when one is
            active, else :func:`default_tracking_uri`).
        flush_interval_s: Longest time metrics wait in memory before being written.
        run_id: Continue this run (a resumed trainer's).
        log_system_metrics: Log MLflow's system metrics (CPU, memory, disk, network, and GPU
            where ``pynvml`` finds one) every ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL``
            seconds (default 10); needs ``psutil`` (``pip install rl8lite[system-metrics]``).

    Raises:
        TrackingError: The store cannot be reached or written, or an MLflow run is
            active in another store than ``tracking_uri``.
    """

    def __init__(
        self,
        experiment_name: str | None = None,
        *,
        default_experiment: str = "rl8lite",
        run_name: str | None = None,
        tags: dict[str, Any] | None = None,
        tracking_uri: str | None = None,
        flush_interval_s: float = 1.0,
        run_id: str | None = None,
        log_system_metrics: bool = False,
    ) -> None:
        active = mlflow.active_run()
        # A user's active run lives in MLflow's current store (which may be MLflow's own
        # default, not the mlruns/ one): log there, into that run. Another trainer's
        # active run is never adopted.
        adopt = active is not None and run_id is None and not is_trainer_run(active.info.run_id)
        self.tracking_uri = tracking_uri or (mlflow.get_tracking_uri() if adopt else default_tracking_uri())
        if adopt and self.tracking_uri != mlflow.get_tracking_uri():
            raise TrackingError(
                f"an MLflow run is active in the store {mlflow.get_tracking_uri()!r}, but the"
                f" tracker was given the store {self.tracking_uri!r}: pass no tracking_uri to log"
                " into the active run, or end that run first."
            )
        #: Whether this tracker continues an existing run (its params are already logged).
        self.resumed = run_id is not None
        self.flush_interval_s = flush_interval_s
        self._pending: list[Metric] = []
        self._pending_lock = threading.Lock()  # guards _pending
        self._write_lock = threading.Lock()  # one batch writer at a time
        self._writer: threading.Thread | None = None
        try:
            self.client = open_client(self.tracking_uri)
            if run_id is not None:
                run = self.client.get_run(run_id)
                self.run_id = run_id
                self.experiment_id = run.info.experiment_id
                self.owns_run = active is None or active.info.run_id != run_id
                if self.owns_run:
                    self.client.update_run(run_id, status="RUNNING")
            elif adopt:
                self.run_id = active.info.run_id
                self.experiment_id = active.info.experiment_id
                self.owns_run = False
                if tags:
                    for key, value in tags.items():
                        self.client.set_tag(self.run_id, key, str(value))
            else:
                name = resolve_experiment_name(self.client, experiment_name, default_experiment)
                self.experiment_id = self._experiment_id(name)
                run = self.client.create_run(
                    self.experiment_id,
                    run_name=run_name,
                    tags={str(k): str(v) for k, v in (tags or {}).items()},
                )
                self.run_id = run.info.run_id
                self.owns_run = True
        except MlflowException as e:
            raise TrackingError(
                f"cannot use the MLflow tracking store {self.tracking_uri!r}: {e.message}"
            ) from e
        except Exception as e:  # noqa: BLE001 - any store failure: name the store, keep the cause
            raise TrackingError(
                f"cannot write the MLflow tracking store {self.tracking_uri!r}: {e}"
            ) from e
        self.ended = False
        #: The policy's LoggedModel once :meth:`log_policy` logged it (eval metrics link to it).
        self.model_id: str | None = None
        self._system_metrics = None
        if self.owns_run:
            if not mlflow.is_tracking_uri_set():  # the user's mlflow.log_* calls go here too
                mlflow.set_tracking_uri(self.tracking_uri)
            activate(self.client, self.run_id)
            if log_system_metrics:
                self._system_metrics = start_system_metrics(self.run_id, self.tracking_uri, resumed=self.resumed)
        _OPEN_TRACKERS.add(self)

    def _experiment_id(self, name: str) -> str:
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self.client.create_experiment(
                name, artifact_location=artifact_location(self.tracking_uri, name)
            )
        except MlflowException:
            # Another process created it between our look-up and our create.
            experiment = self.client.get_experiment_by_name(name)
            if experiment is None:
                raise
            return experiment.experiment_id

    def _reopen(self) -> None:
        if self.ended:
            if self.owns_run:
                self.client.update_run(self.run_id, status="RUNNING")
                activate(self.client, self.run_id)
            self.ended = False
            _OPEN_TRACKERS.add(self)

    def log_params(self, params: dict[str, Any]) -> None:
        """Log params now (synchronously); values longer than MLflow's limit are cut."""
        self._reopen()
        items = [Param(str(k), _param_value(v)) for k, v in params.items()]
        for i in range(0, len(items), _MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + _MAX_PARAMS_PER_BATCH])

    def set_tags(self, tags: dict[str, Any]) -> None:
        """Set run tags now."""
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, str(value)[:_MAX_PARAM_LENGTH])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Queue metrics at ``step``; the background writer stores them within ``flush_interval_s``."""
        self._reopen()
        timestamp = int(time.time() * 1000)
        # Evaluations of a logged policy are that model's metrics too (its Models page).
        batch = [
            Metric(k, float(v), timestamp, int(step), model_id=self.model_id if k.startswith("eval/") else None)
            for k, v in metrics.items()
        ]
        with self._pending_lock:
            self._pending.extend(batch)
        if self._writer is None or not self._writer.is_alive():
            self._writer = threading.Thread(target=self._write_periodically, name="rl8lite-mlflow-writer", daemon=True)
            self._writer.start()

    def _write_periodically(self) -> None:
        while not self.ended:
            time.sleep(self.flush_interval_s)
            try:
                with retried_quietly():
                    self._write_pending()
            except Exception as e:  # noqa: BLE001 - metrics stay queued and are retried; flush()/end() raise
                warn_retry_once(self.tracking_uri, e)

    def _write_pending(self) -> None:
        with self._write_lock:
            with self._pending_lock:
                pending, self._pending = self._pending, []
            try:
                for i in range(0, len(pending), _MAX_METRICS_PER_BATCH):
                    self.client.log_batch(self.run_id, metrics=pending[i : i + _MAX_METRICS_PER_BATCH])
            except Exception:
                with self._pending_lock:  # keep them for the next try
                    self._pending[:0] = pending
                raise

    def log_policy(
        self,
        policy: Policy,
        observation_spec: Spec,
        name: str = "policy",
        *,
        step: int = 0,
        registered_model_name: str | None = None,
    ) -> str:
        """Log ``policy`` as a LoggedModel of the run (see :func:`log_policy_model`), its
        metrics at ``step`` linked to it; return ``runs:/<run id>/<name>``, which
        ``mlflow.pyfunc.load_model`` serves (as does ``models:/<model id>``, :attr:`model_id`).
        """
        self._reopen()
        self.flush()  # the metrics at `step` are linked to the model: write them first
        with _tracking_uri(self.tracking_uri):
            info = log_policy_model(self.run_id, policy, observation_spec, name=name, step=step,
                                    registered_model_name=registered_model_name)
        self.model_id = info.model_id
        return f"runs:/{self.run_id}/{name}"

    def log_image(self, image: Any, *, key: str, step: int) -> None:
        """Log an RGB image under ``key`` at ``step`` (the UI's image slider steps through them)."""
        self._reopen()
        self.client.log_image(self.run_id, image, key=key, step=int(step), synchronous=True)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Copy a local file into the run's artifacts."""
        self._reopen()
        self.client.log_artifact(self.run_id, str(path), artifact_path=artifact_path)

    @property
    def checkpoint_dir(self) -> Path:
        """Local folder for this run's checkpoints (see :func:`checkpoint_dir`)."""
        return checkpoint_dir(self.tracking_uri, self.run_id)

    def flush(self) -> None:
        """Write every queued metric now (waiting for a background write in progress).

        A transient failure of the background writer (e.g. a locked SQLite db) only
        delays metrics: they stay queued and are retried; this raises if writing
        still fails now.
        """
        self._write_pending()

    def end(self, status: str = "FINISHED", *, message: str | None = None) -> None:
        """Flush, then mark an owned run ``status`` (FINISHED, FAILED or KILLED).

        A user-opened run is flushed but left open. ``message`` is kept as the
        ``rl8lite.error`` tag. Logging again later reopens an owned run.
        """
        if status not in ("FINISHED", "FAILED", "KILLED"):
            raise ValueError(f"status must be FINISHED, FAILED or KILLED, received {status!r}")
        if self.ended:
            return
        try:
            self.flush()
            if message:
                self.client.set_tag(self.run_id, "rl8lite.error", message[:_MAX_PARAM_LENGTH])
        finally:
            self.ended = True
            if not self._pending:  # else stay registered: interpreter exit retries the flush
                _OPEN_TRACKERS.discard(self)
            if self.owns_run:
                if self._system_metrics is not None:
                    self._system_metrics.finish()
                    self._system_metrics = None
                deactivate(self.run_id)
                self.client.set_terminated(self.run_id, status=RunStatus.to_string(RunStatus.from_string(status)))

    @property
    def ui_command(self) -> str:
        """Shell command that opens the MLflow UI on this store."""
        return ui_command(self.tracking_uri)

    @property
    def runs_url(self) -> str:
        """Link to this experiment's runs view once the UI runs."""
        return runs_view_url(self.experiment_id)


@contextlib.contextmanager
def _tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's tracking URI set to ``uri`` for the fluent calls inside (model logging)."""
    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        if previous is not None:
            mlflow.set_tracking_uri(previous)


def start_system_metrics(run_id: str, tracking_uri: str, *, resumed: bool) -> Any:
    """MLflow's system metrics monitor for ``run_id``, started.

    Raises:
        TrackingError: ``psutil``, which MLflow samples with, is not installed.
    """
    try:
        import psutil  # noqa: F401
    except ImportError:
        raise TrackingError(
            "log_system_metrics=True needs psutil: pip install 'rl8lite[system-metrics]' (or psutil)"
        ) from None
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    monitor = SystemMetricsMonitor(run_id, resume_logging=resumed, tracking_uri=tracking_uri)
    monitor.start()
    return monitor




"""The MLflow tracker: one run per trainer, params, metrics (buffered, written in batches by a
background thread, and by ``flush``, ``end`` and interpreter exit), artifacts, the policy."""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import random
import re
import sys
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.tracking import fluent

from . import TrackingError, checkpoint_dir, default_tracking_uri, runs_view_url, ui_command
from .export import log_policy_model

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None

_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
_WRITER = "rl8lite-mlflow-writer"  # the name of the threads that write metrics
_TRACKERS: weakref.WeakSet[MlflowTracker] = weakref.WeakSet()
_TRAINER_RUNS: set[str] = set()  # runs a tracker made active (never taken for the user's)


class MlflowTracker:
    """Logs into the run the user opened with ``mlflow.start_run`` (never ending it), else into
    a run of its own, MLflow's active run until :meth:`end` or exit (FAILED or KILLED after an
    uncaught exception). A :class:`TrackingError` if the store fails or another has the active run.

    Args:
        experiment_name: Created when missing; ``None``: the one the user set, else
            ``default_experiment``.
        tracking_uri: Default: the active run's store, else :func:`default_tracking_uri`.
        flush_interval_s: Longest time metrics wait in memory before being written.
        run_id: Continue this run (a resumed trainer's).
        log_system_metrics: Log MLflow's system metrics (needs ``psutil``).
        leave_open: :meth:`end` writes the metrics but leaves the run's status to the caller.
    """

    def __init__(self, experiment_name: str | None = None, *, default_experiment: str = "rl8lite",
                 run_name: str | None = None, tags: dict[str, Any] | None = None,
                 tracking_uri: str | None = None, flush_interval_s: float = 1.0,
                 run_id: str | None = None, log_system_metrics: bool = False,
                 leave_open: bool = False) -> None:
        self.leave_open = leave_open  # a sweep's trial: the study sets its status
        active = mlflow.active_run()
        # a user's active run lives in MLflow's current store; another tracker's is not adopted
        adopt = active is not None and run_id is None and active.info.run_id not in _TRAINER_RUNS
        current = mlflow.get_tracking_uri()
        self.tracking_uri = tracking_uri or (current if adopt else default_tracking_uri())
        if adopt and self.tracking_uri != current:
            raise TrackingError(f"an MLflow run is active in the store {current!r}, but the tracker"
                                f" was given the store {self.tracking_uri!r}: pass no tracking_uri"
                                " to log into the active run, or end that run first.")
        self.resumed = run_id is not None  # its params are already logged
        self.flush_interval_s = flush_interval_s
        self.ended = False
        self.model_id: str | None = None  # the policy's LoggedModel, once logged
        self._pending: list[Metric] = []
        self._pending_lock, self._write_lock = threading.Lock(), threading.Lock()  # one writer
        self._writer: threading.Thread | None = None
        self._warned = False  # that a write failed and is retried
        self._system_metrics: Any = None
        tags = {str(k): str(v) for k, v in (tags or {}).items()}
        try:
            self.client = open_client(self.tracking_uri)
            if run_id is not None:
                run = self.client.get_run(run_id).info
                self.owns_run = active is None or active.info.run_id != run_id
                if self.owns_run:
                    self.client.update_run(run_id, status="RUNNING")
            elif adopt:
                run, self.owns_run = active.info, False
                for key, value in tags.items():
                    self.client.set_tag(run.run_id, key, value)
            else:
                experiment_id = experiment_id_for(self.client, self.tracking_uri,
                                                  experiment_name, default_experiment)
                run = self.client.create_run(experiment_id, tags=tags,
                                             run_name=run_name or _run_name()).info
                self.owns_run = True
        except Exception as e:  # any store failure: name the store, keep the cause
            reason = e.message if isinstance(e, MlflowException) else e
            raise TrackingError(f"cannot use the MLflow tracking store {self.tracking_uri!r}:"
                                f" {reason}") from e
        self.run_id: str | None = run.run_id
        self.experiment_id: str = run.experiment_id
        self.checkpoint_dir: Path | None = checkpoint_dir(self.tracking_uri, run.run_id)
        if self.owns_run:
            if not mlflow.is_tracking_uri_set():  # the user's mlflow.log_* calls go here too
                mlflow.set_tracking_uri(self.tracking_uri)
            _activate(self.client, run.run_id)
            if log_system_metrics:
                self._system_metrics = _system_metrics(run.run_id, self.tracking_uri, self.resumed)
        _TRACKERS.add(self)

    def log_params(self, params: dict[str, Any]) -> None:
        """Log params now, values cut to MLflow's limit."""
        items = [Param(str(k), _param_value(v)) for k, v in params.items()]
        for i in range(0, len(items), _MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + _MAX_PARAMS_PER_BATCH])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Queue metrics at ``step``, written by a background thread within ``flush_interval_s``."""
        now, step = int(time.time() * 1000), int(step)
        # evaluations of a logged policy are that model's metrics too (its Models page)
        batch = [Metric(k, float(v), now, step, self.model_id if k.startswith("eval/") else None)
                 for k, v in metrics.items()]
        with self._pending_lock:
            self._pending.extend(batch)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_in_background, name=_WRITER,
                                                daemon=True)
                self._writer.start()

    def _write_in_background(self) -> None:
        """Write the queued metrics every ``flush_interval_s`` until none are left."""
        while True:
            time.sleep(self.flush_interval_s)
            try:
                self.flush()
            except Exception as e:  # noqa: BLE001 - they stay queued and are retried
                if not self._warned:
                    self._warned = True
                    reason = " ".join(str(e).split())[:200]
                    with contextlib.suppress(Warning):  # a warning made an error stops no retry
                        warnings.warn(
                            f"rl8lite: writing metrics to the MLflow store {self.tracking_uri!r}"
                            f" failed ({reason}); they are kept and retried every second (shown"
                            " once per run). Many processes on one SQLite store: see the"
                            " README's MLflow section for an mlflow server", RuntimeWarning)
            with self._pending_lock:
                if not self._pending:
                    self._writer = None
                    return

    def flush(self) -> None:
        """Write every queued metric now; raises if writing fails (the metrics stay queued)."""
        with self._write_lock:
            with self._pending_lock:
                pending, self._pending = self._pending, []
            try:
                for i in range(0, len(pending), _MAX_METRICS_PER_BATCH):
                    batch = pending[i : i + _MAX_METRICS_PER_BATCH]
                    self.client.log_batch(self.run_id, metrics=batch)
            except Exception:
                with self._pending_lock:  # keep them for the next try
                    self._pending[:0] = pending
                raise

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Copy a local file into the run's artifacts."""
        self.client.log_artifact(self.run_id, str(path), artifact_path=artifact_path)

    def log_image(self, image: Any, *, key: str, step: int) -> None:
        """Log an RGB image under ``key`` at ``step`` (the UI's image slider steps through them)."""
        self.client.log_image(self.run_id, image, key=key, step=int(step), synchronous=True)

    def log_policy(self, policy: Any, observation_spec: Any, name: str = "policy", *, step: int = 0,
                   registered_model_name: str | None = None) -> str:
        """Log ``policy`` as a LoggedModel of the run, the metrics at ``step`` linked to it;
        return ``runs:/<run id>/<name>`` (``models:/<model_id>`` loads it too)."""
        self.flush()  # the metrics at `step` are linked to the model: write them first
        previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
        mlflow.set_tracking_uri(self.tracking_uri)  # for the fluent calls of the model's logging
        try:
            info = log_policy_model(self.run_id, policy, observation_spec, name=name, step=step,
                                    registered_model_name=registered_model_name)
        finally:
            if previous is not None:
                mlflow.set_tracking_uri(previous)
        self.model_id = info.model_id
        return f"runs:/{self.run_id}/{name}"

    def end(self, status: str = "FINISHED", *, message: str | None = None) -> None:
        """Write the queued metrics, then end an owned run with ``status`` (FINISHED, FAILED or
        KILLED) and ``message`` as its ``rl8lite.error`` tag; again: only write the metrics."""
        if status not in ("FINISHED", "FAILED", "KILLED"):
            raise ValueError(f"status must be FINISHED, FAILED or KILLED, received {status!r}")
        if self.ended:
            self.flush()
            return
        self.ended = True
        try:
            self.flush()
            if message:
                self.client.set_tag(self.run_id, "rl8lite.error", message[:_MAX_PARAM_LENGTH])
        finally:
            if self.owns_run:
                if self._system_metrics is not None:
                    self._system_metrics.finish()
                _deactivate(self.run_id)
                if not self.leave_open:
                    self.client.set_terminated(self.run_id, status=status)

    @property
    def ui_command(self) -> str:
        """Shell command that opens the MLflow UI on this store."""
        return ui_command(self.tracking_uri)

    @property
    def runs_url(self) -> str:
        """Link to this experiment's runs view once the UI runs."""
        return runs_view_url(self.experiment_id)


@atexit.register
def _end_runs() -> None:
    """End the open runs: FAILED or KILLED if a script (not a session) died of an exception."""
    status, message = "FINISHED", None
    ipython = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    interactive = hasattr(sys, "ps1") or sys.flags.interactive or ipython is not None
    if not interactive and (exc := getattr(sys, "last_value", None)) is not None:
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        message = f"{type(exc).__name__}: {exc}"
    for tracker in list(_TRACKERS):
        with contextlib.suppress(Exception):  # interpreter exit: nothing left to report to
            tracker.end(status, message=message)


def _param_value(value: Any) -> str:
    container = isinstance(value, (dict, list, tuple))
    return (json.dumps(value, default=str, sort_keys=True) if container else str(value)
            )[:_MAX_PARAM_LENGTH]


def _run_name() -> str:
    """A name like MLflow's (``bold-fox-123``), from the OS's entropy: a seed repeats MLflow's."""
    from mlflow.utils import name_utils
    rng = random.Random()
    predicates = getattr(name_utils, "_GENERATOR_PREDICATES", ["run"])
    nouns = getattr(name_utils, "_GENERATOR_NOUNS", [f"{rng.getrandbits(32):08x}"])
    while True:
        name = f"{rng.choice(predicates)}-{rng.choice(nouns)}-{rng.randint(0, 999)}".lower()
        if len(name) <= 20:  # MLflow's longest
            return name


def open_client(tracking_uri: str) -> MlflowClient:
    """A client whose store is ready (a SQLite store's tables made under a file lock, on POSIX)."""
    if not tracking_uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri)
    database = Path(tracking_uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + ".lock"), "a") as lock:  # closing unlocks it
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        client = MlflowClient(tracking_uri)
        client.search_experiments(max_results=1)  # creates or migrates the tables now
    return client


def experiment_id_for(client: MlflowClient, tracking_uri: str, explicit: str | None,
                   default: str) -> str:
    """The id of experiment ``explicit``, else of the one the user set, else of ``default``;
    created when missing (on a SQLite store, with its artifacts beside the database)."""
    name = explicit or os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if not name and (experiment_id := os.environ.get("MLFLOW_EXPERIMENT_ID")):
        # set_experiment wrote the id of MLflow's current store, which may be another one
        for store in (MlflowClient(mlflow.get_tracking_uri()), client):
            with contextlib.suppress(Exception):
                name = store.get_experiment(experiment_id).name
                break
    name = name or default
    if (experiment := client.get_experiment_by_name(name)) is not None:
        return experiment.experiment_id
    location = None
    if tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri.removeprefix("sqlite:///")).parent
        location = (folder / re.sub(r"[^A-Za-z0-9_.-]", "_", name)).resolve().as_uri()
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException:  # another process may have created it meanwhile
        if (experiment := client.get_experiment_by_name(name)) is None:
            raise
        return experiment.experiment_id


def _system_metrics(run_id: str, tracking_uri: str, resumed: bool) -> Any:
    try:
        import psutil  # noqa: F401
    except ImportError:
        raise TrackingError("log_system_metrics=True needs psutil: pip install"
                            " 'rl8lite[system-metrics]' (or psutil)") from None
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
    monitor = SystemMetricsMonitor(run_id, resume_logging=resumed, tracking_uri=tracking_uri)
    monitor.start()
    return monitor


# MLflow's per-thread active-run stack: a tracker pushes its run on open and takes it out on end.
def _stack() -> list | None:
    variable = getattr(fluent, "_active_run_stack", None)
    if variable is None:  # an MLflow whose internals moved: tracking works, the run is not active
        warnings.warn("this MLflow version keeps no active-run stack rl8lite knows:"
                      " mlflow.active_run() will not return the trainer's run", RuntimeWarning,
                      stacklevel=3)
    return None if variable is None else variable.get()


def _activate(client: MlflowClient, run_id: str) -> None:
    stack = _stack()
    if stack is not None and all(r.info.run_id != run_id for r in stack):
        stack.append(fluent.ActiveRun(client.get_run(run_id)))
        _TRAINER_RUNS.add(run_id)


def _deactivate(run_id: str) -> None:
    if (stack := _stack()) is not None:
        stack[:] = [r for r in stack if r.info.run_id != run_id]
    _TRAINER_RUNS.discard(run_id)


# MLflow logs a locked store's error with a traceback: not from the writers (they retry, warn once)
logging.getLogger("mlflow.store.db.utils").addFilter(lambda record: record.threadName != _WRITER)


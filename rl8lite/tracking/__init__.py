"""Experiment tracking, export and serving (the only package that imports mlflow, lazily): the
:class:`Tracker` protocol, a tracker that logs nothing, and where runs go."""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


class TrackingError(RuntimeError):
    """The tracking store cannot be reached or written; the message names it."""


@runtime_checkable
class Tracker(Protocol):
    """What a :class:`~rl8lite.Trainer` logs through; :class:`MlflowTracker` is the default."""

    run_id: str | None  # the MLflow run; None: not MLflow (resuming then needs tracker=)
    tracking_uri: str | None  # the MLflow store
    checkpoint_dir: Path | None  # where checkpoints go; None: save_checkpoint needs path=
    resumed: bool  # whether the params are already logged (a continued run)

    def log_params(self, params: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...
    def log_image(self, image: Any, *, key: str, step: int) -> None: ...
    def log_policy(self, policy: Any, observation_spec: Any, name: str = "policy", *, step: int = 0,
                   registered_model_name: str | None = None) -> str: ...
    def flush(self) -> None: ...
    def end(self, status: str = "FINISHED", *, message: str | None = None) -> None: ...


class NullTracker(Tracker):
    """Logs nothing (every rank's but rank 0's); checkpoints go into ``checkpoint_dir``."""

    run_id: str | None = None
    tracking_uri: str | None = None
    resumed = True  # it logs no params

    def __init__(self, checkpoint_dir: str | Path | None = None) -> None:
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None

    def log_policy(self, policy: Any, observation_spec: Any, name: str = "policy", *, step: int = 0,
                   registered_model_name: str | None = None) -> str:
        return ""


def find_mlruns_dir(start: Path | None = None) -> Path:
    """The nearest ``mlruns/`` folder from ``start`` (default: cwd) up, else ``start/mlruns``."""
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "mlruns").is_dir():
            return folder / "mlruns"
    return start / "mlruns"


def default_tracking_uri() -> str:
    """MLflow's tracking URI if set, else the SQLite store ``mlflow.db`` in find_mlruns_dir()."""
    import mlflow
    if mlflow.is_tracking_uri_set():
        return mlflow.get_tracking_uri()
    mlruns = find_mlruns_dir()
    mlruns.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{mlruns / 'mlflow.db'}"


def checkpoint_dir(tracking_uri: str, run_id: str) -> Path:
    """Local folder for a run's checkpoints: beside a SQLite store, else ``./checkpoints``."""
    root = Path(tracking_uri.removeprefix("sqlite:///")).parent
    return (root if tracking_uri.startswith("sqlite:///") else Path.cwd()) / "checkpoints" / run_id


def download_run_artifact(tracking_uri: str, run_id: str, artifact: str, destination: Path) -> Path:
    """Fetch one artifact of a run (without touching the run's status)."""
    from mlflow import MlflowClient
    return Path(MlflowClient(tracking_uri).download_artifacts(run_id, artifact, str(destination)))


def ui_command(tracking_uri: str, port: int = 5000) -> str:
    """The shell command, quoted, that opens the MLflow UI on ``tracking_uri`` (the ``mlflow``
    beside the running Python: no venv to activate)."""
    beside = Path(sys.executable).parent / "mlflow"
    executable = str(beside) if beside.exists() else "mlflow"
    return (f"{shlex.quote(executable)} ui --backend-store-uri {shlex.quote(tracking_uri)}"
            f" --host 127.0.0.1 --port {port}")


def runs_view_url(experiment_id: str, port: int = 5000) -> str:
    """The UI link to an experiment's runs view (MLflow 3 opens a GenAI page otherwise)."""
    return (f"http://127.0.0.1:{port}/#/experiments/{experiment_id}/runs"
            "?workflowType=machine_learning")


#: Names of the submodules that import mlflow, loaded when first asked for.
_LAZY = {"MlflowTracker": "mlflow_tracker", "save_policy_model": "export"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MlflowTracker", "NullTracker", "Tracker", "TrackingError", "checkpoint_dir",
           "default_tracking_uri", "download_run_artifact", "find_mlruns_dir", "runs_view_url",
           "save_policy_model", "ui_command"]

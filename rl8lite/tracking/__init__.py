"""Experiment tracking, export and serving: the only package that imports mlflow.

:mod:`~.store` says where runs go, :mod:`~.mlflow_tracker` logs a trainer's run,
:mod:`~.export` turns the policy into a ``torch.export`` program and
:mod:`~.policy_model` packs it as an MLflow model served by ``_pyfunc_policy.py``.
"""

from .mlflow_tracker import MlflowTracker, Tracker, TrackingError, mlflow_version
from .policy_model import save_policy_model
from .store import (
    checkpoint_dir,
    default_tracking_uri,
    download_run_artifact,
    find_mlruns_dir,
    runs_view_url,
    ui_command,
)

__all__ = [
    "MlflowTracker", "Tracker", "TrackingError", "checkpoint_dir", "default_tracking_uri",
    "download_run_artifact", "find_mlruns_dir", "mlflow_version", "runs_view_url",
    "save_policy_model", "ui_command",
]

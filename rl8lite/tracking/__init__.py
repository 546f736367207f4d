"""Experiment tracking, export and serving: the only package that imports mlflow.

:mod:`~.store` says where runs go, :mod:`~.mlflow_tracker` logs a trainer's run,
:mod:`~.export` turns the policy into a ``torch.export`` program and
:mod:`~.policy_model` packs it as an MLflow model served by ``_pyfunc_policy.py``.
mlflow is imported on first use (it adds ~2 s to a process's start): a rank that
does not log, or a script that only builds an algorithm, never pays for it.
"""

from __future__ import annotations

import importlib
from typing import Any

from .tracker import NullTracker, Tracker, TrackingError, mlflow_version

#: Public names of the submodules that import mlflow, loaded when first asked for.
_LAZY = {
    "MlflowTracker": "mlflow_tracker",
    "save_policy_model": "policy_model",
    "checkpoint_dir": "store",
    "default_tracking_uri": "store",
    "download_run_artifact": "store",
    "find_mlruns_dir": "store",
    "runs_view_url": "store",
    "ui_command": "store",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["NullTracker", "Tracker", "TrackingError", "mlflow_version", *_LAZY]

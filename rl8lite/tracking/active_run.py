"""A trainer's run as MLflow's active run, and the experiment a new run goes to.

While a trainer is open its run is the one ``mlflow.active_run()`` returns, so the
user's own ``mlflow.log_*`` calls land in it. MLflow keeps active runs on a per-thread
stack that only ``start_run``/``end_run`` touch from the top; a trainer's run is pushed
when it opens and removed when it closes, wherever it is on the stack, without ending
any other run. Runs that trainers activated are remembered, so a second trainer never
mistakes the first one's run for a run the user opened.
"""

from __future__ import annotations

import os
import warnings

import mlflow
from mlflow import MlflowClient
from mlflow.tracking import fluent

_TRAINER_RUNS: set[str] = set()


def is_trainer_run(run_id: str) -> bool:
    """Whether ``run_id`` was made active by a trainer (not opened by the user)."""
    return run_id in _TRAINER_RUNS


def _stack() -> list | None:
    variable = getattr(fluent, "_active_run_stack", None)
    if variable is None:  # an MLflow whose internals moved: tracking works, the run is not active
        warnings.warn("this MLflow version keeps no active-run stack rl8lite knows: mlflow.active_run()"
                      " will not return the trainer's run", RuntimeWarning, stacklevel=3)
        return None
    return variable.get()


def activate(client: MlflowClient, run_id: str) -> None:
    """Make ``run_id`` MLflow's active run (on top of any other)."""
    stack = _stack()
    if stack is None or any(r.info.run_id == run_id for r in stack):
        return
    stack.append(fluent.ActiveRun(client.get_run(run_id)))
    _TRAINER_RUNS.add(run_id)


def deactivate(run_id: str) -> None:
    """Remove ``run_id`` from MLflow's active runs without ending it or any other run."""
    stack = _stack()
    if stack is not None:
        stack[:] = [r for r in stack if r.info.run_id != run_id]
    _TRAINER_RUNS.discard(run_id)


def experiment_name(client: MlflowClient, explicit: str | None, default: str) -> str:
    """The experiment a trainer's new run goes to: ``explicit``, else the one the user set
    (``mlflow.set_experiment``, ``MLFLOW_EXPERIMENT_NAME`` or ``MLFLOW_EXPERIMENT_ID``), else
    ``default``.

    ``mlflow.set_experiment`` records the experiment by id in MLflow's current store; when
    that is another store than the trainer's, its name is looked up there.
    """
    if explicit:
        return explicit
    if name := os.environ.get("MLFLOW_EXPERIMENT_NAME"):
        return name
    if experiment_id := os.environ.get("MLFLOW_EXPERIMENT_ID"):
        # set_experiment wrote the id in MLflow's current store: look there first
        for store in (MlflowClient(mlflow.get_tracking_uri()), client):
            try:
                return store.get_experiment(experiment_id).name
            except Exception:  # noqa: BLE001 - not in this store: try the next
                continue
    return default

"""Where runs go, and how to look at them.

``MLFLOW_TRACKING_URI`` (or an earlier ``mlflow.set_tracking_uri``) when set;
otherwise a SQLite store ``mlruns/mlflow.db`` in the nearest folder, from the
current directory upwards, that has an ``mlruns/`` folder (the current
directory when none has), with artifacts beside it. MLflow 3.x refuses its old
plain-file store, and its own default writes ``mlflow.db`` into whatever the
current directory is (``notebooks/`` in a notebook), hence this rule.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any



def find_mlruns_dir(start: Path | None = None) -> Path:
    """The nearest ``mlruns/`` folder from ``start`` (default: cwd) upwards, else ``start/mlruns``."""
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "mlruns").is_dir():
            return folder / "mlruns"
    return start / "mlruns"


def default_tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the SQLite store in the project's ``mlruns/``."""
    import mlflow

    if mlflow.is_tracking_uri_set():
        return mlflow.get_tracking_uri()
    mlruns = find_mlruns_dir()
    mlruns.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{mlruns / 'mlflow.db'}"


def artifact_location(tracking_uri: str, experiment_name: str) -> str | None:
    """For a local SQLite store, a folder beside the db (never the current directory)."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    db_path = Path(tracking_uri[len("sqlite:///"):])
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", experiment_name)
    return (db_path.parent / safe).resolve().as_uri()


def ui_command(tracking_uri: str, port: int = 5000) -> str:
    """The shell command that opens the MLflow UI on ``tracking_uri``.

    Names the ``mlflow`` executable beside the running Python (the venv's),
    so the command works without activating the environment.
    """
    beside = Path(sys.executable).parent / "mlflow"
    executable = str(beside) if beside.exists() else "mlflow"
    return (
        f"{shlex.quote(executable)} ui --backend-store-uri {shlex.quote(tracking_uri)}"
        f" --host 127.0.0.1 --port {port}"
    )


def runs_view_url(experiment_id: str, port: int = 5000) -> str:
    """The UI link to an experiment's runs view (MLflow 3 opens a GenAI page otherwise)."""
    return f"http://127.0.0.1:{port}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def checkpoint_dir(tracking_uri: str, run_id: str) -> Path:
    """Local folder for a run's checkpoints: beside a SQLite store, else ``./checkpoints``."""
    if tracking_uri.startswith("sqlite:///"):
        root = Path(tracking_uri[len("sqlite:///"):]).parent
    else:
        root = Path.cwd()
    return root / "checkpoints" / run_id


def download_run_artifact(tracking_uri: str, run_id: str, artifact: str, destination: Path) -> Path:
    """Fetch one artifact of a run (without touching the run's status)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    return Path(client.download_artifacts(run_id, artifact, str(destination)))


def open_client(tracking_uri: str) -> Any:
    """An ``MlflowClient`` of ``tracking_uri`` whose store is ready to use.

    A fresh SQLite store creates and migrates its tables on first use; several
    processes doing that at once (a sweep, a ``torchrun`` job) fail with "table
    experiments already exists" or "duplicate column name". The first use is
    serialised across processes with a lock file beside the database.
    """
    from mlflow import MlflowClient

    if not tracking_uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri)
    database = Path(tracking_uri[len("sqlite:///"):])
    with _file_lock(database.with_name(database.name + ".lock")):
        client = MlflowClient(tracking_uri)
        client.search_experiments(max_results=1)  # creates or migrates the tables now
    return client


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes on ``path`` (created if missing); none off POSIX."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock (concurrent first use may fail there)
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

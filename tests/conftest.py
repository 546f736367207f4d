"""Every test logs to a temporary MLflow store, never to the project's mlruns/."""

from __future__ import annotations

import uuid

import mlflow
import pytest
import torch


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    # One SQLite db per session: creating a fresh one costs ~1.5 s.
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(autouse=True)
def _isolated_tracking(mlflow_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store)
    mlflow.set_tracking_uri(mlflow_store)
    torch.set_num_threads(1)
    yield
    while mlflow.active_run() is not None:
        mlflow.end_run()


@pytest.fixture
def experiment_name() -> str:
    """A fresh experiment per test, in the session's store."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(mlflow_store: str) -> mlflow.MlflowClient:
    return mlflow.MlflowClient(mlflow_store)

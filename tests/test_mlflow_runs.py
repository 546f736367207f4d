"""MLflow as its users expect it: the experiment, the active run, system metrics, retried writes."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import warnings

import mlflow
import pytest
import sqlalchemy
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

from rl8lite import Algorithm, Trainer
from rl8lite.conditions import HitsUpperBound
from rl8lite.env import DiscreteDummyEnv
from rl8lite.tracking import TrackingError


def small() -> Algorithm:
    return Algorithm(DiscreteDummyEnv, num_envs=4, horizon=4, seed=0)


def experiment_of(trainer: Trainer, client: mlflow.MlflowClient) -> str:
    return client.get_experiment(client.get_run(trainer.tracker.run_id).info.experiment_id).name


def test_the_experiment_is_the_named_one_then_the_users_then_the_env_class(
    experiment_name: str, client: mlflow.MlflowClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    with Trainer(small(), progress=False) as trainer:
        assert experiment_of(trainer, client) == "DiscreteDummyEnv"
    mlflow.set_experiment(experiment_name)  # sets MLFLOW_EXPERIMENT_ID
    with Trainer(small(), progress=False) as trainer:
        assert experiment_of(trainer, client) == experiment_name
    with Trainer(small(), experiment_name=f"{experiment_name}-explicit", progress=False) as trainer:
        assert experiment_of(trainer, client) == f"{experiment_name}-explicit"
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", f"{experiment_name}-env")
    with Trainer(small(), progress=False) as trainer:
        assert experiment_of(trainer, client) == f"{experiment_name}-env"


def test_an_open_trainers_run_is_the_active_run_and_closing_ends_it(
    experiment_name: str, client: mlflow.MlflowClient
) -> None:
    first = Trainer(small(), experiment_name=experiment_name, progress=False)
    assert mlflow.active_run().info.run_id == first.tracker.run_id
    mlflow.log_metric("mine", 1.0)  # the user's own logging lands in the trainer's run
    second = Trainer(small(), experiment_name=experiment_name, progress=False)
    assert second.tracker.run_id != first.tracker.run_id  # never another trainer's run
    assert mlflow.active_run().info.run_id == second.tracker.run_id
    second.close()
    assert mlflow.active_run().info.run_id == first.tracker.run_id
    first.step()
    first.close()
    assert mlflow.active_run() is None
    run = client.get_run(first.tracker.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["mine"] == 1.0
    assert client.get_run(second.tracker.run_id).info.status == "FINISHED"
    # a run the user opened is used, and left open
    with mlflow.start_run(experiment_id=client.get_experiment_by_name(experiment_name).experiment_id) as run:
        with Trainer(small(), progress=False) as trainer:
            assert trainer.tracker.run_id == run.info.run_id
        assert mlflow.active_run().info.run_id == run.info.run_id
        assert client.get_run(run.info.run_id).info.status == "RUNNING"


def test_an_rl8_script_finds_the_active_run_after_building_its_trainer(
    experiment_name: str, client: mlflow.MlflowClient
) -> None:
    trainer = Trainer(small(), experiment_name=experiment_name, progress=False)
    print(mlflow.active_run().info.run_id)  # rl8's scripts do this
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 1)])  # run() ends the run
    assert mlflow.active_run() is None
    assert client.get_run(trainer.tracker.run_id).info.status == "FINISHED"


def test_system_metrics_are_logged_when_asked(
    experiment_name: str, client: mlflow.MlflowClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    with Trainer(small(), experiment_name=experiment_name, progress=False, log_system_metrics=True) as trainer:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "system/cpu_utilization_percentage" not in client.get_run(
            trainer.tracker.run_id
        ).data.metrics:
            trainer.step()
            time.sleep(0.2)
    assert "system/cpu_utilization_percentage" in client.get_run(trainer.tracker.run_id).data.metrics
    monkeypatch.setitem(sys.modules, "psutil", None)
    with pytest.raises(TrackingError, match=r"log_system_metrics=True needs psutil: pip install 'rl8lite\[system-metrics\]'"):
        Trainer(small(), experiment_name=experiment_name, progress=False, log_system_metrics=True)


def test_a_write_the_store_refuses_for_a_while_is_retried_with_one_warning_and_no_traceback(
    experiment_name: str, client: mlflow.MlflowClient, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    real = SqlAlchemyStore.log_batch
    failures = []

    def locked(self, *args, **kwargs):  # MLflow's own failure path: it logs the error, then raises
        if kwargs.get("metrics") and len(failures) < 2:
            failures.append(1)
            with self.ManagedSessionMaker(read_only=False):
                raise sqlalchemy.exc.OperationalError("INSERT", {}, Exception("database is locked"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SqlAlchemyStore, "log_batch", locked)
    with Trainer(small(), experiment_name=experiment_name, progress=False) as trainer:
        trainer.tracker.flush_interval_s = 0.05
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.ERROR):
            warnings.simplefilter("always")
            for _ in range(3):
                trainer.step()
                time.sleep(0.3)
    assert len(failures) == 2
    assert not [r for r in caplog.records if "database is locked" in r.getMessage()]  # no traceback
    messages = [str(w.message) for w in caught if "retried every second" in str(w.message)]
    assert len(messages) == 1 and "database is locked" in messages[0]
    history = client.get_metric_history(trainer.tracker.run_id, "env/steps")
    assert [m.value for m in history] == [16.0, 32.0, 48.0]  # nothing lost


def test_processes_starting_on_one_fresh_sqlite_store_do_not_race(tmp_path) -> None:
    script = (
        "import sys; from rl8lite.tracking import MlflowTracker;"
        "t = MlflowTracker('sweep'); t.log_metrics({'x': 1.0}, step=0); t.end()"
    )
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'fresh.db'}", "PATH": ""}
    processes = [subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
    errors = [p.communicate(timeout=120)[1] for p in processes]
    assert [p.returncode for p in processes] == [0] * 4, errors
    runs = mlflow.MlflowClient(env["MLFLOW_TRACKING_URI"]).search_runs(
        [mlflow.MlflowClient(env["MLFLOW_TRACKING_URI"]).get_experiment_by_name("sweep").experiment_id]
    )
    assert len(runs) == 4

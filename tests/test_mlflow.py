"""MLflow logging, in a temporary store: params, metrics at env steps, eval, run status."""

from __future__ import annotations

import inspect
import os
import random
from pathlib import Path

import mlflow
import numpy as np
import pytest

from rl8lite import Algorithm, Trainer
from rl8lite.conditions import HitsUpperBound
from rl8lite.env import DiscreteDummyEnv
from rl8lite.examples import CartPole
from rl8lite.tracking import (
    MlflowTracker,
    NullTracker,
    Tracker,
    TrackingError,
    default_tracking_uri,
    find_mlruns_dir,
)

from .helpers import bad_env
from .trackers import RecordingTracker


def history(client: mlflow.MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def test_params_metrics_and_eval_are_logged(experiment_name: str, client: mlflow.MlflowClient) -> None:
    algo = Algorithm(CartPole, num_envs=8, horizon=4, horizons_per_env_reset=2, seed=0)
    trainer = Trainer(algo, experiment_name=experiment_name, run_name="r1", tags={"team": "rl"}, progress=False)
    trainer.run(steps_per_eval=2, stop_conditions=[HitsUpperBound("algorithm/steps", 4)])
    trainer.eval(env_config={"length": 1.0}, name="long_pole")
    trainer.close()
    run = client.get_run(trainer.tracker.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "r1" and run.data.tags["team"] == "rl"
    params = run.data.params
    assert params["gamma"] == "0.99" and params["horizons_per_env_reset"] == "2"
    assert params["env_cls"] == "rl8lite.examples.cartpole.CartPole"
    assert params["distribution_cls"] == "rl8lite.distributions.Categorical"
    assert params["versions/mlflow"] == mlflow.__version__ and "versions/torch" in params and params["seed"] == "0"
    # one point per step, at step = env steps, none lost
    assert [s for s, _ in history(client, run.info.run_id, "returns/mean")] == [32, 64, 96, 128]
    for key in ("losses/total", "monitors/kl_div", "monitors/explained_variance", "profiling/step_ms",
                "throughput/env_steps_per_s", "memory/buffer_bytes", "episodes/count", "env/steps"):
        assert len(history(client, run.info.run_id, key)) == 4, key
    assert history(client, run.info.run_id, "eval/returns/mean")[0][0] == 64
    assert history(client, run.info.run_id, "eval/long_pole/returns/mean")[0][0] == 128
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.name == experiment_name
    assert experiment.artifact_location.startswith("file://") and "mlruns" not in Path.cwd().as_posix() + experiment.artifact_location.split(os.sep)[0]


def test_each_trainer_gets_its_own_run(experiment_name: str, client: mlflow.MlflowClient) -> None:
    runs = []
    for lr in (1e-3, 3e-3):  # rl8 fails here with "Changing param values is not allowed"
        trainer = Trainer(Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2, optimizer_config={"lr": lr}),
                          experiment_name=experiment_name, progress=False)
        trainer.step()
        trainer.close()
        runs.append(trainer.tracker.run_id)
    assert runs[0] != runs[1]
    assert mlflow.active_run() is None


def test_user_run_is_respected_and_left_open(experiment_name: str, client: mlflow.MlflowClient) -> None:
    mlflow.set_experiment(experiment_name)
    with mlflow.start_run() as user_run:
        with Trainer(Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2), progress=False) as trainer:
            trainer.step()
        assert trainer.tracker.run_id == user_run.info.run_id
        assert client.get_run(user_run.info.run_id).info.status == "RUNNING"
        assert history(client, user_run.info.run_id, "env/steps") == [(4, 4.0)]
    assert client.get_run(user_run.info.run_id).info.status == "FINISHED"


def test_exception_fails_the_run_and_keeps_every_metric(experiment_name: str, client: mlflow.MlflowClient) -> None:
    trainer = Trainer(Algorithm(bad_env("nan_obs", at_step=9), num_envs=4, horizon=3, horizons_per_env_reset=-1),
                      experiment_name=experiment_name, progress=False)
    with pytest.raises(ValueError, match="non-finite 'obs'"):
        trainer.run()
    run = client.get_run(trainer.tracker.run_id)
    assert run.info.status == "FAILED"
    assert "NonFiniteError" in run.data.tags["rl8lite.error"]
    assert [s for s, _ in history(client, run.info.run_id, "returns/mean")] == [12, 24, 36]


def test_keyboard_interrupt_kills_the_run(experiment_name: str, client: mlflow.MlflowClient) -> None:
    trainer = Trainer(Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2), experiment_name=experiment_name, progress=False)

    def interrupt(stats):
        if stats["algorithm/steps"] == 3:
            raise KeyboardInterrupt
        return False

    with pytest.raises(KeyboardInterrupt):
        trainer.run(stop_conditions=[interrupt])
    run = client.get_run(trainer.tracker.run_id)
    assert run.info.status == "KILLED"
    assert len(history(client, run.info.run_id, "env/steps")) == 3
    # the trainer stays usable: it logs into its run, which stays KILLED
    trainer.step()
    trainer.close()
    assert client.get_run(trainer.tracker.run_id).info.status == "KILLED"
    assert len(history(client, run.info.run_id, "env/steps")) == 4


def test_context_manager_ends_the_run_failed_on_error(experiment_name: str, client: mlflow.MlflowClient) -> None:
    trainer = Trainer(Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2), experiment_name=experiment_name,
                      progress=False)
    with pytest.raises(ZeroDivisionError), trainer:
        trainer.step()
        _ = 1 / 0
    assert client.get_run(trainer.tracker.run_id).info.status == "FAILED"


def test_a_user_run_in_mlflows_own_default_store_is_logged_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, experiment_name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(None)  # MLflow's default store, not rl8lite's mlruns/ one
    mlflow.set_experiment(experiment_name)
    with mlflow.start_run() as user_run:
        store = mlflow.get_tracking_uri()
        with Trainer(Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2), progress=False) as trainer:
            trainer.step()
        assert trainer.tracker.run_id == user_run.info.run_id
        assert trainer.tracker.tracking_uri == store
        assert history(mlflow.MlflowClient(store), user_run.info.run_id, "env/steps") == [(4, 4.0)]
        with pytest.raises(TrackingError, match="an MLflow run is active in the store"):
            MlflowTracker(experiment_name, tracking_uri=f"sqlite:///{tmp_path / 'other.db'}")


def test_default_store_is_sqlite_in_the_nearest_mlruns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mlruns").mkdir()
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(None)
    assert find_mlruns_dir() == tmp_path / "mlruns"
    uri = default_tracking_uri()
    assert uri == f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    tracker = MlflowTracker("demo")
    tracker.log_metrics({"x": 1.0}, step=1)
    tracker.end()
    experiment = mlflow.MlflowClient(uri).get_experiment_by_name("demo")
    assert experiment.artifact_location == (tmp_path / "mlruns" / "demo").as_uri()
    assert not (tmp_path / "notebooks" / "mlflow.db").exists()


def test_unwritable_store_is_reported_at_construction(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    with pytest.raises(TrackingError, match="cannot .* the MLflow tracking store"):
        MlflowTracker("x", tracking_uri=f"sqlite:///{blocked}/mlflow.db")


def test_policy_is_saved_as_an_mlflow_model(experiment_name: str) -> None:
    import numpy as np
    import torch

    algo = Algorithm(CartPole, num_envs=4, horizon=4, seed=0)
    trainer = Trainer(algo, experiment_name=experiment_name, progress=False)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 1)])
    model = mlflow.pyfunc.load_model(f"runs:/{trainer.tracker.run_id}/policy")
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    actions = model.predict(obs)
    with torch.no_grad():
        expected = algo.policy.act(torch.from_numpy(obs), deterministic=True)[0].numpy()
    assert actions.shape == (5, 1) and actions.dtype == np.int64
    np.testing.assert_array_equal(actions, expected)


def test_background_writer_stores_metrics_without_a_flush(experiment_name: str, client: mlflow.MlflowClient) -> None:
    import time

    tracker = MlflowTracker(experiment_name, flush_interval_s=0.05)
    for step in range(200):
        tracker.log_metrics({"a": float(step), "b": 1.0}, step=step)
    deadline = time.monotonic() + 10
    while len(client.get_metric_history(tracker.run_id, "a")) < 200:
        assert time.monotonic() < deadline, "the background writer did not store the metrics"
        time.sleep(0.05)
    tracker.log_metrics({"a": 200.0}, step=200)
    tracker.end()  # writes what is left synchronously
    assert [m.step for m in client.get_metric_history(tracker.run_id, "a")] == list(range(201))


def test_a_failed_background_write_is_reported(experiment_name: str) -> None:
    tracker = MlflowTracker(experiment_name, flush_interval_s=3600)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    tracker.client.log_batch = broken  # type: ignore[method-assign]
    tracker.log_metrics({"a": 1.0}, step=1)
    with pytest.raises(RuntimeError, match="disk full"):
        tracker.flush()
    del tracker.client.log_batch  # the store works again: the metric was kept for this try
    tracker.end()
    assert [m.step for m in mlflow.MlflowClient(tracker.tracking_uri).get_metric_history(tracker.run_id, "a")] == [1]


def test_a_transient_write_failure_loses_nothing(experiment_name: str, client: mlflow.MlflowClient) -> None:
    import time

    tracker = MlflowTracker(experiment_name, flush_interval_s=0.05)
    real = tracker.client.log_batch
    failures = [1]

    def flaky(*args, **kwargs):
        if failures:
            failures.pop()
            raise RuntimeError("database is locked")
        return real(*args, **kwargs)

    tracker.client.log_batch = flaky  # type: ignore[method-assign]
    tracker.log_metrics({"a": 1.0}, step=1)
    time.sleep(0.3)  # the background writer fails once, then retries
    tracker.log_metrics({"a": 2.0}, step=2)  # never raises for a background failure
    tracker.end()
    assert [m.step for m in client.get_metric_history(tracker.run_id, "a")] == [1, 2]


def test_a_script_that_crashes_leaves_its_run_failed(tmp_path: Path, mlflow_store: str, client: mlflow.MlflowClient) -> None:
    import subprocess
    import sys

    script = tmp_path / "crash.py"
    script.write_text(
        "from rl8lite import Algorithm, Trainer\n"
        "from rl8lite.env import DiscreteDummyEnv\n"
        "t = Trainer(Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2), experiment_name='crash', progress=False)\n"
        "print(t.tracker.run_id, flush=True)\n"
        "t.step()\n"
        "import sys; assert sys.excepthook is sys.__excepthook__, 'a process-wide hook was set'\n"
        "raise RuntimeError('boom')\n"
    )
    out = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MLFLOW_TRACKING_URI": mlflow_store})
    assert out.returncode == 1 and "boom" in out.stderr
    run = client.get_run(out.stdout.split()[0])
    assert run.info.status == "FAILED" and run.data.tags["rl8lite.error"] == "RuntimeError: boom"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "env/steps")] == [4]



@pytest.mark.parametrize(("flags", "status"), [([], "KILLED"), (["-i"], "FINISHED")], ids=["script", "interactive"])
def test_a_script_ended_by_ctrl_c_kills_its_run_and_an_interactive_sessions_old_error_does_not(
    flags: list[str], status: str, mlflow_store: str, client: mlflow.MlflowClient
) -> None:
    import subprocess
    import sys

    code = ("from rl8lite.tracking import MlflowTracker\n"
            "t = MlflowTracker('interrupted'); print(t.run_id, flush=True)\n"
            "raise KeyboardInterrupt\n")
    out = subprocess.run([sys.executable, *flags, "-c", code], check=False, capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, env={**os.environ, "MLFLOW_TRACKING_URI": mlflow_store})
    assert client.get_run(out.stdout.split()[0]).info.status == status, out.stderr

def test_the_ui_command_survives_a_space_in_the_store_path() -> None:
    import shlex

    from rl8lite.tracking import ui_command

    uri = "sqlite:////tmp/my project/mlruns/mlflow.db"
    args = shlex.split(ui_command(uri, port=5123))
    assert args[1:] == ["ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", "5123"]


PROTOCOL = {"run_id", "tracking_uri", "checkpoint_dir", "resumed", "log_params", "log_metrics", "log_artifact",
            "log_image", "log_policy", "flush", "end"}


def test_every_tracker_has_exactly_the_protocols_members(experiment_name: str) -> None:
    from typing_extensions import get_protocol_members

    assert get_protocol_members(Tracker) == PROTOCOL
    recording = RecordingTracker()
    assert {n for n in {*vars(recording), *vars(RecordingTracker)} if not n.startswith("_")} == PROTOCOL | {"calls"}
    mlflow_tracker = MlflowTracker(experiment_name)
    for tracker in (recording, NullTracker(), mlflow_tracker):
        assert isinstance(tracker, Tracker)
        for name in PROTOCOL:
            if callable(getattr(Tracker, name, None)):
                declared = inspect.signature(getattr(Tracker, name)).parameters.values()
                found = inspect.signature(getattr(type(tracker), name)).parameters.values()
                assert [(p.name, p.kind, p.default) for p in found] == [
                    (p.name, p.kind, p.default) for p in declared
                ], (type(tracker).__name__, name)
    mlflow_tracker.end()
    assert (recording.run_id, recording.tracking_uri, recording.checkpoint_dir) == (None, None, None)
    assert mlflow_tracker.checkpoint_dir.name == mlflow_tracker.run_id



def test_runs_without_a_name_get_distinct_names_whatever_the_seed(
    experiment_name: str, client: mlflow.MlflowClient
) -> None:
    names = []
    for _ in range(2):
        with Trainer(Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2, seed=0),
                     experiment_name=experiment_name, progress=False) as trainer:
            names.append(client.get_run(trainer.tracker.run_id).info.run_name)
    assert names[0] != names[1]
    random.seed(0)
    state = random.getstate()
    MlflowTracker(experiment_name).end()
    assert random.getstate() == state  # the seeded global stream did not move



def test_logging_into_an_ended_run_leaves_its_status_and_end_time(
    experiment_name: str, client: mlflow.MlflowClient, tmp_path: Path
) -> None:
    algo = Algorithm(CartPole, num_envs=2, horizon=2, seed=0)
    tracker = MlflowTracker(experiment_name)
    tracker.log_metrics({"a": 1.0}, step=1)
    tracker.end("KILLED")
    ended = client.get_run(tracker.run_id).info
    (tmp_path / "note.txt").write_text("late")
    tracker.log_metrics({"a": 2.0}, step=2)
    tracker.log_params({"late": 1})
    tracker.log_artifact(tmp_path / "note.txt")
    tracker.log_image(np.zeros((4, 4, 3), dtype=np.uint8), key="late", step=2)
    tracker.log_policy(algo.policy, algo.env.observation_spec, step=2)
    tracker.end()  # ending again writes what is queued, and changes nothing else
    run = client.get_run(tracker.run_id)
    assert (run.info.status, run.info.end_time) == ("KILLED", ended.end_time)
    assert [m.step for m in client.get_metric_history(tracker.run_id, "a")] == [1, 2]
    assert run.data.params["late"] == "1" and mlflow.active_run() is None


def test_a_video_policy_and_eval_after_run_leave_the_run_finished(
    experiment_name: str, client: mlflow.MlflowClient
) -> None:
    trainer = Trainer(Algorithm(CartPole, num_envs=4, horizon=8, seed=0, horizons_per_env_reset=1),
                      experiment_name=experiment_name, progress=False, save_policy=False)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 1)])
    ended = client.get_run(trainer.tracker.run_id).info
    trainer.record_video(max_steps=5)
    trainer.log_policy()
    trainer.eval()
    trainer.close()
    run = client.get_run(trainer.tracker.run_id)
    assert (run.info.status, run.info.end_time) == ("FINISHED", ended.end_time)
    assert "eval/returns/mean" in run.data.metrics and "videos/rollout/length" in run.data.metrics

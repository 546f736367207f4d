"""The policy as an MLflow 3 LoggedModel: the run's model, linked metrics, registry, REST serving."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import mlflow
import numpy as np
import pytest

from rl8lite import Algorithm, Trainer
from rl8lite.conditions import HitsUpperBound
from rl8lite.examples import CartPole

from .helpers import MaskedChoice


def trained(experiment_name: str, env=CartPole, **trainer_options) -> Trainer:
    trainer = Trainer(Algorithm(env, num_envs=8, horizon=8, seed=0, horizons_per_env_reset=1),
                      experiment_name=experiment_name, progress=False, **trainer_options)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)])
    return trainer


def test_run_logs_the_policy_as_the_runs_logged_model_with_its_metrics(
    experiment_name: str, client: mlflow.MlflowClient
) -> None:
    trainer = trained(experiment_name, registered_model_name=f"{experiment_name}-policy")
    run_id, model_id = trainer.tracker.run_id, trainer.tracker.model_id
    (model,) = client.search_logged_models([trainer.tracker.experiment_id])
    assert (model.model_id, model.name, model.source_run_id) == (model_id, "policy", run_id)
    assert [o.model_id for o in client.get_run(run_id).outputs.model_outputs] == [model_id]  # the Models column
    linked = {m.key: m.step for m in client.get_logged_model(model_id).metrics}
    assert linked["returns/mean"] == trainer.state["env/steps"]  # the metrics of the step it was logged at
    # evaluations after it are its metrics too
    trainer.eval(name="long_pole", env_config={"length": 1.0})
    trainer.close()
    linked = {m.key for m in client.get_logged_model(model_id).metrics}
    assert "eval/long_pole/returns/mean" in linked
    (version,) = client.search_model_versions(f"name='{experiment_name}-policy'")
    assert model_id in version.source and version.run_id == run_id
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    by_run = mlflow.pyfunc.load_model(f"runs:/{run_id}/policy").predict(obs)
    by_model = mlflow.pyfunc.load_model(f"models:/{model_id}").predict(obs)
    by_registry = mlflow.pyfunc.load_model(f"models:/{experiment_name}-policy/1").predict(obs)
    assert np.array_equal(by_run, by_model) and np.array_equal(by_run, by_registry)
    # registering a later model from the trainer
    trainer.log_policy(registered_model_name=f"{experiment_name}-policy")
    assert len(client.search_model_versions(f"name='{experiment_name}-policy'")) == 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(model_uri: str, tracking_uri: str, log: Path) -> Iterator[str]:
    """``mlflow models serve`` of ``model_uri`` on 127.0.0.1 until the block ends; its URL."""
    port = free_port()
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [str(mlflow_cli), "models", "serve", "-m", model_uri, "--env-manager", "local", "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1"],
            # the server runs `uvicorn` from PATH: the venv's bin first, as an activated venv has it
            env={**os.environ, "MLFLOW_TRACKING_URI": tracking_uri,
                 "PATH": f"{mlflow_cli.parent}{os.pathsep}{os.environ.get('PATH', '')}"},
            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while not ready(url):
                assert process.poll() is None, f"mlflow models serve exited: {log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, "mlflow models serve did not answer /ping within 120 s"
                time.sleep(0.5)
            yield url
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ping", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def invoke(url: str, inputs) -> np.ndarray:
    body = json.dumps({"inputs": inputs}).encode()
    request = urllib.request.Request(f"{url}/invocations", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return np.asarray(json.loads(response.read())["predictions"])


@pytest.mark.parametrize("env", [CartPole, MaskedChoice], ids=["vector", "dict"])
def test_mlflow_models_serve_answers_with_the_actions_predict_gives(
    env, experiment_name: str, mlflow_store: str, tmp_path: Path
) -> None:
    trainer = trained(experiment_name, env=env)
    uri = f"models:/{trainer.tracker.model_id}"
    model = mlflow.pyfunc.load_model(uri)
    rng = np.random.default_rng(0)
    if env is CartPole:
        obs = rng.normal(size=(6, 4)).astype(np.float32)
        inputs = obs.tolist()
    else:
        mask = rng.random((6, 4)) < 0.7
        mask[:, 1] = True
        obs = {"position": rng.normal(size=(6, 2)).astype(np.float32), "action_mask": mask}
        inputs = {key: value.tolist() for key, value in obs.items()}
    expected = model.predict(obs)
    with serve(uri, mlflow_store, tmp_path / "serve.log") as url:
        served = invoke(url, inputs)
        if env is CartPole:  # JSON integers for float inputs
            integers = np.rint(obs * 3).astype(np.int64)
            np.testing.assert_array_equal(invoke(url, integers.tolist()), model.predict(integers))
    assert served.shape == expected.shape and np.array_equal(served, expected)

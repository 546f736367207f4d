"""Sweeps: the sweep file's checks, a study as MLflow runs, workers, a real mlflow server."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import yaml

pytest.importorskip("optuna")

from optuna.trial import TrialState

from rl8lite import cli
from rl8lite.sweeps import Sweep, SweepConfigError, sweep

BASE = {"env_cls": "rl8lite.examples.CartPole",
        "algorithm_config": {"num_envs": 8, "horizon": 16, "seed": 0, "model_config": {"hiddens": [8]}}}
SWEEP = {"metric": "episodes/return_mean", "direction": "maximize", "max_steps": 512, "trials": 2,
         "params": {"algorithm_config.optimizer_config.lr": {"log_uniform": [1e-4, 1e-2]},
                    "algorithm_config.gae_lambda": {"uniform": [0.8, 0.99]},
                    "algorithm_config.num_sgd_iters": {"choice": [2, 4]}}}


def write(tmp_path: Path, name: str = "sweep.yaml", base: dict | None = None, **changes: object) -> Path:
    block = {**SWEEP, **changes}
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**(base or BASE), "sweep": block}))
    return path


def with_algorithm_config(**changes: object) -> dict:
    return {**BASE, "algorithm_config": {**BASE["algorithm_config"], **changes}}


@pytest.mark.parametrize("changes, message", [
    ({"metrik": "x"}, r"unknown sweep key\(s\) \['metrik'\]"),
    ({"params": {"algorithm_config.gae_lambda": {"uniform": [0.99, 0.8]}}}, r"lo 0.99 > hi 0.8"),
    ({"params": {"algorithm_config.optimizer_config.lr": {"log_uniform": [0.0, 1e-2]}}}, r"needs lo > 0"),
    ({"params": {"algorithm_config.gae_lambdda": {"uniform": [0.8, 0.9]}}}, r"gae_lambdda.*did you mean 'gae_lambda'"),
    ({"params": {"algorithm_config.gae_lambda": {"normal": [0.8, 0.9]}}}, r"kind in"),
    ({"metric": "episodes/retrun_mean"}, r"sweep.metric 'episodes/retrun_mean' is no stat"),
    ({"direction": "up"}, r"maximize or minimize"),
])
def test_a_bad_sweep_file_is_one_line_and_status_2_before_any_trial(
        tmp_path: Path, mlflow_store: str, capsys: pytest.CaptureFixture[str], changes: dict, message: str) -> None:
    path = write(tmp_path, **changes)
    client = mlflow.MlflowClient(mlflow_store)
    runs_before = len(client.search_runs([e.experiment_id for e in client.search_experiments()]))
    assert cli.main(["sweep", "-f", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "mlflow.store.db" not in line]
    assert len(err) == 1 and err[0].startswith("rl8lite: error: ") and re.search(message, err[0]), err
    assert len(client.search_runs([e.experiment_id for e in client.search_experiments()])) == runs_before


def children(client: mlflow.MlflowClient, study_run: str) -> list:
    experiment = client.get_run(study_run).info.experiment_id
    return client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{study_run}'")


def test_a_study_is_a_parent_run_with_a_child_run_per_trial_and_continues(tmp_path: Path, mlflow_store: str) -> None:
    path = write(tmp_path, register="cartpole-sweep")
    study = sweep(path, study_name="s1", tracking_uri=mlflow_store)
    client = mlflow.MlflowClient(mlflow_store)
    study_run = client.get_run(study._study_id)
    assert study_run.info.run_name == "s1" and study_run.info.status == "FINISHED"
    assert study_run.data.params["sweep/metric"] == "episodes/return_mean"
    assert "log_uniform" in study_run.data.params["sweep/algorithm_config.optimizer_config.lr"]
    trials = children(client, study._study_id)
    assert len(trials) == 2 and {t.info.status for t in trials} == {"FINISHED"}
    for trial in trials:
        params = trial.data.params
        lr = float(params["algorithm_config.optimizer_config.lr"])  # the sampled value, and as trained
        assert 1e-4 <= lr <= 1e-2 and f'"lr": {lr}' in params["optimizer_config"]
        history = client.get_metric_history(trial.info.run_id, "episodes/return_mean")
        assert len(history) == 4  # the curve: 512 env steps in steps of 128
        assert trial.data.metrics["sweep/objective"] == history[-1].value
    best = max(trials, key=lambda t: t.data.metrics["sweep/objective"])
    assert study_run.data.metrics["sweep/best_value"] == best.data.metrics["sweep/objective"]
    champion = client.get_model_version_by_alias("cartpole-sweep", "champion")
    assert champion.run_id == best.info.run_id or champion.source.endswith(best.data.tags["rl8lite.sweep.model_id"])
    # running it again with more trials continues the same study
    study = sweep(path, study_name="s1", trials=3, tracking_uri=mlflow_store)
    assert len(children(client, study._study_id)) == 3 and len(study.trials) == 3
    assert len(client.search_runs([study_run.info.experiment_id], "attributes.run_name = 's1'")) == 1


def test_a_trial_that_raises_is_recorded_and_the_study_goes_on(tmp_path: Path, mlflow_store: str) -> None:
    params = {"algorithm_config.num_sgd_iters": {"choice": [2, 0]}}  # 0 is refused when built
    path = write(tmp_path, params=params, trials=2, seed=0)  # samples 0, 2, 0, ...
    study = sweep(path, study_name="s2", tracking_uri=mlflow_store, seeds=[0, 1])
    client = mlflow.MlflowClient(mlflow_store)
    states = [(t.state.name, t.params["algorithm_config.num_sgd_iters"]) for t in study.trials]
    assert sorted(states) == [("COMPLETE", 2), ("FAIL", 0), ("FAIL", 0)], states  # stops at 2 failures
    for trial in children(client, study._study_id):
        if trial.info.status == "FAILED":
            assert "num_sgd_iters must be an int >= 1" in trial.data.tags["rl8lite.sweep.error"]
        else:  # two seeds: a child run per seed, the objective their mean
            seeds = children(client, trial.info.run_id)
            assert sorted(r.data.params["seed"] for r in seeds) == ["0", "1"]
            mean = sum(r.data.metrics["episodes/return_mean"] for r in seeds) / 2
            assert trial.data.metrics["sweep/objective"] == pytest.approx(mean)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path: Path):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--default-artifact-root", str(tmp_path / "artifacts"), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            mlflow.MlflowClient(uri).search_experiments(max_results=1)
            break
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.5)
    else:
        os.killpg(server.pid, signal.SIGKILL)
        pytest.fail("mlflow server did not start within 90 s")
    yield uri
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(30)


def run_cli(uri: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rl8lite", "sweep", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "MLFLOW_TRACKING_URI": uri}, timeout=600, check=False)


@pytest.mark.slow
def test_two_workers_against_an_mlflow_server_and_a_killed_worker_leaves_its_trial_failed(
        tmp_path: Path, mlflow_server: str) -> None:
    path = write(tmp_path, trials=3)
    done = run_cli(mlflow_server, "-f", str(path), "--workers", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3 trials (3 complete)" in done.stdout
    client = mlflow.MlflowClient(mlflow_server)
    (study_run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                      filter_string="attributes.run_name = 'sweep'")
    pids = {t.data.tags["rl8lite.sweep.pid"] for t in children(client, study_run.info.run_id)}
    assert len(pids) == 2  # both workers ran trials
    # a worker killed mid-trial: its trial is FAILED at the next run, which carries on
    slow_base = with_algorithm_config(num_envs=2, horizon=2)  # 4 env steps per training step: slow
    slow = write(tmp_path, "slow.yaml", slow_base, max_steps=200_000, trials=1)
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - the worker writes to it
    worker = subprocess.Popen([sys.executable, "-m", "rl8lite", "sweep", "--worker", "-f", str(slow)],
                              cwd=tmp_path, env={**os.environ, "MLFLOW_TRACKING_URI": mlflow_server},
                              stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and worker.poll() is None:
        running = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                     filter_string="attributes.status = 'RUNNING' and tags.`rl8lite.sweep.pid` != ''")
        if running:
            break
        time.sleep(0.5)
    worker.kill()
    worker.wait()
    log.close()
    assert running, f"the worker never started its trial: {(tmp_path / 'worker.log').read_text()[-3000:]}"
    fast = write(tmp_path, "slow.yaml", with_algorithm_config(num_envs=256, horizon=64), max_steps=200_000, trials=1)
    done = run_cli(mlflow_server, "-f", str(fast), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert client.get_run(running[0].info.run_id).info.status == "FAILED"
    assert "2 trials (1 complete, 1 fail)" in done.stdout


def test_median_pruning_stops_a_trial_that_falls_behind(tmp_path: Path, mlflow_store: str) -> None:
    params = {"algorithm_config.optimizer_config.lr": {"choice": [0.01, 1e-7]}}  # 1e-7 learns nothing
    path = write(tmp_path, params=params, trials=3, seed=6, pruner="median", max_steps=4096)  # 0.01, 0.01, 1e-7
    study = sweep(path, study_name="s3", tracking_uri=mlflow_store)
    states = [(t.state.name, t.params["algorithm_config.optimizer_config.lr"]) for t in study.trials]
    assert sorted(states) == [("COMPLETE", 0.01), ("COMPLETE", 0.01), ("PRUNED", 1e-7)], states
    (pruned,) = study.get_trials(states=(TrialState.PRUNED,))
    assert 1024 <= max(pruned.intermediate_values) < 4096  # after the warm-up, before the end
    run = mlflow.MlflowClient(mlflow_store).get_run(pruned._trial_id)
    assert run.info.status == "KILLED"


def test_an_eval_stat_as_the_metric(tmp_path: Path, mlflow_store: str) -> None:
    path = write(tmp_path, metric="eval/episodes/return_mean", steps_per_eval=2, trials=1,
                 eval_env_config={"max_episode_steps": 50})
    study = sweep(path, study_name="s4", tracking_uri=mlflow_store)
    client = mlflow.MlflowClient(mlflow_store)
    (trial,) = children(client, study._study_id)
    history = client.get_metric_history(trial.info.run_id, "eval/episodes/return_mean")
    assert len(history) == 1 and study.trials[0].value == history[-1].value <= 50  # at 2 of 4 steps
    with pytest.raises(SweepConfigError, match="is an eval stat: set sweep.steps_per_eval"):
        Sweep.from_file(write(tmp_path, metric="eval/episodes/return_mean"))


@pytest.mark.slow
def test_workers_killed_mid_trial_leave_their_trials_failed_and_the_command_says_so(
        tmp_path: Path, mlflow_store: str) -> None:
    path = tmp_path / "dies.yaml"
    path.write_text(yaml.safe_dump({"env_cls": "tests.helpers.DiesInSweepWorkers",
                                    "algorithm_config": {"num_envs": 2, "horizon": 4},
                                    "sweep": {**SWEEP, "metric": "returns/mean", "trials": 2}}))
    done = run_cli(mlflow_store, "-f", str(path), "--workers", "2", cwd=Path(__file__).parents[1])
    assert done.returncode == 1, done.stderr[-3000:]
    assert "2 of 2 sweep workers exited with status [-9, -9]; their running trials are FAILED" in done.stderr
    client = mlflow.MlflowClient(mlflow_store)
    (study_run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                      filter_string="attributes.run_name = 'dies'")
    trials = children(client, study_run.info.run_id)
    assert len(trials) == 2 and {t.info.status for t in trials} == {"FAILED"}

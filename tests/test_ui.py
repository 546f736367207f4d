"""The MLflow UI on a store rl8lite wrote: start the server the library tells users to
start (``tracker.ui_command``), read the run back through its REST API, open the
runs-view link, and shut it down without leaving a process behind.

Only 127.0.0.1 is used; the server runs on a temporary store, never the repo's mlruns/.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest

from rl8lite import Algorithm, Trainer
from rl8lite.conditions import HitsUpperBound
from rl8lite.examples import CartPole
from rl8lite.tracking import runs_view_url, ui_command

from .browser import chromium, run_in_chromium

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def mlflow_executable() -> list[str]:
    """The ``mlflow`` CLI next to this interpreter (``python -m mlflow`` when missing)."""
    sibling = Path(sys.executable).with_name("mlflow")
    return [str(sibling)] if sibling.exists() else [sys.executable, "-m", "mlflow"]


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


def api(base: str, endpoint: str, *, get: dict[str, Any] | None = None, post: dict[str, Any] | None = None) -> dict[str, Any]:
    url = f"{base}/api/2.0/mlflow/{endpoint}"
    if get is not None:
        url += "?" + urllib.parse.urlencode(get)
    status, payload = http(url, post)
    assert status == 200, (endpoint, status, payload[:500])
    return json.loads(payload)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a reused group id we do not own
        return False
    return True


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, wait, then SIGKILL whatever is left."""
    pgid = proc.pid  # start_new_session=True: the CLI leads its own group
    if group_alive(pgid):
        os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=10)
    # Workers exit after the CLI: give them a moment, then kill any straggler.
    deadline = time.monotonic() + 10
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.5)


@contextlib.contextmanager
def ui_server(tracking_uri: str, folder: Path) -> Iterator[str]:
    """The UI command rl8lite prints, on a free port, lighter for a test (one worker, no job
    runner: ready in ~4 s instead of ~17 s), run in ``folder`` until the block ends; its URL."""
    port = free_port()
    command = shlex.split(ui_command(tracking_uri, port=port))
    executable = [command[0]] if Path(command[0]).is_absolute() else mlflow_executable()
    command = [*executable, *command[1:], "--workers", "1"]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    log = folder / "server.log"
    base = f"http://{HOST}:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    try:
        wait_healthy(base, proc, log)
        yield base
    finally:
        stop_group(proc)
    assert proc.returncode is not None
    assert not group_alive(proc.pid), "an mlflow server process outlived the test"


def wait_healthy(base: str, proc: subprocess.Popen[bytes], log: Path) -> float:
    start = time.monotonic()
    while time.monotonic() - start < STARTUP_TIMEOUT_S:
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            status, body = http(f"{base}/health", timeout=2)
            if status == 200 and body.strip() == b"OK":
                return time.monotonic() - start
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.25)
    pytest.fail(f"mlflow server not healthy after {STARTUP_TIMEOUT_S:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_ui_serves_the_logged_run(
    mlflow_store: str, experiment_name: str, tmp_path: Path
) -> None:
    # A short run into the temporary store: 4 steps of 32 env steps, then one named eval.
    algo = Algorithm(CartPole, num_envs=8, horizon=4, horizons_per_env_reset=2, seed=0)
    trainer = Trainer(algo, experiment_name=experiment_name, run_name="ui", progress=False, save_policy=False)
    for _ in range(4):
        trainer.step()
    trainer.eval(env_config={"length": 1.0}, name="long_pole")
    trainer.close()
    tracker = trainer.tracker
    assert tracker.tracking_uri == mlflow_store

    # The command the library prints
    assert tracker.ui_command == ui_command(tracker.tracking_uri)
    command = shlex.split(ui_command(tracker.tracking_uri, port=5077))
    assert Path(command[0]).name == "mlflow" and command[1] == "ui", command
    options = dict(zip(command[2::2], command[3::2]))
    assert options == {"--backend-store-uri": tracker.tracking_uri, "--host": HOST, "--port": "5077"}, command
    with ui_server(tracker.tracking_uri, tmp_path) as base:
        runs = api(base, "runs/search", post={"experiment_ids": [tracker.experiment_id]})["runs"]
        assert [r["info"]["run_id"] for r in runs] == [tracker.run_id]
        info = runs[0]["info"]
        assert info["status"] == "FINISHED" and info["run_name"] == "ui"

        run = api(base, "runs/get", get={"run_id": tracker.run_id})["run"]
        params = {p["key"]: p["value"] for p in run["data"]["params"]}
        assert params["env_cls"] == "rl8lite.examples.cartpole.CartPole"
        assert params["num_envs"] == "8" and params["horizon"] == "4" and params["seed"] == "0"

        def history(key: str) -> list[dict[str, Any]]:
            return api(base, "metrics/get-history", get={"run_id": tracker.run_id, "metric_key": key})["metrics"]

        # one point per training step, at step = env steps
        returns = history("returns/mean")
        assert sorted(int(m["step"]) for m in returns) == [32, 64, 96, 128]
        env_steps = history("env/steps")
        assert sorted((int(m["step"]), m["value"]) for m in env_steps) == [(32, 32.0), (64, 64.0), (96, 96.0), (128, 128.0)]
        evals = history("eval/long_pole/returns/mean")
        assert [int(m["step"]) for m in evals] == [128]

        # The runs-view link (the fragment stays in the browser; the server serves the app).
        port = base.rsplit(":", 1)[1]
        url = runs_view_url(tracker.experiment_id, port=int(port))
        assert url == f"{base}/#/experiments/{tracker.experiment_id}/runs?workflowType=machine_learning"
        assert tracker.runs_url == runs_view_url(tracker.experiment_id)
        status, page = http(url)
        assert status == 200 and b"<html" in page.lower()


@pytest.mark.slow
def test_trainers_log_into_an_mlflow_server_and_read_back_through_it(
    tmp_path: Path, experiment_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The set-up the README gives for sweeps and torchrun jobs: one server on a real store.
    monkeypatch.chdir(tmp_path)  # the server keeps its artifacts (./mlartifacts) here
    with ui_server(f"sqlite:///{tmp_path / 'server.db'}", tmp_path) as base:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", base)
        mlflow.set_tracking_uri(base)
        trainer = Trainer(Algorithm(CartPole, num_envs=8, horizon=8, seed=0), experiment_name=experiment_name,
                          progress=False)
        trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)])
        client = mlflow.MlflowClient(base)
        run = client.get_run(trainer.tracker.run_id)
        assert run.info.status == "FINISHED" and run.data.metrics["env/steps"] == 128
        assert [m.step for m in client.get_metric_history(run.info.run_id, "returns/mean")] == [64, 128]
        obs = np.zeros((3, 4), dtype=np.float32)
        actions = mlflow.pyfunc.load_model(f"models:/{trainer.tracker.model_id}").predict(obs)
        assert actions.shape == (3, 1)


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="needs Chromium (Debian's chromium package: /usr/bin/chromium)")
def test_the_rollout_video_plays_in_the_runs_artifact_page_in_chromium(
    mlflow_store: str, experiment_name: str, tmp_path: Path
) -> None:
    trainer = Trainer(Algorithm(CartPole, num_envs=8, horizon=8, seed=0), experiment_name=experiment_name,
                      progress=False, save_policy=False)
    trainer.step()
    path = trainer.record_video(max_steps=60)
    trainer.close()
    tracker = trainer.tracker
    assert path.endswith(".mp4")
    page_url = f"#/experiments/{tracker.experiment_id}/runs/{tracker.run_id}/artifacts/{path}"
    screenshot = tmp_path / "rollout-video.png"

    async def watch(page) -> dict[str, float]:
        await page.navigate(f"{base}/{page_url}")
        await page.wait_for("(v => v !== null && v.readyState >= 2)(document.querySelector('video'))")
        played = await page.evaluate(
            "(async () => { const v = document.querySelector('video'); v.muted = true; await v.play();"
            " const start = v.currentTime; await new Promise(r => setTimeout(r, 300));"
            " return {ready: v.readyState, start: start, now: v.currentTime, width: v.videoWidth,"
            " height: v.videoHeight, duration: v.duration, error: v.error ? v.error.code : 0}; })()"
        )
        await page.screenshot(screenshot)
        return played

    with ui_server(mlflow_store, tmp_path) as base:
        played = run_in_chromium(watch)
    assert played["error"] == 0 and played["ready"] >= 2, played
    assert (played["width"], played["height"]) == (600, 400)
    assert played["now"] > played["start"]  # it plays
    assert screenshot.stat().st_size > 10_000
    print(f"screenshot of the playing video: {screenshot}")

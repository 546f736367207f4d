"""Gymnasium env failures are clear and leave nothing behind: a sub-env's exception names the
copy, its type, message and traceback (also under ``-W error``); a killed worker is reported,
not waited for; after any failure, ``close()``, garbage collection or exit, no worker remains."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil  # with the test extra (ipykernel needs it)
import pytest
import torch

pytest.importorskip("gymnasium")

from rl8lite import Algorithm
from rl8lite.env import SubEnvError, gymnasium_env

from .gymnasium_envs import make_exploding, make_unbuildable_in_workers

ROOT = Path(__file__).resolve().parents[1]
ACTIONS = torch.zeros(3, 1, dtype=torch.long)

pytestmark = pytest.mark.slow  # worker processes


def running(pids: list[int]) -> list[int]:
    """The pids that still name a process (a zombie, never reaped, counts)."""
    return [pid for pid in pids if psutil.pid_exists(pid)]


def worker_pids(env: object) -> list[int]:
    return [p.pid for p in env.vector_env.processes]  # type: ignore[attr-defined]


#: pyproject.toml's exceptions to "every warning is an error": MLflow's own import-time warnings.
MLFLOW_WARNINGS = """
import warnings
warnings.filterwarnings("ignore", ".*Any type hint is inferred as AnyType", UserWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning, module="mlflow")
warnings.filterwarnings("ignore", category=FutureWarning, module="mlflow")
"""


def run_python(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with ``python -W error`` (every warning an error, MLflow's aside)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    code = MLFLOW_WARNINGS + textwrap.dedent(script)
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_sub_env_exception_names_the_copy_its_type_message_and_traceback(mode: str) -> None:
    env = gymnasium_env(make_exploding, vectorization_mode=mode, seed=100, bad_seeds=[101], at=3)(3)
    pids = worker_pids(env) if mode == "async" else []
    env.reset()
    env.step(ACTIONS)
    env.step(ACTIONS)
    with pytest.raises(SubEnvError) as caught:
        env.step(ACTIONS)
    message = str(caught.value)
    assert message.startswith("sub-env 1 raised ValueError in step(): boom at step 3"), message
    assert "--- traceback of sub-env 1 ---" in message
    assert "gymnasium_envs.py" in message and "in explode" in message, (
        "the traceback reaches the env's code"
    )
    assert "sub-env 0" not in message and "sub-env 2" not in message
    with pytest.raises(
        RuntimeError, match="make_exploding is closed after sub-env failure: sub-env 1 raised"
    ):
        env.step(ACTIONS)
    assert running(pids) == []


def test_every_failing_copy_is_named() -> None:
    env = gymnasium_env(
        make_exploding, vectorization_mode="async", seed=100, bad_seeds=[100, 102], at=1
    )(3)
    pids = worker_pids(env)
    env.reset()
    with pytest.raises(SubEnvError) as caught:
        env.step(ACTIONS)
    message = str(caught.value)
    assert "sub-env 0 raised ValueError" in message and "sub-env 2 raised ValueError" in message
    assert "sub-env 1" not in message
    assert running(pids) == []


def test_under_python_w_error_failures_are_reported_and_forgotten_envs_end_at_exit() -> None:
    result = run_python("""
        import torch
        from rl8lite.env import SubEnvError, gymnasium_env
        from tests.gymnasium_envs import make_exploding
        env = gymnasium_env(make_exploding, vectorization_mode="async", seed=0, bad_seeds=[1], at=2)(2)
        env.reset()
        try:
            for _ in range(3):
                env.step(torch.zeros(2, 1, dtype=torch.long))
        except SubEnvError as e:
            print(e)
        print("workers alive:", [p.is_alive() for p in env.vector_env.processes])
        forgotten = gymnasium_env("CartPole-v1", vectorization_mode="async")(2)
        forgotten.reset()
        print("forgotten:", *[p.pid for p in forgotten.vector_env.processes])
    """)
    assert result.returncode == 0, result.stderr
    assert "sub-env 1 raised ValueError in step(): boom at step 2" in result.stdout
    assert "in explode" in result.stdout and "workers alive: [False, False]" in result.stdout
    assert "Warning" not in result.stdout + result.stderr
    pids = [int(pid) for pid in result.stdout.split("forgotten:")[1].split()]
    deadline = time.monotonic() + 10
    while running(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids) == 2 and running(pids) == [], (
        "the forgotten env's workers ended with the interpreter"
    )


@pytest.mark.parametrize(
    ("how", "death"), [("kill", "was killed by SIGKILL"), ("exit", "exited with status 3")]
)
def test_a_worker_that_dies_is_reported_by_sub_env_and_the_others_are_ended(
    how: str, death: str
) -> None:
    env = gymnasium_env(
        make_exploding, vectorization_mode="async", seed=0, bad_seeds=[2], at=2, how="exit"
    )(3)
    pids = worker_pids(env)
    env.reset()
    if how == "kill":
        os.kill(pids[2], signal.SIGKILL)
        env.vector_env.processes[2].join(10)
    start = time.monotonic()
    with pytest.raises(SubEnvError, match=rf"sub-env 2's worker \(pid {pids[2]}\) {death}"):
        for _ in range(3):
            env.step(ACTIONS)
    assert time.monotonic() - start < 30, "reported, not waited for"
    assert running(pids) == []
    with pytest.raises(RuntimeError, match="closed after sub-env failure"):
        env.reset()


def test_a_sync_copys_observation_of_the_wrong_shape_is_named() -> None:
    env = gymnasium_env(make_exploding, seed=0, bad_seeds=[1], at=2, how="misshape")(3)
    env.reset()
    env.step(ACTIONS)
    with pytest.raises(SubEnvError, match=r"^sub-env 1 returned a ndarray of shape \(5,\), which does not fit Box"):
        env.step(ACTIONS)
    with pytest.raises(RuntimeError, match="closed after sub-env failure: sub-env 1 returned"):
        env.reset()


def test_a_copy_that_fails_to_build_in_its_worker_is_named_with_its_error() -> None:
    cls = gymnasium_env(make_unbuildable_in_workers, vectorization_mode="async")
    before = set(psutil.Process().children(recursive=True))
    with pytest.raises(SubEnvError) as raised:
        cls(3)
    message = str(raised.value)
    for index in range(3):
        assert f"sub-env {index} raised OSError in its construction: cannot open /dev/simulator0" in message
    assert "in make_unbuildable_in_workers" in message  # the worker's traceback
    left = [p for p in psutil.Process().children(recursive=True) if p not in before and p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]
    assert left == []


def test_workers_leave_the_process_groups_signals_to_the_main_process() -> None:
    # Ctrl-C in a terminal, a scheduler's SIGTERM or a SIGUSR1 reach every process of the
    # group: the workers go on, and the main process (a Trainer) stops or checkpoints.
    env = gymnasium_env("CartPole-v1", vectorization_mode="async")(2)
    try:
        pids = worker_pids(env)
        env.reset()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            for pid in pids:
                os.kill(pid, signum)
        time.sleep(0.2)
        assert running(pids) == pids
        for _ in range(3):
            env.step(torch.zeros(2, 1, dtype=torch.long))
    finally:
        env.close()
    assert running(pids) == []


def test_close_ends_the_workers_and_a_closed_env_says_so() -> None:
    algo = Algorithm(
        gymnasium_env("CartPole-v1", vectorization_mode="async"), num_envs=2, horizon=4, seed=0
    )
    pids = worker_pids(algo.env)
    algo.collect()
    assert len(running(pids)) == 2
    algo.close()
    assert running(pids) == []
    algo.close()  # harmless twice
    with pytest.raises(RuntimeError, match="CartPole-v1 is closed$"):
        algo.env.reset()


def test_a_forgotten_env_ends_its_workers_when_collected() -> None:
    env = gymnasium_env("CartPole-v1", vectorization_mode="async")(2)
    pids = worker_pids(env)
    del env
    gc.collect()
    assert running(pids) == []


def test_rl8lite_works_without_gymnasium_and_gymnasium_env_says_how_to_get_it() -> None:
    result = run_python("""
        import sys
        sys.modules["gymnasium"] = None  # as if it were not installed
        import rl8lite, rl8lite.env, rl8lite.trainers, rl8lite.cli
        from rl8lite import Algorithm, TrainConfig
        from rl8lite.env import DiscreteDummyEnv, gymnasium_env
        Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2).collect()
        for make in (lambda: gymnasium_env("CartPole-v1"), lambda: TrainConfig("gymnasium:CartPole-v1")):
            try:
                make()
            except ImportError as e:
                print(e)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("needs Gymnasium: pip install rl8lite[gymnasium]") == 2, (
        result.stdout
    )

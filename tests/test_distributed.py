"""Data-parallel training under torchrun (gloo on the CPU): jobs in ``distributed_job.py``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import torch

from rl8lite import Algorithm, Trainer
from rl8lite.examples import CartPole
from rl8lite.runtime.checkpoint_files import CheckpointError, numbered_checkpoints, rank_file
from rl8lite.runtime.distributed import DistributedError, check_backend, rank_device

from . import distributed_job as job

JOB = Path(__file__).with_name("distributed_job.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]

pytestmark = pytest.mark.slow  # worker processes


def job_env(experiment: str) -> dict[str, str]:
    # The session's store (conftest): an existing SQLite db saves each job ~1.5 s of set-up.
    return {**os.environ, "EXPERIMENT": experiment, "PYTHONWARNINGS": "ignore"}


def torchrun(tmp_path: Path, experiment: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    command = [*TORCHRUN, "--standalone", "--nproc_per_node=2", str(JOB), *args]
    return subprocess.run(command, cwd=tmp_path, env=job_env(experiment), capture_output=True, text=True,
                          timeout=timeout, check=False)


def the_run(client: mlflow.MlflowClient, experiment: str) -> mlflow.entities.Run:
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return run


def result(out: Path, rank: int = 0) -> dict:
    return torch.load(f"{out}.rank{rank}.pt", weights_only=False)


def test_two_ranks_make_the_update_of_one_process_holding_every_sample(tmp_path: Path) -> None:
    reference = {}
    for name in job.EQUIVALENCE:
        algo = Algorithm(CartPole, **job.equivalence_config(name, 16))
        algo.collect()
        reference[name] = {
            "num_envs": 16, "reward_scale": algo.state.reward_scale,
            "initial_params": {k: v.clone() for k, v in algo.policy.state_dict().items()},
            "buffer": {k: v.clone() for k, v in algo.buffer.items()},
        }
        reference[name]["stats"] = algo.step()
        reference[name]["params"] = {k: v.clone() for k, v in algo.policy.state_dict().items()}
    torch.save(reference, tmp_path / "reference.pt")
    done = torchrun(tmp_path, "", "equivalence", str(tmp_path / "out"), str(tmp_path / "reference.pt"))
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [result(tmp_path / "out", r) for r in (0, 1)]
    for name in job.EQUIVALENCE:
        got, want = ranks[0][name], reference[name]
        assert got["ranks_equal"] and ranks[1][name]["ranks_equal"], name  # bitwise, params + Adam state
        for key, value in want["params"].items():
            torch.testing.assert_close(got["params"][key].double(), value.double(), rtol=1e-5, atol=1e-6,
                                       msg=f"{name}: {key}")
        for key in ("losses/total", "losses/policy", "losses/vf", "monitors/kl_div", "monitors/clip_fraction",
                    "monitors/grad_norm", "monitors/explained_variance", "monitors/sgd_iters"):
            assert got["stats"][key] == pytest.approx(want["stats"][key], rel=1e-4, abs=1e-6), (name, key)
    iterations = ranks[0]["iterations"]
    assert iterations["ranks_equal"] and not iterations["actions_equal"]  # same parameters, own samples
    assert iterations["env_steps"] == 2 * 8 * 16  # global


def test_one_run_global_counts_and_an_exact_two_rank_resume(
    tmp_path: Path, client: mlflow.MlflowClient, experiment_name: str, mlflow_store: str
) -> None:
    straight = torchrun(tmp_path, experiment_name, "train", str(tmp_path / "straight"), "5")
    assert straight.returncode == 0, straight.stderr[-3000:]
    final = result(tmp_path / "straight")
    assert final["env_steps"] == 5 * 2 * 8 * 16
    run = the_run(client, experiment_name)
    assert run.info.status == "FINISHED" and run.data.params["world_size"] == "2"
    history = client.get_metric_history(run.info.run_id, "env/steps")
    assert [m.value for m in history] == [k * 256.0 for k in range(1, 6)]
    folder = Path(mlflow_store.removeprefix("sqlite:///")).parent / "checkpoints" / run.info.run_id
    checkpoint = folder / "checkpoint-000000000768.pt"  # step 3 of 5, both ranks' files
    assert checkpoint.is_file() and rank_file(checkpoint, 1).is_file()
    # every 3 steps, and when the run ends
    assert [p.name for _, p in numbered_checkpoints(folder, 1)] == [
        "checkpoint-000000000768.rank1.pt", "checkpoint-000000001280.rank1.pt"]
    resumed = torchrun(tmp_path, experiment_name, "resume", str(tmp_path / "resumed"), str(checkpoint))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for rank in (0, 1):
        again = result(tmp_path / "resumed", rank)
        assert again["run_id"] == (final["run_id"] if rank == 0 else None) and again["env_steps"] == final["env_steps"]
        for key, value in final["params"].items():
            assert torch.equal(again["params"][key], value), key
    # another world size is refused, naming both
    with pytest.raises(CheckpointError, match=r"written by 2 process\(es\) and is resumed by 1"):
        Trainer.from_checkpoint(checkpoint)


def test_a_signal_to_one_rank_stops_both_at_the_same_step(
    tmp_path: Path, client: mlflow.MlflowClient, experiment_name: str, mlflow_store: str
) -> None:
    done = torchrun(tmp_path, experiment_name, "signal", str(tmp_path / "out"))
    assert done.returncode != 0  # both exit as SIGTERM asks (143)
    assert [result(tmp_path / "out", r)["steps"] for r in (0, 1)] == [2, 2]
    run = the_run(client, experiment_name)
    assert run.info.status == "KILLED"
    folder = Path(mlflow_store.removeprefix("sqlite:///")).parent / "checkpoints" / run.info.run_id
    assert [n for n, _ in numbered_checkpoints(folder, 0)] == [512] == [n for n, _ in numbered_checkpoints(folder, 1)]


def test_an_exception_on_one_rank_ends_the_job_at_once_naming_the_rank(
    tmp_path: Path, client: mlflow.MlflowClient, experiment_name: str
) -> None:
    start = time.monotonic()
    done = torchrun(tmp_path, experiment_name, "fail", str(tmp_path / "out"), timeout=100)
    assert time.monotonic() - start < 60  # the collective timeout is 30 minutes
    assert done.returncode != 0
    assert "rank 1 failed: ValueError: the env broke on purpose" in done.stderr
    run = the_run(client, experiment_name)
    assert run.info.status == "FAILED"
    assert run.data.tags["rl8lite.error"] == "rank 1 failed: ValueError: the env broke on purpose"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gymnasium_envs_train_under_torchrun_each_rank_with_its_own_seeds(
    tmp_path: Path, experiment_name: str, mode: str
) -> None:
    pytest.importorskip("gymnasium")
    done = torchrun(tmp_path, experiment_name, "gymnasium", str(tmp_path / "out"), mode)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [result(tmp_path / "out", r) for r in (0, 1)]
    assert [r["seeds"] for r in ranks] == [[5, 6, 7, 8], [9, 10, 11, 12]]  # seed + rank * num_envs + i
    assert all(r["params_equal"] and r["env_steps"] == 3 * 2 * 4 * 8 for r in ranks)
    assert [r["workers_left"] for r in ranks] == [0, 0]


def test_ranks_with_different_configs_are_refused_before_training(tmp_path: Path) -> None:
    done = torchrun(tmp_path, "", "mismatch", str(tmp_path / "out"))
    assert done.returncode != 0
    assert "the ranks were given different configs (num_envs: rank 0 8, rank 1 6)" in done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_agents_as_two_nodes_train_and_log_one_run(
    tmp_path: Path, client: mlflow.MlflowClient, experiment_name: str
) -> None:
    rendezvous = ["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-id=job"]
    nodes = [
        subprocess.Popen([*TORCHRUN, *rendezvous, f"--node-rank={node}", "--nproc_per_node=1", str(JOB),
                          "train", str(tmp_path / "out"), "2"], cwd=tmp_path, env=job_env(experiment_name),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for node in (0, 1)
    ]
    outputs = [node.communicate(timeout=120) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][1][-2000:] + outputs[1][1][-2000:]
    run = the_run(client, experiment_name)
    assert run.info.status == "FINISHED" and run.data.metrics["env/steps"] == 2 * 2 * 8 * 16


def test_a_rank_trains_on_cuda_local_rank_and_the_backend_must_fit_the_device() -> None:
    assert rank_device("auto", 1, cuda_available=True) == torch.device("cuda", 1)
    assert rank_device("cuda", 3, cuda_available=True) == torch.device("cuda", 3)
    assert rank_device("auto", 1, cuda_available=False) == torch.device("cpu")
    with pytest.raises(DistributedError, match=r"device='cuda:0' on the process with LOCAL_RANK=1"):
        rank_device("cuda:0", 1, cuda_available=True)
    with pytest.raises(DistributedError, match="NCCL backend, which needs CUDA devices, but this rank trains on cpu"):
        check_backend("nccl", torch.device("cpu"))
    with pytest.warns(RuntimeWarning, match="gloo while training on CUDA"):
        check_backend("gloo", torch.device("cuda", 0))


def test_one_process_joins_no_process_group() -> None:
    algo = Algorithm(CartPole, num_envs=4, horizon=4)
    assert not torch.distributed.is_initialized()
    assert (algo.ranks.rank, algo.ranks.world_size, algo.ranks.distributed) == (0, 1, False)
    assert algo.ranks.agree([1.0, 0.0]) == [1.0, 0.0] and algo.ranks.collective_seconds == 0.0


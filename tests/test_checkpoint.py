"""Checkpoints: exact resume into the same run, safe loading, atomic writes, signals."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import mlflow
import pytest
import torch

from rl8lite import Algorithm, ConfigError, Trainer
from rl8lite.conditions import HitsUpperBound
from rl8lite.examples import CartPole
from rl8lite.models import DefaultModel
from rl8lite.runtime.checkpoint_files import CheckpointError, read_checkpoint, write_atomic
from rl8lite.trainers.checkpoints import latest_checkpoint_of_run

from .helpers import MemoryTracker

VOLATILE = ("profiling/", "throughput/", "memory/")


def make(experiment_name: str) -> Trainer:
    # horizons_per_env_reset = 16: the env's episodes continue across collects,
    # so the env's own state must travel in the checkpoint too.
    algo = Algorithm(CartPole, num_envs=8, horizon=8, seed=3, sgd_minibatch_size=16)
    return Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)


def stable(stats: list[dict[str, float]]) -> str:
    return repr([{k: v for k, v in s.items() if not k.startswith(VOLATILE)} for s in stats])


def test_resume_is_bit_identical_and_continues_the_run(experiment_name: str, client: mlflow.MlflowClient) -> None:
    straight = make(experiment_name)
    reference = [straight.step() for _ in range(6)]
    straight.close()

    first = make(experiment_name)
    for _ in range(3):
        first.step()
    path = first.save_checkpoint()
    first.close()

    resumed = Trainer.from_checkpoint(path, progress=False, save_policy=False)
    continued = [resumed.step() for _ in range(3)]
    resumed.close()
    assert stable(continued) == stable(reference[3:])
    for a, b in zip(straight.algorithm.policy.parameters(), resumed.algorithm.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    assert resumed.state == straight.state
    # same run, step axis continues with no gap and no duplicate
    run_id = first.tracker.run_id
    assert resumed.tracker.run_id == run_id
    steps = [m.step for m in client.get_metric_history(run_id, "returns/mean")]
    assert steps == [64, 128, 192, 256, 320, 384]
    assert client.get_run(run_id).info.status == "FINISHED"


def test_resume_from_run_id_and_keep_last_checkpoints(experiment_name: str, client: mlflow.MlflowClient) -> None:
    trainer = make(experiment_name)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 5)], checkpoint_every=1, keep_checkpoints=2)
    run_id = trainer.tracker.run_id
    files = sorted(trainer.tracker.checkpoint_dir.glob("checkpoint-*.pt"))
    assert [f.name for f in files] == ["checkpoint-000000000256.pt", "checkpoint-000000000320.pt"]
    assert [a.path for a in client.list_artifacts(run_id, "checkpoints")] == ["checkpoints/latest.pt"]
    resumed = Trainer.from_checkpoint(run_id, progress=False, save_policy=False)
    assert resumed.state["algorithm/steps"] == 5
    resumed.step()
    resumed.close()
    assert [m.step for m in client.get_metric_history(run_id, "env/steps")][-2:] == [320, 384]


def test_a_run_with_checkpoints_ends_with_one_so_resuming_never_rewinds(experiment_name: str) -> None:
    trainer = make(experiment_name)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)])
    assert not list(trainer.tracker.checkpoint_dir.glob("checkpoint-*.pt"))  # none asked for
    trainer = make(experiment_name)
    trainer.save_checkpoint()  # a checkpoint in the run's folder at step 0
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)])
    run_id = trainer.tracker.run_id
    resumed = Trainer.from_checkpoint(run_id, progress=False, save_policy=False)
    assert resumed.state["algorithm/steps"] == 2
    resumed.run(stop_conditions=[HitsUpperBound("algorithm/steps", 4)])  # no checkpoint_every
    again = Trainer.from_checkpoint(run_id, progress=False, save_policy=False)
    assert again.state["algorithm/steps"] == 4
    again.close()


def test_bad_checkpoint_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(tmp_path / "nope.pt")
    good = write_atomic({"format": "rl8lite-checkpoint", "version": 1, "x": torch.ones(1000)}, tmp_path / "good.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"checkpoint '.*truncated.pt' is corrupt, truncated"):
        read_checkpoint(truncated)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="garbage.pt"):
        read_checkpoint(garbage)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(CheckpointError, match="is not an rl8lite checkpoint"):
        read_checkpoint(other)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_loading_never_unpickles_arbitrary_objects(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"format": "rl8lite-checkpoint", "version": 1, "payload": Evil()}, path)
    with pytest.raises(CheckpointError, match="not a safe rl8lite checkpoint"):
        read_checkpoint(path)


def test_non_finite_step_writes_no_checkpoint(experiment_name: str, client: mlflow.MlflowClient) -> None:
    from .helpers import bad_env

    trainer = Trainer(Algorithm(bad_env("nan_rewards", at_step=6), num_envs=4, horizon=3, horizons_per_env_reset=-1),
                      experiment_name=experiment_name, progress=False, save_policy=False)
    with pytest.raises(ValueError, match="non-finite 'rewards'"):
        trainer.run(checkpoint_every=1)
    files = sorted(trainer.tracker.checkpoint_dir.glob("checkpoint-*.pt"))
    assert [f.name for f in files][-1] == "checkpoint-000000000024.pt"  # the last good step (2)
    assert client.get_run(trainer.tracker.run_id).info.status == "FAILED"


CHILD = textwrap.dedent(
    """
    import sys, torch
    torch.set_num_threads(1)
    from rl8lite import Algorithm, Trainer
    from rl8lite.conditions import HitsUpperBound
    from rl8lite.examples import CartPole
    trainer = Trainer(Algorithm(CartPole, num_envs=64, horizon=16, seed=0), progress=False, save_policy=False)
    print(trainer.tracker.run_id, trainer.tracker.checkpoint_dir, flush=True)
    steps = int(sys.argv[1])
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", steps)], checkpoint_every=1, keep_checkpoints=2)
    print("done", flush=True)
    """
)

# The writer under kill -9: training with checkpoints every step, no MLflow store to contend for.
KILL_CHILD = textwrap.dedent(
    """
    import sys, torch
    torch.set_num_threads(1)
    sys.path.insert(0, sys.argv[2])
    from tests.helpers import MemoryTracker
    from rl8lite import Algorithm, Trainer
    from rl8lite.examples import CartPole
    tracker = MemoryTracker(checkpoint_dir=sys.argv[1])
    trainer = Trainer(Algorithm(CartPole, num_envs=64, horizon=16, seed=0), progress=False,
                      save_policy=False, tracker=tracker)
    print("ready", tracker.checkpoint_dir, flush=True)
    trainer.run(checkpoint_every=1, keep_checkpoints=2)
    """
)


def start_child(tmp_path: Path, steps: int) -> tuple[subprocess.Popen[str], str, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(steps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    run_id, folder = child.stdout.readline().split()
    return child, run_id, Path(folder)


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("signum, status, code", [(signal.SIGTERM, "KILLED", 143), (signal.SIGINT, "KILLED", -signal.SIGINT)])
def test_stop_signals_checkpoint_and_kill_the_run(tmp_path, client, signum, status, code) -> None:
    child, run_id, folder = start_child(tmp_path, 10_000)
    wait_for(lambda: len(list(folder.glob("checkpoint-*.pt"))) >= 1)
    child.send_signal(signum)
    child.communicate(timeout=60)
    assert child.returncode == code
    run = client.get_run(run_id)
    assert run.info.status == status
    latest = max(folder.glob("checkpoint-*.pt"))
    steps = read_checkpoint(latest)["trainer"]["state"]["algorithm/steps"]
    # the checkpoint is the state at the last finished step, and nothing was logged past it
    assert [m.step for m in client.get_metric_history(run_id, "env/steps")][-1] == steps * 64 * 16


EXPORT_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    torch.set_num_threads(1)
    from rl8lite import Algorithm, Trainer
    from rl8lite.conditions import HitsUpperBound
    from rl8lite.env import DiscreteDummyEnv
    signum = getattr(signal, sys.argv[1])
    trainer = Trainer(Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2, seed=0), progress=False,
                      experiment_name=sys.argv[2])
    def export(name="policy"):
        os.kill(os.getpid(), signum)  # the signal arrives while the policy is exported
        return "exported"
    trainer.log_policy = export
    print(trainer.tracker.run_id, trainer.tracker.checkpoint_dir, flush=True)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 3)])
    print("done", flush=True)
    """
)


@pytest.mark.parametrize("signame, code", [("SIGTERM", 143), ("SIGINT", -signal.SIGINT), ("SIGUSR1", 0)])
def test_a_signal_during_the_final_export_waits_for_it_and_loses_nothing(
    tmp_path, client, experiment_name, signame, code
) -> None:
    script = tmp_path / "export_child.py"
    script.write_text(EXPORT_CHILD)
    child = subprocess.run([sys.executable, str(script), signame, experiment_name],
                           capture_output=True, text=True, timeout=120, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert child.returncode == code, child.stderr
    run_id, folder = child.stdout.split()[:2]
    assert ("done" in child.stdout) is (code == 0)
    # the training had finished and the policy was exported: the run is complete, all logged
    assert client.get_run(run_id).info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run_id, "env/steps")] == [4, 8, 12]
    checkpoints = list(Path(folder).glob("checkpoint-*.pt"))
    if signame == "SIGUSR1":  # the checkpoint it asks for is written
        assert [read_checkpoint(p)["trainer"]["state"]["algorithm/steps"] for p in checkpoints] == [3]
    else:
        assert checkpoints == []


@pytest.mark.slow
def test_sigusr1_checkpoints_and_continues(tmp_path, client) -> None:
    child, run_id, folder = start_child(tmp_path, 40)
    wait_for(lambda: len(list(folder.glob("checkpoint-*.pt"))) >= 1)
    child.send_signal(signal.SIGUSR1)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert "done" in out
    assert client.get_run(run_id).info.status == "FINISHED"


@pytest.mark.slow
def test_kill_9_never_leaves_an_unloadable_last_checkpoint(tmp_path) -> None:
    # Ten training processes at once (startup dominates), each killed at its own random moment.
    rng = random.Random(0)
    script = tmp_path / "kill_child.py"
    script.write_text(KILL_CHILD)
    repo = str(Path(__file__).resolve().parents[1])
    children = []
    for i in range(10):
        child = subprocess.Popen([sys.executable, str(script), str(tmp_path / f"trial{i}"), repo],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        children.append((child, tmp_path / f"trial{i}"))
    for trial, (child, folder) in enumerate(children):
        wait_for(lambda folder=folder: len(list(folder.glob("checkpoint-*.pt"))) >= 1, timeout=120)
        time.sleep(rng.uniform(0.0, 0.3))
        child.kill()
        _, err = child.communicate(timeout=30)
        checkpoints = sorted(folder.glob("checkpoint-*.pt"))
        assert checkpoints, f"trial {trial}: no checkpoint; stderr: {err[-500:]}"
        payload = read_checkpoint(checkpoints[-1])
        assert payload["trainer"]["state"]["algorithm/steps"] >= 1


def test_config_values_are_checked_before_a_checkpoint_is_written(experiment_name: str, tmp_path: Path) -> None:
    import numpy as np

    from rl8lite.env import DiscreteDummyEnv

    algo = Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2, env_config={"bounds": np.float64(5.0)})
    trainer = Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)
    trainer.step()
    resumed = Trainer.from_checkpoint(trainer.save_checkpoint(tmp_path / "a.pt"), progress=False)
    assert resumed.algorithm.hparams.env_config == {"bounds": 5.0}
    resumed.close()
    algo.hparams.model_config = {"weird": object()}
    with pytest.raises(CheckpointError, match=r"cannot checkpoint model_config.weird"):
        trainer.save_checkpoint(tmp_path / "b.pt")
    assert not (tmp_path / "b.pt").exists()
    trainer.close()


def test_resume_with_a_model_instance_and_final_obs_buffer(experiment_name: str, tmp_path: Path) -> None:
    from rl8lite.models import DefaultModel

    spec_env = CartPole(1)
    model = DefaultModel(spec_env.observation_spec, spec_env.action_spec, num_features=2, hiddens=[16])
    trainer = Trainer(Algorithm(CartPole, num_envs=4, horizon=4, seed=0, model=model),
                      experiment_name=experiment_name, progress=False, save_policy=False)
    trainer.step()
    state = trainer.algorithm.state_dict()
    trainer.step()
    trainer.algorithm.load_state_dict(state)  # final_obs buffer exists by now (CartPole gives it)
    resumed = Trainer.from_checkpoint(trainer.save_checkpoint(tmp_path / "m.pt"), progress=False)
    assert resumed.algorithm.policy.model.actor[0].out_features == 16
    resumed.step()
    resumed.close()
    trainer.close()


class Narrow(DefaultModel):
    """A model whose constructor argument is not passed on to ``Model.__init__(**config)``."""

    def __init__(self, observation_spec, action_spec, /, width: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__(observation_spec, action_spec, num_features=2, hiddens=[width])


def test_a_model_instance_that_its_config_cannot_rebuild_is_checkpointed_with_a_warning(
    experiment_name: str, tmp_path: Path
) -> None:
    spec_env = CartPole(1)
    trainer = Trainer(Algorithm(CartPole, num_envs=4, horizon=4, seed=0,
                                model=Narrow(spec_env.observation_spec, spec_env.action_spec, width=8)),
                      experiment_name=experiment_name, progress=False, save_policy=False)
    trainer.step()
    random_state = torch.get_rng_state()
    with pytest.warns(RuntimeWarning, match=r"cannot be resumed .*Narrow\(observation_spec, action_spec, \*\*model.config\) raises TypeError"):
        written = trainer.save_checkpoint(tmp_path / "a.pt")
    assert torch.equal(random_state, torch.get_rng_state())  # saving leaves the run's random stream alone
    assert read_checkpoint(written)["algorithm"]["policy"]  # the weights are kept all the same
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per trainer
        trainer.save_checkpoint(tmp_path / "b.pt")
    trainer.close()
    with pytest.raises(ConfigError, match="cannot build the model .*Narrow"):
        Trainer.from_checkpoint(written, progress=False)


def test_a_rebuildable_model_instance_saves_without_a_warning(experiment_name: str, tmp_path: Path) -> None:
    from rl8lite.models import DefaultModel

    spec_env = CartPole(1)
    model = DefaultModel(spec_env.observation_spec, spec_env.action_spec, num_features=2, hiddens=[16])
    trainer = Trainer(Algorithm(CartPole, num_envs=4, horizon=4, seed=0, model=model),
                      experiment_name=experiment_name, progress=False, save_policy=False)
    random_state = torch.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.save_checkpoint(tmp_path / "m.pt")
    assert torch.equal(random_state, torch.get_rng_state())  # the rebuild check draws nothing for the run
    trainer.close()


def test_a_checkpoint_written_with_a_custom_tracker_resumes_with_one(tmp_path: Path) -> None:
    trainer = Trainer(Algorithm(CartPole, num_envs=4, horizon=4, seed=0), progress=False,
                      save_policy=False, tracker=MemoryTracker())
    trainer.step()
    written = trainer.save_checkpoint(tmp_path / "c.pt")
    trainer.step()
    with pytest.raises(CheckpointError, match="custom tracker .* pass tracker="):
        Trainer.from_checkpoint(written, progress=False)
    tracker = MemoryTracker()
    resumed = Trainer.from_checkpoint(written, progress=False, save_policy=False, tracker=tracker)
    assert resumed.tracker is tracker and resumed.state["algorithm/steps"] == 1
    resumed.step()
    for a, b in zip(trainer.algorithm.policy.parameters(), resumed.algorithm.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b)  # continues exactly
    assert [step for step, _ in tracker.metrics] == [32]


def test_checkpoint_is_taken_after_a_due_eval(experiment_name: str) -> None:
    def make_k1() -> Trainer:
        algo = Algorithm(CartPole, num_envs=8, horizon=8, seed=3, horizons_per_env_reset=1)
        return Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)

    straight = make_k1()
    reference = straight.run(steps_per_eval=2, stop_conditions=[HitsUpperBound("algorithm/steps", 4)])
    first = make_k1()  # checkpoints at step 2, after that step's eval; runs on to step 3
    first.run(steps_per_eval=2, checkpoint_every=2, stop_conditions=[HitsUpperBound("algorithm/steps", 3)])
    at_step_2 = first.tracker.checkpoint_dir / "checkpoint-000000000128.pt"
    resumed = Trainer.from_checkpoint(at_step_2, progress=False, save_policy=False)
    final = resumed.run(steps_per_eval=2, stop_conditions=[HitsUpperBound("algorithm/steps", 4)])
    assert stable([final]) == stable([reference])
    assert resumed.state == straight.state


def test_run_off_the_main_thread_warns_that_signals_will_not_checkpoint(tmp_path: Path) -> None:
    import threading
    import warnings

    trainer = Trainer(Algorithm(CartPole, num_envs=4, horizon=4, seed=0), progress=False, save_policy=False,
                      tracker=MemoryTracker(str(tmp_path)))
    caught: list[warnings.WarningMessage] = []

    def train() -> None:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 1)])
        caught.extend(record)

    thread = threading.Thread(target=train, name="trainer-thread")
    thread.start()
    thread.join(timeout=120)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any("outside the main thread (trainer-thread)" in m and "checkpoint_every" in m for m in messages)
    assert trainer.state["algorithm/steps"] == 1


def folder_snapshot(folder: Path) -> dict[str, object]:
    """Every entry of ``folder`` and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("keep", [0, -2, 1.5, True, "3"])
def test_a_bad_keep_is_refused_before_anything_is_written_or_removed(tmp_path: Path, keep: object) -> None:
    folder = tmp_path / "checkpoints"
    trainer = Trainer(Algorithm(CartPole, num_envs=4, horizon=4, seed=0), progress=False, save_policy=False,
                      tracker=MemoryTracker(str(folder)))
    for _ in range(2):
        trainer.step()
        trainer.save_checkpoint()
    trainer.step()
    before = folder_snapshot(folder)
    with pytest.raises(ValueError, match=rf"keep must be an int >= 1 or None, received {keep!r}"):
        trainer.save_checkpoint(keep=keep)
    with pytest.raises(ValueError, match="keep must be an int >= 1"):
        trainer.save_checkpoint(tmp_path / "elsewhere.pt", keep=keep)
    assert folder_snapshot(folder) == before
    assert not (tmp_path / "elsewhere.pt").exists()
    newest = trainer.save_checkpoint(keep=1)
    assert newest.is_file()
    assert [p.name for p in folder.glob("checkpoint-*.pt")] == [newest.name]


def saves_at_steps_2_3_4(experiment_name: str) -> tuple[str, Path]:
    """A run with checkpoints at steps 2, 3 and 4 (env steps 128, 192, 256); its id and folder."""
    first = make(experiment_name)
    for step in range(1, 5):
        first.step()
        if step >= 2:
            first.save_checkpoint()
    first.close()
    return first.tracker.run_id, first.tracker.checkpoint_dir


def numbered(folder: Path) -> list[str]:
    return [p.name for p in sorted(folder.glob("checkpoint-*.pt"))]


def test_resume_from_run_id_takes_the_newest_save_not_the_most_env_steps(
    experiment_name: str, client: mlflow.MlflowClient, tmp_path: Path
) -> None:
    run_id, folder = saves_at_steps_2_3_4(experiment_name)
    branch = Trainer.from_checkpoint(folder / "checkpoint-000000000128.pt", progress=False, save_policy=False)
    branch.step()
    newest = branch.save_checkpoint(keep=3)
    branch.close()

    resumed = Trainer.from_checkpoint(run_id, progress=False, save_policy=False)
    resumed.close()
    assert resumed.state == branch.state  # env steps 192, not the abandoned branch's 256
    for a, b in zip(branch.algorithm.policy.parameters(), resumed.algorithm.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    artifact = client.download_artifacts(run_id, "checkpoints/latest.pt", str(tmp_path))
    assert read_checkpoint(artifact)["trainer"]["state"] == branch.state
    # keep applies to the branch's own history; the abandoned step-4 file is left alone
    assert newest.is_file()
    assert numbered(folder) == ["checkpoint-000000000128.pt", "checkpoint-000000000192.pt",
                                "checkpoint-000000000256.pt"]
    assert (folder / "latest").read_text() == newest.name  # a plain file naming it (no symlink)
    assert not (folder / "latest").is_symlink()


def test_without_keep_the_abandoned_branch_stays_but_is_never_resumed(
    experiment_name: str, client: mlflow.MlflowClient, tmp_path: Path
) -> None:
    run_id, folder = saves_at_steps_2_3_4(experiment_name)
    all_three = ["checkpoint-000000000128.pt", "checkpoint-000000000192.pt", "checkpoint-000000000256.pt"]
    branch = Trainer.from_checkpoint(folder / "checkpoint-000000000128.pt", progress=False, save_policy=False)
    branch.step()
    branch.save_checkpoint()  # keep=None: nothing is removed
    branch.close()
    assert numbered(folder) == all_three

    resumed = Trainer.from_checkpoint(run_id, progress=False, save_policy=False)
    assert resumed.state["env/steps"] == 192
    # pruning keeps this history's newest file (the one just written) and leaves the
    # abandoned step-4 file alone
    kept = resumed.save_checkpoint(keep=1)
    resumed.close()
    assert kept.is_file()
    assert numbered(folder) == ["checkpoint-000000000192.pt", "checkpoint-000000000256.pt"]

    # a save elsewhere is the run's latest too; once that file is gone, the artifact (its copy) is
    again = Trainer.from_checkpoint(run_id, progress=False, save_policy=False)
    again.step()
    mine = again.save_checkpoint(tmp_path / "mine.pt")
    again.close()
    assert latest_checkpoint_of_run(run_id, None) == mine.resolve()
    mine.unlink()
    from_artifact = latest_checkpoint_of_run(run_id, None)
    assert read_checkpoint(from_artifact)["trainer"]["state"]["env/steps"] == 256


def test_a_folder_without_the_latest_record_resumes_from_the_most_env_steps(experiment_name: str) -> None:
    # folders written before the record existed
    run_id, folder = saves_at_steps_2_3_4(experiment_name)
    (folder / "latest").unlink(missing_ok=True)
    resumed = Trainer.from_checkpoint(run_id, progress=False, save_policy=False)
    resumed.close()
    assert resumed.state["env/steps"] == 256


def test_the_run_folder_and_its_latest_record_resume_like_the_run_id(experiment_name: str, tmp_path: Path) -> None:
    run_id, folder = saves_at_steps_2_3_4(experiment_name)
    branch = Trainer.from_checkpoint(folder / "checkpoint-000000000128.pt", progress=False, save_policy=False)
    branch.step()
    branch.save_checkpoint()  # now the latest: env steps 192, not the most env steps (256)
    branch.close()
    for given in (folder, str(folder), folder / "latest", run_id):
        resumed = Trainer.from_checkpoint(given, progress=False, save_policy=False)
        resumed.close()
        assert resumed.state["env/steps"] == 192, given
    (folder / "latest").unlink()  # a folder from before the record: the most env steps
    resumed = Trainer.from_checkpoint(folder, progress=False, save_policy=False)
    resumed.close()
    assert resumed.state["env/steps"] == 256
    with pytest.raises(CheckpointError, match="folder without a 'latest' record or checkpoint"):
        Trainer.from_checkpoint(tmp_path, progress=False, save_policy=False)


def test_one_in_memory_state_dict_loaded_twice_resumes_the_same_way() -> None:
    # CartPole updates its state in place: the loaded tensors must be the env's own copies,
    # or the first resumed collect would write into the state dict and the second differ.
    algo = Algorithm(CartPole, num_envs=4, horizon=4, seed=0)
    algo.collect()
    algo.step()
    state = algo.state_dict()
    saved_env = {k: v.clone() for k, v in state["env"].items() if isinstance(v, torch.Tensor)}
    observations = []
    for _ in range(2):
        algo.load_state_dict(state)
        torch.manual_seed(5)  # the sampling's random stream (Trainer checkpoints carry it)
        algo.collect()
        observations.append(algo.buffer["obs"].clone())
    assert torch.equal(observations[0], observations[1])
    for key, value in saved_env.items():
        assert torch.equal(state["env"][key], value), key

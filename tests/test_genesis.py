"""rl8lite.examples.Go2: Genesis's Go2 walking task as an episodic env instance, and PPO teaching
it to walk on Genesis's CPU backend."""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys

import numpy as np
import pytest
import torch

from rl8lite import Algorithm, Trainer
from rl8lite.env import EnvConfigError
from rl8lite.examples import Go2
from rl8lite.examples.configs import GO2
from rl8lite.examples.go2 import MAX_EPISODE_LENGTH

# the first scene in a process compiles Genesis's kernels: 55 s on 2 cores with an empty kernel
# cache (this file then runs in 75 s), 12 s with Genesis's on-disk cache, 3 s for a later scene
pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("genesis") is None,
                                                   reason="needs genesis-world (the genesis extra)")]


@pytest.fixture(scope="module")
def env() -> Go2:
    env = Go2(4, 8, config={"random_episode_start": False})
    yield env
    env.close()


def test_observations_start_in_the_default_pose_under_the_command(env: Go2) -> None:
    obs = env.reset(config={"lin_vel_x_range": [1.0, 1.0]})
    assert obs.shape == (4, 45) and env.observation_spec.shape == (45,)
    assert env.action_spec.shape == (12,)
    torch.testing.assert_close(obs[:, 3:6], torch.tensor([0.0, 0.0, -1.0]).expand(4, 3))
    torch.testing.assert_close(obs[:, 6:9], torch.tensor([2.0, 0.0, 0.0]).expand(4, 3))
    assert not obs[:, 9:].any()  # joints at the default pose, still; no last action
    with pytest.raises(EnvConfigError, match="no config parameter"):
        env.reset(config={"lin_vel_range": [1.0, 1.0]})


def test_a_copy_past_its_time_limit_is_truncated_and_restarted(env: Go2) -> None:
    first = env.reset()
    env.episode_length[:2] = MAX_EPISODE_LENGTH
    out = env.step(torch.zeros(4, 12))
    assert out["truncated"][:, 0].tolist() == [True, True, False, False]
    assert not out["terminated"].any() and out["rewards"].shape == (4, 1)
    torch.testing.assert_close(out["obs"][:2], first[:2])  # new episodes, from the start pose
    assert not torch.equal(out["final_obs"][:2], first[:2])
    assert Go2.max_episode_steps == MAX_EPISODE_LENGTH + 1


def test_a_reset_starts_the_copies_at_random_steps_unless_told_not_to(env: Go2) -> None:
    env.reset(config={"random_episode_start": True})
    assert env.episode_length.any() and env.episode_length.max() < MAX_EPISODE_LENGTH
    env.reset()
    assert not env.episode_length.any()


def test_a_copy_that_tips_over_is_terminated(env: Go2) -> None:
    env.reset()
    pushed = env.robot.get_qpos().clone()
    pushed[0, 3:7] = torch.tensor([0.966, 0.259, 0.0, 0.0])  # rolled 30 degrees
    env.robot.set_qpos(pushed, zero_velocity=True)
    out = env.step(torch.zeros(4, 12))
    assert out["terminated"][:, 0].tolist() == [True, False, False, False]


def test_a_second_env_shares_genesis_and_the_device_must_be_genesiss(env: Go2) -> None:
    other = Go2(2)
    assert other.reset().shape == (2, 45)
    other.close()
    with pytest.raises(ValueError, match="closed"):
        Algorithm(other)
    with pytest.raises(ValueError, match="Genesis runs on cpu"):
        Go2(2, device="meta")


def test_building_one_leaves_the_process_excepthook_alone() -> None:
    code = ("import sys, torch; from rl8lite.examples.go2 import init_genesis; hook = sys.excepthook;"
            " init_genesis(torch.device('cpu')); assert sys.excepthook is hook")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_ppo_teaches_go2_to_walk_on_the_cpu_backend() -> None:
    """64 copies, 40 collects of 24 steps (61,440 env steps), small 64-64 ELU MLPs, otherwise
    Genesis's rsl_rl settings (``configs.GO2``), seed 0. Measured on 2 cores (7-15 s): the
    per-step reward mean goes from -0.0079 (first collect; -0.0048 over the first 5) to 0.0042
    over the last 5 collects, and the tracking term of the commanded 0.5 m/s (0.02 per step at
    best) from 0.0056 to 0.0129."""
    env = Go2(64, 24)
    algo = Algorithm(env, seed=0, **{**GO2, "sgd_minibatch_size": 64 * 24 // 4,
                                     "model_config": {"hiddens": [64, 64], "activation": "elu"}})
    rewards, tracking = [], []
    for _ in range(40):
        rewards.append(algo.collect()["rewards/mean"])
        tracking.append(env.reward_terms()["tracking_lin_vel"])
        algo.step()
    env.close()
    assert rewards[0] < -0.005 and tracking[0] < 0.007
    assert statistics.mean(rewards[-5:]) > 0.0015, rewards
    assert statistics.mean(tracking[-5:]) > 0.010, tracking


def test_a_go2_with_a_camera_renders_copy_0_and_films_a_video(tmp_path) -> None:
    from tests.trackers import RecordingTracker

    env = Go2(2, 8, camera=True)
    try:
        frame = env.render()
        assert frame.dtype == np.uint8 and frame.shape == (360, 480, 3) and frame.any()
        tracker = RecordingTracker(tmp_path)
        with Trainer(Algorithm(env, **{**GO2, "sgd_minibatch_size": 16}), tracker=tracker,
                     progress=False) as trainer:
            trainer.step()
            assert trainer.record_video(max_steps=4).startswith("videos/rollout/step_16")
        assert any(call == "log_artifact" for call, _ in tracker.calls)
    finally:
        env.close()
    with pytest.raises(NotImplementedError, match="camera=True"):
        Go2.render(type("Bare", (), {"camera": None})())

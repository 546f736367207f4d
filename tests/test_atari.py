"""Atari as the field trains it: envpool's pools through ``envpool_env`` (and its MuJoCo tasks),
ALE through Gymnasium with frames stacked by a view requirement, and Breakout learning."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

if importlib.util.find_spec("envpool") is None:  # not imported here: envpool_env imports it
    pytest.skip("needs envpool (the envpool or atari extra)", allow_module_level=True)

from rl8lite import Algorithm, TrainConfig
from rl8lite.env import EnvConfigError, env_reference, envpool_env, import_env_class
from rl8lite.models import DefaultModel, NatureCNNModel
from rl8lite.specs import Categorical

from .gymnasium_envs import breakout_preprocessed

#: CleanRL's ppo_atari_envpool.py settings (8 copies x 128 steps, 4 minibatches, 4 epochs);
#: rl8lite's vf_coeff multiplies half the squared error, as CleanRL's 0.5 * v_loss does.
CLEANRL_ATARI = {"num_envs": 8, "horizon": 128, "sgd_minibatch_size": 256, "num_sgd_iters": 4,
                 "optimizer_config": {"lr": 2.5e-4, "eps": 1e-5}, "clip_param": 0.1, "vf_clip_param": 0.1,
                 "entropy_coeff": 0.01, "vf_coeff": 0.5, "max_grad_norm": 0.5, "normalize_rewards": False}
BREAKOUT = {"episodic_life": True, "reward_clip": True, "num_threads": 1}


def test_breakout_is_uint8_frames_and_four_actions_for_the_nature_cnn() -> None:
    env = envpool_env("Breakout-v5", **BREAKOUT)(2)
    assert (env.observation_spec.shape, env.observation_spec.dtype) == (torch.Size([4, 84, 84]), torch.uint8)
    assert isinstance(env.action_spec, Categorical) and env.action_spec.n == 4
    assert env.max_episode_steps == 27000 and env.render().shape == (210, 160, 3)
    assert type(Algorithm(envpool_env("Breakout-v5", **BREAKOUT), num_envs=2, horizon=2).policy.model) is NatureCNNModel
    env.close()


def test_envpool_env_leaves_the_processs_matplotlib_backend_as_it_was() -> None:
    # envpool's import sets MPLBACKEND=Agg, which a notebook kernel started later would inherit
    code = "import os; from rl8lite.env import envpool_env; envpool_env('Pong-v5'); print(os.environ.get('MPLBACKEND'))"
    for before in (None, "TkAgg"):
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"} | ({"MPLBACKEND": before} if before else {})
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == str(before)


def test_a_finished_copy_starts_its_next_episode_in_the_same_step() -> None:
    env = envpool_env("Breakout-v5", **BREAKOUT, seed=3)(4)
    env.reset()
    generator, ends = torch.Generator().manual_seed(0), 0
    for _ in range(400):
        out = env.step(torch.randint(0, 4, (4, 1), generator=generator))
        done = (out["terminated"] | out["truncated"])[:, 0]
        same = (out["obs"] == out["final_obs"]).flatten(1).all(1)
        assert torch.equal(same, ~done)  # only a finished copy's observation was replaced
        ends += int(done.sum())
        # the next episode's first frames: after a lost life the game goes on, after the last it restarts
    assert ends >= 4


def test_options_are_envpools_and_an_eval_config_rebuilds_the_pool() -> None:
    Breakout = envpool_env("Breakout-v5", **BREAKOUT)
    env = Breakout(2)
    assert env.default_config["episodic_life"] is True and "repeat_action_probability" in env.default_config
    pool = env._pool
    env.reset(config={"episodic_life": False, "reward_clip": False})
    assert env._pool is not pool and env._applied["episodic_life"] is False
    env.reset()
    assert env._applied["episodic_life"] is True
    with pytest.raises(EnvConfigError, match=r"Breakout-v5 has no config parameter\(s\) \['lives'\]"):
        env.reset(config={"lives": 3})
    with pytest.raises(TypeError, match=r"envpool's Breakout-v5 has no option\(s\) \['episodic_lives'\]"):
        envpool_env("Breakout-v5", episodic_lives=True)
    with pytest.raises(TypeError, match=r"envpool_env sets \['num_envs'\] itself"):
        envpool_env("Breakout-v5", num_envs=8)
    with pytest.raises(ValueError, match="envpool has no task 'Breakout-v9'"):
        envpool_env("Breakout-v9")


def test_configs_and_checkpoints_name_the_class_by_its_options() -> None:
    Breakout = envpool_env("Breakout-v5", **BREAKOUT, seed=1)
    assert envpool_env("Breakout-v5", **BREAKOUT, seed=1) is Breakout
    reference = env_reference(Breakout)
    assert reference == {"envpool": "Breakout-v5", "seed": 1, "render_mode": "rgb_array", **BREAKOUT}
    assert import_env_class(reference) is Breakout
    config = TrainConfig(env_cls={"envpool": "Breakout-v5", **BREAKOUT}, algorithm_config={"num_envs": 2, "horizon": 4})
    assert config.build().algorithm.env.task_id == "Breakout-v5"


def test_envpools_mujoco_tasks_get_the_default_mlp() -> None:
    algo = Algorithm(envpool_env("Hopper-v5", num_threads=1, seed=0), num_envs=4, horizon=16, normalize_observations=True, seed=0)
    assert type(algo.policy.model) is DefaultModel and algo.env.observation_spec.shape == torch.Size([11])
    stats = algo.collect()
    assert stats["env/steps"] == 64.0 and "losses/total" in algo.step()


def test_ale_through_gymnasium_with_frames_stacked_by_a_view_requirement() -> None:
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    from rl8lite.env import gymnasium_env

    algo = Algorithm(gymnasium_env(breakout_preprocessed, seed=0), num_envs=2, horizon=16,
                     model_config={"frame_stack": 4}, seed=0)
    assert algo.env.observation_spec.shape == torch.Size([84, 84]) and algo.buffer["obs"].dtype == torch.uint8
    assert algo.buffer["obs"].shape == torch.Size([2, 17, 84, 84])  # one frame per step, not four
    algo.collect()
    assert np.isfinite(algo.step()["losses/total"])
    algo.close()


@pytest.mark.slow
def test_breakout_returns_rise_within_a_short_cpu_budget() -> None:
    # 80 updates (82k env steps, about four minutes on one core): the episode return (one life,
    # clipped rewards; the mean of the last 100 episodes) of a random policy is about 0.2, the
    # learning policy's 0.6 (0.45 at 65 updates, 2026-12-06)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    algo = Algorithm(envpool_env("Breakout-v5", **BREAKOUT, seed=1), **CLEANRL_ATARI, seed=0)
    first = algo.collect()["episodes/return_mean"]
    for _ in range(80):
        algo.step()
        last = algo.collect()["episodes/return_mean"]
    torch.set_num_threads(threads)
    assert first < 0.35 and last > max(2 * first, 0.4), (first, last)

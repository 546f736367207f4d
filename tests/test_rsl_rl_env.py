"""rsl_rl's ``VecEnv`` through ``rsl_rl_env``, and asymmetric actor-critic: a critic that reads
privileged observation groups the actor does not, in the default model, normalisation, the
exported policies (the actor's inputs only), checkpoints and learning."""

from __future__ import annotations

from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl8lite import Algorithm, RecurrentAlgorithm, Trainer
from rl8lite.algorithms.config import ConfigError
from rl8lite.env import EnvConfigError, EnvOutputError, rsl_rl_env
from rl8lite.models import DefaultModel

from .helpers import ReachVecEnv

PRIVILEGED = {"actor": ["policy"], "critic": ["policy", "critic"]}


def test_groups_follow_rsl_rls_rule_and_map_to_a_composite_observation() -> None:
    env = rsl_rl_env(ReachVecEnv(4))
    assert env.obs_groups == {"actor": ["policy"], "critic": ["critic"]}  # the set's own name, else "policy"
    assert list(env.observation_spec) == ["policy", "critic"]
    assert env.observation_spec["critic"].shape == torch.Size([5])
    assert (env.num_envs, env.max_episode_steps, env.action_spec.shape) == (4, 40, torch.Size([2]))
    assert rsl_rl_env(ReachVecEnv(4), obs_groups={"actor": ["policy"]}).obs_groups["critic"] == ["critic"]
    with pytest.raises(ValueError, match=r"obs_groups\['critic'\]=\['privileged'\]: the VecEnv's observation groups are \['policy', 'critic'\]"):
        rsl_rl_env(ReachVecEnv(4), obs_groups={"critic": ["privileged"]})


def test_dones_with_time_outs_are_truncations_and_the_others_terminations() -> None:
    vec_env = ReachVecEnv(3, max_episode_length=2)
    env = rsl_rl_env(vec_env)
    env.reset()
    vec_env.goal[0] = vec_env.point[0] + torch.tensor([0.05, 0.0])  # copy 0 reaches its goal at once
    out = env.step(torch.zeros(3, 2))
    assert out["terminated"][:, 0].tolist() == [True, False, False]
    assert not out["truncated"].any()
    out = env.step(torch.zeros(3, 2))  # copies 1 and 2 time out
    assert out["truncated"][:, 0].tolist() == [False, True, True] and not out["terminated"].any()
    assert out["rewards"].shape == (3, 1) and out["obs"]["critic"].shape == (3, 5)


def test_a_vec_env_without_time_outs_is_an_error_naming_it_unless_every_end_is_terminal() -> None:
    algo = Algorithm(rsl_rl_env(ReachVecEnv(4, time_outs=False)), horizon=4)
    with pytest.raises(EnvOutputError, match="ReachVecEnv.step's extras lack 'time_outs'.*finite_horizon=True"):
        algo.collect()
    vec_env = ReachVecEnv(2, max_episode_length=1, time_outs=False)
    env = rsl_rl_env(vec_env, finite_horizon=True)
    env.reset()
    out = env.step(torch.zeros(2, 2))
    assert out["terminated"].all() and not out["truncated"].any()


def test_reset_takes_no_config_and_calls_the_vec_envs_reset_where_it_has_one() -> None:
    class Resettable(ReachVecEnv):
        resets = 0

        def reset(self) -> tuple[TensorDict, dict]:
            self.resets += 1
            return self.get_observations(), {}

    vec_env = Resettable(2)
    env = rsl_rl_env(vec_env, init_at_random_ep_len=True)
    env.reset()
    assert vec_env.resets == 0 and vec_env.episode_length_buf.max() > 0  # the first reset only randomises
    env.reset()
    assert vec_env.resets == 1
    with pytest.raises(EnvConfigError, match="Resettable has no config parameter"):
        env.reset(config={"terrain": 1})


def test_the_default_models_critic_reads_the_privileged_group_and_the_actor_does_not() -> None:
    algo = Algorithm(rsl_rl_env(ReachVecEnv(8), obs_groups=PRIVILEGED), horizon=4, seed=0)
    model = algo.policy.model
    assert isinstance(model, DefaultModel) and model.obs_groups == PRIVILEGED
    assert (model.actor[0].in_features, model.critic[0].in_features) == (4, 9)
    obs = algo.env.observation_spec.rand([16])
    changed = obs.clone()
    changed["critic"] = changed["critic"] + 1.0
    with torch.no_grad():
        assert torch.equal(algo.policy.act(obs, deterministic=True)[0], algo.policy.act(changed, deterministic=True)[0])
        assert not torch.equal(algo.policy.values(obs), algo.policy.values(changed))


def test_obs_groups_in_model_config_win_and_bad_ones_name_the_culprit() -> None:
    env = rsl_rl_env(ReachVecEnv(4))
    algo = Algorithm(env, horizon=4, model_config={"obs_groups": {"actor": ["policy"], "critic": ["policy"]}})
    assert algo.policy.model.critic[0].in_features == 4
    with pytest.raises(ConfigError, match=r"obs_groups\['actor'\]=\['nope'\]: expected a non-empty list of the observation's groups"):
        Algorithm(env, horizon=4, model_config={"obs_groups": {"actor": ["nope"], "critic": ["policy"]}})
    with pytest.raises(ConfigError, match="DefaultRecurrentModel's actor and critic share layers.*pass model_cls="):
        RecurrentAlgorithm(env, horizon=4)


def test_normalisation_covers_both_groups_and_the_exports_take_the_actors_inputs_only(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    import onnxruntime

    from rl8lite.tracking.export import export_onnx, save_policy_model

    algo = Algorithm(rsl_rl_env(ReachVecEnv(8), obs_groups=PRIVILEGED), horizon=8, normalize_observations=True, seed=0)
    for _ in range(2):
        algo.collect()
        algo.step()
    assert algo.policy.normalizer.keys() == ["obs.policy", "obs.critic"]
    raw = algo.buffer["obs"][:, :8].flatten(0, 1)
    with torch.no_grad():
        expected = algo.policy.act(raw, deterministic=True)[0].numpy()
    session = onnxruntime.InferenceSession(str(export_onnx(algo.policy, algo.env.observation_spec, tmp_path / "p.onnx")))
    assert [i.name for i in session.get_inputs()] == ["policy"]
    np.testing.assert_allclose(session.run(None, {"policy": raw["policy"].numpy()})[0], expected, rtol=1e-5, atol=1e-5)
    save_policy_model(algo.policy, algo.env.observation_spec, tmp_path / "mlflow")
    served = mlflow.pyfunc.load_model(str(tmp_path / "mlflow")).predict({"policy": raw["policy"].numpy()})
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)


def test_a_checkpoint_resumes_onto_the_instance_in_the_same_run(experiment_name: str) -> None:
    vec_env = ReachVecEnv(4)
    first = Trainer(Algorithm(rsl_rl_env(vec_env), horizon=8, seed=0), experiment_name=experiment_name)
    for _ in range(2):
        first.step()
    path, run_id = first.save_checkpoint(), first.tracker.run_id
    params = [p.detach().clone() for p in first.algorithm.policy.parameters()]
    first.close()
    resumed = Trainer.from_checkpoint(path, env=rsl_rl_env(vec_env))  # the simulator goes on where it is
    assert resumed.tracker.run_id == run_id and resumed.state["env/steps"] == 2 * 4 * 8
    assert all(torch.equal(a, b) for a, b in zip(params, resumed.algorithm.policy.parameters()))
    assert resumed.step()["env/steps"] == 3 * 4 * 8
    resumed.close()


@pytest.mark.slow
def test_a_privileged_critic_learns_to_reach_the_goal() -> None:
    algo = Algorithm(rsl_rl_env(ReachVecEnv(64)), horizon=24, num_sgd_iters=5, sgd_minibatch_size=64 * 24 // 4,
                     normalize_observations=True, seed=0)
    first = algo.collect()["returns/mean"]
    for _ in range(25):
        algo.step()
        last = algo.collect()
    assert first < -15 and last["returns/mean"] > 0, (first, last["returns/mean"])


def test_rsl_rls_adaptive_learning_rate_rule() -> None:
    from rl8lite.schedulers import LRScheduler

    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    scheduler = LRScheduler(optimizer)
    for kl, expected in [(0.03, 1e-3 / 1.5), (0.01, 1e-3 / 1.5), (0.004, 1e-3), (0.0, 1e-3)]:
        scheduler.adapt(kl, 0.01)
        assert scheduler.lr == pytest.approx(expected)
    scheduler.set(9e-3)
    scheduler.adapt(0.001, 0.01)
    assert scheduler.lr == 1e-2  # the bounds: [1e-5, 1e-2]
    scheduler.set(1.2e-5)
    scheduler.adapt(1.0, 0.01)
    assert scheduler.lr == 1e-5


@pytest.mark.parametrize("desired_kl, moves", [(1e-9, "down"), (10.0, "up")])
def test_desired_kl_adapts_the_learning_rate_after_every_optimizer_step(desired_kl: float, moves: str) -> None:
    algo = Algorithm(rsl_rl_env(ReachVecEnv(8)), horizon=8, sgd_minibatch_size=16, num_sgd_iters=2,
                     optimizer_config={"lr": 1e-3}, desired_kl=desired_kl, seed=0)
    algo.collect()
    algo.step()  # 8 optimizer steps; the first's KL is 0 (the policy has not moved yet): no change
    expected = 1e-3 / 1.5**7 if moves == "down" else 1e-2
    assert algo.lr_scheduler.lr == pytest.approx(expected)
    assert algo.state_dict()["lr"] == pytest.approx(expected)  # checkpointed


def test_desired_kl_excludes_an_lr_schedule() -> None:
    with pytest.raises(ConfigError, match="desired_kl adapts the learning rate, lr_schedule sets it"):
        Algorithm(rsl_rl_env(ReachVecEnv(2)), horizon=4, desired_kl=0.01, lr_schedule=[(0, 1e-3)])

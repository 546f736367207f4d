"""Bad input gets an error naming the culprit, raised before state is damaged."""

from __future__ import annotations

import math

import pytest
import torch

from rl8lite import Algorithm, AlgorithmConfig, ConfigError, Trainer
from rl8lite.algorithms.rollout import EnvOutputError, NonFiniteError
from rl8lite.env import DiscreteDummyEnv, EnvConfigError
from rl8lite.examples import CartPole

from .helpers import MaskedChoice, bad_env

INVALID = [
    ("num_envs", 0, r"num_envs must be an int >= 1, received 0"),
    ("num_envs", 2.5, r"num_envs must be an int >= 1, received 2.5"),
    ("horizon", 0, r"horizon must be an int >= 1"),
    ("horizons_per_env_reset", 0, r"horizons_per_env_reset must be > 0 .* or < 0"),
    ("gamma", 0.0, r"gamma must be in \(0.0, 1.0\]"),
    ("gamma", 1.5, r"gamma must be in \(0.0, 1.0\], received 1.5"),
    ("gae_lambda", -0.1, r"gae_lambda must be in \[0.0, 1.0\]"),
    ("gae_lambda", float("nan"), r"gae_lambda must be a number"),
    ("clip_param", 1.0, r"clip_param must be in \(0.0, 1.0\)"),
    ("clip_param", 0.0, r"clip_param must be in \(0.0, 1.0\)"),
    ("vf_clip_param", 0.0, r"vf_clip_param must be in \(0.0, inf\) or None"),
    ("dual_clip_param", 1.0, r"dual_clip_param must be in \(1.0, inf\) or None"),
    ("vf_coeff", -1.0, r"vf_coeff must be in \[0.0, inf\)"),
    ("entropy_coeff", -0.01, r"entropy_coeff must be in \[0.0, inf\)"),
    ("vf_coeff", float("inf"), r"vf_coeff must be in \[0.0, inf\), received inf"),
    ("vf_coeff", float("nan"), r"vf_coeff must be a number, received nan"),
    ("entropy_coeff", float("inf"), r"entropy_coeff must be in \[0.0, inf\), received inf"),
    ("target_kl_div", 0.0, r"target_kl_div must be in \(0.0, inf\) or None"),
    ("max_grad_norm", -1.0, r"max_grad_norm must be in \(0.0, inf\) or None"),
    ("num_sgd_iters", 0, r"num_sgd_iters must be an int >= 1"),
    ("sgd_minibatch_size", 0, r"sgd_minibatch_size must be an int >= 1"),
    ("sgd_minibatch_size", 10_000, r"sgd_minibatch_size=10000 exceeds the buffer's num_envs \* horizon = 64"),
    ("update_chunk_size", 0, r"update_chunk_size must be an int >= 1"),
    ("update_chunk_size", "whole", r"update_chunk_size must be an int >= 1 or \"auto\" or None, received 'whole'"),
    ("collect_chunk_size", 0, r"collect_chunk_size must be an int >= 1"),
    ("collect_chunk_size", "all", r"collect_chunk_size must be an int >= 1 or \"auto\" or None, received 'all'"),
    ("accumulate_grads", True, r"accumulate_grads=True needs more than one minibatch"),
    ("normalize_rewards", "yes", r"normalize_rewards must be a bool"),
    ("cuda_graphs", 1, r"cuda_graphs must be True, False or 'auto', received 1"),
    ("optimizer_config", {"lr": -1.0}, r"optimizer_config\['lr'\] must be > 0"),
    ("optimizer_config", {"lr": float("inf")}, r"optimizer_config\['lr'\] must be finite, received inf"),
    ("optimizer_config", {"lr": float("nan")}, r"optimizer_config\['lr'\] must be finite, received nan"),
    ("optimizer_config", {"lr": torch.tensor(float("inf"))}, r"optimizer_config\['lr'\] must be finite, received tensor\(inf\)"),
    ("optimizer_config", {"lr": 1e-3, "weight_decay": float("inf")},
     r"optimizer_config\['weight_decay'\] must be finite, received inf"),
    ("optimizer_config", {"eps": float("nan")}, r"optimizer_config\['eps'\] must be finite, received nan"),
    ("optimizer_config", {"betas": (0.9, float("inf"))}, r"optimizer_config\['betas'\] must be finite, received \(0.9, inf\)"),
    ("optimizer_cls", dict, r"optimizer_cls must be a torch.optim.Optimizer subclass"),
    ("lr_schedule", [(5, 0.1)], r"lr_schedule must start at env_steps 0"),
    ("lr_schedule", [(0, float("inf"))], r"lr_schedule values must be finite, received inf"),
    ("entropy_coeff_schedule", [(0, 0.1), (8, float("nan"))], r"entropy_coeff_schedule values must be finite, received nan"),
    ("entropy_coeff_schedule", [(0, 0.1), (0, 0.0)], r"entropy_coeff_schedule env_steps must increase strictly"),
    ("lr_schedule_kind", "cosine", r"lr_schedule_kind must be 'step' or 'interp'"),
    ("lr_schedule", [(0, "1e-3")], r"lr_schedule\[0\] = \(0, '1e-3'\): the value must be a real number, received str"),
    ("entropy_coeff_schedule", [(0, 1e-3), (10, "abc")],
     r"entropy_coeff_schedule\[1\] = \(10, 'abc'\): the value must be a real number, received str 'abc'"),
    ("entropy_coeff_schedule", [(0, 0.1), (8, None)], r"entropy_coeff_schedule\[1\] = \(8, None\): the value must be"),
    ("lr_schedule", [(0, 0.1), (True, 0.2)], r"lr_schedule\[1\] = \(True, 0.2\): env_steps must be an int, received bool"),
    ("lr_schedule", [(0, 0.1), (8.5, 0.2)], r"lr_schedule\[1\] = \(8.5, 0.2\): env_steps must be an int, received float"),
    ("seed", -1, r"seed must be an int >= 0 or None, received -1"),
    ("device", "cuda:0" if not torch.cuda.is_available() else "tpu", r"device .*"),
]


@pytest.mark.parametrize("field, value, message", INVALID, ids=[f"{f}={v!r}" for f, v, _ in INVALID])
def test_invalid_hyperparameters_name_the_field(field: str, value, message: str) -> None:
    kwargs = {"num_envs": 8, "horizon": 8, field: value}
    with pytest.raises(ConfigError, match=message):
        Algorithm(DiscreteDummyEnv, **kwargs)
    with pytest.raises(ConfigError, match=message):
        AlgorithmConfig(**kwargs).validate()


BOOL_FIELDS = ["shuffle_minibatches", "normalize_advantages", "normalize_rewards",
               "normalize_observations", "accumulate_grads", "enable_amp", "tune_malloc"]


@pytest.mark.parametrize("field", BOOL_FIELDS)
def test_every_bool_field_refuses_a_non_bool(field: str) -> None:
    with pytest.raises(ConfigError, match=f"{field} must be a bool, received 0"):
        AlgorithmConfig(num_envs=8, horizon=8, **{field: 0}).validate()


def test_unknown_config_field_names_the_closest_valid_ones_first() -> None:
    with pytest.raises(TypeError, match=r"unknown AlgorithmConfig field\(s\): 'num_env' \(did you mean 'num_envs'\?\); valid"
                                        r" fields: num_envs, .*gamma"):
        Algorithm(DiscreteDummyEnv, num_env=8)
    with pytest.raises(TypeError, match=r"'lerning_rate'; valid fields: .*gamma"):
        Algorithm(DiscreteDummyEnv, lerning_rate=1e-3)


def test_model_and_model_cls_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="model excludes model_cls"):
        Algorithm(DiscreteDummyEnv, model=torch.nn.Linear(1, 1), model_config={"hiddens": [4]})


@pytest.mark.parametrize(("env_cls", "received"), [
    ("CartPole", r"received 'CartPole' \(str\)"),
    (dict, r"received the class builtins.dict, which is not an Env subclass"),
])
def test_an_env_that_is_not_an_env_class_or_instance_is_named(env_cls, received: str) -> None:
    with pytest.raises(TypeError, match=r"env must be an rl8lite.Env subclass or instance .*; " + received):
        Algorithm(env_cls)
    with pytest.raises(TypeError, match="env must be an rl8lite.Env subclass or instance"):
        AlgorithmConfig(num_envs=2).build(env_cls)


def test_env_limits_are_checked_at_construction() -> None:
    class Small(DiscreteDummyEnv):
        max_num_envs = 4
        max_horizon = 8

    with pytest.raises(ValueError, match=r"Small: num_envs=5 exceeds Small.max_num_envs=4"):
        Algorithm(Small, num_envs=5, horizon=2)
    with pytest.raises(ValueError, match=r"Small: horizon=9 exceeds Small.max_horizon=8"):
        Algorithm(Small, num_envs=2, horizon=9)


def test_unknown_env_config_key_is_named() -> None:
    algo = Algorithm(CartPole, num_envs=2, horizon=2)
    with pytest.raises(EnvConfigError, match=r"CartPole has no config parameter\(s\) \['lenght'\]; valid: .*'length'"):
        algo.collect(env_config={"lenght": 1.0})
    with pytest.raises(EnvConfigError, match="'mass'"):
        Algorithm(CartPole, num_envs=2, env_config={"mass": 1.0})


@pytest.mark.parametrize(
    "fault, error, message",
    [
        ("reset_shape", EnvOutputError, r"BadEnv_reset_shape.reset output: expected shape \[\.\.\., 1\].*received \[4, 0\]"),
        ("step_shape", EnvOutputError, r"BadEnv_step_shape.step output 'obs': expected shape \[\.\.\., 1\].*received \[4, 3\]"),
        ("missing_rewards", EnvOutputError, r"step output is missing 'rewards'; received keys \['obs'\]"),
        ("reward_shape", EnvOutputError, r"step output 'rewards': expected shape \[4, 1\], received \[4\]"),
        ("terminated_dtype", EnvOutputError, r"'terminated': expected bool dtype, received torch.float32"),
        ("nan_obs", NonFiniteError, r"non-finite 'obs' \(NaN or Inf\) in env copies \[2\] at time steps \[1[,\]]"),
        ("nan_rewards", NonFiniteError, r"non-finite 'rewards' \(NaN or Inf\) in env copies \[1\] at time steps \[0, 1, 2\]"),
    ],
)
def test_bad_env_outputs_are_named_before_the_policy_changes(fault, error, message, experiment_name) -> None:
    algo = Algorithm(bad_env(fault), num_envs=4, horizon=3, seed=0)
    before = [p.detach().clone() for p in algo.policy.parameters()]
    trainer = Trainer(algo, experiment_name=experiment_name, progress=False)
    with pytest.raises(error, match=message):
        trainer.run()
    assert trainer.state["algorithm/steps"] == 0 and not algo.state.buffered
    for a, b in zip(before, algo.policy.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(error):
        algo.validate()


def test_validate_passes_on_good_envs() -> None:
    for env in (DiscreteDummyEnv, CartPole):
        algo = Algorithm(env, num_envs=4, horizon=2)
        algo.validate()
        assert algo.collect()["env/resets"] == 4  # validate leaves the next collect to reset


def test_non_finite_gradients_leave_parameters_intact() -> None:
    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=3, seed=0)
    algo.collect()
    algo.buffer["advantages"].fill_(0)
    algo.buffer["rewards"][0, 0] = float("nan")  # poisons the returns, hence the value loss
    before = [p.detach().clone() for p in algo.policy.parameters()]
    with pytest.raises(NonFiniteError, match="non-finite loss"):
        algo.step()
    for a, b in zip(before, algo.policy.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("overrides", "steps_before_error"),
    [
        ({"sgd_minibatch_size": 8}, 1),  # minibatch 2 of 2 holds the NaN
        ({"sgd_minibatch_size": 8, "accumulate_grads": True}, 0),
        ({"update_chunk_size": 4}, 0),  # chunk 4 of 4 holds the NaN
        ({"sgd_minibatch_size": 8, "update_chunk_size": 4}, 1),
    ],
)
def test_a_non_finite_loss_in_a_later_chunk_or_minibatch_stops_its_step(
    overrides: dict, steps_before_error: int
) -> None:
    # 4 copies x 4 steps, unshuffled: a NaN reward of the last copy poisons units 12-15 only
    # (no advantage normalisation to spread it), the last chunk / minibatch.
    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=4, seed=0, shuffle_minibatches=False,
                     normalize_advantages=False, optimizer_config={"lr": 1e-2}, **overrides)
    algo.collect()
    algo.buffer["rewards"][3, 3] = float("nan")
    before = [p.detach().clone() for p in algo.policy.parameters()]
    with pytest.raises(NonFiniteError, match="non-finite loss"):
        algo.step()
    changed = any(not torch.equal(a, b) for a, b in zip(before, algo.policy.parameters(), strict=True))
    assert changed == (steps_before_error > 0)
    assert all(torch.isfinite(p).all() for p in algo.policy.parameters())


def test_non_finite_gradient_with_finite_loss_is_named() -> None:
    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=3, seed=0)
    algo.collect()

    def poison(grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf")

    handle = next(algo.policy.parameters()).register_hook(poison)
    before = [p.detach().clone() for p in algo.policy.parameters()]
    with pytest.raises(NonFiniteError, match="non-finite gradient norm .* with a finite loss"):
        algo.step()
    handle.remove()
    for a, b in zip(before, algo.policy.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_plain_dict_observation_is_refused_by_name() -> None:
    class DictObs(MaskedChoice):
        def reset(self, *, config=None) -> dict:  # type: ignore[no-untyped-def, override]
            return dict(self._obs().items())

    with pytest.raises(EnvOutputError, match=r"DictObs.reset output'?: expected a TensorDict with batch_size=\[4\] and keys \['action_mask', 'position'\], received dict"):
        Algorithm(DictObs, num_envs=4, horizon=2).collect()


@pytest.mark.parametrize("name", ["vf_clip_param", "dual_clip_param", "target_kl_div", "max_grad_norm"])
def test_an_infinite_optional_limit_means_no_limit(name: str) -> None:
    # Older configs and checkpoints say "no limit" with inf; it is None, and still trains.
    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=4, seed=0, **{name: float("inf")})
    assert getattr(algo.hparams, name) is None
    algo.collect()
    assert not any(math.isnan(v) for v in algo.step().values())
    with pytest.raises(ConfigError, match=rf"{name} must be in .* received -inf"):
        Algorithm(DiscreteDummyEnv, num_envs=4, horizon=4, **{name: float("-inf")})

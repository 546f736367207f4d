"""Tuned hyperparameters for the example envs (``benchmarks/solve.py`` measures them)."""

from __future__ import annotations

from typing import Any

#: CartPole (mean return 475): small tanh MLPs, many small Adam steps at a high learning rate.
CARTPOLE: dict[str, Any] = {
    "num_envs": 32, "horizon": 32, "gamma": 0.995, "gae_lambda": 0.95,
    "sgd_minibatch_size": 512, "num_sgd_iters": 8, "max_grad_norm": None,
    "optimizer_config": {"lr": 1e-2, "fused": True}, "model_config": {"hiddens": [32, 32]},
}

#: Acrobot-v1 through ``rl8lite.env.gymnasium_env("Acrobot-v1")`` (mean return -100).
ACROBOT: dict[str, Any] = {
    "num_envs": 16, "horizon": 64, "gamma": 0.99, "gae_lambda": 0.94,
    "sgd_minibatch_size": 256, "num_sgd_iters": 4,
    "optimizer_config": {"lr": 3e-3, "fused": True}, "model_config": {"hiddens": [64, 64]},
}

#: Pendulum (mean return -200). The horizon is one whole 200-step episode, so the reward scale
#: sees every episode phase in each collect; ReLU MLPs learn this env faster than tanh ones.
PENDULUM: dict[str, Any] = {
    "num_envs": 32, "horizon": 200, "gamma": 0.95, "gae_lambda": 0.95, "clip_param": 0.3,
    "sgd_minibatch_size": 800, "num_sgd_iters": 5,
    "optimizer_config": {"lr": 3e-3, "fused": True}, "model_config": {"activation": "relu"},
}

#: rl8's own CartPole example (``benchmarks/rl8_cartpole.py``: infinite horizon, reward minus
#: the state errors) at rl8's horizon and reset rule, so ``returns/mean`` means the same as rl8's.
RL8_CARTPOLE: dict[str, Any] = {**CARTPOLE, "horizon": 64, "horizons_per_env_reset": 1,
                                "gamma": 0.95}

#: Go2 with the PPO settings of Genesis's rsl_rl example (24 steps per collect; its 4 minibatches
#: are ``sgd_minibatch_size=num_envs * 24 // 4``). rsl_rl's value coefficient 1.0 is rl8lite's
#: 2.0 (rl8lite halves the squared error); ``target_kl_div`` stops an update early where rsl_rl's
#: ``desired_kl`` adapts the learning rate.
GO2: dict[str, Any] = {
    "gamma": 0.99, "gae_lambda": 0.95, "clip_param": 0.2, "vf_clip_param": 0.2, "vf_coeff": 2.0,
    "entropy_coeff": 0.01, "max_grad_norm": 1.0, "num_sgd_iters": 5, "target_kl_div": 0.01,
    "normalize_rewards": False, "optimizer_config": {"lr": 1e-3},
    "model_config": {"hiddens": [512, 256, 128], "activation": "elu"},
}

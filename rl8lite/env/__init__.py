"""Environments: the batched :class:`Env` protocol (rl8's ``rl8.env``), rl8's dummy envs, and
ordinary Gymnasium envs through :func:`gymnasium_env` (the ``gymnasium`` extra), envpool's through
:func:`envpool_env` (the ``envpool`` extra), and rsl_rl's ``VecEnv`` through :func:`rsl_rl_env`."""

from .base import (
    ContinuousDummyEnv,
    DiscreteDummyEnv,
    Env,
    EnvConfigError,
    EnvOutputError,
    ReferencedEnv,
    SubEnvError,
    apply_env_config,
)
from .envpool import EnvpoolEnv, envpool_env
from .gymnasium import GymnasiumEnv, env_label, env_reference, gymnasium_env, import_env_class
from .rsl_rl import RslRlEnv, rsl_rl_env

__all__ = [
    "ContinuousDummyEnv", "DiscreteDummyEnv", "Env", "EnvConfigError", "EnvOutputError",
    "EnvpoolEnv", "GymnasiumEnv", "ReferencedEnv", "RslRlEnv", "SubEnvError", "apply_env_config",
    "env_label", "env_reference", "envpool_env", "gymnasium_env", "import_env_class", "rsl_rl_env",
]

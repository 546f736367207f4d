"""Environments: the batched :class:`Env` protocol (rl8's ``rl8.env``), rl8's dummy envs, and
ordinary Gymnasium envs through :func:`gymnasium_env` (the ``gymnasium`` extra)."""

from .base import (
    ContinuousDummyEnv,
    DiscreteDummyEnv,
    Env,
    EnvConfigError,
    SubEnvError,
    apply_env_config,
)
from .gymnasium import GymnasiumEnv, env_label, env_reference, gymnasium_env, import_env_class

__all__ = [
    "ContinuousDummyEnv", "DiscreteDummyEnv", "Env", "EnvConfigError", "GymnasiumEnv",
    "SubEnvError", "apply_env_config", "env_label", "env_reference", "gymnasium_env",
    "import_env_class",
]

"""Environments: the batched :class:`Env` protocol (rl8's ``rl8.env``) and rl8's dummy envs."""

from .base import Env, EnvConfigError, apply_env_config
from .dummy import ContinuousDummyEnv, DiscreteDummyEnv

__all__ = ["ContinuousDummyEnv", "DiscreteDummyEnv", "Env", "EnvConfigError", "apply_env_config"]

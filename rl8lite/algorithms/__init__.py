"""The PPO loop (rl8's ``rl8.algorithms``): ``Algorithm.collect`` runs the :mod:`~.rollout` into
the :mod:`~.buffer`, ``Algorithm.step`` the :mod:`~.update`."""

from .algorithm import Algorithm, AlgorithmState, RecurrentAlgorithm
from .config import AlgorithmConfig, ConfigError, RecurrentAlgorithmConfig

__all__ = ["Algorithm", "AlgorithmConfig", "AlgorithmState", "ConfigError", "RecurrentAlgorithm",
           "RecurrentAlgorithmConfig"]

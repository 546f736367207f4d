"""The PPO loop (rl8's ``rl8.algorithms``): ``Algorithm.collect`` then ``Algorithm.step``."""

from .algorithm import Algorithm, AlgorithmState, RecurrentAlgorithm
from .config import AlgorithmConfig, ConfigError, RecurrentAlgorithmConfig

__all__ = ["Algorithm", "AlgorithmConfig", "AlgorithmState", "ConfigError", "RecurrentAlgorithm",
           "RecurrentAlgorithmConfig"]

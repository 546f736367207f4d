"""rl8lite: a small, fast, MLflow-tracked PPO trainer for batched, torch-native environments."""

from importlib.metadata import version as _version

from .algorithms import (
    Algorithm,
    AlgorithmConfig,
    AlgorithmState,
    ConfigError,
    RecurrentAlgorithm,
    RecurrentAlgorithmConfig,
)
from .env import Env
from .trainers import RecurrentTrainer, TrainConfig, Trainer

__version__ = _version("rl8lite")

__all__ = [
    "Algorithm", "AlgorithmConfig", "AlgorithmState", "ConfigError", "Env", "RecurrentAlgorithm",
    "RecurrentAlgorithmConfig", "RecurrentTrainer", "TrainConfig", "Trainer", "__version__",
]

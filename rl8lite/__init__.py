"""rl8lite: a small, fast, MLflow-tracked PPO trainer for batched, torch-native environments."""

from .algorithms import (
    Algorithm,
    AlgorithmConfig,
    AlgorithmState,
    ConfigError,
    RecurrentAlgorithm,
    RecurrentAlgorithmConfig,
)
from .env import Env
from .runtime.imports import package_version
from .trainers import RecurrentTrainer, TrainConfig, Trainer

__version__ = package_version("rl8lite")

__all__ = [
    "Algorithm", "AlgorithmConfig", "AlgorithmState", "ConfigError", "Env", "RecurrentAlgorithm",
    "RecurrentAlgorithmConfig", "RecurrentTrainer", "TrainConfig", "Trainer", "__version__",
]

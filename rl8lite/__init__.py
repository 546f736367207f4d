"""rl8lite: a small, fast, MLflow-tracked PPO trainer for batched, torch-native environments."""

__version__ = "0.1.0"

from .algorithm import Algorithm, AlgorithmState, RecurrentAlgorithm  # noqa: E402
from .config import AlgorithmConfig, ConfigError, RecurrentAlgorithmConfig  # noqa: E402
from .env import Env  # noqa: E402
from .trainer import RecurrentTrainer, Trainer  # noqa: E402
from .train_config import TrainConfig  # noqa: E402

__all__ = [
    "Algorithm", "AlgorithmConfig", "AlgorithmState", "ConfigError", "Env", "RecurrentAlgorithm",
    "RecurrentAlgorithmConfig", "RecurrentTrainer", "TrainConfig", "Trainer", "__version__",
]

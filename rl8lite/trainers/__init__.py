"""Training around an algorithm (rl8's ``rl8.trainers``): ``Trainer`` and ``TrainConfig``."""

from .train_config import TrainConfig
from .trainer import RecurrentTrainer, Trainer

__all__ = ["RecurrentTrainer", "TrainConfig", "Trainer"]

"""Training loops around an algorithm (rl8's ``rl8.trainers``): the :class:`Trainer` (counters,
evaluation, stop conditions, checkpoints, videos, tracking) and :class:`TrainConfig` (a trainer
described by a YAML or JSON file)."""

from .train_config import TrainConfig
from .trainer import RecurrentTrainer, Trainer

__all__ = ["RecurrentTrainer", "TrainConfig", "Trainer"]

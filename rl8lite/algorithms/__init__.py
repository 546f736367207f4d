"""The PPO loop and its math (rl8's ``rl8.algorithms``).

``Algorithm.collect`` runs the :mod:`~.rollout` (env steps into the shared
:mod:`~.buffer`, with what the policy carries between steps in :mod:`~.recurrence`
and each collect's :mod:`~.statistics`); ``Algorithm.step`` estimates
:mod:`~.advantages` and runs the :mod:`~.update` (chunked minibatch passes over the
:mod:`~.losses`). Math modules are pure functions of tensors.
"""

from .algorithm import Algorithm, AlgorithmState, RecurrentAlgorithm
from .config import AlgorithmConfig, ConfigError, RecurrentAlgorithmConfig

__all__ = [
    "Algorithm", "AlgorithmConfig", "AlgorithmState", "ConfigError", "RecurrentAlgorithm",
    "RecurrentAlgorithmConfig",
]

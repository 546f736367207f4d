"""The PPO loop and its math (rl8's ``rl8.algorithms``).

``Algorithm.collect`` runs the :mod:`~.rollout` (env steps into the shared :mod:`~.buffer`, with
what the policy carries between steps in :mod:`~.carries` and :mod:`~.windowed`, and each
collect's :mod:`~.statistics`); ``Algorithm.step`` estimates advantages
(:func:`rl8lite.nn.ppo.gae`) and runs the :mod:`~.update`. :mod:`~.data_parallel` takes
statistics and gradients over several processes; :mod:`~.graphs` captures CUDA graphs.
"""

from .algorithm import Algorithm, AlgorithmState, RecurrentAlgorithm
from .config import AlgorithmConfig, ConfigError, RecurrentAlgorithmConfig

__all__ = ["Algorithm", "AlgorithmConfig", "AlgorithmState", "ConfigError", "RecurrentAlgorithm",
           "RecurrentAlgorithmConfig"]
